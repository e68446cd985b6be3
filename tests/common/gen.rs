//! Random steps for property tests: every request kind, every parameter
//! corner, adversarial logits (-inf, ties, duplicates), masks, golden tokens.

use sampler_host::{DraftDist, FilterOrder, LogprobsMode, Request, RequestKind, SamplingParams};

/// A small test-side RNG (xorshift64*), independent of the sampler's streams.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x2545_F491_4F6C_DD1D | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }
    /// Uniform in lo..hi (hi exclusive, hi > lo).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.f64().max(1e-300);
        let u2 = self.f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// One random step.
#[derive(Clone, Debug)]
pub struct Step {
    pub vocab: usize,
    /// 0 = off.
    pub force_topk: usize,
    pub logits: Vec<f32>,
    pub requests: Vec<Request>,
}

/// Knobs of the generator.
#[derive(Clone, Copy, Debug)]
pub struct GenOpts {
    /// Probability that a request has a parameter / mask / logits error.
    pub p_error: f64,
    /// Probability that a request is a draft tree (SAMPLER.md section 11).
    pub p_tree: f64,
}

impl Default for GenOpts {
    fn default() -> Self {
        GenOpts { p_error: 0.08, p_tree: 0.2 }
    }
}

/// Draws one child token from `q` (over `ids`, logprobs `lps`) with the
/// tokens in `removed` taken out (without replacement), or any id.
fn draw_child(rng: &mut Rng, v: usize, q: &DraftDist, removed: &[i32]) -> i32 {
    if rng.chance(0.1) {
        return if rng.chance(0.5) { -1 } else { rng.below(v) as i32 };
    }
    let w: Vec<f64> = q
        .ids
        .iter()
        .zip(&q.logprobs)
        .map(|(t, lp)| if removed.contains(t) { 0.0 } else { (*lp as f64).exp() })
        .collect();
    let total: f64 = w.iter().sum();
    if total <= 0.0 {
        return rng.below(v) as i32;
    }
    let u = rng.f64() * total;
    let mut cum = 0.0;
    for (i, x) in w.iter().enumerate() {
        cum += x;
        if cum > u && *x > 0.0 {
            return q.ids[i];
        }
    }
    q.ids[w.iter().rposition(|&x| x > 0.0).unwrap()]
}

/// A random draft tree of `m` nodes over the rows `rows[n]` (`[V]` each):
/// bushy or chain-shaped, fixed, with or without replacement, with
/// placeholders; children drawn from their node's distribution as declared.
pub fn random_tree(rng: &mut Rng, v: usize, m: usize, rows: &dyn Fn(usize) -> Vec<f32>) -> sampler_host::DraftTree {
    let chain = rng.chance(0.25);
    let parent: Vec<i32> = (0..m)
        .map(|n| {
            if n == 0 {
                -1
            } else if chain {
                n as i32 - 1
            } else {
                rng.below(n) as i32
            }
        })
        .collect();
    let mode = rng.below(3);
    let internal: Vec<bool> = (0..m).map(|c| parent.contains(&(c as i32))).collect();
    let dists: Vec<Option<DraftDist>> =
        (0..m).map(|c| (mode > 0 && internal[c]).then(|| random_draft_dist(rng, v, &rows(c)).1)).collect();
    let mut tokens = vec![-1i32; m.saturating_sub(1)];
    #[allow(clippy::needless_range_loop)]
    for c in 0..m {
        let mut removed = Vec::new();
        for n in (c + 1)..m {
            if parent[n] != c as i32 {
                continue;
            }
            let t = match &dists[c] {
                Some(q) => draw_child(rng, v, q, if mode == 2 { &removed } else { &[] }),
                None if rng.chance(0.1) => -1,
                // Fixed: top tokens of the row, or any id.
                None => {
                    let r = rows(c);
                    let mut order: Vec<usize> = (0..v).collect();
                    order
                        .sort_by(|&a, &b| r[b].partial_cmp(&r[a]).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b)));
                    if rng.chance(0.7) {
                        order[removed.len().min(v - 1)] as i32
                    } else {
                        rng.below(v) as i32
                    }
                }
            };
            removed.push(t);
            tokens[n - 1] = t;
        }
    }
    let draft_dists = (mode > 0).then(|| dists.into_iter().flatten().collect());
    sampler_host::DraftTree { parent, tokens, draft_dists, without_replacement: mode == 2 }
}

