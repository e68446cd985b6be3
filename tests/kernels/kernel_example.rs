//! The example of docs/DSL.md, "Add, launch and test a kernel": a min-p
//! filter written with `#[kernel]` (and a `#[kernel_fn]` helper), launched
//! on the CPU and checked against plain Rust, then run under the AscendC
//! emulation beside the CPU. A kernel added to
//! a family module of `sampler-kernels/src/kernels/` is tested the same way (then
//! `cargo run --example regenerate` writes its PTX and AscendC).

use crate::common;

use common::ascendc_emu::{gxx, run_both, Val};
use sampler_kernels::rt::cpu::{self, Gm};
use sampler_kernels::rt::math::exp_f32;
use sampler_macros::{kernel, kernel_fn};

/// `p_i / p_max = exp(x_i - max x)` of a row tile.
#[kernel_fn]
fn relative_probs(x: Tile<f32>) -> Tile<f32> {
    exp(x - reduce_max(x))
}

/// Min-p: keeps the logits whose probability is at least `min_p` times the
/// row's largest, and sets the others to `-inf`.
///
/// - `logits`: `[R, n]` f32; `out`: `[R, n]` f32 out; `min_p` in `[0, 1]`.
#[kernel(tile = [64, 256], threads = [64, 128])]
pub fn min_p_filter(logits: Gm<f32>, n: u32, min_p: f32, out: GmMut<f32>) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let x = load(logits, off, n);
    let p = relative_probs(x); // a helper call stands alone
    let keep = p >= min_p;
    store(out, off, select(keep, x, NEG_INF));
}

/// The same filter in plain Rust (the DSL's `exp` is `rt::math::exp_f32`).
fn reference(row: &[f32], min_p: f32) -> Vec<f32> {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    row.iter().map(|&x| if exp_f32(x - m) >= min_p { x } else { f32::NEG_INFINITY }).collect()
}

/// Logits well away from the `min_p` threshold (the AscendC `Exp` is
/// compared within a tolerance).
fn logits(rows: usize, n: usize) -> Vec<f32> {
    (0..rows * n).map(|i| ((i * 37 % 101) as f32) * 0.05 - 2.5).collect()
}

#[test]
fn min_p_filter_on_the_cpu_matches_plain_rust() {
    let (rows, n, min_p) = (3usize, 200usize, 0.1f32);
    let x = logits(rows, n);
    let mut y = vec![0.0f32; rows * n];
    let (gx, gy) = (Gm::new(&x), Gm::new_mut(&mut y));
    // SAFETY: `x` and `y` outlive the launch; program r writes only row r of `y`.
    cpu::launch(rows as u32, |r| unsafe { min_p_filter::cpu(r, gx, n as u32, min_p, gy) });
    for r in 0..rows {
        assert_eq!(y[r * n..(r + 1) * n], reference(&x[r * n..(r + 1) * n], min_p)[..], "min_p_filter row {r}");
    }
    assert!(y.contains(&f32::NEG_INFINITY) && y.iter().any(|v| v.is_finite()), "the case filters some logits, not all");
}

#[test]
fn min_p_filter_under_ascendc_emulation_matches_the_cpu() {
    if gxx().is_none() {
        eprintln!("skipping: g++ not found");
        return;
    }
    let (rows, n) = (3u32, 200u32);
    let args = [
        Val::F32(logits(rows as usize, n as usize)),
        Val::SU32(n),
        Val::SF32(0.1),
        Val::F32(vec![0.0; (rows * n) as usize]),
    ];
    // Tile 256 holds a row of 200; one program per row.
    let (cpu, emu) = run_both("min_p_filter", 256, rows, &args).unwrap();
    assert_eq!(cpu[3].f32s(), emu[3].f32s(), "min_p_filter: AscendC emulation vs CPU");
}
