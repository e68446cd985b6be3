//! Determinism and batch invariance (SAMPLER.md section 9), bit for bit.
//!
//! - The same inputs give bitwise the same outputs, on a fresh sampler or a
//!   reused one.
//! - A request's rows and its request output are bitwise identical whatever
//!   else is in the batch (neighbours of every kind, failing ones included)
//!   and whatever R and its position in the batch are. Only the width k of
//!   the top logprobs may change (it is the batch's largest top_logprobs):
//!   the common prefix must be identical.
//! - A request without `seq_seed` draws a fresh seed, so two runs differ.

use crate::common;

use common::gen::{random_step, GenOpts, Rng, Step};
use sampler_host::{
    BackendKind, Request, RequestOutput, RowOutput, Sampler, SamplerConfig, SamplingParams, StepOutput,
};

fn sampler(vocab: usize, force_topk: usize) -> Sampler {
    Sampler::new(SamplerConfig {
        vocab_size: vocab as u32,
        force_topk: force_topk as u32,
        nextn: 5,
        backend: BackendKind::Cpu,
    })
    .unwrap()
}

/// A row as bits; top logprobs cut to `k` entries.
fn row_bits(r: &RowOutput, k: usize) -> (i32, u32, u32, Vec<(i32, u32)>) {
    let top = r.top_logprobs.iter().take(k).map(|&(id, lp)| (id, lp.to_bits())).collect();
    (r.token, r.logprob.to_bits(), r.sum_smaller_probs.to_bits(), top)
}

/// A request output as bits (the status by its error variant: a bad-logits
/// error names the failing row's index in the batch, which may move).
fn req_bits(o: &RequestOutput) -> (String, u32, Vec<i32>, Vec<u32>, Vec<u32>) {
    let status = match &o.status {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("{e:?}").split(['{', '(', ' ']).next().unwrap().to_string(),
    };
    (
        status,
        o.accepted,
        o.emitted.clone(),
        o.emitted_logprobs.iter().map(|x| x.to_bits()).collect(),
        o.prompt_logprobs.iter().map(|x| x.to_bits()).collect(),
    )
}

#[allow(clippy::type_complexity)]
fn step_bits(
    out: &StepOutput,
) -> (Vec<(i32, u32, u32, Vec<(i32, u32)>)>, Vec<(String, u32, Vec<i32>, Vec<u32>, Vec<u32>)>, usize) {
    (
        out.rows.iter().map(|r| row_bits(r, usize::MAX)).collect(),
        out.requests.iter().map(req_bits).collect(),
        out.top_logprobs_width,
    )
}

/// (V, force top-k) pairs: tiny, ordinary, several tile sizes, force top-k on.
const SHAPES: &[(usize, usize)] = &[(1, 0), (7, 0), (64, 0), (300, 0), (300, 17), (1000, 0), (5000, 0), (5000, 300)];

#[test]
fn same_inputs_same_bits() {
    for (i, &(v, force)) in SHAPES.iter().enumerate() {
        for rep in 0..6u64 {
            let mut rng = Rng::new(1000 + 10 * i as u64 + rep);
            let step = random_step(&mut rng, v, force, 8, GenOpts { p_error: 0.2, ..Default::default() });
            let mut s = sampler(v, force);
            let a = s.sample(&step.logits, &step.requests).unwrap();
            let b = s.sample(&step.logits, &step.requests).unwrap();
            let c = sampler(v, force).sample(&step.logits, &step.requests).unwrap();
            assert_eq!(step_bits(&a), step_bits(&b), "V={v} N={force} rep {rep}: reused sampler differs");
            assert_eq!(step_bits(&a), step_bits(&c), "V={v} N={force} rep {rep}: fresh sampler differs");
        }
    }
}

/// The rows of `step`'s request `idx`, and the request.
fn take(step: &Step, idx: usize) -> (Request, Vec<f32>) {
    let v = step.vocab;
    let first: usize = step.requests[..idx].iter().map(|r| r.rows()).sum();
    let req = step.requests[idx].clone();
    let l = step.logits[first * v..(first + req.rows()) * v].to_vec();
    (req, l)
}