/// One logits row with V entries, in one of several adversarial styles.
pub fn random_row(rng: &mut Rng, v: usize) -> Vec<f32> {
    let style = rng.below(7);
    let scale = rng.pick(&[0.1, 1.0, 2.0, 4.0, 10.0]);
    let mut row: Vec<f32> = (0..v)
        .map(|_| match style {
            // Quantised: many exact ties.
            0 => (rng.normal() * 2.0).round() as f32 * 0.5,
            // Few distinct values: heavy duplication.
            1 => rng.pick(&[-1.0f32, 0.0, -0.0, 0.5, 2.0]),
            // Large magnitudes (x = logit / 1e-5 stays finite in f32).
            6 => (rng.normal() * 1e3) as f32 * rng.pick(&[1.0f32, 10.0]),
            // One dominant logit family.
            2 => (rng.normal() * scale) as f32 - 5.0,
            _ => (rng.normal() * scale) as f32,
        })
        .collect();
    if style == 2 && v > 0 {
        let i = rng.below(v);
        row[i] = 8.0;
    }
    // -inf entries.
    if rng.chance(0.35) {
        let frac = rng.pick(&[0.05, 0.3, 0.9]);
        for x in row.iter_mut() {
            if rng.chance(frac) {
                *x = f32::NEG_INFINITY;
            }
        }
        // Usually keep one finite entry so the row stays valid.
        if row.iter().all(|x| *x == f32::NEG_INFINITY) && rng.chance(0.9) {
            let i = rng.below(v);
            row[i] = rng.normal() as f32;
        }
    }
    // Copies of the same value at several ids.
    if rng.chance(0.3) && v > 2 {
        let val = row[rng.below(v)];
        for _ in 0..rng.range(1, 4) {
            let i = rng.below(v);
            row[i] = val;
        }
    }
    row
}

fn random_params(rng: &mut Rng, n: usize, v: usize, err: bool) -> SamplingParams {
    let temperature = rng.pick(&[0.0f32, 1e-6, 1e-5, 2e-5, 1e-3, 0.05, 0.3, 0.7, 1.0, 1.0, 1.0, 1.3, 2.0, 5.0]);
    let free = rng.f64() as f32 + 1e-6;
    let top_p = if rng.chance(0.45) { 1.0 } else { rng.pick(&[1e-4f32, 0.05, 0.3, 0.5, 0.8, 0.9, 0.95, 0.999, free]) };
    let top_k = if rng.chance(0.45) {
        -1
    } else {
        match rng.below(4) {
            0 => 1,
            1 => rng.range(1, v as u64 + 3) as i64,
            2 => v as i64 + rng.range(0, 1000) as i64,
            _ => i32::MAX as i64,
        }
    };
    let top_logprobs = if rng.chance(0.4) { 0 } else { rng.range(0, n.min(6) as u64 + 1) as u32 };
    let mut p = SamplingParams {
        temperature,
        top_p: top_p.min(1.0),
        top_k,
        top_logprobs,
        seq_seed: Some(rng.next_u64()),
        ..Default::default()
    };
    // Section 10: min-p, the filter order and the logprobs mode.
    if rng.chance(0.35) {
        let free = rng.f64() as f32;
        p.min_p = rng.pick(&[1e-4f32, 0.01, 0.05, 0.1, 0.3, 0.9, 1.0, free]);
    }
    if rng.chance(0.35) {
        p.filter_order = FilterOrder::TopKThenTopP;
    }
    if rng.chance(0.35) {
        p.logprobs_mode = LogprobsMode::Raw;
    }
    if err {
        match rng.below(7) {
            0 => p.temperature = rng.pick(&[-1.0, -1e-6, f32::NAN]),
            1 => p.top_p = rng.pick(&[0.0, -0.5, 1.0001, 2.0, f32::NAN]),
            2 => p.top_k = rng.pick(&[0, -2, -100, i32::MAX as i64 + 1]),
            3 => p.top_logprobs = n as u32 + 1 + rng.below(3) as u32,
            4 => p.min_p = rng.pick(&[-0.1, -1e-9, 1.0001, 2.0, f32::NAN]),
            _ => {}
        }
    }
    p
}

