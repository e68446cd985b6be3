//! The CPU model of the one-pass selection (`rt::stream_select`, issue 22
//! items 2 and 4) bitwise against the existing exact CPU top-N
//! (`host_algo::top_keys_counted`, and the `force_topn` kernel) on
//! adversarial rows, every split / cap / visiting order, and random rows;
//! and the force-top-k-off bound (perf-design 3.4 E) against
//! `process_prefix_draw` run with the true total and with other totals.

use proptest::prelude::*;
use sampler_kernels::kernels as k;
use sampler_kernels::rt::cpu::{Gm, Logits};
use sampler_kernels::rt::host_algo::{top_keys_counted, Counts};
use sampler_kernels::rt::math::{key_id, key_logit, mix64, order_bits};
use sampler_kernels::rt::stream_select::{
    status_of_max, stream_top_n, total_bound, CapScope, Config, Row, RowLogits, Selection, Threshold, Visit,
};

#[path = "support/rows.rs"]
mod rows;
use rows::{cases, Rng, V};

/// Every check of one (row, N, config): the keys (value order and id
/// order), the counts, the status (from the counts and from the max) and
/// the max against the reference on the widened, masked row.
fn check(sel: &Selection, x: &[f32], n: usize, cfg: &Config, what: &str) {
    let (want, counts) = top_keys_counted(x, n);
    assert_eq!(sel.keys.len(), want.len(), "{what}: length");
    assert!(sel.keys == want, "{what}: keys differ from top_keys (stats {:?})", sel.stats);
    let mut by_id = want.clone();
    by_id.sort_unstable_by_key(|&k| key_id(k));
    assert_eq!(sel.keys_by_id(), by_id, "{what}: id order");
    assert_eq!(sel.counts, counts, "{what}: counts");
    let status = if counts.bad > 0 {
        1
    } else if counts.neg_inf as usize == x.len() {
        2
    } else {
        0
    };
    assert_eq!(sel.status, status, "{what}: status");
    if !x.is_empty() {
        assert_eq!(status_of_max(sel.max), status, "{what}: status from the NaN-propagating max {}", sel.max);
    }
    assert_eq!(sel.max.is_nan(), x.iter().any(|v| v.is_nan()), "{what}: max {}", sel.max);
    if !sel.max.is_nan() && !sel.keys.is_empty() {
        // m of the tail is key_logit of the first key: the same value (zeros of either sign).
        assert!(sel.max == key_logit(sel.keys[0]), "{what}: max {} vs first key {}", sel.max, key_logit(sel.keys[0]));
    }
    // Bounds the model claims.
    let st = &sel.stats;
    assert!(st.merged as u64 <= st.appended, "{what}: {st:?}");
    assert!(st.peak as usize <= cfg.cap(n.min(x.len())), "{what}: a buffer past its cap: {st:?}");
    if st.fallback {
        assert!(st.threshold.is_some() && (st.merged as usize) < n, "{what}: {st:?}");
        assert!(cfg.threshold == Threshold::Sampled, "{what}: the histogram mode fell back: {st:?}");
    }
}