#[test]
fn batch_invariance() {
    let mut checked = 0usize;
    let mut ok_targets = 0usize;
    for (i, &(v, force)) in SHAPES.iter().enumerate() {
        let mut rng = Rng::new(7000 + i as u64);
        let max_neighbours = if v >= 1000 { 4 } else { 8 };
        for _ in 0..8 {
            // The request under test (any kind; sometimes a failing one).
            let src = random_step(&mut rng, v, force, 6, GenOpts { p_error: 0.15, ..Default::default() });
            let idx = rng.below(src.requests.len());
            let (target, tl) = take(&src, idx);
            let mut s = sampler(v, force);
            let alone = s.sample(&tl, std::slice::from_ref(&target)).unwrap();
            ok_targets += alone.requests[0].status.is_ok() as usize;
            for _ in 0..4 {
                // Neighbours of every kind, failing ones included, before and after it.
                let nb =
                    random_step(&mut rng, v, force, max_neighbours, GenOpts { p_error: 0.3, ..Default::default() });
                let split = rng.below(nb.requests.len() + 1);
                let mut reqs: Vec<Request> = nb.requests[..split].to_vec();
                let before: usize = reqs.iter().map(|r| r.rows()).sum();
                let mut logits = nb.logits[..before * v].to_vec();
                reqs.push(target.clone());
                logits.extend_from_slice(&tl);
                reqs.extend_from_slice(&nb.requests[split..]);
                logits.extend_from_slice(&nb.logits[before * v..]);
                let out = s.sample(&logits, &reqs).unwrap();
                let k = alone.top_logprobs_width.min(out.top_logprobs_width);
                for j in 0..target.rows() {
                    assert_eq!(
                        row_bits(&out.rows[before + j], k),
                        row_bits(&alone.rows[j], k),
                        "V={v} N={force}: row {j} of {:?} differs in a batch of {} rows at row {before}",
                        target.kind,
                        out.rows.len()
                    );
                }
                assert_eq!(
                    req_bits(&out.requests[split]),
                    req_bits(&alone.requests[0]),
                    "V={v} N={force}: request output of {:?} differs in a batch",
                    target.kind
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 200 && ok_targets >= 40, "checked {checked}, ok targets {ok_targets}");
}

/// The same row at every row index of a batch of identical rows (one wide
/// batch, R up to 300) gives the same bits: no dependence on R or position.
#[test]
fn position_in_batch() {
    for &(v, force) in SHAPES {
        let mut rng = Rng::new(v as u64 * 31 + force as u64);
        let step = random_step(&mut rng, v, force, 1, GenOpts { p_error: 0.0, ..Default::default() });
        let (req, l) = take(&step, 0);
        let mut s = sampler(v, force);
        let alone = s.sample(&l, std::slice::from_ref(&req)).unwrap();
        let copies = if v >= 1000 { 20 } else { 100 };
        let reqs = vec![req.clone(); copies];
        let logits: Vec<f32> = (0..copies).flat_map(|_| l.iter().copied()).collect();
        let out = s.sample(&logits, &reqs).unwrap();
        for c in 0..copies {
            assert_eq!(req_bits(&out.requests[c]), req_bits(&alone.requests[0]), "V={v} N={force}: copy {c}");
            for j in 0..req.rows() {
                assert_eq!(
                    row_bits(&out.rows[c * req.rows() + j], usize::MAX),
                    row_bits(&alone.rows[j], usize::MAX),
                    "V={v} N={force}: copy {c} row {j}"
                );
            }
        }
    }
}

#[test]
fn absent_seed_differs_between_runs() {
    let v = 1000;
    let rows = 8;
    // Flat logits: every draw is uniform over V.
    let logits = vec![0.0f32; rows * v];
    let reqs: Vec<Request> = (0..rows)
        .map(|i| Request::prefill(SamplingParams { seq_seed: None, ..Default::default() }, 10 + i as u64))
        .collect();
    let mut s = sampler(v, 0);
    let a: Vec<i32> = s.sample(&logits, &reqs).unwrap().rows.iter().map(|r| r.token).collect();
    let b: Vec<i32> = s.sample(&logits, &reqs).unwrap().rows.iter().map(|r| r.token).collect();
    let c: Vec<i32> = sampler(v, 0).sample(&logits, &reqs).unwrap().rows.iter().map(|r| r.token).collect();
    assert!(a.iter().all(|&t| t >= 0));
    // Chance of equality with fresh seeds: 1000^-8.
    assert_ne!(a, b, "two runs without seq_seed drew the same tokens");
    assert_ne!(a, c, "two samplers without seq_seed drew the same tokens");
    // With a seed they agree.
    let seeded: Vec<Request> = (0..rows)
        .map(|i| Request::prefill(SamplingParams { seq_seed: Some(5), ..Default::default() }, 10 + i as u64))
        .collect();
    let x: Vec<i32> = s.sample(&logits, &seeded).unwrap().rows.iter().map(|r| r.token).collect();
    let y: Vec<i32> = sampler(v, 0).sample(&logits, &seeded).unwrap().rows.iter().map(|r| r.token).collect();
    assert_eq!(x, y);
}
