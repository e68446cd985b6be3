//! Probability inputs (SAMPLER.md section 12), computed on the host.
//!
//! A row of probabilities p is processed as the logit row `ln p` at
//! temperature 1 except where section 12 decides otherwise: candidates are
//! ordered by p (descending, ties by lower id), step 5 uses p itself
//! renormalised, min-p compares `p_i < f32(min_p * p_max)`, force top-k keeps
//! the N largest p. These rows never reach the kernels: their order is not
//! the order of any f32 logit row, so one host pass (the CPU, whatever the
//! sampler's backend) computes them. Prefill and decode (chain verification,
//! section 6) requests are served; other kinds fail their request.

use sampler_kernels::rt::math::uniform_f64;

use crate::error::{BatchError, RequestError};
use crate::layout::{row_positions, seq};
use crate::params::{FilterOrder, ValidParams};
use crate::request::{Request, RequestKind, RequestOutput, RowOutput, StepOutput};

/// The processed distribution of one probability row.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbRow {
    /// The N candidates, p descending, ties by lower id (section 12).
    pub order: Vec<u32>,
    /// Raw p of each candidate, in `order`.
    pub p: Vec<f32>,
    /// Kept candidates: a prefix of `order`.
    pub kept: usize,
    /// Sum of p over the kept candidates (f64).
    pub kept_sum: f64,
}

impl ProbRow {
    /// Processed probability of candidate `c` (position in `order`); 0 when removed.
    pub fn prob(&self, c: usize) -> f64 {
        if c < self.kept && self.kept_sum > 0.0 {
            self.p[c] as f64 / self.kept_sum
        } else {
            0.0
        }
    }
    /// Processed logprob `ln(p_i / sum over kept)` of candidate `c` (-inf when removed or zero).
    pub fn logprob(&self, c: usize) -> f32 {
        let q = self.prob(c);
        if q > 0.0 {
            q.ln() as f32
        } else {
            f32::NEG_INFINITY
        }
    }
    /// Position in `order` of vocabulary id `id`, if it is a candidate.
    pub fn position(&self, id: i32) -> Option<usize> {
        self.order.iter().position(|&t| t as i64 == id as i64)
    }
    /// Processed probability of vocabulary id `id` (0 when removed, absent or not an id).
    pub fn prob_of(&self, id: i32) -> f64 {
        self.position(id).map_or(0.0, |c| self.prob(c))
    }
    /// Section 4's walk over the kept candidates with weights `w` (in `order`) and `u`:
    /// the first whose inclusive sum exceeds `u * total`, else the last with weight > 0.
    fn walk(&self, w: &[f64], u: f64) -> i32 {
        let total: f64 = w.iter().sum();
        let mut acc = 0.0f64;
        let mut last = None;
        for (c, &x) in w.iter().enumerate() {
            if x <= 0.0 {
                continue;
            }
            acc += x / total;
            last = Some(c);
            if acc > u {
                return self.order[c] as i32;
            }
        }
        last.map_or(-1, |c| self.order[c] as i32)
    }
    /// The draw from the processed distribution with `u` (section 4).
    pub fn draw(&self, u: f64) -> i32 {
        let w: Vec<f64> = (0..self.kept).map(|c| self.prob(c)).collect();
        self.walk(&w, u)
    }
    /// Section 5's sum_smaller_probs of token `s`, comparing probabilities.
    fn sum_smaller(&self, s: i32) -> f32 {
        let Some(cs) = self.position(s).filter(|&c| self.prob(c) > 0.0) else { return 0.0 };
        let ps = self.p[cs];
        let sum: f64 = (0..self.kept)
            .filter(|&c| self.p[c] < ps || (self.p[c] == ps && self.order[c] <= self.order[cs]))
            .map(|c| self.prob(c))
            .sum();
        sum as f32
    }
}

/// Why a probability row is invalid (section 12: as 3.2).
pub fn check_row(p: &[f32], row: usize) -> Result<(), RequestError> {
    if p.iter().any(|x| !x.is_finite() || *x < 0.0) {
        return Err(RequestError::BadLogits { row });
    }
    if !p.iter().any(|&x| x > 0.0) {
        return Err(RequestError::AllMasked { row });
    }
    Ok(())
}

