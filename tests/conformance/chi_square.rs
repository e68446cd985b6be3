//! Chi-square goodness of fit of the CPU sampler's draws (alpha = 1e-4).
//!
//! (a) Plain draws: many prefill rows of the same logits, each with its own
//!     seed; the observed token counts must follow the processed
//!     distribution (temperature, top-p, top-k; force top-k; a mask), whose
//!     expected probabilities come from the f64 reference.
//! (b) Verification (reject sampling): the first token a 2-row verify
//!     request emits, when its draft d_1 is drawn from q, must follow the
//!     target law p whatever q is (q = p, uniform, peaked elsewhere, zero on
//!     part of p's support, mass outside p's support).
//!
//! (c) SAMPLER.md section 10: under min-p and under the top-k-then-top-p
//!     order, the draws follow the renormalised kept distribution, computed
//!     here directly from the spec's rules (and checked against the reference).
//! (d) Tree verification (section 11): the first token a tree request emits,
//!     with the root's children proposed fixed (q's top tokens), with or
//!     without replacement from q, must follow p.
//!
//! Tokens of zero expected probability must never appear. Bins with an
//! expected count below 5 are pooled. The p-value is the upper regularised
//! incomplete gamma function Q(df/2, chi2/2).

use crate::common;

use common::gen::Rng;
use common::reference::{check_params, mask_row, process_row};
use sampler_host::{
    BackendKind, DraftDist, DraftTree, FilterOrder, Request, RequestKind, Sampler, SamplerConfig, SamplingParams,
};

const ALPHA: f64 = 1e-4;
/// Rows per `sample` call.
const CHUNK: usize = 20_000;

