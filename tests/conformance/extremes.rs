//! Finite input, never NaN out (SAMPLER.md 3.4, issue 10): rows of finite
//! logits of huge magnitude (up to ±f32::MAX, f32::MIN used as a mask
//! value, rows all equal at ±3e38), temperatures from 0 to 100, every kind
//! of row, force top-k on and off.
//!
//! Each step is checked against the f64 reference, and:
//! - no ok request has a row that should emit but gives token -1;
//! - no output float is NaN or +inf (-inf only where documented);
//! - the result document never contains `"nan"` or `"inf"`.

use crate::common;

use common::gen::{random_step, GenOpts, Rng, Step};
use common::reference::{compare, reference_step};
use proptest::prelude::*;
use sampler_host::conformance::case::result_document;
use sampler_host::{BackendKind, RequestKind, Sampler, SamplerConfig, StepOutput};

const TEMPERATURES: &[f32] = &[0.0, 1e-6, 1e-5, 1.000_001e-5, 1e-4, 0.01, 0.5, 1.0, 3.0, 7.0, 100.0];

/// One row of finite logits in an extreme style.
fn extreme_row(rng: &mut Rng, v: usize) -> Vec<f32> {
    let big = |rng: &mut Rng| rng.pick(&[f32::MAX, 3.4e38, 3e38, 1e38, 1e34, 1e33, 1e20]);
    let style = rng.below(6);
    let mut row: Vec<f32> = (0..v)
        .map(|_| match style {
            // All equal at +-3e38.
            0 => 3e38,
            1 => -3e38,
            // Huge values of both signs.
            2 => {
                if rng.chance(0.5) {
                    big(rng)
                } else {
                    -big(rng)
                }
            }
            // One huge logit above ordinary ones ([1e34, 1e33, 0]-like).
            3 => (rng.normal() * 3.0) as f32,
            // Every logit near -3.4e38.
            4 => -3.4e38 + (rng.below(3) as f32) * 1e32,
            _ => (rng.normal() as f32) * big(rng),
        })
        .collect();
    if style == 3 && v > 0 {
        let top = big(rng);
        row[rng.below(v)] = top;
        if v > 1 {
            row[rng.below(v)] = top / 10.0;
        }
    }
    // f32::MIN as a "mask value" on a share of the row (keeps one other entry).
    if rng.chance(0.4) && v > 1 {
        let keep = rng.below(v);
        for (t, x) in row.iter_mut().enumerate() {
            if t != keep && rng.chance(0.5) {
                *x = f32::MIN;
            }
        }
    }
    row
}

/// A random step of every request kind with extreme finite logits and temperatures.
fn extreme_step(seed: u64, vocab: usize, force: usize) -> Step {
    let mut rng = Rng::new(seed);
    let mut step = random_step(&mut rng, vocab, force, 5, GenOpts { p_error: 0.0, ..Default::default() });
    let rows = step.logits.len() / vocab;
    step.logits = (0..rows).flat_map(|_| extreme_row(&mut rng, vocab)).collect();
    for r in &mut step.requests {
        r.params.temperature = rng.pick(TEMPERATURES);
    }
    step
}

fn check_no_nan(out: &StepOutput, step: &Step) -> Result<(), String> {
    let bad = |x: f32| x.is_nan() || x == f32::INFINITY;
    let mut first = 0usize;
    for (i, (req, o)) in step.requests.iter().zip(&out.requests).enumerate() {
        let rows = &out.rows[first..first + req.rows()];
        first += req.rows();
        if o.status.is_err() {
            continue;
        }
        let must_emit = match &req.kind {
            RequestKind::Prefill { .. } | RequestKind::Draft { .. } => rows.len(),
            RequestKind::Decode { .. } | RequestKind::Tree { .. } => o.accepted as usize + 1,
            RequestKind::PromptLogprobs { .. } => 0,
        };
        if o.emitted.len() != must_emit || o.emitted.iter().any(|&t| t < 0) {
            return Err(format!(
                "request {i} ({:?}) ok but emitted {:?} (accepted {})",
                req.kind, o.emitted, o.accepted
            ));
        }
        if rows.iter().take(must_emit).any(|r| r.token < 0)
            && !matches!(req.kind, RequestKind::Decode { .. } | RequestKind::Tree { .. })
        {
            return Err(format!("request {i}: ok with token -1"));
        }
        for (j, r) in rows.iter().enumerate() {
            if bad(r.logprob)
                || bad(r.sum_smaller_probs)
                || r.sum_smaller_probs.is_infinite()
                || r.top_logprobs.iter().any(|&(_, lp)| bad(lp))
            {
                return Err(format!("request {i} row {j}: non-finite output {r:?}"));
            }
            if r.top_logprobs.iter().any(|&(id, _)| id < 0) {
                return Err(format!("request {i} row {j}: top logprob id -1 {r:?}"));
            }
        }
        if o.emitted_logprobs.iter().chain(&o.prompt_logprobs).any(|&x| bad(x)) {
            return Err(format!("request {i}: non-finite logprob {o:?}"));
        }
    }
    let doc = result_document(out).to_string();
    if doc.contains("\"nan\"") || doc.contains("\"inf\"") {
        return Err(format!("result document holds nan/inf: {doc}"));
    }
    Ok(())
}