/// A random draft distribution over V proposing `d`; sometimes built from the
/// target row (so drafts get accepted), sometimes without mass on `d`.
fn random_draft_dist(rng: &mut Rng, v: usize, target: &[f32]) -> (i32, DraftDist) {
    let support = if rng.chance(0.5) { v } else { rng.range(1, v as u64 + 1) as usize };
    let mut ids: Vec<usize> = (0..v).collect();
    for i in (1..v).rev() {
        let j = rng.below(i + 1);
        ids.swap(i, j);
    }
    ids.truncate(support);
    let like_target = rng.chance(0.5);
    let temp = rng.pick(&[0.3, 1.0, 2.0]);
    let x: Vec<f64> = ids
        .iter()
        .map(|&t| {
            if like_target && target[t].is_finite() {
                target[t] as f64 / temp + rng.normal() * 0.3
            } else {
                rng.normal() * 2.0
            }
        })
        .collect();
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = m + x.iter().map(|xi| (xi - m).exp()).sum::<f64>().ln();
    let logprobs: Vec<f32> = x.iter().map(|xi| (xi - lse).min(0.0) as f32).collect();
    // The draft token: usually drawn from q, sometimes any id (maybe q = 0).
    let d = if rng.chance(0.85) {
        let u = rng.f64();
        let mut cum = 0.0;
        let mut pick = ids[ids.len() - 1];
        for (i, &lp) in logprobs.iter().enumerate() {
            cum += (lp as f64).exp();
            if cum > u {
                pick = ids[i];
                break;
            }
        }
        pick
    } else {
        rng.below(v)
    };
    let ids = ids.iter().map(|&t| t as i32).collect();
    (d as i32, DraftDist { ids, logprobs })
}

fn random_mask(rng: &mut Rng, v: usize) -> Vec<u32> {
    let words = v.div_ceil(32);
    let density = rng.pick(&[0.1, 0.5, 0.9, 1.0]);
    let mut m = vec![0u32; words];
    for t in 0..v {
        if rng.chance(density) {
            m[t / 32] |= 1 << (t % 32);
        }
    }
    // Bits at ids >= V are ignored: set some.
    if !v.is_multiple_of(32) && rng.chance(0.5) {
        m[words - 1] |= !0u32 << (v % 32);
    }
    if rng.chance(0.9) && !(0..v).any(|t| m[t / 32] >> (t % 32) & 1 == 1) {
        let t = rng.below(v);
        m[t / 32] |= 1 << (t % 32);
    }
    m
}

