//! A host model of `rt::gpu::cluster::top_n_cluster` (issue 22: a row's
//! top-N over the CTAs of a thread-block cluster) step for step: each rank
//! its slice and histograms, the MSB-first radix passes on the 32-bit order
//! bits over the summed histograms (11, 11, 10 bits; the two ranks `n` and
//! `sorted` together; bf16's 22 bits), the boundary value split by id with
//! each rank's quota, and the kept keys gathered as the leader sees them.
//! Checked bitwise against `host_algo::top_keys_counted` on the adversarial
//! rows of issue 22 item 4 at 1 to 16 CTAs a row, and on random rows. The
//! GPU kernel itself is checked on the H200 (`tests/devices/cuda_counts.rs`,
//! `gpu_suite` with `SAMPLER_CLUSTER`); this model pins the algorithm.

use proptest::prelude::*;
use sampler_kernels::rt::host_algo::top_keys_counted;
use sampler_kernels::rt::math::{key_of_bits, order_bits, order_is_bad, NEG_INF_ORDER};
use sampler_kernels::spec::cluster_slice;

#[path = "support/rows.rs"]
mod rows;
use rows::{cases, Rng, V};

const HB: usize = 2048;

fn digit(p: u32) -> (u32, u32) {
    match p {
        0 => (21, 11),
        1 => (10, 11),
        _ => (0, 10),
    }
}

#[derive(Clone, Copy, Debug)]
struct Sel {
    pre: u32,
    need: u32,
    done: bool,
    thr: u32,
    ties: bool,
}

/// What the leader returns: the kept keys (the first `sp` sorted, the rest
/// in gather order), `sp`, bad and -inf counts, passes run.
struct Out {
    keys: Vec<u64>,
    sp: usize,
    bad: u32,
    neg: u32,
    passes: u32,
}

/// `top_n_cluster` on the widened row `x` over `ctas` ranks; `flat`: the
/// logits' `Source::flat_bits` (16 for bf16).
fn model(x: &[f32], n: u32, sorted: u32, ctas: u32, flat: u32) -> Out {
    let v = x.len() as u32;
    let n = n.min(v);
    let slice = cluster_slice(v, ctas);
    let u: Vec<u32> = x.iter().map(|&f| order_bits(f)).collect();
    let range = |q: u32| {
        let start = (q * slice).min(v);
        start as usize..(start + slice.min(v - start)) as usize
    };
    let (bad, neg) = u.iter().fold((0, 0), |(b, g), &o| (b + order_is_bad(o) as u32, g + (o == NEG_INF_ORDER) as u32));
    let s = sorted.min(n);
    let two = s > 0 && s < n;
    let fresh = |need: u32, done: bool| Sel { pre: 0, need, done, thr: 0, ties: false };
    let mut sel = [fresh(n, n == 0), fresh(s, !two)];
    // hists[rank][h][bin]
    let mut hists = vec![vec![vec![0u32; HB]; 5]; ctas as usize];
    for q in 0..ctas {
        for &o in &u[range(q)] {
            hists[q as usize][0][(o >> 21) as usize] += 1;
        }
    }
    // Per selection: the hist index of the last pass and each rank's count of the boundary value.
    let mut ranks = [vec![0u32; ctas as usize], vec![0u32; ctas as usize]];
    let mut p = 0u32;
    while p < 3 && !(sel[0].done && sel[1].done) {
        let (shift, bits) = digit(p);
        let h0 = if p == 0 { 0 } else { 2 * p - 1 } as usize;
        let share = p == 0 || (!sel[0].done && sel[1].pre == sel[0].pre);
        let h1 = if share { h0 } else { 2 * p as usize };
        if p > 0 {
            let above = shift + bits;
            let mask = (1u32 << bits) - 1;
            for q in 0..ctas {
                for &o in &u[range(q)] {
                    let d = ((o >> shift) & mask) as usize;
                    if !sel[0].done && (o >> above) == sel[0].pre {
                        hists[q as usize][h0][d] += 1;
                    }
                    if !share && !sel[1].done && (o >> above) == sel[1].pre {
                        hists[q as usize][h1][d] += 1;
                    }
                }
            }
        }
        let last = p == 2 || (p == 1 && flat >= 10);
        for (j, h) in [(0usize, h0), (1, h1)] {
            let sj = &mut sel[j];
            if sj.done {
                continue;
            }
            let g: Vec<u32> = (0..HB).map(|b| hists.iter().map(|r| r[h][b]).sum()).collect();
            // The boundary: from the top bin down.
            let mut above = 0u32;
            let mut found = None;
            for b in (0..HB).rev() {
                if above < sj.need && sj.need <= above + g[b] {
                    found = Some((b as u32, above, g[b]));
                    break;
                }
                above += g[b];
            }
            let (b, above, cnt) = found.expect("a boundary bin");
            sj.need -= above;
            sj.pre = (sj.pre << bits) | b;
            if cnt == sj.need {
                sj.done = true;
                sj.thr = sj.pre << shift;
            } else if last {
                sj.done = true;
                sj.ties = true;
                let fill = if shift == 0 || (sj.pre >> (31 - shift)) & 1 == 1 { 0 } else { (1u32 << shift) - 1 };
                sj.thr = (sj.pre << shift) | fill;
                ranks[j] = hists.iter().map(|r| r[h][b as usize]).collect();
            }
        }
        p += 1;
    }
    let share_of = |sj: &Sel, rk: &[u32], q: usize| {
        if !sj.ties {
            return (true, 0);
        }
        let before: u32 = rk[..q].iter().sum();
        let mine = rk[q];
        let take = if sj.need > before { (sj.need - before).min(mine) } else { 0 };
        (take == mine, take)
    };
    let (mut pre_keys, mut rest_keys) = (Vec::new(), Vec::new());
    for q in 0..ctas as usize {
        let (all0, quota0) = share_of(&sel[0], &ranks[0], q);
        let (all1, quota1) = if two { share_of(&sel[1], &ranks[1], q) } else { (true, 0) };
        let (t0, t1) = (sel[0].thr, sel[1].thr);
        let mut tr = (0u32, 0u32);
        let r = range(q as u32);
        for (i, &o) in u[r.clone()].iter().enumerate() {
            let k0 = o > t0 || (o == t0 && (all0 || tr.0 < quota0));
            let k1 = o > t1 || (o == t1 && (all1 || tr.1 < quota1));
            tr = (tr.0 + (o == t0) as u32, tr.1 + (o == t1) as u32);
            let pre = if two { k1 } else { s == n && k0 && n > 0 };
            let key = key_of_bits(o, (r.start + i) as u32);
            if pre {
                pre_keys.push(key);
            } else if k0 && n > 0 {
                rest_keys.push(key);
            }
        }
    }
    let sp = if two {
        s
    } else if s == n {
        n
    } else {
        0
    } as usize;
    assert_eq!(pre_keys.len(), sp, "prefix keys gathered");
    pre_keys.sort_unstable_by(|a, b| b.cmp(a));
    pre_keys.extend(rest_keys);
    Out { keys: pre_keys, sp, bad, neg, passes: p }
}