/// Processes one valid probability row (masked values already 0) with the
/// validated parameters `vp` and candidate width `n` (section 12 over 3 and 10).
pub fn process_row(p: &[f32], vp: &ValidParams, n: usize) -> ProbRow {
    let mut order: Vec<u32> = (0..p.len() as u32).collect();
    // p descending, ties by lower id (a total order: p is finite and >= 0).
    order.sort_unstable_by(|&a, &b| p[b as usize].total_cmp(&p[a as usize]).then(a.cmp(&b)));
    order.truncate(n.min(p.len()));
    let pv: Vec<f32> = order.iter().map(|&t| p[t as usize]).collect();
    let total: f64 = pv.iter().map(|&x| x as f64).sum();
    let len = pv.len();
    // min-p: remove i if p_i < f32(min_p * p_max); a prefix, p being sorted.
    let min_cut = if vp.min_p > 0.0 {
        let t = vp.min_p * pv[0];
        pv.iter().take_while(|&&x| x >= t).count()
    } else {
        len
    };
    // Top-p over weights `w` (mass `mass`): the shortest prefix whose sum exceeds top_p.
    let top_p_cut = |w: &[f32], mass: f64, upto: usize| -> usize {
        if vp.top_p >= 1.0 || mass <= 0.0 {
            return upto;
        }
        let mut before = 0.0f64;
        for (c, &x) in w.iter().enumerate().take(upto) {
            if before > vp.top_p as f64 {
                return c;
            }
            before += x as f64 / mass;
        }
        upto
    };
    let k = if vp.top_k < 0 { len } else { (vp.top_k as usize).min(len) };
    let kept = match vp.filter_order {
        FilterOrder::TopPThenTopK => top_p_cut(&pv, total, len).min(min_cut).min(k),
        FilterOrder::TopKThenTopP => {
            let m = min_cut.min(k);
            let mass: f64 = pv[..m].iter().map(|&x| x as f64).sum();
            top_p_cut(&pv, mass, m)
        }
    };
    let kept_sum = pv[..kept].iter().map(|&x| x as f64).sum();
    ProbRow { order, p: pv, kept, kept_sum }
}

/// The rows of one request, masked (disallowed ids 0), checked and processed.
fn request_rows(
    req: &Request,
    vp: &ValidParams,
    probs: &[f32],
    v: usize,
    n: usize,
) -> Result<Vec<ProbRow>, RequestError> {
    (0..req.rows())
        .map(|j| {
            let mut row = probs[j * v..(j + 1) * v].to_vec();
            if let Some(m) = &req.masks {
                for (t, x) in row.iter_mut().enumerate() {
                    if m[j][t / 32] >> (t % 32) & 1 == 0 {
                        *x = 0.0;
                    }
                }
            }
            check_row(&row, j)?;
            Ok(process_row(&row, vp, n))
        })
        .collect()
}

fn row_out(r: &ProbRow, token: i32, k: usize) -> RowOutput {
    let (logprob, sum_smaller_probs) = match r.position(token) {
        Some(c) if token >= 0 => (r.logprob(c), r.sum_smaller(token)),
        _ => (f32::NEG_INFINITY, 0.0),
    };
    let top_logprobs = (0..k.min(r.order.len())).map(|c| (r.order[c] as i32, r.logprob(c))).collect();
    RowOutput { token, logprob, top_logprobs, sum_smaller_probs }
}

/// One request's outputs; `independent` gets the count of drafts whose
/// acceptance test (section 6 step 3, or the golden match) passes on its own,
/// the stop at the first rejection ignored (FlashInfer's accepted count).
fn run_request(
    req: &Request,
    vp: &ValidParams,
    rows: &[ProbRow],
    k: usize,
    independent: &mut u32,
) -> Result<(Vec<RowOutput>, u32, Vec<i32>), RequestError> {
    let pos = row_positions(&req.kind);
    let golden = |j: usize| req.golden.get(j).copied().filter(|&g| g >= 0);
    let u = |j: usize, case: u64| uniform_f64(vp.seed, seq(pos[j], case));
    match &req.kind {
        RequestKind::Prefill { .. } => {
            let t = golden(0).unwrap_or_else(|| rows[0].draw(u(0, 0)));
            Ok((vec![row_out(&rows[0], t, k)], 0, vec![t]))
        }
        RequestKind::Decode { drafts, draft_dists, .. } => {
            let m = rows.len();
            let mut tokens = vec![-1i32; m];
            let mut emitted = Vec::new();
            let mut stopped = false;
            for j in 0..m.saturating_sub(1) {
                let d = drafts[j];
                let accept = match golden(j) {
                    Some(g) => d == g,
                    None => {
                        let p = if d >= 0 { rows[j].prob_of(d) } else { 0.0 };
                        let dist = &draft_dists[j];
                        let q = if d < 0 {
                            0.0
                        } else if dist.ids.is_empty() {
                            1.0 // a model-free draft: one-hot on its token
                        } else {
                            dist.ids.iter().position(|&i| i == d).map_or(0.0, |c| (dist.logprobs[c] as f64).exp())
                        };
                        q > 0.0 && u(j, 1) * q < p
                    }
                };
                *independent += accept as u32;
                if stopped {
                    continue;
                }
                if accept {
                    tokens[j] = d;
                    emitted.push(d);
                    continue;
                }
                let t = match golden(j) {
                    Some(g) => g,
                    None => {
                        // Residual max(p_t - q_t, 0) over the target's kept tokens, in its order.
                        let r = &rows[j];
                        let dist = &draft_dists[j];
                        let q_of = |t: u32| -> f64 {
                            if dist.ids.is_empty() {
                                return if t as i32 == d { 1.0 } else { 0.0 };
                            }
                            dist.ids
                                .iter()
                                .position(|&i| i == t as i32)
                                .map_or(0.0, |c| (dist.logprobs[c] as f64).exp())
                        };
                        let w: Vec<f64> = (0..r.kept).map(|c| (r.prob(c) - q_of(r.order[c])).max(0.0)).collect();
                        if w.iter().sum::<f64>() > 0.0 {
                            r.walk(&w, u(j, 2))
                        } else {
                            r.draw(u(j, 2))
                        }
                    }
                };
                tokens[j] = t;
                emitted.push(t);
                stopped = true;
            }
            if !stopped {
                let j = m - 1;
                let t = golden(j).unwrap_or_else(|| rows[j].draw(u(j, 0)));
                tokens[j] = t;
                emitted.push(t);
            }
            let accepted = (emitted.len() - 1) as u32;
            let outs = rows.iter().zip(&tokens).map(|(r, &t)| row_out(r, t, k)).collect();
            Ok((outs, accepted, emitted))
        }
        _ => Err(RequestError::Field {
            field: "input",
            msg: "probability inputs (SAMPLER.md section 12) take prefill and decode requests".into(),
        }),
    }
}

