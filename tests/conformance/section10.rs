//! SAMPLER.md section 10 properties that hold whatever the inputs:
//!
//! - `logprobs_mode = raw` changes only the reported values: tokens, drafts
//!   accepted, statuses, top-logprob ids and `sum_smaller_probs` are bitwise
//!   those of processed mode, on random steps of every kind (force top-k,
//!   masks, golden tokens, drafts, prompt logprobs); the raw values are
//!   `log_softmax` of the masked logits over all V at temperature 1, also for
//!   a golden token outside the force top-N.
//! - `min_p = 1` keeps exactly the tokens tied with the largest logit, even
//!   where `exp(x)` of the next token rounds to 1 in f32.

use crate::common;

use common::gen::{random_step, GenOpts, Rng};
use sampler_host::{BackendKind, LogprobsMode, Request, Sampler, SamplerConfig, SamplingParams, StepOutput};

fn sampler(v: usize, force: usize) -> Sampler {
    Sampler::new(SamplerConfig { vocab_size: v as u32, force_topk: force as u32, nextn: 5, backend: BackendKind::Cpu })
        .unwrap()
}

fn with_mode(reqs: &[Request], mode: LogprobsMode) -> Vec<Request> {
    let mut out = reqs.to_vec();
    out.iter_mut().for_each(|r| r.params.logprobs_mode = mode);
    out
}

/// Everything but the reported logprob values, as bits.
fn decisions(o: &StepOutput) -> Vec<String> {
    let mut v: Vec<String> = o
        .rows
        .iter()
        .map(|r| {
            format!(
                "{} {:?} {}",
                r.token,
                r.top_logprobs.iter().map(|t| t.0).collect::<Vec<_>>(),
                r.sum_smaller_probs.to_bits()
            )
        })
        .collect();
    v.extend(
        o.requests
            .iter()
            .map(|r| format!("{:?} {} {:?} {}", r.status.is_ok(), r.accepted, r.emitted, r.prompt_logprobs.len())),
    );
    v
}

#[test]
fn raw_mode_changes_only_the_reported_values() {
    let mut raw_rows = 0;
    for rep in 0..120u64 {
        let mut rng = Rng::new(900 + rep);
        let v = rng.pick(&[5usize, 40, 300, 5000]);
        let force = if rng.chance(0.5) { rng.range(1, v as u64) as usize } else { 0 };
        let step = random_step(&mut rng, v, force, 5, GenOpts::default());
        let mut s = sampler(v, force);
        let p = s.sample(&step.logits, &with_mode(&step.requests, LogprobsMode::Processed)).unwrap();
        let r = s.sample(&step.logits, &with_mode(&step.requests, LogprobsMode::Raw)).unwrap();
        assert_eq!(decisions(&p), decisions(&r), "rep {rep}: V={v} N={force}: raw mode changed a decision");
        // Raw values: log_softmax over all V of the masked logits (f64 here), for every ok row.
        let mut first = 0usize;
        for (req, out) in step.requests.iter().zip(&r.requests) {
            let m = req.rows();
            for j in 0..m {
                let row = &r.rows[first + j];
                if out.status.is_err() {
                    continue;
                }
                let mut l: Vec<f32> = step.logits[(first + j) * v..(first + j + 1) * v].to_vec();
                if let Some(masks) = &req.masks {
                    for (t, x) in l.iter_mut().enumerate() {
                        if (masks[j][t / 32] >> (t % 32)) & 1 == 0 {
                            *x = f32::NEG_INFINITY;
                        }
                    }
                }
                let mx = l.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let z: f64 = l.iter().map(|&x| ((x - mx) as f64).exp()).sum();
                let want = |t: i32| ((l[t as usize] - mx) as f64) - z.ln();
                let close = |a: f32, b: f64| {
                    if b == f64::NEG_INFINITY {
                        a == f32::NEG_INFINITY
                    } else {
                        (a as f64 - b).abs() <= 1e-4 + 1e-5 * b.abs()
                    }
                };
                for &(id, lp) in &row.top_logprobs {
                    assert!(
                        close(lp, want(id)),
                        "rep {rep}: row {}: raw top logprob of {id}: {lp} vs {}",
                        first + j,
                        want(id)
                    );
                }
                if row.token >= 0 {
                    assert!(
                        close(row.logprob, want(row.token)),
                        "rep {rep}: row {}: raw logprob of {}: {} vs {}",
                        first + j,
                        row.token,
                        row.logprob,
                        want(row.token)
                    );
                    raw_rows += 1;
                }
            }
            first += m;
        }
    }
    assert!(raw_rows > 100, "only {raw_rows} rows checked");
}

#[test]
fn raw_logprob_of_a_golden_token_outside_the_top_n() {
    // V = 10, force top-k 2: token 9 (the smallest logit) is outside the top N.
    let logits: Vec<f32> = (0..10).map(|i| 3.0 - i as f32 * 0.5).collect();
    let mut s = sampler(10, 2);
    let mut req = |mode| {
        let p = SamplingParams {
            temperature: 0.5,
            top_logprobs: 2,
            logprobs_mode: mode,
            seq_seed: Some(3),
            ..Default::default()
        };
        let mut r = Request::prefill(p, 7);
        r.golden = vec![9];
        s.sample(&logits, &[r]).unwrap().rows[0].clone()
    };
    let (p, r) = (req(LogprobsMode::Processed), req(LogprobsMode::Raw));
    assert_eq!((p.token, r.token), (9, 9));
    assert_eq!(p.logprob, f32::NEG_INFINITY, "outside the top N: removed in processed mode");
    let z: f64 = logits.iter().map(|&x| ((x - 3.0) as f64).exp()).sum();
    assert!((r.logprob as f64 - (-4.5 - z.ln())).abs() < 1e-5, "raw logprob {}", r.logprob);
}

#[test]
fn min_p_one_keeps_exactly_the_ties_with_the_largest_logit() {
    // At temperature 100, token 2 is one ulp below the largest logit: exp(x) rounds to 1 in f32.
    let top = 1.0f32;
    let below = f32::from_bits(top.to_bits() - 1);
    let logits = vec![top, 0.5, below, top, -1.0];
    let mut s = sampler(5, 0);
    let p = SamplingParams { temperature: 100.0, min_p: 1.0, top_logprobs: 5, seq_seed: Some(1), ..Default::default() };
    let out = s.sample(&logits, &[Request::prefill(p, 3)]).unwrap();
    let kept: Vec<i32> = out.rows[0].top_logprobs.iter().filter(|t| t.1 > f32::NEG_INFINITY).map(|t| t.0).collect();
    assert_eq!(kept, [0, 3]);
    assert!(out.rows[0].top_logprobs.iter().all(|t| t.1 == f32::NEG_INFINITY || (t.1 - -(2f32).ln()).abs() < 1e-6));
}
