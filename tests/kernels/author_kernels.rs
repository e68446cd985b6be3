//! Two new kernels written from docs/DSL.md alone, as a kernel author
//! joining the project would ("Add, launch and test a kernel"), kept in a
//! test file: each runs on the CPU against plain Rust and under the AscendC
//! emulation beside the CPU.
//!
//! - `min_p_cut_count`: per row, how many logits min-p keeps;
//! - `top_k_renorm`: per row, the `k` largest logits (ids and probabilities
//!   renormalised over those `k`, summed exactly in fixed point).

use crate::common;

use common::ascendc_emu::{gxx, run_both, Val};
use sampler_kernels::rt::cpu::{self, Gm, Logits};
use sampler_kernels::rt::math::{exp_f32, fixed_to_f32, order_key, to_fixed};
use sampler_macros::kernel;

/// Min-p cut count: the number of logits of each row whose probability is
/// at least `min_p` times the row's largest.
///
/// - `logits`: `[R, n]` (f32, bf16 or f16); `min_p` in `[0, 1]`;
/// - `counts`: `[R]` u32 out.
#[kernel(tile = [64, 256], threads = [32, 128])]
pub fn min_p_cut_count(logits: Logits, n: u32, min_p: f32, counts: GmMut<u32>) {
    let r = row();
    let x = load(logits, (r as u64) * (n as u64), n);
    let m = reduce_max(x);
    store_scalar(counts, r as u64, count(exp(x - m) >= min_p));
}

/// Top-k renormalised: the `k` largest logits of each row (logit
/// descending, ties by lower id), and their probabilities renormalised over
/// those `k` (fixed-point sum, so exact in any order).
///
/// - `logits`: `[R, v]` f32; `k` in `1..=TILE` and at most `v`;
/// - `probs`: `[R, k]` f32 out; `ids`: `[R, k]` i32 out.
#[kernel(tile = [64, 256], threads = [64, 128])]
pub fn top_k_renorm(logits: Gm<f32>, v: u32, k: u32, probs: GmMut<f32>, ids: GmMut<i32>) {
    let r = row();
    let (vals, idx) = top_n(logits, (r as u64) * (v as u64), v, k);
    let m = reduce_max(vals);
    let total = fixed_to_f32(reduce_sum(to_fixed(exp(vals - m))));
    let out = (r as u64) * (k as u64);
    store(probs, out, exp(vals - m) / total);
    store(ids, out, idx);
}

/// Logits with repeated values (ties) and a spread of probabilities.
fn logits(rows: usize, n: usize) -> Vec<f32> {
    (0..rows * n).map(|i| ((i * 37 % 101) as f32) * 0.05 - 2.5).collect()
}

fn cut_count_reference(row: &[f32], min_p: f32) -> u32 {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    row.iter().filter(|&&x| exp_f32(x - m) >= min_p).count() as u32
}

fn top_k_reference(row: &[f32], k: usize) -> (Vec<f32>, Vec<i32>) {
    let mut keyed: Vec<(u64, usize)> = row.iter().enumerate().map(|(i, &x)| (order_key(x, i as u32), i)).collect();
    // A larger order key comes earlier (logit descending, ties by lower id).
    keyed.sort_unstable_by(|a, b| b.cmp(a));
    let top: Vec<usize> = keyed.iter().take(k).map(|&(_, i)| i).collect();
    let m = top.iter().map(|&i| row[i]).fold(f32::NEG_INFINITY, f32::max);
    let total = fixed_to_f32(top.iter().map(|&i| to_fixed(exp_f32(row[i] - m))).sum());
    (top.iter().map(|&i| exp_f32(row[i] - m) / total).collect(), top.iter().map(|&i| i as i32).collect())
}

#[test]
fn min_p_cut_count_on_the_cpu_matches_plain_rust() {
    let (rows, n, min_p) = (4usize, 200usize, 0.1f32);
    let x = logits(rows, n);
    let mut c = vec![u32::MAX; rows];
    let (gx, gc) = (Gm::new(&x), Gm::new_mut(&mut c));
    // SAFETY: `x` and `c` outlive the launch; program r writes only c[r].
    cpu::launch(rows as u32, |r| unsafe { min_p_cut_count::cpu(r, gx, n as u32, min_p, gc) });
    for r in 0..rows {
        assert_eq!(c[r], cut_count_reference(&x[r * n..(r + 1) * n], min_p), "row {r}");
    }
    assert!(c.iter().all(|&k| k > 0 && k < n as u32), "the case cuts some logits, not all: {c:?}");
}