/// The model's kept set, its sorted prefix and counts against the exact CPU top-N.
fn check(x: &[f32], n: u32, sorted: u32, ctas: u32, flat: u32, what: &str) -> u32 {
    let out = model(x, n, sorted, ctas, flat);
    let (want, counts) = top_keys_counted(x, n as usize);
    assert_eq!(out.keys.len(), want.len(), "{what}: kept count");
    assert_eq!(&out.keys[..out.sp], &want[..out.sp], "{what}: sorted prefix");
    let mut got = out.keys.clone();
    got.sort_unstable_by(|a, b| b.cmp(a));
    assert!(got == want, "{what}: kept set differs from top_keys");
    assert_eq!((out.bad, out.neg), (counts.bad, counts.neg_inf), "{what}: counts");
    out.passes
}

#[test]
fn adversarial_rows_at_every_cluster_size_equal_top_keys() {
    let mut passes = [0u32; 4];
    for case in cases(V) {
        if case.mask.is_some() {
            continue; // the cluster top-N runs on steps without a grammar mask
        }
        let x: Vec<f32> = match case.half {
            None => case.f32s.clone(),
            Some(true) => case.f32s.iter().map(|&f| half::bf16::from_f32(f).to_f32()).collect(),
            Some(false) => case.f32s.iter().map(|&f| half::f16::from_f32(f).to_f32()).collect(),
        };
        let flat = if case.half == Some(true) { 16 } else { 0 };
        for ctas in [1u32, 2, 3, 4, 5, 6, 7, 8, 12, 16] {
            for (n, sorted) in [(1u32, 1u32), (50, 64), (1024, 64), (1024, 1024), (4096, 64), (4096, 0), (4096, 4096)] {
                let what = format!("{} at {ctas} CTAs, N {n}, sorted {sorted}", case.name);
                passes[check(&x, n, sorted, ctas, flat, &what) as usize] += 1;
            }
        }
    }
    // Ends after one, two and three digits all occur (bf16 ties after two).
    assert!(passes[1] > 0 && passes[2] > 0 && passes[3] > 0, "passes run: {passes:?}");
}

/// Ties split across slices: a value shared by more keys than still needed,
/// spread so that the boundary falls inside a middle rank's slice.
#[test]
fn ties_across_slices_take_the_lowest_ids() {
    let v = 20_000usize;
    for ctas in [2u32, 3, 4, 5, 6, 7, 8, 12, 16] {
        for every in [1usize, 3, 16, 97] {
            let x: Vec<f32> = (0..v).map(|i| if i % every == 0 { 5.0 } else { (i % 13) as f32 * 0.25 }).collect();
            for n in [1u32, 700, 1024, 4096, 9000] {
                for sorted in [0u32, 1, 64, n] {
                    check(&x, n, sorted, ctas, 0, &format!("every {every} at {ctas} CTAs, N {n}, sorted {sorted}"));
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Random rows (few values, specials, random bits, the benchmark's
    /// distribution), lengths, N, prefixes and cluster sizes.
    #[test]
    fn random_rows_equal_top_keys(seed in any::<u64>(), v in 1usize..6000, nf in 0.0f64..1.2, sf in 0.0f64..1.2,
                                  ctas_log in 0u32..5, kind in 0u32..4, bf in any::<bool>()) {
        let mut g = Rng(seed);
        let specials = [f32::NAN, -f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0, f32::from_bits(1)];
        let x: Vec<f32> = (0..v)
            .map(|_| match kind {
                0 => (g.next() % 7) as f32 * 0.5,
                1 => specials[(g.next() % 7) as usize],
                2 => f32::from_bits(g.next() as u32),
                _ => g.bench(),
            })
            .map(|f| if bf { half::bf16::from_f32(f).to_f32() } else { f })
            .collect();
        let n = ((v as f64 * nf) as u32).clamp(1, v as u32);
        let sorted = (n as f64 * sf) as u32;
        check(&x, n, sorted, 1 << ctas_log, if bf { 16 } else { 0 }, "proptest");
    }
}
