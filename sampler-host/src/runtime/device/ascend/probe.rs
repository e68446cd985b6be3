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

/// The hand-written probe kernel `scalar_probe` (scalar-unit f32 `+ * - /`,
/// `sk::exp`, u64 <-> f32 conversions, `sampler-host/ascendc/probes/scalar_probe.cpp`).
pub const SCALAR_SOURCE: &str = include_str!("../../../../ascendc/probes/scalar_probe.cpp");

/// Elements per program of `scalar_probe`.
pub const SCALAR_CHUNK: usize = 512;

/// The ops of `scalar_probe`, in the order of its 8 output words (the last unused)
/// and then its 2 u64 outputs.
pub const SCALAR_OPS: [&str; 9] =
    ["x + y", "x * y", "x / y", "exp(x)", "(f32)u", "fixed_to_f32(u)", "x - y", "to_fixed(x)", "(u64)x"];

/// `n` inputs of `scalar_probe`: `x` over the range the kernels feed `exp`
/// (logit - max over T: [-104, 0], and up to 89) with the values around
/// rounding edges a sweep misses (subnormals, +-0, +-inf, NaN, 2^-44
/// multiples); `y` nonzero temperatures and logits; `u` fixed-point sums and
/// integers around 2^24, 2^53, 2^63 and 2^64 - 1, where u64 -> f32 rounds.
pub fn scalar_inputs(n: usize) -> (Vec<f32>, Vec<f32>, Vec<u64>) {
    let special = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        f32::MIN_POSITIVE,
        1e-40,
        -1e-40,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        88.72283,
        -103.97208,
        -87.33655,
        f32::from_bits(0x2980_0000), // 2^-44, the fixed-point unit
        0.5,
        std::f32::consts::LN_2,
    ];
    let h = |i: usize, k: u64| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(k).rotate_left(17);
    let x = (0..n)
        .map(|i| match i {
            i if i < special.len() => special[i],
            i if i % 3 == 0 => -104.0 + 193.0 * (i as f64 / n.max(1) as f64) as f32,
            i if i % 3 == 1 => -(((h(i, 1) >> 40) as f32) / (1u64 << 24) as f32) * 30.0,
            i => f32::from_bits((h(i, 2) as u32 & 0x3fff_ffff) | 0x0080_0000),
        })
        .collect();
    let y = (0..n)
        .map(|i| match i % 4 {
            0 => 0.05 + ((h(i, 3) >> 44) as f32 / (1u64 << 20) as f32) * 2.0,
            1 => 1.0,
            2 => -((h(i, 4) >> 41) as f32) / (1u64 << 23) as f32 * 20.0 - 1e-3,
            _ => f32::from_bits((h(i, 5) as u32 & 0x3fff_ffff) | 0x0080_0000),
        })
        .collect();
    let edges = [
        0u64,
        1,
        (1 << 24) - 1,
        1 << 24,
        (1 << 24) + 1,
        (1 << 24) + 3,
        (1 << 53) + 1,
        (1 << 63) - 1,
        1 << 63,
        u64::MAX,
    ];
    let u = (0..n)
        .map(|i| match i {
            i if i < edges.len() => edges[i],
            i if i % 2 == 0 => h(i, 6) >> (h(i, 7) % 64),
            i => (h(i, 8) >> 20) | 1,
        })
        .collect();
    (x, y, u)
}

/// What `scalar_probe` must write, computed on the CPU with the kernels' own
/// `rt::math` and Rust's IEEE f32 (round to nearest even, `as` casts):
/// `(f [8 n] u32, q [2 n] u64)` in the probe's layout.
pub fn scalar_expected(x: &[f32], y: &[f32], u: &[u64]) -> (Vec<u32>, Vec<u64>) {
    use sampler_kernels::rt::math;
    let mut f = Vec::with_capacity(x.len() * 8);
    let mut q = Vec::with_capacity(x.len() * 2);
    for i in 0..x.len() {
        let (a, b, v) = (x[i], y[i], u[i]);
        f.extend_from_slice(&[
            (a + b).to_bits(),
            (a * b).to_bits(),
            (a / b).to_bits(),
            math::exp_f32(a).to_bits(),
            (v as f32).to_bits(),
            math::fixed_to_f32(v).to_bits(),
            (a - b).to_bits(),
            0,
        ]);
        q.extend_from_slice(&[math::to_fixed(a), a as u64]);
    }
    (f, q)
}