fn run(seed: u64, vocab: usize, force: usize) -> Result<(), TestCaseError> {
    let step = extreme_step(seed, vocab, force);
    let cfg = SamplerConfig { vocab_size: vocab as u32, force_topk: force as u32, nextn: 5, backend: BackendKind::Cpu };
    let mut s = Sampler::new(cfg).expect("sampler");
    let got = s.sample(&step.logits, &step.requests).expect("batch");
    if let Err(e) = check_no_nan(&got, &step) {
        prop_assert!(false, "V={vocab} N={force} seed={seed}: {e}");
    }
    let want = reference_step(vocab, force, &step.logits, &step.requests);
    let diffs = compare(&got, &want, &step.requests);
    prop_assert!(diffs.is_empty(), "V={vocab} N={force} seed={seed}: {diffs:#?}");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, max_shrink_iters: 100, ..ProptestConfig::default() })]

    #[test]
    fn extreme_finite_logits_never_give_nan(vocab in 1usize..=200, force_sel in 0usize..3, frac in 0.0f64..1.0, seed in any::<u64>()) {
        let force = if force_sel == 0 || vocab == 1 { 0 } else { 1 + (frac * (vocab - 1) as f64) as usize };
        run(seed, vocab, force.min(vocab.saturating_sub(1)))?;
    }
}

/// The issue's repros, one by one: each row is valid and every output finite.
#[test]
fn issue_repros() {
    use sampler_host::{Request, SamplingParams};
    let cases: &[(&[f32], f32)] = &[
        (&[1e34, 1e33, 0.0], 0.0),
        (&[3e38, 3e38, 0.0], 0.5),
        (&[-3.4e38, -3.4e38, -3.4e38], 0.5),
        (&[f32::MAX, f32::MIN, 0.0], 1e-5),
    ];
    for &(logits, t) in cases {
        for force in [0u32, 2] {
            let mut s =
                Sampler::new(SamplerConfig { vocab_size: 3, force_topk: force, nextn: 5, backend: BackendKind::Cpu })
                    .unwrap();
            let params = SamplingParams { temperature: t, top_logprobs: 2, seq_seed: Some(1), ..Default::default() };
            let reqs = vec![
                Request::prefill(params.clone(), 10),
                Request {
                    params: params.clone(),
                    kind: RequestKind::PromptLogprobs { targets: vec![1] },
                    golden: vec![],
                    masks: None,
                },
                Request::decode(
                    params.clone(),
                    10,
                    2,
                    vec![1],
                    vec![sampler_host::DraftDist { ids: vec![1, 2], logprobs: vec![-0.1, -2.4] }],
                ),
            ];
            let all: Vec<f32> = (0..4).flat_map(|_| logits.iter().copied()).collect();
            let out = s.sample(&all, &reqs).unwrap();
            let step = Step { vocab: 3, force_topk: force as usize, logits: all.clone(), requests: reqs.clone() };
            check_no_nan(&out, &step).unwrap_or_else(|e| panic!("{logits:?} T={t} N={force}: {e}"));
            assert!(out.requests.iter().all(|r| r.status.is_ok()), "{logits:?} T={t}: {:?}", out.requests);
            let diffs = compare(&out, &reference_step(3, force as usize, &all, &reqs), &reqs);
            assert!(diffs.is_empty(), "{logits:?} T={t} N={force}: {diffs:#?}");
        }
    }
}

/// A regression: a draft logprob of -107.5 (q = 1.6e-47) underflows to 0 in
/// f32, so the kernels reject it; the reference holds q in f32 too.
#[test]
fn draft_q_underflow_is_a_reject_in_both() {
    run(5492735965441900374, 48, 0).unwrap();
}