fn configs() -> Vec<Config> {
    let mut out = Vec::new();
    let d = Config::default();
    for (i, &c) in [1u32, 2, 4, 8, 16].iter().enumerate() {
        for scope in [CapScope::PerCta, CapScope::PerRow] {
            let visit = match i % 3 {
                0 => Visit::Forward,
                1 => Visit::Backward,
                _ => Visit::Shuffled { seed: 77 + c as u64, within: true },
            };
            out.push(Config { ctas: c, scope, visit, ..d });
        }
    }
    // Tight caps (compactions every few hundred keys), a small sample, short segments, a shuffled order.
    out.push(Config {
        ctas: 4,
        cap_num: 11,
        cap_den: 10,
        segment: 256,
        visit: Visit::Shuffled { seed: 5, within: true },
        ..d
    });
    out.push(Config { ctas: 16, cap_num: 1, cap_den: 1, cap_min: 0, scope: CapScope::PerRow, segment: 1000, ..d });
    // Mode S: the resident histogram (the design's 1024 bins of 1/64), and a coarse one whose boundary bin is crowded.
    let hist = Threshold::Histogram { bins: 1024, per_unit: 64 };
    out.push(Config {
        ctas: 16,
        scope: CapScope::PerRow,
        threshold: hist,
        visit: Visit::Shuffled { seed: 4, within: true },
        ..d
    });
    out.push(Config { ctas: 8, threshold: hist, ..d });
    out.push(Config { ctas: 1, threshold: Threshold::Histogram { bins: 8, per_unit: 1 }, cap_min: 0, ..d });
    out.push(Config {
        ctas: 2,
        sectors: 16,
        sector_len: 1,
        target: 1,
        visit: Visit::Shuffled { seed: 9, within: false },
        ..d
    });
    out
}

/// Every adversarial family at N = 1, 50, 1024, 4096, V and V + 7, under
/// every config: bitwise the reference; and the families meant to reach
/// the rare paths do reach them.
#[test]
fn adversarial_rows_equal_top_keys_at_every_split_and_order() {
    let cfgs = configs();
    let (mut fallbacks, mut compactions) = (0u32, 0u32);
    for case in cases(V) {
        for n in [1usize, 50, 1024, 4096, V, V + 7] {
            for (ci, cfg) in cfgs.iter().enumerate() {
                let (sel, x) = case.run(n, cfg);
                check(&sel, &x, n, cfg, &format!("{}, n = {n}, config {ci} {cfg:?}", case.name));
                if case.name.starts_with("sample-adversarial")
                    && (n == 1024 || n == 4096)
                    && cfg.target == 2
                    && cfg.threshold == Threshold::Sampled
                {
                    assert!(sel.stats.fallback, "{}: F1 not reached at n = {n}, config {ci}", case.name);
                }
                fallbacks += sel.stats.fallback as u32;
                compactions += sel.stats.compactions;
            }
        }
    }
    assert!(
        fallbacks > 0 && compactions > 0,
        "rare paths not reached: {fallbacks} fallbacks, {compactions} compactions"
    );
}

/// The model's kept set equals the `force_topn` kernel's candidates (logit
/// bits and ids, in order) on the CPU backend, for f32 and bf16 logits.
#[test]
fn equals_the_force_topn_kernel() {
    let v = 20_000;
    for case in cases(v).iter().filter(|c| c.mask.is_none()) {
        for n in [1usize, 50, 1024, 4096] {
            let cfg = Config {
                ctas: 8,
                scope: CapScope::PerRow,
                visit: Visit::Shuffled { seed: 3, within: true },
                ..Default::default()
            };
            let (sel, _) = case.run(n, &cfg);
            let (mut cand, mut ids) = (vec![0f32; n], vec![0i32; n]);
            let bf: Vec<half::bf16> = case.f32s.iter().map(|&x| half::bf16::from_f32(x)).collect();
            let hf: Vec<half::f16> = case.f32s.iter().map(|&x| half::f16::from_f32(x)).collect();
            let logits = match case.half {
                None => Logits::f32(&case.f32s),
                Some(true) => Logits::bf16(&bf),
                Some(false) => Logits::f16(&hf),
            };
            unsafe { k::force_topn::cpu(0, logits, v as u32, n as u32, Gm::new_mut(&mut cand), Gm::new_mut(&mut ids)) };
            let got: Vec<(u32, i32)> = sel.keys.iter().map(|&k| (key_logit(k).to_bits(), key_id(k) as i32)).collect();
            let want: Vec<(u32, i32)> = cand.iter().map(|x| x.to_bits()).zip(ids).collect();
            assert!(got == want, "{}, n = {n}: differs from force_topn", case.name);
        }
    }
}