/// Compares the device's `scalar_probe` output with [`scalar_expected`] bit
/// for bit (NaNs of any payload count as equal): per op of
/// [`SCALAR_OPS`], `(op, mismatches, first mismatch described)`, ops
/// without a mismatch left out. Empty: every bit matches.
pub fn scalar_mismatches(x: &[f32], y: &[f32], u: &[u64], f: &[u32], q: &[u64]) -> Vec<(&'static str, usize, String)> {
    let (wf, wq) = scalar_expected(x, y, u);
    let mut out: Vec<(&'static str, usize, String)> = Vec::new();
    let mut note = |op: usize, i: usize, got: String, want: String| match out.iter_mut().find(|o| o.0 == SCALAR_OPS[op])
    {
        Some(o) => o.1 += 1,
        None => {
            out.push((SCALAR_OPS[op], 1, format!("x={:e} y={:e} u={}: device {got}, cpu {want}", x[i], y[i], u[i])))
        }
    };
    for i in 0..x.len() {
        for k in 0..7 {
            let (g, w) = (f[8 * i + k], wf[8 * i + k]);
            let nan = |b: u32| f32::from_bits(b).is_nan();
            if g != w && !(nan(g) && nan(w)) {
                note(
                    k,
                    i,
                    format!("{:e} ({g:#010x})", f32::from_bits(g)),
                    format!("{:e} ({w:#010x})", f32::from_bits(w)),
                );
            }
        }
        for k in 0..2 {
            if q[2 * i + k] != wq[2 * i + k] {
                note(7 + k, i, q[2 * i + k].to_string(), wq[2 * i + k].to_string());
            }
        }
    }
    out
}

/// The hand-written probe kernel `abi_probe` (echoes its scalar arguments,
/// `sampler-host/ascendc/probes/abi_probe.cpp`).
pub const ABI_SOURCE: &str = include_str!("../../../../ascendc/probes/abi_probe.cpp");

/// The scalar arguments of `abi_probe` after its `GM_ADDR out`:
/// `(a: u32, b: u32, c: u64, d: u32, e: f32, programs: u32)`, values whose
/// words are all distinct, so any shifted reading shows.
pub const ABI_ARGS: (u32, u32, u64, u32, f32, u32) =
    (0x1111_1111, 0x2222_2222, 0x4444_4444_3333_3333, 0x5555_5555, 1.5, 1);

/// The 8 words `abi_probe` writes when the launch's argument layout is the
/// one [`super::acl::pack_args`] packs.
pub fn abi_expected() -> [u32; 8] {
    let (a, b, c, d, e, p) = ABI_ARGS;
    [a, b, c as u32, (c >> 32) as u32, d, e.to_bits(), p, 0xC0FFEE]
}

/// What `abi_probe` would echo from the block `packed` (the output pointer,
/// then [`ABI_ARGS`]) under each plausible layout rule: `("natural
/// alignment", words)` and `("8-byte slots", words)`; bytes past the block
/// read as 0. The two differ, so the probe tells them apart.
pub fn abi_layouts(packed: &[u8]) -> [(&'static str, [u32; 8]); 2] {
    let w = |o: usize| packed.get(o..o + 4).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()));
    let read = |offs: [usize; 6]| {
        [w(offs[0]), w(offs[1]), w(offs[2]), w(offs[2] + 4), w(offs[3]), w(offs[4]), w(offs[5]), 0xC0FFEE]
    };
    [("natural alignment", read([8, 12, 16, 24, 28, 32])), ("8-byte slots", read([8, 16, 24, 32, 40, 48]))]
}

/// The `abi_probe` launch arguments for an output buffer `out`.
pub fn abi_launch_args(out: super::acl::KernelArg) -> Vec<super::acl::KernelArg> {
    use super::acl::KernelArg::*;
    let (a, b, c, d, e, p) = ABI_ARGS;
    vec![out, U32(a), U32(b), U64(c), U32(d), F32(e), U32(p)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_abi_probe_tells_the_two_layout_rules_apart() {
        let packed = super::super::acl::pack_args(&abi_launch_args(super::super::acl::KernelArg::Gm(8usize as *mut _)));
        let [(_, natural), (_, slots)] = abi_layouts(&packed);
        assert_eq!(natural, abi_expected(), "pack_args packs at natural alignment");
        assert_ne!(slots, abi_expected());
        assert_ne!(natural[..7], slots[..7]);
    }

    #[test]
    fn the_scalar_probe_expectation_covers_rounding_edges_and_detects_one_flipped_bit() {
        let n = 3000;
        let (x, y, u) = scalar_inputs(n);
        let (f, mut q) = scalar_expected(&x, &y, &u);
        assert!(scalar_mismatches(&x, &y, &u, &f, &q).is_empty());
        // u64 -> f32 at 2^24 + 1 rounds to even (2^24); the CPU side says so.
        assert_eq!(f[8 * 4 + 4], 16777216.0f32.to_bits());
        assert!(x.iter().any(|v| v.is_subnormal()) && x.iter().any(|v| v.is_nan()));
        let mut g = f.clone();
        g[8 * 100 + 3] ^= 1;
        q[2 * 7] ^= 1;
        let bad = scalar_mismatches(&x, &y, &u, &g, &q);
        assert_eq!(bad.iter().map(|b| (b.0, b.1)).collect::<Vec<_>>(), [("to_fixed(x)", 1), ("exp(x)", 1)]);
    }
}
