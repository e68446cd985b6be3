//! Request shapes fail only their own request (SAMPLER.md section 6, issue 10).
//!
//! Batches in which one request has a malformed shape (wrong draft count,
//! drafts beyond `nextn`, a `seqlen_q` that disagrees with the drafts, bad
//! draft ids, wrong draft-distribution or mask counts): that request gets an
//! error status with token -1 on all its rows, and every other request is
//! bitwise identical to running it alone.

use crate::common;

use common::gen::{random_step, GenOpts, Rng};
use proptest::prelude::*;
use sampler_host::{
    BackendKind, DraftDist, Request, RequestKind, RowOutput, Sampler, SamplerConfig, SamplingParams, StepOutput,
};

const NEXTN: u32 = 5;

fn sampler(v: usize, force: usize) -> Sampler {
    Sampler::new(SamplerConfig {
        vocab_size: v as u32,
        force_topk: force as u32,
        nextn: NEXTN,
        backend: BackendKind::Cpu,
    })
    .unwrap()
}

/// A malformed decode request and its logits rows (`seqlen_q` rows: it owns them).
fn malformed(rng: &mut Rng, v: usize) -> (Request, usize, &'static str) {
    let params = SamplingParams {
        temperature: 0.8,
        top_p: 0.9,
        top_logprobs: 1,
        seq_seed: Some(rng.next_u64()),
        ..Default::default()
    };
    let dist = |rng: &mut Rng| DraftDist { ids: vec![rng.below(v) as i32], logprobs: vec![0.0] };
    let ids = |rng: &mut Rng, n: usize| (0..n).map(|_| rng.below(v) as i32).collect::<Vec<_>>();
    let m = rng.range(2, 7) as usize;
    let (drafts, dists, seqlen_q, why): (Vec<i32>, Vec<DraftDist>, usize, &str) = match rng.below(7) {
        // One draft too few or too many for seqlen_q.
        0 => (ids(rng, m), (0..m).map(|_| dist(rng)).collect(), m, "drafts = seqlen_q"),
        1 => (
            ids(rng, m.saturating_sub(2)),
            (0..m.saturating_sub(2)).map(|_| dist(rng)).collect(),
            m,
            "drafts = seqlen_q - 2",
        ),
        // More drafts than nextn (with a consistent seqlen_q).
        2 => {
            let k = NEXTN as usize + 1 + rng.below(3);
            (ids(rng, k), (0..k).map(|_| dist(rng)).collect(), k + 1, "drafts beyond nextn")
        }
        // A draft id outside 0..V-1 other than the placeholder -1.
        3 => {
            let mut d = ids(rng, m.max(2) - 1);
            let i = rng.below(d.len());
            d[i] = rng.pick(&[v as i32, v as i32 + 7, -2, i32::MIN, i32::MAX]);
            let n = d.len();
            (d, (0..n).map(|_| dist(rng)).collect(), n + 1, "bad draft id")
        }
        // Draft distributions of the wrong count.
        4 => {
            let k = m.max(2) - 1;
            (ids(rng, k), (0..k - 1).map(|_| dist(rng)).collect(), k + 1, "draft_dists count")
        }
        // seqlen_q with no drafts at all (the repro: decode(.., 4, [], [])).
        5 => (vec![], vec![], m.max(2), "no drafts for seqlen_q > 1"),
        // A bad id inside a draft distribution.
        _ => {
            let k = m.max(2) - 1;
            let mut ds: Vec<DraftDist> = (0..k).map(|_| dist(rng)).collect();
            ds[0].ids[0] = v as i32;
            (ids(rng, k), ds, k + 1, "draft_dists id")
        }
    };
    let mut req = Request::decode(params, 1000, seqlen_q as u64, drafts, dists);
    if rng.chance(0.3) {
        // Masks of the wrong count on top.
        req.masks = Some(vec![vec![u32::MAX; v.div_ceil(32)]; seqlen_q + 1]);
    }
    (req, seqlen_q, why)
}

fn same_row(a: &RowOutput, b: &RowOutput, k: usize) -> bool {
    let bits = |x: f32| x.to_bits();
    a.token == b.token
        && bits(a.logprob) == bits(b.logprob)
        && bits(a.sum_smaller_probs) == bits(b.sum_smaller_probs)
        && a.top_logprobs.len() >= k
        && a.top_logprobs[..k].iter().zip(&b.top_logprobs[..k]).all(|(x, y)| x.0 == y.0 && bits(x.1) == bits(y.1))
}

fn rows_of(out: &StepOutput, first: usize, n: usize) -> &[RowOutput] {
    &out.rows[first..first + n]
}