/// A random step with `vocab` V, force top-k `force_topk` (0 off) and up to
/// `max_requests` requests of every kind.
pub fn random_step(rng: &mut Rng, vocab: usize, force_topk: usize, max_requests: usize, opts: GenOpts) -> Step {
    let v = vocab;
    let n = if force_topk == 0 || force_topk >= v { v } else { force_topk };
    let nreq = rng.range(1, max_requests as u64 + 1) as usize;
    let mut requests = Vec::new();
    let mut logits = Vec::new();
    for _ in 0..nreq {
        let err = rng.chance(opts.p_error);
        let params = random_params(rng, n, v, err);
        let kind_sel = if opts.p_tree > 0.0 && rng.chance(opts.p_tree) { 4 } else { rng.below(4) };
        let rows = match kind_sel {
            0 => 1,
            4 => rng.range(1, 13) as usize,
            1 => rng.range(1, 7) as usize,
            2 => rng.range(1, 6) as usize,
            _ => rng.range(1, 7) as usize,
        };
        let start = logits.len();
        for _ in 0..rows {
            logits.extend(random_row(rng, v));
        }
        let row = |j: usize, l: &Vec<f32>| l[start + j * v..start + (j + 1) * v].to_vec();
        let seqlen_k = if rng.chance(0.2) { rng.next_u64() } else { rng.range(rows as u64, 200_000) };
        let kind = match kind_sel {
            0 => RequestKind::Prefill { seqlen_k },
            1 => {
                let mut drafts = Vec::new();
                let mut dists = Vec::new();
                for j in 0..rows - 1 {
                    let (d, q) = random_draft_dist(rng, v, &row(j, &logits));
                    drafts.push(d);
                    dists.push(q);
                }
                RequestKind::Decode { seqlen_k, seqlen_q: rows as u64, drafts, draft_dists: dists }
            }
            4 => RequestKind::Tree { seqlen_k, tree: random_tree(rng, v, rows, &|j| row(j, &logits)) },
            2 => RequestKind::Draft {
                seqlen_k,
                seqlen_q: rng.range(1, 7).min(seqlen_k.max(1)),
                last_valid_offset: rng.range(0, 6),
                rows: rows as u32,
            },
            _ => RequestKind::PromptLogprobs {
                targets: (0..rows).map(|_| if rng.chance(0.8) { rng.below(v) as i32 } else { -1 }).collect(),
            },
        };
        let mut golden = Vec::new();
        if let RequestKind::Tree { tree, .. } = &kind {
            if rng.chance(0.25) {
                // One id per depth: often a child's token, so golden moves along the tree.
                let mut depth = vec![0usize; rows];
                for n in 1..rows {
                    depth[n] = depth[tree.parent[n] as usize] + 1;
                }
                let d = depth.iter().copied().max().unwrap_or(0);
                golden = (0..=d)
                    .map(|j| match rng.below(3) {
                        0 => -1,
                        1 => (1..rows).filter(|&n| depth[n] == j + 1).map(|n| tree.tokens[n - 1]).next().unwrap_or(-1),
                        _ => rng.below(v) as i32,
                    })
                    .collect();
            }
        }
        if matches!(kind, RequestKind::Prefill { .. } | RequestKind::Decode { .. }) && rng.chance(0.25) {
            golden = (0..rows)
                .map(|j| match rng.below(4) {
                    0 => -1,
                    1 => match &kind {
                        RequestKind::Decode { drafts, .. } if j < drafts.len() => drafts[j],
                        _ => rng.below(v) as i32,
                    },
                    _ => rng.below(v) as i32,
                })
                .collect();
        }
        let mut masks = None;
        if rng.chance(0.2) {
            masks = Some((0..rows).map(|_| random_mask(rng, v)).collect::<Vec<_>>());
        }
        if err {
            match rng.below(4) {
                0 => {
                    // A bad value in some row.
                    let j = rng.below(rows);
                    let t = rng.below(v);
                    logits[start + j * v + t] = rng.pick(&[f32::NAN, f32::INFINITY]);
                }
                1 => {
                    let j = rng.below(rows);
                    for x in &mut logits[start + j * v..start + (j + 1) * v] {
                        *x = f32::NEG_INFINITY;
                    }
                }
                2 => {
                    // Wrong number of masks or of words.
                    let mut ms: Vec<Vec<u32>> = (0..rows).map(|_| random_mask(rng, v)).collect();
                    if rng.chance(0.5) {
                        ms.pop();
                        if ms.is_empty() {
                            ms.push(vec![u32::MAX; v.div_ceil(32) + 1]);
                        }
                    } else {
                        let j = rng.below(rows);
                        ms[j].push(u32::MAX);
                    }
                    masks = Some(ms);
                }
                _ => {}
            }
        }
        requests.push(Request { params, kind, golden, masks });
    }
    Step { vocab, force_topk, logits, requests }
}