/// Samples one step from probability rows `probs` `[R, vocab]` (section 12):
/// as [`crate::Sampler::sample`] with logits, on the host. `n`: the candidate
/// width (V when force top-k is off), `nextn`: most drafts per request.
/// Also returns, per request, the drafts whose acceptance test passes on its
/// own (all verify rows tested, the stop ignored; 0 for other requests).
///
/// Errors: [`BatchError`] when `probs` does not hold the requests' rows.
pub fn sample(
    vocab: u32,
    n: u32,
    nextn: u32,
    probs: &[f32],
    reqs: &[Request],
) -> Result<(StepOutput, Vec<u32>), BatchError> {
    let v = vocab as usize;
    let total: usize = reqs.iter().map(Request::rows).sum();
    if probs.len() != total * v {
        return Err(BatchError::LogitsShape { got: probs.len(), rows: total, vocab: v, expected: total * v });
    }
    let checked: Vec<Result<ValidParams, RequestError>> = reqs
        .iter()
        .map(|r| {
            let vp = crate::layout::validate(r, vocab, n, nextn)?;
            if r.params.temperature != 1.0 {
                return Err(RequestError::Field {
                    field: "temperature",
                    msg: format!("probability inputs take no temperature (section 12), got {:?}", r.params.temperature),
                });
            }
            Ok(vp)
        })
        .collect();
    let k = checked.iter().filter_map(|c| c.as_ref().ok()).map(|vp| vp.top_logprobs as usize).max().unwrap_or(0);
    let mut rows_out = Vec::with_capacity(total);
    let mut outs = Vec::with_capacity(reqs.len());
    let mut independent = vec![0u32; reqs.len()];
    let mut first = 0usize;
    for (i, (req, vp)) in reqs.iter().zip(&checked).enumerate() {
        let nr = req.rows();
        let own = &probs[first * v..(first + nr) * v];
        let res = vp.clone().and_then(|vp| {
            let rows = request_rows(req, &vp, own, v, n as usize)?;
            run_request(req, &vp, &rows, k, &mut independent[i]).map(|r| (r, vp))
        });
        match res {
            Ok(((rs, accepted, emitted), vp)) => {
                let emitted_logprobs = rs.iter().filter(|r| r.token >= 0).map(|r| r.logprob).collect();
                rows_out.extend(rs);
                outs.push(RequestOutput {
                    status: Ok(()),
                    accepted,
                    path: None,
                    emitted,
                    emitted_logprobs,
                    prompt_logprobs: Vec::new(),
                    rows: first..first + nr,
                    top_logprobs_width: vp.top_logprobs as usize,
                });
            }
            Err(e) => {
                independent[i] = 0;
                rows_out.extend((0..nr).map(|_| RowOutput {
                    token: -1,
                    logprob: f32::NEG_INFINITY,
                    top_logprobs: Vec::new(),
                    sum_smaller_probs: 0.0,
                }));
                outs.push(RequestOutput {
                    status: Err(e),
                    accepted: 0,
                    path: None,
                    emitted: Vec::new(),
                    emitted_logprobs: Vec::new(),
                    prompt_logprobs: Vec::new(),
                    rows: first..first + nr,
                    top_logprobs_width: 0,
                });
            }
        }
        first += nr;
    }
    Ok((StepOutput { rows: rows_out, requests: outs, top_logprobs_width: k }, independent))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::SamplingParams;

    fn vp(top_k: i32, top_p: f32, min_p: f32, order: FilterOrder) -> ValidParams {
        let mut v = SamplingParams::default().validate(1 << 20).unwrap();
        v.top_k = top_k;
        v.top_p = top_p;
        v.min_p = min_p;
        v.filter_order = order;
        v
    }

    #[test]
    fn probabilities_sharing_one_ln_are_ordered_by_probability() {
        // Section 12's example: a < b with f32 ln a == ln b, top_k = 2 keeps {1, 2}.
        let mut a = 0.1f32;
        while a.ln() != f32::from_bits(a.to_bits() + 1).ln() {
            a = f32::from_bits(a.to_bits() + 1);
        }
        let b = f32::from_bits(a.to_bits() + 1);
        let r = process_row(&[a, b, 0.4], &vp(2, 1.0, 0.0, FilterOrder::TopPThenTopK), 3);
        let mut kept: Vec<u32> = r.order[..r.kept].to_vec();
        kept.sort();
        assert_eq!(kept, vec![1, 2]);
    }

    #[test]
    fn filter_orders_and_min_p() {
        // 10.2's example: p = [0.5, 0.3, 0.2], top_k 2, top_p 0.6.
        let p = [0.5f32, 0.3, 0.2];
        assert_eq!(process_row(&p, &vp(2, 0.6, 0.0, FilterOrder::TopPThenTopK), 3).kept, 2);
        assert_eq!(process_row(&p, &vp(2, 0.6, 0.0, FilterOrder::TopKThenTopP), 3).kept, 1);
        // min_p = 1 keeps exactly the largest probabilities.
        assert_eq!(process_row(&[0.25, 0.5, 0.25], &vp(-1, 1.0, 1.0, FilterOrder::TopPThenTopK), 3).kept, 1);
        // Section 3's worked example through probabilities.
        let r = process_row(&[0.5, 0.25, 0.15, 0.06, 0.04], &vp(2, 0.8, 0.0, FilterOrder::TopPThenTopK), 5);
        assert_eq!(r.kept, 2);
        assert!((r.prob(0) - 2.0 / 3.0).abs() < 1e-6);
    }

    #[test]
    fn invalid_rows_fail_only_their_request() {
        let p = SamplingParams { seq_seed: Some(1), ..Default::default() };
        let reqs = vec![Request::prefill(p.clone(), 3), Request::prefill(p, 3)];
        let (out, _) = sample(3, 3, 5, &[0.5, -0.1, 0.6, 0.2, 0.3, 0.5], &reqs).unwrap();
        assert!(out.requests[0].status.is_err());
        assert!(out.requests[1].status.is_ok());
        assert_eq!(out.rows[0].token, -1);
        assert!(out.rows[1].token >= 0);
    }

    #[cfg(feature = "conformance")]
    #[test]
    fn the_case_runner_reads_probability_rows() {
        let mut a = 0.1f32;
        while a.ln() != f32::from_bits(a.to_bits() + 1).ln() {
            a = f32::from_bits(a.to_bits() + 1);
        }
        let b = f32::from_bits(a.to_bits() + 1);
        let c = 1.0 - a - b;
        let case = format!(
            r#"{{"vocab_size": 3, "input": "probs", "logits": [[{a:?}, {b:?}, {c:?}]],
                "requests": [{{"kind": "sample", "phase": "prefill", "rows": 1, "seqlen_k": 4, "seq_seed": 7, "temperature": 1.0, "top_p": 1.0, "top_k": 2, "top_logprobs": 3}}]}}"#
        );
        let doc = crate::conformance::case::run_case_str(&case, crate::BackendKind::Cpu).unwrap();
        let ids: Vec<i64> =
            doc["rows"][0]["top_logprobs"].as_array().unwrap().iter().map(|x| x[0].as_i64().unwrap()).collect();
        // Kept by probability: c, then b (the larger of the two sharing one ln), then a (removed).
        assert_eq!(ids, vec![2, 1, 0]);
        assert!(doc["rows"][0]["top_logprobs"][2][1].is_null());
        let logits = case.replace(r#""input": "probs","#, "");
        assert!(
            crate::conformance::case::run_case_str(&logits.replace("\"probs\"", ""), crate::BackendKind::Cpu).is_ok()
        );
        let bad = case.replace(r#""probs""#, r#""odds""#);
        assert!(crate::conformance::case::run_case_str(&bad, crate::BackendKind::Cpu)
            .unwrap_err()
            .to_string()
            .contains("input"));
    }
}