fn run(seed: u64, v: usize, force: usize) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let step = random_step(&mut rng, v, force, 4, GenOpts { p_error: 0.0, ..Default::default() });
    // Only requests the sampler accepts on their own shape (nextn included).
    let good: Vec<(Request, Vec<f32>)> = {
        let mut first = 0;
        step.requests
            .iter()
            .filter_map(|r| {
                let rows = r.rows();
                let l = step.logits[first * v..(first + rows) * v].to_vec();
                first += rows;
                match &r.kind {
                    RequestKind::Decode { drafts, .. } if drafts.len() > NEXTN as usize => None,
                    RequestKind::Draft { rows, .. } if *rows > NEXTN => None,
                    _ => Some((r.clone(), l)),
                }
            })
            .collect()
    };
    let (bad, bad_rows, why) = malformed(&mut rng, v);
    let at = rng.below(good.len() + 1);
    let mut reqs: Vec<Request> = good.iter().map(|g| g.0.clone()).collect();
    let mut logits: Vec<f32> = Vec::new();
    for (i, g) in good.iter().enumerate() {
        if i == at {
            logits.extend((0..bad_rows * v).map(|_| rng.normal() as f32));
        }
        logits.extend_from_slice(&g.1);
    }
    if at == good.len() {
        logits.extend((0..bad_rows * v).map(|_| rng.normal() as f32));
    }
    reqs.insert(at, bad.clone());
    let mut s = sampler(v, force);
    let out = s.sample(&logits, &reqs).map_err(|e| TestCaseError::fail(format!("{why}: batch error {e}")))?;
    prop_assert_eq!(out.rows.len(), logits.len() / v);
    let mut first = 0;
    for (i, req) in reqs.iter().enumerate() {
        let n = req.rows();
        if i == at {
            prop_assert_eq!(n, bad_rows, "{}: the malformed request owns seqlen_q rows", why);
            prop_assert!(out.requests[i].status.is_err(), "{}: malformed request accepted: {:?}", why, req.kind);
            prop_assert!(rows_of(&out, first, n).iter().all(|r| r.token == -1 && r.top_logprobs.is_empty()), "{}", why);
        } else {
            let gi = if i < at { i } else { i - 1 };
            let alone = sampler(v, force).sample(&good[gi].1, std::slice::from_ref(req)).unwrap();
            prop_assert_eq!(&out.requests[i].status, &alone.requests[0].status, "{}: request {}", why, i);
            prop_assert_eq!(&out.requests[i].emitted, &alone.requests[0].emitted, "{}: request {}", why, i);
            prop_assert_eq!(out.requests[i].accepted, alone.requests[0].accepted);
            let k = alone.top_logprobs_width;
            for (a, b) in rows_of(&out, first, n).iter().zip(&alone.rows) {
                prop_assert!(
                    same_row(a, b, if b.top_logprobs.is_empty() { 0 } else { k }),
                    "{}: request {} row differs: {:?} vs alone {:?}",
                    why,
                    i,
                    a,
                    b
                );
            }
        }
        first += n;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, max_shrink_iters: 100, ..ProptestConfig::default() })]

    #[test]
    fn malformed_shapes_fail_only_their_request(v in 2usize..=120, force_sel in 0usize..3, frac in 0.0f64..1.0, seed in any::<u64>()) {
        let force = if force_sel == 0 { 0 } else { 1 + (frac * (v - 1) as f64) as usize };
        run(seed, v, force.min(v - 1))?;
    }
}

/// The repro: `decode(params, 10, 4, [], [])` owns 4 rows and fails
/// alone; the placeholder draft -1 is always rejected.
#[test]
fn repros() {
    let v = 8usize;
    let p = SamplingParams { temperature: 1.0, seq_seed: Some(3), ..Default::default() };
    let reqs = vec![
        Request::prefill(p.clone(), 5),
        Request::decode(p.clone(), 10, 4, vec![], vec![]),
        Request::prefill(p.clone(), 6),
    ];
    let logits: Vec<f32> = (0..6 * v).map(|i| (i % 7) as f32 * 0.25).collect();
    let out = sampler(v, 0).sample(&logits, &reqs).expect("no batch-wide error");
    assert!(out.requests[0].status.is_ok() && out.requests[2].status.is_ok());
    let e = out.requests[1].status.as_ref().unwrap_err().to_string();
    assert!(e.contains("drafts"), "{e}");
    assert_eq!(out.rows.len(), 6);
    // Placeholder: rejected whatever the target and draft say.
    let q = DraftDist { ids: (0..v as i32).collect(), logprobs: vec![-(v as f32).ln(); v] };
    let req = Request::decode(p, 10, 3, vec![-1, 2], vec![q.clone(), q]);
    let out = sampler(v, 0).sample(&logits[..3 * v], &[req]).unwrap();
    assert!(out.requests[0].status.is_ok(), "{:?}", out.requests[0].status);
    assert_eq!(out.requests[0].accepted, 0);
    assert_eq!(out.requests[0].emitted.len(), 1);
    assert!(out.requests[0].emitted[0] >= 0);
}