#[test]
fn min_p_cut_count_of_bf16_logits_counts_the_widened_values() {
    let (rows, n, min_p) = (2usize, 100usize, 0.2f32);
    let h: Vec<half::bf16> = logits(rows, n).into_iter().map(half::bf16::from_f32).collect();
    let wide: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
    let mut c = vec![0u32; rows];
    let gc = Gm::new_mut(&mut c);
    let lx = Logits::bf16(&h);
    // SAFETY: as above.
    cpu::launch(rows as u32, |r| unsafe { min_p_cut_count::cpu(r, lx, n as u32, min_p, gc) });
    for r in 0..rows {
        assert_eq!(c[r], cut_count_reference(&wide[r * n..(r + 1) * n], min_p), "row {r}");
    }
}

#[test]
fn top_k_renorm_on_the_cpu_matches_plain_rust() {
    let (rows, v, k) = (3usize, 500usize, 20usize);
    let x = logits(rows, v);
    let (mut p, mut ids) = (vec![0.0f32; rows * k], vec![-7i32; rows * k]);
    let (gx, gp, gi) = (Gm::new(&x), Gm::new_mut(&mut p), Gm::new_mut(&mut ids));
    // SAFETY: the buffers outlive the launch; program r writes only row r of `p` and `ids`.
    cpu::launch(rows as u32, |r| unsafe { top_k_renorm::cpu(r, gx, v as u32, k as u32, gp, gi) });
    for r in 0..rows {
        let (rp, ri) = top_k_reference(&x[r * v..(r + 1) * v], k);
        assert_eq!(ids[r * k..(r + 1) * k], ri[..], "ids of row {r}");
        assert_eq!(p[r * k..(r + 1) * k], rp[..], "probs of row {r}");
        let s: f32 = rp.iter().sum();
        assert!((s - 1.0).abs() < 1e-4, "row {r} sums to {s}");
    }
}

#[test]
fn new_kernels_are_registered_with_their_params() {
    let k = sampler_kernels::registry::find("top_k_renorm").expect("registered");
    let names: Vec<_> = k.params.iter().map(|p| p.name).collect();
    assert_eq!(names, ["logits", "v", "k", "probs", "ids"]);
    assert!(k.ascendc.is_some(), "top_k_renorm lowers to AscendC: {:?}", k.ascendc_skipped);
    assert!(sampler_kernels::registry::find("min_p_cut_count").is_some_and(|k| k.ascendc.is_some()));
}

#[test]
fn new_kernels_under_ascendc_emulation_match_the_cpu() {
    if gxx().is_none() {
        eprintln!("skipping: g++ not found");
        return;
    }
    let (rows, n) = (3u32, 200u32);
    let args =
        [Val::F32(logits(rows as usize, n as usize)), Val::SU32(n), Val::SF32(0.1), Val::U32(vec![0; rows as usize])];
    let (cpu, emu) = run_both("min_p_cut_count", 256, rows, &args).unwrap();
    assert_eq!(cpu[3].u32s(), emu[3].u32s(), "min_p_cut_count: AscendC emulation vs CPU");

    let (v, k) = (500u32, 20u32);
    let out = (rows * k) as usize;
    let args = [
        Val::F32(logits(rows as usize, v as usize)),
        Val::SU32(v),
        Val::SU32(k),
        Val::F32(vec![0.0; out]),
        Val::I32(vec![0; out]),
    ];
    let (cpu, emu) = run_both("top_k_renorm", 64, rows, &args).unwrap();
    assert_eq!(cpu[4].i32s(), emu[4].i32s(), "top_k_renorm ids: AscendC emulation vs CPU");
    for (i, (a, b)) in cpu[3].f32s().iter().zip(emu[3].f32s()).enumerate() {
        // The AscendC `Exp` is compared within a tolerance (kernel_example.rs).
        assert!(common::ascendc_emu::close(*a, *b), "top_k_renorm prob {i}: cpu {a} emu {b}");
    }
}
