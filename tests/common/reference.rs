//! A naive, obviously-correct f64 reference of SAMPLER.md sections 2-8 and
//! 10 (min-p, filter order, raw logprobs) for one step, written straight
//! from the spec text.
//!
//! It shares nothing with the kernels or `sampler_kernels::rt::math`: the
//! random numbers (SplitMix64), the mask, top-N, softmax, top-p, top-k, the
//! draws, verification and every output are re-implemented here with plain
//! sorting and f64 arithmetic. Only the request types (`sampler_host::Request`
//! and friends) are shared, so that the same inputs drive both sides.
//!
//! Besides the outputs, the reference reports per request how close its
//! decisions came to a boundary (`RefRequest::draw_margin`: a draw's u vs a
//! cumulative sum, an accept test u1*q vs p; `RefRequest::cut_margin`: a
//! top-p cut, the sum before a token vs top_p). A backend that sums in a
//! different order or precision may legitimately decide the other way when
//! a margin is below ~1e-6 (SAMPLER.md section 5, "Precision").

use sampler_host::{FilterOrder, LogprobsMode, Request, RequestKind, SamplingParams};

// ---------------------------------------------------------------- section 2

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix64(z: u64) -> u64 {
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `rand_u64(seed, seq) = mix64(seed + (seq + 1) * GAMMA)`, all wrapping.
pub fn rand_u64(seed: u64, seq: u64) -> u64 {
    mix64(seed.wrapping_add(seq.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// `uniform(seed, seq) = (rand_u64 >> 11) * 2^-53`.
pub fn uniform(seed: u64, seq: u64) -> f64 {
    (rand_u64(seed, seq) >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
}

/// `seq = 3 * position + case` (wrapping).
pub fn seq(position: u64, case: u64) -> u64 {
    position.wrapping_mul(3).wrapping_add(case)
}

/// Draft-model seed offset.
pub const DRAFT_SEED_OFFSET: u64 = 1_000_000_007;
/// Row stride of decode positions.
pub const ROW_STRIDE: u64 = 10_000_019;

/// Seed of the request's random streams (draft rows: `seq_seed + 1000000007`)
/// and the position of each of its rows, per section 2.
pub fn seed_and_positions(req: &Request, seq_seed: u64) -> (u64, Vec<u64>) {
    match &req.kind {
        RequestKind::Prefill { seqlen_k } => (seq_seed, vec![*seqlen_k]),
        RequestKind::Decode { seqlen_k, seqlen_q, .. } => {
            let sp = seqlen_k.wrapping_sub(*seqlen_q).wrapping_add(1);
            (seq_seed, (0..*seqlen_q).map(|j| sp.wrapping_add(j.wrapping_mul(ROW_STRIDE))).collect())
        }
        RequestKind::Draft { seqlen_k, seqlen_q, last_valid_offset, rows } => {
            let sp = seqlen_k.wrapping_sub(*seqlen_q).wrapping_add(1);
            let seed = seq_seed.wrapping_add(DRAFT_SEED_OFFSET);
            (seed, (1..=*rows as u64).map(|i| sp.wrapping_add(*last_valid_offset).wrapping_add(i)).collect())
        }
        RequestKind::PromptLogprobs { targets } => (seq_seed, vec![0; targets.len()]),
        // Section 11.5: row n at pos(depth(n), 0) (its bonus and residual);
        // the sibling tests add `rank * 1000000009` (`tree_walk_ref`).
        RequestKind::Tree { seqlen_k, tree } => {
            let m = tree.parent.len() as u64;
            let sp = seqlen_k.wrapping_sub(m).wrapping_add(1);
            let depth = tree_depths(&tree.parent).unwrap_or_else(|| vec![0; tree.parent.len()]);
            (seq_seed, depth.iter().map(|&d| sp.wrapping_add((d as u64).wrapping_mul(ROW_STRIDE))).collect())
        }
    }
}

/// Sibling stride of tree positions (section 11.5).
pub const SIBLING_STRIDE: u64 = 1_000_000_009;

/// Depth of each node, or None when `parent` is not a valid tree (11.1, 11.10).
pub fn tree_depths(parent: &[i32]) -> Option<Vec<usize>> {
    if parent.is_empty() || parent.len() > 256 || parent[0] != -1 {
        return None;
    }
    let mut depth = vec![0usize; parent.len()];
    for n in 1..parent.len() {
        let p = usize::try_from(parent[n]).ok().filter(|&p| p < n)?;
        depth[n] = depth[p] + 1;
        if depth[n] > 64 {
            return None;
        }
    }
    Some(depth)
}

fn rows_of(req: &Request) -> usize {
    match &req.kind {
        RequestKind::Prefill { .. } => 1,
        RequestKind::Decode { seqlen_q, .. } => *seqlen_q as usize,
        RequestKind::Draft { rows, .. } => *rows as usize,
        RequestKind::PromptLogprobs { targets } => targets.len(),
        RequestKind::Tree { tree, .. } => tree.parent.len(),
    }
}

// ---------------------------------------------------------------- section 1

/// Section 6 (decided): a draft distribution fails its request unless its
/// ids are distinct and in 0..V-1, its logprobs finite or -inf and at most
/// 1e-6, and its total probability at most 1 + 1e-4 (below 1 is valid).
pub fn bad_draft_dist(d: &sampler_host::DraftDist, vocab: usize) -> bool {
    let mut seen = std::collections::HashSet::new();
    d.ids.len() != d.logprobs.len()
        || d.ids.iter().any(|&t| t < 0 || t as usize >= vocab || !seen.insert(t))
        || d.logprobs.iter().any(|&x| x.is_nan() || x > 1e-6)
        || d.logprobs.iter().map(|&x| (x as f64).exp()).sum::<f64>() > 1.0 + 1e-4
}

/// Parameters after section 1's checks and clamp.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RefParams {
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: i64,
    pub top_logprobs: usize,
    pub seed: u64,
    /// Section 10.1 (0 = off).
    pub min_p: f32,
    /// Section 10.2: top-k, then top-p on the renormalised top-k mass.
    pub top_k_first: bool,
    /// Section 10.3: report raw logprobs.
    pub raw: bool,
}

/// Section 1: validation against candidate width `n`, then the temperature clamp.
pub fn check_params(p: &SamplingParams, n: usize) -> Result<RefParams, String> {
    // Section 1: NaN, < 0 (-0.0 is 0) and +inf are errors.
    if !(p.temperature >= 0.0 && p.temperature < f32::INFINITY) {
        return Err(format!("temperature {}", p.temperature));
    }
    if !(p.top_p > 0.0 && p.top_p <= 1.0) {
        return Err(format!("top_p {}", p.top_p));
    }
    if p.top_k == 0 || p.top_k < -1 || p.top_k > i32::MAX as i64 {
        return Err(format!("top_k {}", p.top_k));
    }
    if p.top_logprobs as usize > n {
        return Err(format!("top_logprobs {} > N {}", p.top_logprobs, n));
    }
    if p.min_p.is_nan() || p.min_p < 0.0 || p.min_p > 1.0 {
        return Err(format!("min_p {}", p.min_p));
    }
    let seed = p.seq_seed.expect("the reference needs seq_seed");
    let eps = 1e-5f32;
    let (temperature, top_p, top_k, min_p) =
        if p.temperature < eps { (eps, 1.0, -1, 0.0) } else { (p.temperature, p.top_p, p.top_k, p.min_p) };
    Ok(RefParams {
        temperature,
        top_p,
        top_k,
        top_logprobs: p.top_logprobs as usize,
        seed,
        min_p,
        top_k_first: p.filter_order == FilterOrder::TopKThenTopP,
        raw: p.logprobs_mode == LogprobsMode::Raw,
    })
}

// ------------------------------------------------------------- sections 3-5

/// The processed distribution of one row (section 3).
#[derive(Clone, Debug)]
pub struct RowDist {
    /// Masked logits, by vocabulary id.
    pub logit: Vec<f32>,
    /// Candidates (all V, or the N kept by force top-k) in the order of
    /// section 3.6: logit descending, ties by lower id.
    pub order: Vec<usize>,
    /// Processed logprob by vocabulary id: -inf for removed tokens and non-candidates.
    pub logprob: Vec<f64>,
    /// Kept tokens (a prefix of `order`).
    pub kept: Vec<usize>,
    /// Smallest |sum before a token - top_p| or |exp(x) - min_p| (infinity when both are off).
    pub cut_margin: f64,
    /// Section 10.3: raw logprob by vocabulary id (log_softmax of the masked
    /// logits over all V at temperature 1).
    pub raw: Vec<f64>,
    /// Whether the row reports `raw` instead of `logprob`.
    pub report_raw: bool,
}

impl RowDist {
    /// Processed probability of a token (0 when removed).
    pub fn prob(&self, t: usize) -> f64 {
        self.logprob[t].exp()
    }
    /// The logprob the row reports for token `t` (processed or raw, section 10.3).
    pub fn reported(&self, t: usize) -> f64 {
        if self.report_raw {
            self.raw[t]
        } else {
            self.logprob[t]
        }
    }
}

/// Why a row is invalid (section 3.2).
#[derive(Clone, Debug, PartialEq)]
pub enum RowError {
    BadValue,
    AllNegInf,
}

/// Mask check (3.1-3.2): masked logits, or why the row is invalid.
pub fn mask_row(row: &[f32], mask: Option<&[u32]>) -> Result<Vec<f32>, RowError> {
    let mut l = row.to_vec();
    if let Some(m) = mask {
        for (t, x) in l.iter_mut().enumerate() {
            if (m[t / 32] >> (t % 32)) & 1 == 0 {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    if l.iter().any(|x| x.is_nan() || *x == f32::INFINITY) {
        return Err(RowError::BadValue);
    }
    if l.iter().all(|x| *x == f32::NEG_INFINITY) {
        return Err(RowError::AllNegInf);
    }
    Ok(l)
}

/// Sections 3.3-3.9 on a masked, valid row.
pub fn process_row(masked: Vec<f32>, n: usize, p: &RefParams) -> RowDist {
    let v = masked.len();
    // 3.3 / 3.6: sort by (logit desc, id asc); the first N are the candidates.
    let mut order: Vec<usize> = (0..v).collect();
    order.sort_by(|&a, &b| masked[b].partial_cmp(&masked[a]).unwrap().then(a.cmp(&b)));
    order.truncate(n.min(v));
    // 3.4: x = (logit - m) / temperature in f32 operations (m the largest
    // masked logit, so the largest x is exactly 0), then f64.
    let mmax = masked[order[0]];
    let x: Vec<f64> = order.iter().map(|&t| ((masked[t] - mmax) / p.temperature) as f64).collect();
    // 3.5: softmax over the candidates.
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = x.iter().map(|&xi| (xi - m).exp()).collect();
    let z: f64 = e.iter().sum();
    let prob: Vec<f64> = e.iter().map(|&ei| ei / z).collect();
    let mut keep = vec![true; order.len()];
    let mut cut_margin = f64::INFINITY;
    // 10.1: min-p, remove i if x_i < L, L = ln(min_p) in f64 rounded to
    // f32 (0 for min_p = 1): an exact f32 comparison, so no margin.
    let mut min_p_keep = vec![true; order.len()];
    if p.min_p > 0.0 {
        let l = if p.min_p == 1.0 { 0.0 } else { (p.min_p as f64).ln() as f32 };
        for i in 0..order.len() {
            min_p_keep[i] = (x[i] as f32) >= l; // not x < L (x is never NaN)
        }
    }
    // 3.8: top-k on the ranks of the order (kept tokens are a prefix).
    let top_k_keep = |i: usize| p.top_k == -1 || (i as i64) < p.top_k;
    // 3.7 (or 10.2 after min-p and top-k): top-p on `mass`, removing a token
    // when the mass before it exceeds top_p.
    let first: Vec<bool> = (0..order.len()).map(|i| min_p_keep[i] && (!p.top_k_first || top_k_keep(i))).collect();
    if p.top_p < 1.0 {
        let tp = p.top_p as f64;
        let z1: f64 = if p.top_k_first { (0..order.len()).filter(|&i| first[i]).map(|i| prob[i]).sum() } else { 1.0 };
        let mut before = 0.0f64;
        for i in 0..order.len() {
            if p.top_k_first && !first[i] {
                continue;
            }
            cut_margin = cut_margin.min((before - tp).abs());
            if before > tp {
                keep[i] = false;
            }
            before += prob[i] / z1;
        }
    }
    for (i, k) in keep.iter_mut().enumerate() {
        *k = *k && first[i] && top_k_keep(i);
    }
    // 3.9: logprob = x - logsumexp(x over kept).
    let kept: Vec<usize> = (0..order.len()).filter(|&i| keep[i]).collect();
    let s: f64 = kept.iter().map(|&i| (x[i] - m).exp()).sum();
    let lse = m + s.ln();
    let mut logprob = vec![f64::NEG_INFINITY; v];
    for &i in &kept {
        logprob[order[i]] = x[i] - lse;
    }
    let kept = kept.iter().map(|&i| order[i]).collect();
    // 10.3: raw_i = (logit_i - M) - ln(sum over all V of exp(logit_j - M)), logit - M in f32.
    let z: f64 = masked.iter().map(|&l| ((l - mmax) as f64).exp()).sum();
    let raw = masked.iter().map(|&l| ((l - mmax) as f64) - z.ln()).collect();
    RowDist { logit: masked, order, logprob, kept, cut_margin, raw, report_raw: p.raw }
}

/// Section 4 with weights `w` over `ids` (in order) and `u`: the first token whose
/// inclusive cumulative weight exceeds `u * total`; fallback the last with
/// nonzero weight. Returns the token and the decision margin, in the weights'
/// own (unnormalised) units: min |cum - u * total| over the walk.
pub fn walk(ids: &[usize], w: &[f64], u: f64) -> (Option<usize>, f64) {
    let total: f64 = w.iter().sum();
    let target = u * total;
    let mut cum = 0.0f64;
    let mut margin = f64::INFINITY;
    let mut chosen = None;
    for (i, &t) in ids.iter().enumerate() {
        if w[i] <= 0.0 {
            continue;
        }
        cum += w[i];
        margin = margin.min((cum - target).abs());
        if chosen.is_none() && cum > target {
            chosen = Some(t);
        }
    }
    if chosen.is_none() {
        chosen = ids.iter().zip(w).rev().find(|(_, &x)| x > 0.0).map(|(&t, _)| t);
    }
    (chosen, margin)
}

/// A case-0 draw from the processed distribution.
pub fn draw(d: &RowDist, seed: u64, position: u64) -> (usize, f64) {
    let u = uniform(seed, seq(position, 0));
    let w: Vec<f64> = d.kept.iter().map(|&t| d.prob(t)).collect();
    let (t, m) = walk(&d.kept, &w, u);
    (t.expect("a valid row has a kept token with mass"), m)
}

/// Section 5's sum_smaller_probs of token `s` (None = no token).
pub fn sum_smaller(d: &RowDist, s: Option<usize>) -> f64 {
    let Some(s) = s else { return 0.0 };
    if d.logprob[s] == f64::NEG_INFINITY {
        return 0.0;
    }
    let ls = d.logit[s];
    d.kept.iter().filter(|&&j| d.logit[j] < ls || (d.logit[j] == ls && j <= s)).map(|&j| d.prob(j)).sum()
}

// ---------------------------------------------------------------- outputs

/// One row's outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct RefRow {
    pub token: i32,
    pub logprob: f64,
    pub top_logprobs: Vec<(i32, f64)>,
    pub sum_smaller_probs: f64,
}

/// One request's outputs, with its decision margins.
#[derive(Clone, Debug, PartialEq)]
pub struct RefRequest {
    pub status: Result<(), String>,
    pub accepted: u32,
    pub emitted: Vec<i32>,
    pub emitted_logprobs: Vec<f64>,
    pub prompt_logprobs: Vec<f64>,
    /// Tree requests that did not fail: the accepted path (section 11.9).
    pub path: Option<Vec<u32>>,
    /// Smallest margin of a draw or accept decision (infinity when none).
    pub draw_margin: f64,
    /// Smallest margin of a top-p cut of any of the request's rows.
    pub cut_margin: f64,
}

/// A step's outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct RefOutput {
    pub rows: Vec<RefRow>,
    pub requests: Vec<RefRequest>,
    /// Width of every ok row's top logprobs.
    pub k: usize,
}

fn none_row() -> RefRow {
    RefRow { token: -1, logprob: f64::NEG_INFINITY, top_logprobs: Vec::new(), sum_smaller_probs: 0.0 }
}

fn failed(rows: usize, why: String) -> (Vec<RefRow>, RefRequest) {
    let req = RefRequest {
        status: Err(why),
        accepted: 0,
        emitted: Vec::new(),
        emitted_logprobs: Vec::new(),
        prompt_logprobs: Vec::new(),
        path: None,
        draw_margin: f64::INFINITY,
        cut_margin: f64::INFINITY,
    };
    ((0..rows).map(|_| none_row()).collect(), req)
}

/// One step of the sampler: `logits` is `[R, vocab]`, the requests own
/// consecutive rows in order; `force_topk` 0 (or >= vocab) = off.
pub fn reference_step(vocab: usize, force_topk: usize, logits: &[f32], requests: &[Request]) -> RefOutput {
    assert_eq!(logits.len(), requests.iter().map(rows_of).sum::<usize>() * vocab);
    let n = if force_topk == 0 || force_topk >= vocab { vocab } else { force_topk };
    // Section 5: k = the largest top_logprobs among requests with valid parameters.
    let k = requests.iter().filter_map(|r| check_params(&r.params, n).ok()).map(|p| p.top_logprobs).max().unwrap_or(0);
    let words = vocab.div_ceil(32);
    let mut rows = Vec::new();
    let mut outs = Vec::new();
    let mut first = 0usize;
    for req in requests {
        let m = rows_of(req);
        let base = first;
        let row_logits = |j: usize| &logits[(base + j) * vocab..(base + j + 1) * vocab];
        first += m;
        let p = match check_params(&req.params, n) {
            Ok(p) => p,
            Err(e) => {
                let (r, o) = failed(m, e);
                rows.extend(r);
                outs.push(o);
                continue;
            }
        };
        // Section 6: m - 1 drafts (each -1 or a vocabulary id) and draft distributions.
        if let RequestKind::Decode { drafts, draft_dists, .. } = &req.kind {
            let bad_id = drafts.iter().any(|&d| d < -1 || d >= vocab as i32);
            let bad_dist = draft_dists.iter().any(|d| bad_draft_dist(d, vocab));
            if m == 0 || drafts.len() != m - 1 || draft_dists.len() != m - 1 || bad_id || bad_dist {
                let (r, o) = failed(m, "bad drafts".into());
                rows.extend(r);
                outs.push(o);
                continue;
            }
        }
        // Section 11.10: a malformed tree fails its request.
        if let RequestKind::Tree { tree, .. } = &req.kind {
            let depth = tree_depths(&tree.parent);
            let internal = (0..m).filter(|&c| tree.parent.contains(&(c as i32))).count();
            let bad = match &depth {
                None => true,
                Some(dp) => {
                    tree.tokens.len() + 1 != m
                        || tree.tokens.iter().any(|&t| t < -1 || t >= vocab as i32)
                        || req.golden.len() > dp.iter().max().unwrap() + 1
                        || req.golden.iter().any(|&t| t < -1 || t >= vocab as i32)
                        || (tree.without_replacement && tree.draft_dists.is_none())
                        || tree
                            .draft_dists
                            .as_ref()
                            .is_some_and(|d| d.len() != internal || d.iter().any(|x| bad_draft_dist(x, vocab)))
                }
            };
            if bad {
                let (r, o) = failed(m, "bad tree".into());
                rows.extend(r);
                outs.push(o);
                continue;
            }
        }
        if let Some(masks) = &req.masks {
            if masks.len() != m || masks.iter().any(|w| w.len() != words) {
                let (r, o) = failed(m, "bad mask".into());
                rows.extend(r);
                outs.push(o);
                continue;
            }
        }
        let mut masked = Vec::with_capacity(m);
        let mut bad = None;
        for j in 0..m {
            match mask_row(row_logits(j), req.masks.as_ref().map(|ms| ms[j].as_slice())) {
                Ok(l) => masked.push(l),
                Err(e) => {
                    bad = Some(format!("row {j}: {e:?}"));
                    break;
                }
            }
        }
        if let Some(why) = bad {
            let (r, o) = failed(m, why);
            rows.extend(r);
            outs.push(o);
            continue;
        }
        let dists: Vec<RowDist> = masked.into_iter().map(|l| process_row(l, n, &p)).collect();
        let (r, o) = request_outputs(req, &p, &dists, k);
        rows.extend(r);
        outs.push(o);
    }
    RefOutput { rows, requests: outs, k }
}

fn golden_of(req: &Request, j: usize) -> Option<usize> {
    req.golden.get(j).copied().filter(|&g| g >= 0).map(|g| g as usize)
}

/// Outputs of one valid request whose rows are processed (sections 4-8).
fn request_outputs(req: &Request, p: &RefParams, dists: &[RowDist], k: usize) -> (Vec<RefRow>, RefRequest) {
    let m = dists.len();
    let (seed, pos) = seed_and_positions(req, p.seed);
    let mut tokens: Vec<Option<usize>> = vec![None; m];
    let mut draw_margin = f64::INFINITY;
    let mut accepted = 0u32;
    let mut prompt_logprobs = Vec::new();
    let mut path = None;
    match &req.kind {
        RequestKind::Tree { tree, .. } => {
            let (t, pth, mg) = tree_walk_ref(req, tree, seed, &pos, dists);
            tokens = t;
            accepted = pth.len() as u32 - 1;
            path = Some(pth);
            draw_margin = mg;
        }
        RequestKind::Prefill { .. } | RequestKind::Draft { .. } => {
            for j in 0..m {
                tokens[j] = Some(match golden_of(req, j) {
                    Some(g) => g,
                    None => {
                        let (t, mg) = draw(&dists[j], seed, pos[j]);
                        draw_margin = draw_margin.min(mg);
                        t
                    }
                });
            }
        }
        RequestKind::PromptLogprobs { targets } => {
            for (j, &t) in targets.iter().enumerate() {
                if t >= 0 {
                    prompt_logprobs.push(dists[j].reported(t as usize));
                }
            }
        }
        RequestKind::Decode { drafts, draft_dists, .. } => {
            let mut all_accepted = true;
            for j in 0..m - 1 {
                let d = dists.get(j).unwrap();
                // A placeholder draft (-1) has p = q = 0: always rejected.
                let dt = usize::try_from(drafts[j]).ok();
                // Step 1: golden.
                if let Some(g) = golden_of(req, j) {
                    tokens[j] = Some(g);
                    if Some(g) == dt {
                        accepted += 1;
                        continue;
                    }
                    all_accepted = false;
                    break;
                }
                // Step 2: p and q of the draft token.
                let mut qv = vec![0.0f64; d.logit.len()];
                for (&id, &lp) in draft_dists[j].ids.iter().zip(&draft_dists[j].logprobs) {
                    // The kernels hold q in f32 (it underflows to 0 below ~1e-45, a reject).
                    qv[id as usize] = sampler_kernels::rt::math::exp_f32(lp) as f64;
                }
                let pd = dt.map_or(0.0, |t| d.prob(t));
                let qd = dt.map_or(0.0, |t| qv[t]);
                // Step 3: accept test.
                let u1 = uniform(seed, seq(pos[j], 1));
                let acc = qd > 0.0 && u1 * qd < pd;
                if qd > 0.0 && pd > 0.0 {
                    draw_margin = draw_margin.min((u1 * qd - pd).abs());
                }
                if acc {
                    tokens[j] = dt;
                    accepted += 1;
                    continue;
                }
                // Step 4: residual over the target's kept tokens, else the target.
                let u2 = uniform(seed, seq(pos[j], 2));
                let r: Vec<f64> = d.kept.iter().map(|&t| (d.prob(t) - qv[t]).max(0.0)).collect();
                let s: f64 = r.iter().sum();
                let t = if s > 0.0 {
                    draw_margin = draw_margin.min(s);
                    let (t, mg) = walk(&d.kept, &r, u2);
                    draw_margin = draw_margin.min(mg);
                    t.unwrap()
                } else {
                    let w: Vec<f64> = d.kept.iter().map(|&t| d.prob(t)).collect();
                    let (t, mg) = walk(&d.kept, &w, u2);
                    draw_margin = draw_margin.min(mg);
                    t.unwrap()
                };
                tokens[j] = Some(t);
                all_accepted = false;
                break;
            }
            if all_accepted {
                let j = m - 1;
                tokens[j] = Some(match golden_of(req, j) {
                    Some(g) => g,
                    None => {
                        let (t, mg) = draw(&dists[j], seed, pos[j]);
                        draw_margin = draw_margin.min(mg);
                        t
                    }
                });
            }
        }
    }
    let mut rows = Vec::with_capacity(m);
    let mut emitted = Vec::new();
    let mut emitted_logprobs = Vec::new();
    for (j, d) in dists.iter().enumerate() {
        let tok = tokens[j];
        let logprob = tok.map_or(f64::NEG_INFINITY, |t| d.reported(t));
        let top = d.order.iter().take(k).map(|&t| (t as i32, d.reported(t))).collect();
        rows.push(RefRow {
            token: tok.map_or(-1, |t| t as i32),
            logprob,
            top_logprobs: top,
            sum_smaller_probs: sum_smaller(d, tok),
        });
        if let Some(t) = tok {
            emitted.push(t as i32);
            emitted_logprobs.push(logprob);
        }
    }
    let cut_margin = dists.iter().map(|d| d.cut_margin).fold(f64::INFINITY, f64::min);
    let out = RefRequest {
        status: Ok(()),
        accepted,
        emitted,
        emitted_logprobs,
        prompt_logprobs,
        path,
        draw_margin,
        cut_margin,
    };
    (rows, out)
}

/// Section 11.4 in f64, straight from the text: the walk over a valid tree
/// whose rows are processed. `pos[n]` is row n's pos(depth(n), 0). Returns
/// the token emitted at each row, the path and the smallest decision margin.
fn tree_walk_ref(
    req: &Request,
    tree: &sampler_host::DraftTree,
    seed: u64,
    pos: &[u64],
    dists: &[RowDist],
) -> (Vec<Option<usize>>, Vec<u32>, f64) {
    let m = dists.len();
    let depth = tree_depths(&tree.parent).unwrap();
    let children = |c: usize| -> Vec<usize> { (1..m).filter(|&n| tree.parent[n] == c as i32).collect() };
    // The draft distribution of each internal node, in node order (11.1).
    let mut q_of: Vec<Option<Vec<f64>>> = vec![None; m];
    if let Some(dd) = &tree.draft_dists {
        let mut it = dd.iter();
        for c in 0..m {
            if !children(c).is_empty() {
                let d = it.next().unwrap();
                let mut q = vec![0.0f64; dists[c].logit.len()];
                for (&id, &lp) in d.ids.iter().zip(&d.logprobs) {
                    q[id as usize] = sampler_kernels::rt::math::exp_f32(lp) as f64;
                }
                q_of[c] = Some(q);
            }
        }
    }
    let mut tokens = vec![None; m];
    let mut path = vec![0u32];
    let mut margin = f64::INFINITY;
    let mut c = 0usize;
    loop {
        let d = &dists[c];
        let kids = children(c);
        // 11.7: golden at this depth.
        if let Some(g) = req.golden.get(depth[c]).copied().filter(|&g| g >= 0) {
            tokens[c] = Some(g as usize);
            match kids.iter().find(|&&k| tree.tokens[k - 1] == g) {
                Some(&k) => {
                    c = k;
                    path.push(k as u32);
                    continue;
                }
                None => break,
            }
        }
        if kids.is_empty() {
            let (t, mg) = draw(d, seed, pos[c]);
            margin = margin.min(mg);
            tokens[c] = Some(t);
            break;
        }
        let v = d.logit.len();
        let p: Vec<f64> = (0..v).map(|t| d.prob(t)).collect();
        let mut w = p.clone();
        let mut s = 1.0f64;
        let mut removed: Vec<usize> = Vec::new();
        let mut next = None;
        for (k, &ch) in kids.iter().enumerate() {
            let x = usize::try_from(tree.tokens[ch - 1]).ok();
            // 11.3: the proposal law q_k of this child.
            let qk: Vec<f64> = match &q_of[c] {
                None => (0..v).map(|t| if Some(t) == x { 1.0 } else { 0.0 }).collect(),
                Some(q) if !tree.without_replacement => q.clone(),
                Some(q) => {
                    let den = 1.0 - removed.iter().map(|&t| q[t]).sum::<f64>();
                    (0..v).map(|t| if den <= 0.0 || removed.contains(&t) { 0.0 } else { q[t] / den }).collect()
                }
            };
            let qx = x.map_or(0.0, |t| qk[t]);
            let wx = x.map_or(0.0, |t| w[t]);
            let pos_k = pos[c].wrapping_add((k as u64).wrapping_mul(SIBLING_STRIDE));
            let u = uniform(seed, seq(pos_k, 1));
            if qx > 0.0 && wx > 0.0 {
                margin = margin.min((u * qx * s - wx).abs());
            }
            if qx > 0.0 && u * qx * s < wx {
                next = Some(ch);
                break;
            }
            for &t in &d.kept {
                w[t] = (w[t] - s * qk[t]).max(0.0);
            }
            s = d.kept.iter().map(|&t| w[t]).sum();
            if s <= 0.0 {
                w = p.clone();
                s = 1.0;
            }
            if let Some(t) = x {
                if !removed.contains(&t) {
                    removed.push(t);
                }
            }
        }
        match next {
            Some(ch) => {
                tokens[c] = x_of(tree, ch);
                c = ch;
                path.push(ch as u32);
            }
            None => {
                let u2 = uniform(seed, seq(pos[c], 2));
                let wk: Vec<f64> = d.kept.iter().map(|&t| w[t]).collect();
                let (t, mg) = walk(&d.kept, &wk, u2);
                margin = margin.min(mg).min(s);
                tokens[c] = t;
                break;
            }
        }
    }
    (tokens, path, margin)
}

fn x_of(tree: &sampler_host::DraftTree, n: usize) -> Option<usize> {
    usize::try_from(tree.tokens[n - 1]).ok()
}

// ------------------------------------------------------------- comparison

/// CONFORMANCE.md's float tolerance: `|a - b| <= 1e-4 + 1e-5 |b|`, -inf only where -inf is expected.
pub fn close(a: f64, b: f64) -> bool {
    if b == f64::NEG_INFINITY || a == f64::NEG_INFINITY {
        return a == b;
    }
    a.is_finite() && b.is_finite() && (a - b).abs() <= 1e-4 + 1e-5 * b.abs()
}

/// Margin below which a decision may legitimately go either way.
pub const MARGIN: f64 = 1e-6;

/// Compares a sampler's step output with the reference's. Ids are compared
/// only where the reference's decisions are at least [`MARGIN`] from a
/// boundary; everything is skipped for a request whose top-p cut is that close.
/// Returns the differences found (empty = agree).
pub fn compare(got: &sampler_host::StepOutput, want: &RefOutput, requests: &[Request]) -> Vec<String> {
    let mut diffs = Vec::new();
    if got.top_logprobs_width != want.k {
        diffs.push(format!("top_logprobs width {} vs reference {}", got.top_logprobs_width, want.k));
    }
    if got.rows.len() != want.rows.len() || got.requests.len() != want.requests.len() {
        diffs.push(format!(
            "shape: {} rows {} requests vs reference {} / {}",
            got.rows.len(),
            got.requests.len(),
            want.rows.len(),
            want.requests.len()
        ));
        return diffs;
    }
    let mut first = 0usize;
    for (i, (g, w)) in got.requests.iter().zip(&want.requests).enumerate() {
        let m = rows_of(&requests[i]);
        let rows = first..first + m;
        first += m;
        if g.status.is_ok() != w.status.is_ok() {
            diffs.push(format!("request {i}: status {:?} vs reference {:?}", g.status, w.status));
            continue;
        }
        if w.status.is_err() {
            for r in rows {
                let gr = &got.rows[r];
                if gr.token != -1 || !gr.top_logprobs.is_empty() || gr.sum_smaller_probs != 0.0 {
                    diffs.push(format!("row {r} of failed request {i}: {gr:?}"));
                }
            }
            if !g.emitted.is_empty() {
                diffs.push(format!("failed request {i} emitted {:?}", g.emitted));
            }
            continue;
        }
        if w.cut_margin < MARGIN {
            continue;
        }
        let ids = w.draw_margin >= MARGIN;
        let mut d = |what: String| diffs.push(format!("request {i}: {what}"));
        if g.prompt_logprobs.len() != w.prompt_logprobs.len() {
            d(format!("prompt_logprobs {:?} vs reference {:?}", g.prompt_logprobs, w.prompt_logprobs));
        } else {
            for (a, b) in g.prompt_logprobs.iter().zip(&w.prompt_logprobs) {
                if !close(*a as f64, *b) {
                    d(format!("prompt_logprobs {:?} vs reference {:?}", g.prompt_logprobs, w.prompt_logprobs));
                    break;
                }
            }
        }
        for r in rows {
            let (gr, wr) = (&got.rows[r], &want.rows[r]);
            let tl_ok = gr.top_logprobs.len() == wr.top_logprobs.len()
                && gr.top_logprobs.iter().zip(&wr.top_logprobs).all(|(a, b)| a.0 == b.0 && close(a.1 as f64, b.1));
            if !tl_ok {
                d(format!("row {r}: top_logprobs {:?} vs reference {:?}", gr.top_logprobs, wr.top_logprobs));
            }
            if ids {
                if gr.token != wr.token {
                    d(format!("row {r}: token {} vs reference {}", gr.token, wr.token));
                } else {
                    if !close(gr.logprob as f64, wr.logprob) {
                        d(format!("row {r}: logprob {} vs reference {}", gr.logprob, wr.logprob));
                    }
                    if !close(gr.sum_smaller_probs as f64, wr.sum_smaller_probs) {
                        d(format!(
                            "row {r}: sum_smaller_probs {} vs reference {}",
                            gr.sum_smaller_probs, wr.sum_smaller_probs
                        ));
                    }
                }
            }
        }
        if ids {
            if g.path != w.path {
                d(format!("path {:?} vs reference {:?}", g.path, w.path));
            }
            if g.accepted != w.accepted || g.emitted != w.emitted {
                d(format!(
                    "accepted/emitted {} {:?} vs reference {} {:?}",
                    g.accepted, g.emitted, w.accepted, w.emitted
                ));
            } else if g.emitted_logprobs.len() != w.emitted_logprobs.len()
                || !g.emitted_logprobs.iter().zip(&w.emitted_logprobs).all(|(a, b)| close(*a as f64, *b))
            {
                d(format!("emitted_logprobs {:?} vs reference {:?}", g.emitted_logprobs, w.emitted_logprobs));
            }
        }
    }
    diffs
}

/// Self-checks of the reference against the spec's worked examples.
pub fn self_check() {
    assert_eq!(uniform(0, 0), 0.8833108082136426);
    // Section 2: seq_seed 1, 41-token prompt: seq 123.
    let pre = Request::prefill(SamplingParams { seq_seed: Some(1), ..Default::default() }, 41);
    let (_, pos) = seed_and_positions(&pre, 1);
    assert_eq!(seq(pos[0], 0), 123);
    let dec = Request::decode(
        SamplingParams { seq_seed: Some(1), ..Default::default() },
        55,
        6,
        vec![1; 5],
        vec![Default::default(); 5],
    );
    let (_, pos) = seed_and_positions(&dec, 1);
    assert_eq!((pos[0], pos[2]), (50, 20_000_088));
    // Section 3: p = [0.50, 0.25, 0.15, 0.06, 0.04], top_p 0.8, top_k 2 -> [2/3, 1/3, 0, 0, 0].
    let logits: Vec<f32> = [0.50f64, 0.25, 0.15, 0.06, 0.04].iter().map(|x| x.ln() as f32).collect();
    let p = RefParams {
        temperature: 1.0,
        top_p: 0.8,
        top_k: 2,
        top_logprobs: 0,
        seed: 0,
        min_p: 0.0,
        top_k_first: false,
        raw: false,
    };
    let d = process_row(logits, 5, &p);
    let probs: Vec<f64> = (0..5).map(|t| d.prob(t)).collect();
    let want = [2.0 / 3.0, 1.0 / 3.0, 0.0, 0.0, 0.0];
    for (a, b) in probs.iter().zip(want) {
        assert!((a - b).abs() < 1e-6, "{probs:?}");
    }
    // Section 10.2: p = [0.5, 0.3, 0.2], top_k 2, top_p 0.6 keeps {0} top-k first, {0, 1} in the seed's order.
    let logits: Vec<f32> = [0.5f64, 0.3, 0.2].iter().map(|x| x.ln() as f32).collect();
    let p = RefParams { top_p: 0.6, top_k_first: true, ..p };
    assert_eq!(process_row(logits.clone(), 3, &p).kept, [0]);
    assert_eq!(process_row(logits.clone(), 3, &RefParams { top_k_first: false, ..p }).kept, [0, 1]);
    // Section 10.1: min_p 0.5 keeps p_i >= 0.25; min_p 1 keeps only the ties with the largest.
    let p = RefParams { top_p: 1.0, top_k: -1, min_p: 0.5, ..p };
    assert_eq!(process_row(logits.clone(), 3, &p).kept, [0, 1]);
    assert_eq!(process_row(vec![1.0, 2.0, 2.0], 3, &RefParams { min_p: 1.0, ..p }).kept, [1, 2]);
    // Section 10.3: raw logprobs ignore temperature and filters.
    let d = process_row(vec![2.0, 1.5], 2, &RefParams { temperature: 1e-5, min_p: 0.0, raw: true, ..p });
    assert!((d.raw[1] - -(1.0f64 + 0.5f64.exp()).ln()).abs() < 1e-7, "{:?}", d.raw);
}