/// Issue 24 item 3 (SAMPLER.md 10.1, decided): a step of `rows` prefill
/// requests (one row each) with min-p on and top-p / top-k off, whose
/// logits put tokens on the min-p boundary: besides random ones, several
/// logits `l` for which `(l - m) / T` in f32 operations is `L =
/// f32(ln min_p)` or a few ulps from it (m the row's largest logit), and
/// sometimes ties with m. With `far_tail`, all but a few logits sit far
/// below every min-p cut (the kept set stays short: the prefix path).
/// `top_logprobs` is `min(N, 64)`.
pub fn min_p_boundary_step(rng: &mut Rng, vocab: usize, force_topk: usize, rows: usize, far_tail: bool) -> Step {
    let n = if force_topk == 0 || force_topk >= vocab { vocab } else { force_topk };
    let mut logits = Vec::with_capacity(rows * vocab);
    let mut requests = Vec::with_capacity(rows);
    for r in 0..rows {
        let temperature: f32 = if rng.chance(0.7) {
            rng.pick(&[1e-5f32, 0.3, 0.5, 0.7, 0.8, 1.0, 1.3, 2.0, 10.0, 1e3])
        } else {
            (1e-5 + rng.f64() * 5.0) as f32
        };
        let min_p: f32 = if rng.chance(0.7) {
            rng.pick(&[1e-4f32, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.9, 0.999, 1.0])
        } else {
            (rng.f64() as f32).max(1e-30)
        };
        let l = if min_p == 1.0 { 0.0 } else { (min_p as f64).ln() as f32 };
        let scale = rng.pick(&[0.5, 2.0, 5.0]);
        let offset = rng.pick(&[0.0, 10.0, -30.0]);
        let mut row: Vec<f32> = (0..vocab).map(|_| (offset + rng.normal() * scale) as f32).collect();
        let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        if far_tail {
            let head = rng.range(1, 9.min(vocab as u64) + 1) as usize;
            for (i, x) in row.iter_mut().enumerate() {
                if i >= head {
                    *x = m - 1000.0 * temperature.max(1.0);
                }
            }
            if row.iter().all(|&x| x < m) {
                row[0] = m;
            }
        }
        // Boundary logits: x targets L + k ulps (k in -2..=2, never above 0).
        let boundary = rng.range(1, (vocab as u64 / 4).clamp(1, 12) + 1) as usize;
        for _ in 0..boundary {
            let k = rng.range(0, 5) as i32 - 2;
            let mut xt = l;
            for _ in 0..k.abs() {
                xt = if k > 0 { next_up(xt) } else { next_down(xt) };
            }
            if xt > 0.0 {
                continue;
            }
            let t = temperature.max(1e-5);
            let l0 = (m as f64 + xt as f64 * t as f64) as f32;
            // The f32 logit nearest l0 whose f32 x is exactly xt, if any within 8 ulps.
            let mut cand = l0;
            let mut down = l0;
            let mut up = l0;
            for _ in 0..8 {
                if (up - m) / t == xt {
                    cand = up;
                    break;
                }
                if (down - m) / t == xt {
                    cand = down;
                    break;
                }
                up = next_up(up);
                down = next_down(down);
            }
            if cand <= m && cand.is_finite() {
                row[rng.below(vocab)] = cand;
            }
        }
        if rng.chance(0.2) {
            row[rng.below(vocab)] = m;
        }
        logits.extend_from_slice(&row);
        let params = SamplingParams {
            temperature,
            min_p,
            top_logprobs: n.min(64) as u32,
            seq_seed: Some(rng.next_u64()),
            ..Default::default()
        };
        requests.push(Request::prefill(params, 10 + r as u64));
    }
    Step { vocab, force_topk, logits, requests }
}

/// The next f32 above `x` (finite x).
pub fn next_up(x: f32) -> f32 {
    if x == 0.0 {
        f32::from_bits(1)
    } else if x > 0.0 {
        f32::from_bits(x.to_bits() + 1)
    } else {
        f32::from_bits(x.to_bits() - 1)
    }
}

/// The next f32 below `x` (finite x).
pub fn next_down(x: f32) -> f32 {
    -next_up(-x)
}

/// Section 10.1's kept set of one row of a [`min_p_boundary_step`] request
/// (top-p and top-k off), computed independently of the sampler: the
/// candidates (the N largest logits, ties by lower id) in the order of
/// section 3.6 whose f32 `x = (l - m) / T` is not below `L = ln(min_p)` in
/// f64 rounded to f32 (0 for min_p = 1); all candidates when the
/// temperature clamp turns min-p off. Also returns the candidates' x and L.
pub fn min_p_kept_set(row: &[f32], n: usize, temperature: f32, min_p: f32) -> (Vec<i32>, Vec<(i32, f32)>, f32) {
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].partial_cmp(&row[a]).unwrap().then(a.cmp(&b)));
    order.truncate(n);
    let (t, mp) = if temperature < 1e-5 { (1e-5f32, 0.0f32) } else { (temperature, min_p) };
    let m = row[order[0]];
    let l = if mp == 0.0 {
        f32::NEG_INFINITY
    } else if mp == 1.0 {
        0.0
    } else {
        (mp as f64).ln() as f32
    };
    let xs: Vec<(i32, f32)> = order.iter().map(|&i| (i as i32, (row[i] - m) / t)).collect();
    // Kept unless x < L (x is never NaN here: finite logits).
    let kept = xs.iter().filter(|&&(_, x)| x >= l).map(|&(i, _)| i).collect();
    (kept, xs, l)
}