fn draws() -> usize {
    std::env::var("CHI_DRAWS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000)
}

/// Extra seed mixed into every test RNG (`CHI_SEED`), to rerun with other draws.
fn seed_offset() -> u64 {
    std::env::var("CHI_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

// ------------------------------------------------------------ statistics

/// ln Gamma(x), Lanczos (g = 7, 9 terms), x > 0.
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + 7.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Upper regularised incomplete gamma Q(a, x) (Numerical Recipes: series
/// below a + 1, Lentz continued fraction above).
fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let lg = ln_gamma(a);
    if x < a + 1.0 {
        let (mut ap, mut sum, mut del) = (a, 1.0 / a, 1.0 / a);
        for _ in 0..10_000 {
            ap += 1.0;
            del *= x / ap;
            sum += del;
            if del.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        1.0 - sum * (-x + a * x.ln() - lg).exp()
    } else {
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() < 1e-15 {
                break;
            }
        }
        (-x + a * x.ln() - lg).exp() * h
    }
}

#[test]
fn gamma_q_known_values() {
    // Chi-square upper tail: df = 1, x = 3.841459 -> 0.05; df = 10, x = 18.307 -> 0.05;
    // df = 3, x = 21.108 -> 1e-4; df = 50, x = 67.505 -> 0.05.
    let p = |df: f64, x: f64| gamma_q(df / 2.0, x / 2.0);
    assert!((p(1.0, 3.841_459) - 0.05).abs() < 1e-6);
    assert!((p(10.0, 18.307_038) - 0.05).abs() < 1e-6);
    assert!((p(3.0, 21.107_5) - 1e-4).abs() < 1e-7);
    assert!((p(50.0, 67.504_807) - 0.05).abs() < 1e-6);
    assert!((p(2.0, 2.0) - (-1.0f64).exp()).abs() < 1e-12);
}

/// Chi-square test of `observed` counts against probabilities `expected`
/// (summing to 1). Panics with a report when the fit is rejected at ALPHA or
/// a token of zero probability was observed.
fn chi_square(what: &str, observed: &[u64], expected: &[f64]) {
    let total: u64 = observed.iter().sum();
    let n = total as f64;
    let esum: f64 = expected.iter().sum();
    assert!((esum - 1.0).abs() < 1e-9, "{what}: expected probabilities sum to {esum}");
    for (t, (&o, &e)) in observed.iter().zip(expected).enumerate() {
        assert!(!(e == 0.0 && o > 0), "{what}: token {t} has probability 0 but was drawn {o} times");
    }
    // Bins in decreasing expected count; pool those below 5.
    let mut bins: Vec<(f64, f64)> = Vec::new();
    let (mut pool_o, mut pool_e) = (0.0, 0.0);
    for (&o, &e) in observed.iter().zip(expected) {
        if e == 0.0 {
            continue;
        }
        if e * n < 5.0 {
            pool_o += o as f64;
            pool_e += e * n;
        } else {
            bins.push((o as f64, e * n));
        }
    }
    if pool_e > 0.0 {
        if pool_e >= 5.0 || bins.is_empty() {
            bins.push((pool_o, pool_e));
        } else {
            // Fold a small pool into the smallest bin.
            let i = (0..bins.len()).min_by(|&a, &b| bins[a].1.partial_cmp(&bins[b].1).unwrap()).unwrap();
            bins[i].0 += pool_o;
            bins[i].1 += pool_e;
        }
    }
    if bins.len() < 2 {
        // A single bin: everything must land there (checked by the zero test above).
        return;
    }
    let stat: f64 = bins.iter().map(|&(o, e)| (o - e) * (o - e) / e).sum();
    let df = (bins.len() - 1) as f64;
    let p = gamma_q(df / 2.0, stat / 2.0);
    eprintln!("{what}: {total} draws, {} bins, chi2 = {stat:.2}, df = {df}, p = {p:.4}", bins.len());
    assert!(p > ALPHA, "{what}: chi-square rejects the fit: chi2 = {stat:.2}, df = {df}, p = {p:.3e}\nobserved {observed:?}\nexpected {:?}", expected.iter().map(|e| e * n).collect::<Vec<_>>());
}

// ------------------------------------------------------------ helpers

fn sampler(vocab: usize, force_topk: usize) -> Sampler {
    Sampler::new(SamplerConfig {
        vocab_size: vocab as u32,
        force_topk: force_topk as u32,
        nextn: 5,
        backend: BackendKind::Cpu,
    })
    .unwrap()
}

/// Processed probabilities of one row per the reference (index = vocabulary id).
fn reference_probs(row: &[f32], mask: Option<&[u32]>, n: usize, params: &SamplingParams) -> Vec<f64> {
    let p = check_params(params, n).unwrap();
    let d = process_row(mask_row(row, mask).unwrap(), n, &p);
    (0..row.len()).map(|t| d.prob(t)).collect()
}

fn logits_row(rng: &mut Rng, v: usize, scale: f64) -> Vec<f32> {
    (0..v).map(|_| (rng.normal() * scale) as f32).collect()
}

// ------------------------------------------------------------ (a) plain draws

#[allow(clippy::too_many_arguments)]
fn plain_draws(
    what: &str,
    v: usize,
    force_topk: usize,
    row: &[f32],
    mask: Option<Vec<u32>>,
    params: SamplingParams,
    draws: usize,
    seed: u64,
) {
    let n = if force_topk == 0 || force_topk >= v { v } else { force_topk };
    let expected = reference_probs(row, mask.as_deref(), n, &SamplingParams { seq_seed: Some(0), ..params.clone() });
    let mut s = sampler(v, force_topk);
    let mut rng = Rng::new(seed ^ seed_offset().wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut counts = vec![0u64; v];
    let mut done = 0;
    let logits: Vec<f32> = (0..CHUNK).flat_map(|_| row.iter().copied()).collect();
    while done < draws {
        let rows = CHUNK.min(draws - done);
        let reqs: Vec<Request> = (0..rows)
            .map(|_| {
                let p = SamplingParams { seq_seed: Some(rng.next_u64()), ..params.clone() };
                let mut r = Request::prefill(p, rng.range(1, 1 << 40));
                r.masks = mask.clone().map(|m| vec![m]);
                r
            })
            .collect();
        let out = s.sample(&logits[..rows * v], &reqs).unwrap();
        for r in &out.rows {
            assert!(r.token >= 0, "{what}: no token");
            counts[r.token as usize] += 1;
        }
        done += rows;
    }
    chi_square(what, &counts, &expected);
}

#[test]
fn plain_draws_follow_the_processed_distribution() {
    let mut rng = Rng::new(11);
    let v = 64;
    let row = logits_row(&mut rng, v, 1.5);
    let params = SamplingParams { temperature: 0.8, top_p: 0.9, top_k: 20, ..Default::default() };
    plain_draws("draws T=0.8 top_p=0.9 top_k=20 V=64", v, 0, &row, None, params, draws(), 1);
}

#[test]
fn plain_draws_force_topk_mask_and_ties() {
    let mut rng = Rng::new(12);
    let v = 40;
    // Quantised logits: ties everywhere, some -inf.
    let mut row: Vec<f32> = (0..v).map(|_| (rng.normal() * 2.0).round() as f32 * 0.5).collect();
    row[3] = f32::NEG_INFINITY;
    row[17] = f32::NEG_INFINITY;
    let mut mask = vec![u32::MAX; 2];
    for t in [0usize, 5, 9, 33] {
        mask[t / 32] &= !(1 << (t % 32));
    }
    let params = SamplingParams { temperature: 1.3, top_p: 0.97, top_k: -1, ..Default::default() };
    plain_draws("draws force_topk=24 mask ties T=1.3 top_p=0.97 V=40", v, 24, &row, Some(mask), params, draws() / 2, 2);
}

// ------------------------------------------------------------ (b) verification

/// Processed q as a draft distribution (ids with q > 0 and their logprobs) plus q as f64.
fn draft_dist(q: &[f64]) -> (DraftDist, Vec<f64>) {
    let z: f64 = q.iter().sum();
    let mut d = DraftDist::default();
    let mut qn = vec![0.0; q.len()];
    for (t, &x) in q.iter().enumerate() {
        if x > 0.0 {
            let lp = (x / z).ln() as f32;
            d.ids.push(t as i32);
            d.logprobs.push(lp);
            qn[t] = (lp as f64).exp();
        }
    }
    let s: f64 = qn.iter().sum();
    qn.iter_mut().for_each(|x| *x /= s);
    (d, qn)
}

fn sample_from(rng: &mut Rng, w: &[f64]) -> usize {
    let u = rng.f64() * w.iter().sum::<f64>();
    let mut cum = 0.0;
    for (i, &x) in w.iter().enumerate() {
        cum += x;
        if cum > u && x > 0.0 {
            return i;
        }
    }
    w.iter().rposition(|&x| x > 0.0).unwrap()
}

fn verify_law(what: &str, v: usize, row: &[f32], params: &SamplingParams, q: &[f64], trials: usize, seed: u64) {
    let p = reference_probs(row, None, v, &SamplingParams { seq_seed: Some(0), ..params.clone() });
    let (dist, qn) = draft_dist(q);
    let mut s = sampler(v, 0);
    let mut rng = Rng::new(seed ^ seed_offset().wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut counts = vec![0u64; v];
    let mut accepted = 0u64;
    let per_call = CHUNK / 2;
    let logits: Vec<f32> = (0..2 * per_call).flat_map(|_| row.iter().copied()).collect();
    let mut done = 0;
    while done < trials {
        let m = per_call.min(trials - done);
        let reqs: Vec<Request> = (0..m)
            .map(|_| {
                // d_1 ~ q from an independent test RNG; a fresh seed per trial.
                let d1 = sample_from(&mut rng, &qn) as i32;
                let pr = SamplingParams { seq_seed: Some(rng.next_u64()), ..params.clone() };
                let seqlen_k = rng.range(2, 1 << 40);
                Request {
                    params: pr,
                    kind: RequestKind::Decode {
                        seqlen_k,
                        seqlen_q: 2,
                        drafts: vec![d1],
                        draft_dists: vec![dist.clone()],
                    },
                    golden: Vec::new(),
                    masks: None,
                }
            })
            .collect();
        let out = s.sample(&logits[..2 * m * v], &reqs).unwrap();
        for o in &out.requests {
            assert!(o.status.is_ok(), "{what}: {:?}", o.status);
            counts[o.emitted[0] as usize] += 1;
            accepted += o.accepted as u64;
        }
        done += m;
    }
    // Acceptance rate of reject sampling: sum_t min(p_t, q_t).
    let want_acc: f64 = p.iter().zip(&qn).map(|(a, b)| a.min(*b)).sum();
    let acc = accepted as f64 / trials as f64;
    let sd = (want_acc * (1.0 - want_acc) / trials as f64).sqrt().max(1e-12);
    eprintln!("{what}: acceptance {acc:.5} (theory {want_acc:.5})");
    assert!(
        (acc - want_acc).abs() <= 4.5 * sd + 1e-9,
        "{what}: acceptance rate {acc} vs theory {want_acc} (sd {sd:.2e})"
    );
    chi_square(what, &counts, &p);
}

#[test]
fn verification_emits_the_target_law() {
    let v = 24;
    let mut rng = Rng::new(21);
    let row = logits_row(&mut rng, v, 1.2);
    // top-p removes part of the vocabulary from p's support.
    let params = SamplingParams { temperature: 1.0, top_p: 0.9, top_k: -1, ..Default::default() };
    let p = reference_probs(&row, None, v, &SamplingParams { seq_seed: Some(0), ..params.clone() });
    let support: Vec<usize> = (0..v).filter(|&t| p[t] > 0.0).collect();
    assert!(support.len() >= 4 && support.len() < v, "test setup: support {}", support.len());
    let trials = draws() / 4;

    // q = p.
    verify_law("verify q = p", v, &row, &params, &p, trials, 31);
    // q uniform over V (mass outside p's support).
    verify_law("verify q uniform", v, &row, &params, &vec![1.0; v], trials, 32);
    // q peaked on the least likely token of p's support (and on one outside it).
    let low = *support.last().unwrap();
    let outside = (0..v).find(|t| p[*t] == 0.0).unwrap();
    let mut peaked: Vec<f64> = (0..v).map(|_| 0.01).collect();
    peaked[low] = 5.0;
    peaked[outside] = 2.0;
    verify_law("verify q peaked elsewhere", v, &row, &params, &peaked, trials, 33);
    // q with zero mass on half of p's support (the most likely half).
    let mut partial: Vec<f64> = (0..v).map(|t| p[t] + 0.02).collect();
    for &t in support.iter().take(support.len() / 2) {
        partial[t] = 0.0;
    }
    verify_law("verify q zero on part of p's support", v, &row, &params, &partial, trials, 34);
}

// ------------------------------------------------------------ (c) section 10

/// The renormalised kept distribution of SAMPLER.md section 10, straight from
/// its text (no force top-k, no mask, distinct logits): p = softmax(logit / T)
/// in f64; min-p removes p_i < min_p * p_max; then either top-p on p and
/// top-k (the seed's order) or top-k and top-p on the renormalised top-k mass.
fn section10_law(row: &[f32], t: f64, top_p: f64, top_k: usize, min_p: f64, top_k_first: bool) -> Vec<f64> {
    let v = row.len();
    let mut order: Vec<usize> = (0..v).collect();
    order.sort_by(|&a, &b| row[b].partial_cmp(&row[a]).unwrap().then(a.cmp(&b)));
    let m = row[order[0]] as f64;
    let e: Vec<f64> = order.iter().map(|&i| ((row[i] as f64 - m) / t).exp()).collect();
    let z: f64 = e.iter().sum();
    let p: Vec<f64> = e.iter().map(|x| x / z).collect();
    let min_p_ok = |i: usize| p[i] >= min_p * p[0];
    let mut keep = vec![false; v];
    if top_k_first {
        let first: Vec<usize> = (0..v).filter(|&i| min_p_ok(i) && i < top_k).collect();
        let z1: f64 = first.iter().map(|&i| p[i]).sum();
        let mut before = 0.0;
        for &i in &first {
            keep[i] = before / z1 <= top_p;
            before += p[i];
        }
    } else {
        let mut before = 0.0;
        for i in 0..v {
            keep[i] = before <= top_p && min_p_ok(i) && i < top_k;
            before += p[i];
        }
    }
    let zk: f64 = (0..v).filter(|&i| keep[i]).map(|i| p[i]).sum();
    let mut law = vec![0.0; v];
    for i in 0..v {
        if keep[i] {
            law[order[i]] = p[i] / zk;
        }
    }
    law
}

fn kept_count(law: &[f64]) -> usize {
    law.iter().filter(|&&x| x > 0.0).count()
}

#[test]
fn min_p_draws_follow_the_renormalised_kept_distribution() {
    let mut rng = Rng::new(41);
    let v = 64;
    let row = logits_row(&mut rng, v, 1.5);
    let params = SamplingParams { temperature: 0.9, top_p: 1.0, top_k: -1, min_p: 0.08, ..Default::default() };
    let law = section10_law(&row, 0.9, 1.0, v, 0.08, false);
    let kept = kept_count(&law);
    assert!(kept >= 4 && kept < v / 2, "test setup: min-p keeps {kept} of {v}");
    let reference = reference_probs(&row, None, v, &SamplingParams { seq_seed: Some(0), ..params.clone() });
    // The same kept set; values up to the reference's f32 scaling (section 3.4).
    assert!(
        law.iter().zip(&reference).all(|(a, b)| (*a > 0.0) == (*b > 0.0) && (a - b).abs() < 1e-6),
        "the reference disagrees with section 10.1"
    );
    plain_draws("draws min_p=0.08 T=0.9 V=64", v, 0, &row, None, params, draws() / 4, 41);
    // Min-p with top-p and top-k in the seed's order: the shortest prefix wins.
    let params = SamplingParams { temperature: 0.9, top_p: 0.9, top_k: 12, min_p: 0.05, ..Default::default() };
    let law = section10_law(&row, 0.9, 0.9, 12, 0.05, false);
    assert!(kept_count(&law) >= 4, "test setup");
    plain_draws("draws min_p=0.05 top_p=0.9 top_k=12 T=0.9 V=64", v, 0, &row, None, params, draws() / 4, 42);
}

#[test]
fn top_k_then_top_p_draws_follow_the_renormalised_kept_distribution() {
    let mut rng = Rng::new(43);
    let v = 64;
    let row = logits_row(&mut rng, v, 1.0);
    let (t, top_p, top_k) = (1.0, 0.6, 10usize);
    let law = section10_law(&row, t, top_p as f64, top_k, 0.0, true);
    let seed_order = section10_law(&row, t, top_p as f64, top_k, 0.0, false);
    // The setup must tell the two orders apart: top-k first keeps fewer tokens here.
    assert!(
        kept_count(&law) >= 3 && kept_count(&law) < kept_count(&seed_order),
        "test setup: {} vs {}",
        kept_count(&law),
        kept_count(&seed_order)
    );
    let params = SamplingParams {
        temperature: t as f32,
        top_p,
        top_k: top_k as i64,
        filter_order: FilterOrder::TopKThenTopP,
        ..Default::default()
    };
    let reference = reference_probs(&row, None, v, &SamplingParams { seq_seed: Some(0), ..params.clone() });
    assert!(
        law.iter().zip(&reference).all(|(a, b)| (*a > 0.0) == (*b > 0.0) && (a - b).abs() < 1e-6),
        "the reference disagrees with section 10.2"
    );
    plain_draws("draws top_k_then_top_p k=10 top_p=0.6 V=64", v, 0, &row, None, params, draws() / 4, 43);
    // With min-p too, under force top-k.
    let params = SamplingParams {
        temperature: 0.7,
        top_p: 0.8,
        top_k: 20,
        min_p: 0.02,
        filter_order: FilterOrder::TopKThenTopP,
        ..Default::default()
    };
    plain_draws(
        "draws top_k_then_top_p k=20 top_p=0.8 min_p=0.02 force_topk=32 V=64",
        v,
        32,
        &row,
        None,
        params,
        draws() / 4,
        44,
    );
}

// ------------------------------------------------------------ (d) tree verification

/// How the children of the root are proposed (SAMPLER.md 11.3).
#[derive(Clone, Copy, Debug)]
enum Law {
    /// The `k` most likely tokens of q (no random numbers): target-only.
    Fixed,
    /// Each child drawn from q independently.
    WithReplacement,
    /// Each child drawn from q with the earlier children removed.
    WithoutReplacement,
}

/// The first token a tree request emits (at the root) must follow the
/// target law p whatever the proposal, when the root's `k` children are
/// drawn as declared; the root's children also have children, so the walk
/// goes on after an acceptance.
#[allow(clippy::too_many_arguments)]
fn tree_law(
    what: &str,
    v: usize,
    row: &[f32],
    params: &SamplingParams,
    q: &[f64],
    law: Law,
    k: usize,
    trials: usize,
    seed: u64,
) {
    let p = reference_probs(row, None, v, &SamplingParams { seq_seed: Some(0), ..params.clone() });
    let (dist, qn) = draft_dist(q);
    let mut s = sampler(v, 0);
    let mut rng = Rng::new(seed ^ seed_offset().wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut counts = vec![0u64; v];
    // Nodes: root, its k children, one grandchild under child 1.
    let m = k + 2;
    let mut parent: Vec<i32> = vec![-1];
    parent.extend(std::iter::repeat_n(0, k));
    parent.push(1);
    let internal = 2;
    let per_call = CHUNK / m;
    let logits: Vec<f32> = (0..per_call * m).flat_map(|_| row.iter().copied()).collect();
    // Fixed children: q's k most likely tokens, in that order.
    let mut by_q: Vec<usize> = (0..v).collect();
    by_q.sort_by(|&a, &b| qn[b].partial_cmp(&qn[a]).unwrap().then(a.cmp(&b)));
    let mut done = 0;
    while done < trials {
        let n = per_call.min(trials - done);
        let reqs: Vec<Request> = (0..n)
            .map(|_| {
                let mut tokens = Vec::with_capacity(m - 1);
                let mut w = qn.clone();
                #[allow(clippy::needless_range_loop)]
                for c in 0..k {
                    let t = match law {
                        Law::Fixed => by_q[c],
                        Law::WithReplacement => sample_from(&mut rng, &qn),
                        Law::WithoutReplacement => {
                            let t = sample_from(&mut rng, &w);
                            w[t] = 0.0;
                            t
                        }
                    };
                    tokens.push(t as i32);
                }
                tokens.push(sample_from(&mut rng, &qn) as i32);
                let draft_dists = match law {
                    Law::Fixed => None,
                    _ => Some(vec![dist.clone(); internal]),
                };
                let tree = DraftTree {
                    parent: parent.clone(),
                    tokens,
                    draft_dists,
                    without_replacement: matches!(law, Law::WithoutReplacement),
                };
                let pr = SamplingParams { seq_seed: Some(rng.next_u64()), ..params.clone() };
                Request::tree(pr, rng.range(m as u64, 1 << 40), tree)
            })
            .collect();
        let out = s.sample(&logits[..n * m * v], &reqs).unwrap();
        for o in &out.requests {
            assert!(o.status.is_ok(), "{what}: {:?}", o.status);
            counts[o.emitted[0] as usize] += 1;
        }
        done += n;
    }
    chi_square(what, &counts, &p);
}

#[test]
fn tree_verification_emits_the_target_law() {
    let v = 16;
    let mut rng = Rng::new(41);
    let row = logits_row(&mut rng, v, 1.2);
    let params = SamplingParams { temperature: 1.0, top_p: 0.9, top_k: -1, ..Default::default() };
    let p = reference_probs(&row, None, v, &SamplingParams { seq_seed: Some(0), ..params.clone() });
    let outside = (0..v).find(|t| p[*t] == 0.0).expect("test setup: top-p removes a token");
    // q peaked elsewhere (on a token outside p's support too), and q near p.
    let mut peaked: Vec<f64> = (0..v).map(|t| 0.02 + p[t] * 0.2).collect();
    peaked[outside] = 1.5;
    let near: Vec<f64> = (0..v).map(|t| p[t] + 0.01).collect();
    let trials = draws() / 16;
    for (law, tag) in [(Law::Fixed, 1u64), (Law::WithReplacement, 2), (Law::WithoutReplacement, 3)] {
        tree_law(&format!("tree {law:?} q peaked, 3 children"), v, &row, &params, &peaked, law, 3, trials, 50 + tag);
        tree_law(&format!("tree {law:?} q near p, 4 children"), v, &row, &params, &near, law, 4, trials / 2, 60 + tag);
    }
}
