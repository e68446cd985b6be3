//! Hardware probes with a stated expected outcome, run by the emulator in
//! CI (`tests/ascend/emulation.rs`) and by the `hardware_*` tests on a
//! 910B, and the device-vs-CPU comparison the hardware golden run uses.
//! The step itself runs only through the shared launch list
//! ([`crate::runtime::pipeline`]).

use crate::runtime::plan::StepResult;

/// Compares a device result with the CPU backend's: statuses, tokens,
/// accepted counts, tree paths and top ids identical; on rows with status 0, token
/// logprobs, sum_smaller_probs and top logprobs within 1e-4 + 1e-5 |cpu|.
/// Errors: the first difference, named.
pub fn compare(got: &StepResult, cpu: &StepResult) -> Result<(), String> {
    let same = |what: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
        let (a, b) = (format!("{a:?}"), format!("{b:?}"));
        if a == b {
            Ok(())
        } else {
            Err(format!("{what}: device {a}, cpu {b}"))
        }
    };
    same("row_status", &got.row_status, &cpu.row_status)?;
    same("group_status", &got.group_status, &cpu.group_status)?;
    same("tokens", &got.tokens, &cpu.tokens)?;
    same("accepted", &got.accepted, &cpu.accepted)?;
    same("tree path", &got.path, &cpu.path)?;
    let close = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a - b).abs() as f64 <= 1e-4 + 1e-5 * b.abs() as f64;
    let k = if cpu.row_status.is_empty() { 0 } else { cpu.top_ids.len() / cpu.row_status.len() };
    for r in (0..cpu.row_status.len()).filter(|&r| cpu.row_status[r] == 0) {
        if !close(got.token_lp[r], cpu.token_lp[r]) || !close(got.sum_smaller[r], cpu.sum_smaller[r]) {
            return Err(format!(
                "row {r}: token_lp {} / {}, sum_smaller {} / {} (device / cpu)",
                got.token_lp[r], cpu.token_lp[r], got.sum_smaller[r], cpu.sum_smaller[r]
            ));
        }
        let s = r * k..(r + 1) * k;
        same(&format!("row {r} top_ids"), &got.top_ids[s.clone()].to_vec(), &cpu.top_ids[s.clone()].to_vec())?;
        if got.top_lps[s.clone()].iter().zip(&cpu.top_lps[s]).any(|(a, b)| !close(*a, *b)) {
            return Err(format!("row {r}: top logprobs differ"));
        }
    }
    Ok(())
}

/// The NaN / signed-zero / tie probe of `force_topn` (one row, one launch).
#[derive(Clone, Debug, PartialEq)]
pub struct SortTies {
    /// The row's logits, `[64]` f32 (two `TILE/2` chunks of the t64 entry).
    pub logits: Vec<f32>,
    /// The row width V (64).
    pub v: u32,
    /// The kept width N (8).
    pub n: u32,
    /// The entry's tile (64: `force_topn_t64`).
    pub tile: u32,
    /// The ids the stated Sort32/MrgSort order gives, `[n]` i32.
    pub want: Vec<i32>,
}

/// `force_topn_t64` on one row of 64 logits in two `TILE/2` chunks:
/// NaN at ids 1 and 5, 1.0 at ids 3 and 40 (one per chunk), 0.0, -0.0
/// and 0.0 at ids 0, 2 and 4, -inf elsewhere; N = 8. The stated
/// Sort32/MrgSort order (docs/ASCEND.md: every NaN first, -0.0 == +0.0,
/// ties in id order, the lower MrgSort list first) gives
/// `[1, 5, 3, 40, 0, 2, 4, 6]`. The launch is `force_topn(logits, v, n,
/// out_logits [n] f32, out_ids [n] i32)` on one program.
pub fn sort_ties() -> SortTies {
    let mut row = vec![f32::NEG_INFINITY; 64];
    row[0] = 0.0;
    row[1] = f32::NAN;
    row[2] = -0.0;
    row[3] = 1.0;
    row[4] = 0.0;
    row[5] = -f32::NAN;
    row[40] = 1.0;
    SortTies { logits: row, v: 64, n: 8, tile: 64, want: vec![1, 5, 3, 40, 0, 2, 4, 6] }
}

/// The hand-written probe kernel `exp_div_probe` (vector `Exp` and
/// `Div` over GM buffers, `sampler-host/ascendc/probes/exp_div_probe.cpp`).
pub const EXP_DIV_SOURCE: &str = include_str!("../../../../ascendc/probes/exp_div_probe.cpp");

/// `n` probe inputs: `x` evenly over [-104, 89] (the whole range where
/// `exp` is finite and not flushed), divisors `y` spread over
/// [0.05, 10.05) by a multiplicative hash.
pub fn exp_div_inputs(n: usize) -> (Vec<f32>, Vec<f32>) {
    let x = (0..n).map(|i| -104.0 + 193.0 * (i as f64 / n.max(1) as f64)).map(|v| v as f32).collect();
    let y = (0..n)
        .map(|i| 0.05 + 10.0 * (((i as u64).wrapping_mul(2654435761) % (1 << 20)) as f64 / (1 << 20) as f64))
        .map(|v| v as f32)
        .collect();
    (x, y)
}

/// Histogram of the ulp distance of the device's `e = Exp(x)` and
/// `d = x / y` from `rt::math::exp_f32` and IEEE division: counts of
/// 0, 1, 2, 3+ ulp and of results flushed to zero (the expected value
/// subnormal); returns `(exp, div)` histograms and the worst distance.
pub fn ulp_histogram(x: &[f32], y: &[f32], e: &[f32], d: &[f32]) -> ([u64; 5], [u64; 5], u32) {
    fn bucket(h: &mut [u64; 5], worst: &mut u32, got: f32, want: f32) {
        if got.to_bits() == want.to_bits() || got == want {
            h[0] += 1;
        } else if got == 0.0 && want.is_subnormal() {
            h[4] += 1;
        } else {
            let dist = if got.is_finite() && want.is_finite() && got.is_sign_negative() == want.is_sign_negative() {
                (got.to_bits() as i64 - want.to_bits() as i64).unsigned_abs() as u32
            } else {
                u32::MAX
            };
            *worst = (*worst).max(dist);
            h[dist.min(3) as usize] += 1;
        }
    }
    let (mut he, mut hd, mut worst) = ([0u64; 5], [0u64; 5], 0u32);
    for i in 0..x.len() {
        bucket(&mut he, &mut worst, e[i], sampler_kernels::rt::math::exp_f32(x[i]));
        bucket(&mut hd, &mut worst, d[i], x[i] / y[i]);
    }
    (he, hd, worst)
}