/// A row from a pool that mixes specials, few distinct values and random bits.
fn mixed_row(seed: u64, v: usize, style: u8) -> Vec<f32> {
    let specials = [
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        0.0,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        f32::MAX,
        f32::MIN,
    ];
    let mut g = Rng(seed);
    (0..v)
        .map(|_| {
            let h = g.next();
            match style % 4 {
                0 => g.bench(),
                1 => ((h >> 60) as f32) - 8.0,
                2 if h.is_multiple_of(50) => specials[((h >> 8) % specials.len() as u64) as usize],
                2 => g.bench(),
                _ if h.is_multiple_of(4) => specials[((h >> 8) % 10) as usize],
                _ => f32::from_bits((h >> 16) as u32),
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
    /// Random rows, N, splits, caps, samples, segment sizes, visiting orders and masks.
    #[test]
    fn random_rows_equal_top_keys(
        seed in any::<u64>(),
        v in 1usize..6000,
        n_frac in 0u32..1100,
        style in 0u8..4,
        ctas in 1u32..=16,
        per_row in any::<bool>(),
        visit in 0u8..3,
        cap_extra in 0u32..20,
        sectors in 1u32..600,
        sector_len in 1u32..9,
        target in 1u32..4,
        min_rank in 1u32..20,
        cap_min in 0u32..64,
        segment in 1u32..5000,
        masked in 0u8..3,
        hist in 0u32..3,
        bins in 1u32..2000,
        per_unit in 1u32..256,
    ) {
        let x = mixed_row(seed, v, style);
        let n = (v as u64 * n_frac as u64 / 1000) as usize; // 0 ..= 1.1 V
        let cfg = Config {
            ctas,
            sectors,
            sector_len,
            target,
            min_rank,
            cap_num: 10 + cap_extra,
            cap_den: 10,
            cap_min,
            scope: if per_row { CapScope::PerRow } else { CapScope::PerCta },
            segment,
            threshold: if hist == 0 { Threshold::Histogram { bins, per_unit } } else { Threshold::Sampled },
            visit: match visit { 0 => Visit::Forward, 1 => Visit::Backward, _ => Visit::Shuffled { seed: seed ^ 1, within: seed & 2 == 0 } },
        };
        let mask: Option<Vec<u32>> = match masked {
            0 => None,
            1 => Some((0..v.div_ceil(32)).map(|w| mix64(seed ^ w as u64) as u32).collect()),
            _ => Some((0..v.div_ceil(32)).map(|w| mix64(seed ^ w as u64).is_multiple_of(64) as u32).collect()),
        };
        let row = Row { logits: RowLogits::F32(&x), mask: mask.as_deref() };
        let sel = stream_top_n(row, n, &cfg).unwrap();
        check(&sel, &row.widened(), n, &cfg, &format!("v {v}, n {n}, {cfg:?}"));
    }
}

/// Perf-design 3.4 E, the exact claim: where [`total_bound`] says decided,
/// `process_prefix_draw` on the first w candidates gives the same
/// logprobs, overflow flag and token with the true row total (from
/// `row_mass`) as with any total >= S_w; and the test can tell totals apart
/// (some undecided rows do change with the total).
#[test]
fn total_bound_decided_rows_do_not_depend_on_the_total() {
    let mut g = Rng(5);
    let (mut decided, mut undecided, mut undecided_differs) = (0, 0, 0);
    for rep in 0..600u64 {
        let v = [300usize, 3000, 20_000][rep as usize % 3];
        let style = (rep % 5) as u8;
        let x: Vec<f32> = match style {
            0 | 1 => (0..v).map(|_| g.bench()).collect(),
            2 => (0..v).map(|_| g.bench() * 0.1).collect(), // flat: the prefix holds little mass
            3 => (0..v).map(|i| ((mix64(i as u64 ^ rep) % 4) as f32) * 2.0).collect(), // ties
            _ => (0..v).map(|i| if i % 97 == 0 { 10.0 + g.bench() } else { g.bench() }).collect(),
        };
        let w = [64usize, 256][rep as usize % 2];
        let t = [0.3f32, 0.7, 1.0, 1.5][(rep / 2) as usize % 4];
        let tp = [0.05f32, 0.5, 0.9, 0.99, 1.0][(rep / 8) as usize % 5];
        let tk = [-1i32, 1, 5, 50, 64, 200, 300][(g.next() % 7) as usize];
        let mp = [0f32, 0.0, 0.05, 0.3][(g.next() % 4) as usize];
        let ord = g.next().is_multiple_of(3) as u32;
        let (mut cand, mut ids) = (vec![0f32; w], vec![0i32; w]);
        unsafe {
            k::force_topn::cpu(0, Gm::new(&x), v as u32, w as u32, Gm::new_mut(&mut cand), Gm::new_mut(&mut ids))
        };
        let mut total = [0u64];
        unsafe {
            k::row_mass::cpu(
                0,
                Gm::new(&x),
                v as u32,
                v as u32,
                1,
                Gm::new(&cand),
                w as u32,
                Gm::new(&[t]),
                Gm::new_mut(&mut total),
            )
        };
        let b = total_bound(&cand, v as u32, t, tp, tk, mp, ord);
        assert!(total[0] >= b.s_w, "rep {rep}: the total {} is below S_w {}", total[0], b.s_w);
        let seed = g.next();
        let run = |tot: u64| {
            let (mut lp, mut of, mut tok) = (vec![0f32; w], [0u32], [0i32]);
            unsafe {
                k::process_prefix_draw::cpu(
                    0,
                    Gm::new(&cand),
                    Gm::new(&ids),
                    w as u32,
                    v as u32,
                    Gm::new(&[tot]),
                    1,
                    Gm::new(&[t]),
                    Gm::new(&[tp]),
                    Gm::new(&[tk]),
                    Gm::new(&[mp]),
                    Gm::new(&[ord]),
                    Gm::new(&[seed]),
                    Gm::new(&[rep]),
                    Gm::new_mut(&mut lp),
                    Gm::new_mut(&mut of),
                    Gm::new_mut(&mut tok),
                )
            };
            (lp.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), of, tok)
        };
        let truth = run(total[0]);
        let others = [b.s_w, b.s_w + 1, (b.s_w + total[0]) / 2, total[0] + 12_345, (v as u64) << 44];
        if b.decided {
            decided += 1;
            for tot in others {
                assert!(
                    run(tot) == truth,
                    "rep {rep}: decided ({b:?}) but total {tot} changes the outputs (true {})",
                    total[0]
                );
            }
        } else {
            undecided += 1;
            undecided_differs += others.iter().any(|&tot| run(tot) != truth) as u32;
        }
    }
    assert!(decided > 50 && undecided > 50, "{decided} decided, {undecided} undecided");
    assert!(undecided_differs > 0, "no undecided row depends on the total: the comparison cannot fail");
}

/// The bound on the benchmark's rows (T 0.7, top-p 0.9, top-k 50) decides at w = 256, as perf-design 3.4 E claims.
#[test]
fn total_bound_decides_the_benchmark_rows() {
    let mut g = Rng(1);
    for _ in 0..3 {
        let x: Vec<f32> = (0..V).map(|_| g.bench()).collect();
        let (keys, _) = top_keys_counted(&x, 256);
        let cand: Vec<f32> = keys.iter().map(|&k| key_logit(k)).collect();
        let b = total_bound(&cand, V as u32, 0.7, 0.9, 50, 0.0, 0);
        assert!(b.decided, "{b:?}");
    }
}

#[test]
fn counts_type_is_the_host_algo_one() {
    // The model reports host_algo's Counts, so a composite op can return it unchanged.
    let x = [f32::NAN, f32::NEG_INFINITY, 1.0];
    let s = stream_top_n(Row::f32(&x), 2, &Config::default()).unwrap();
    assert_eq!(s.counts, Counts { bad: 1, neg_inf: 1 });
    assert_eq!(order_bits(key_logit(s.keys[0])), order_bits(f32::NAN));
}
