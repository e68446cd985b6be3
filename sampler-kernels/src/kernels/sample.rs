//! Sections 3.4-3.9, 4 and 10.1-10.2: temperature, softmax, the min-p /
//! top-p / top-k filters, the renormalised logprobs and the draw
//! (`process`, `draw`, `process_draw`), and the prefix path without force
//! top-k (`row_mass*`, `process_prefix_draw`), with their helpers.

use sampler_macros::{kernel, kernel_fn};

/// Section 3.4: `x = (logit - m) / T` of the `n` candidates at `off`, with
/// `m` the row's largest logit (the first candidate), so the largest `x`
/// is exactly 0 and nothing overflows; `[n]` f32.
#[kernel_fn]
pub fn scaled_logits(cand: Gm<f32>, off: u64, n: u32, temperature: f32) -> Tile<f32> {
    (load(cand, off, n) - load_scalar(cand, off)) / temperature
}

/// Sections 10.1 and 3.8: the prefix min-p and top-k keep, of the scaled
/// logits `x` (`[n]` f32, in order): not `x < log_min_p` (min-p's one f32
/// comparison with the host's `L = ln(min_p)`, `-inf` off, 0 for min_p = 1,
/// which keeps exactly the ties with the largest logit) and the first `k`
/// (`k < 0`: off); `[n]` bool.
#[kernel_fn]
pub fn prefix_mask(x: Tile<f32>, log_min_p: f32, k: i32, n: u32) -> Tile<bool> {
    (x >= log_min_p) & ((iota(n) < (k as u32)) | (k < 0))
}

/// Section 10.2: the mass top-p is a fraction of (2^-44 units): the mass
/// `pre` keeps (min-p and top-k) when they come first (`kfirst`), else
/// `total` (the row's).
#[kernel_fn]
pub fn filtered_mass(w: Tile<u64>, pre: Tile<bool>, kfirst: bool, total: u64) -> u64 {
    if kfirst {
        reduce_sum(select(pre, w, 0u64))
    } else {
        total
    }
}

/// Sections 3.7-3.8 and 10.1-10.2: which candidates are kept, given their
/// fixed-point weights `w` (`[n]` u64, in order), the min-p / top-k mask
/// `pre` and the mass `base` top-p is a fraction of: a candidate is removed
/// when the mass before it exceeds `top_p` of `base` (exactly, in integers)
/// or `pre` removes it. Returns the kept mask and the top-p threshold.
#[kernel_fn]
pub fn keep_mask(w: Tile<u64>, pre: Tile<bool>, base: u64, top_p: f32) -> (Tile<bool>, u64) {
    let thr = frac_floor(base, top_p);
    ((exclusive_scan(w) <= thr) & pre, thr)
}

/// Section 3.9: the renormalised logprobs `x - ln(kept mass)` of the kept
/// candidates, `-inf` for the removed ones; `[n]` f32.
#[kernel_fn]
pub fn renormalise(x: Tile<f32>, w: Tile<u64>, keep: Tile<bool>) -> Tile<f32> {
    let lse = ln_fixed(reduce_sum(select(keep, w, 0u64)));
    select(keep, x - lse, NEG_INF)
}

/// Section 4: the vocabulary id drawn from the logprobs `lp` (`[n]`) with
/// `u = uniform(seed, seq)`, or -1 when nothing has mass.
#[kernel_fn]
pub fn draw_token(lp: Tile<f32>, cand_ids: Gm<i32>, off: u64, seed: u64, seq: u64) -> i32 {
    let c = categorical(to_fixed(exp(lp)), uniform53(seed, seq));
    if c >= 0 {
        load_scalar(cand_ids, off + (c as u64))
    } else {
        -1i32
    }
}

/// Row `r`'s filter parameters, loaded at once before any collective (a
/// load after a barrier is a round trip of its own): temperature, top-p,
/// top-k, the min-p threshold and whether top-k comes first (section 10.2).
#[kernel_fn]
pub fn row_params(
    r: u32,
    temperature: Gm<f32>,
    top_p: Gm<f32>,
    top_k: Gm<i32>,
    log_min_p: Gm<f32>,
    order: Gm<u32>,
) -> (f32, f32, i32, f32, bool) {
    let i = r as u64;
    (
        load_scalar(temperature, i),
        load_scalar(top_p, i),
        load_scalar(top_k, i),
        load_scalar(log_min_p, i),
        load_scalar(order, i) != 0,
    )
}

/// Sections 3.4-3.9 and 10.1-10.2 for one row (the sequence `process` and
/// `process_draw` share): the renormalised logprobs (`[n]` f32, `-inf` for
/// removed candidates) of its `n` candidates at `cand[off..]`, with its
/// temperature `t`, top-p `tp`, top-k `k`, min-p threshold `lmp` and filter
/// order (`kfirst`). The prefix path (`process_prefix_draw`) runs the same
/// helpers with the row's total mass from `row_mass` and its overflow
/// checks between them.
#[kernel_fn]
fn process_row(cand: Gm<f32>, off: u64, n: u32, t: f32, tp: f32, k: i32, lmp: f32, kfirst: bool) -> Tile<f32> {
    let x = scaled_logits(cand, off, n, t);
    let w = to_fixed(exp(x));
    let pre = prefix_mask(x, lmp, k, n);
    let base = filtered_mass(w, pre, kfirst, reduce_sum(w));
    let (keep, _) = keep_mask(w, pre, base, tp);
    renormalise(x, w, keep)
}

/// Sections 3.4-3.9 and 10.1-10.2: temperature (`(logit - m) / T`, IEEE
/// f32), softmax, min-p, top-p and top-k in the row's filter order, and the
/// renormalised (processed) logprobs of the candidates.
///
/// - `cand`: `[R, n]` f32 candidate logits in order.
/// - `temperature`, `top_p`: `[R]` f32 (already clamped, section 1); `top_k`: `[R]` i32 (-1 off).
/// - `log_min_p`: `[R]` f32 min-p threshold `L = ln(min_p)` (section 10.1,
///   rounded to f32 on the host; `-inf` off); `order`: `[R]` u32, 0 top-p then
///   top-k (the seed), 1 top-k then top-p (section 10.2).
/// - `logprobs`: `[R, n]` f32 out; `-inf` for removed candidates.
#[kernel(variants = CANDIDATES)]
pub fn process(
    cand: Gm<f32>,
    n: u32,
    temperature: Gm<f32>,
    top_p: Gm<f32>,
    top_k: Gm<i32>,
    log_min_p: Gm<f32>,
    order: Gm<u32>,
    logprobs: GmMut<f32>,
) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let (t, tp, k, lmp, kfirst) = row_params(r, temperature, top_p, top_k, log_min_p, order);
    let lp = process_row(cand, off, n, t, tp, k, lmp, kfirst);
    store(logprobs, off, lp);
}

/// Section 3.5: the fixed-point softmax weights `to_fixed(exp((logit - m) / t))`
/// of logits `cstart .. cend` of the row at `base`, summed over its first
/// `ntiles` tiles (the prefix path's row mass; 2^-44 units).
#[kernel_fn]
fn chunk_mass(logits: Logits, base: u64, cstart: u32, cend: u32, ntiles: u32, m: f32, t: f32) -> u64 {
    let mut s = 0u64;
    for i in 0..ntiles {
        let start = cstart + i * TILE;
        let len = min(TILE, cend - start);
        let x = (load(logits, base + (start as u64), len) - m) / t;
        s += reduce_sum(to_fixed(exp(x)));
    }
    s
}

/// Sections 3.5 and 3.7 without force top-k (stage 1 of the prefix path):
/// program `r * chunks + c` sums the fixed-point softmax weights
/// `to_fixed(exp(x))` of chunk `c` of row `r` (logits `c * chunk_len ..`,
/// the last chunk shorter), with `x = (logit - m) / temperature` (section
/// 3.4) and `m` the row's largest logit, taken from the first candidate of
/// `force_topn` / `topn_merge`.
/// The weights are bitwise those `process` computes over all V columns, so
/// the exact integer sum of the chunks is its `total`.
///
/// - `logits`: `[R, v]` (masked, checked; f32, bf16 or f16, read as f32);
///   `cand`: `[R, n]` f32, the top-`n` candidates.
/// - `temperature`: `[R]` f32; `mass`: `[R * chunks]` u64 out (fixed point, 2^-44 units).
#[kernel(variants = VOCAB)]
pub fn row_mass(
    logits: Logits,
    v: u32,
    chunk_len: u32,
    chunks: u32,
    cand: Gm<f32>,
    n: u32,
    temperature: Gm<f32>,
    mass: GmMut<u64>,
) {
    let p = row();
    let r = p / chunks;
    let cstart = (p % chunks) * chunk_len;
    let cend = min(cstart + chunk_len, v);
    let base = (r as u64) * (v as u64);
    let t = load_scalar(temperature, r as u64);
    let m = load_scalar(cand, (r as u64) * (n as u64));
    let ntiles = (cend - cstart + TILE - 1) / TILE;
    let s = chunk_mass(logits, base, cstart, cend, ntiles, m, t);
    store_scalar(mass, p as u64, s);
}

/// `mass[r * chunks]` of a row whose softmax total `row_mass_bounded` did not
/// sum because no output can depend on it (a real sum of at most 2^20
/// weights of at most 2^44 never reaches it).
pub const MASS_UNNEEDED: u64 = u64::MAX;

/// Perf-design 3.4 E (issue 22): whether no output of `process_prefix_draw`
/// can depend on the row's softmax total, given the candidates' weights `w`
/// (`[n]` u64, in order), the min-p and top-k prefix `pre`, whether min-p
/// keeps the last column (`last_in`), top-k `k` and the filter order
/// (`kfirst`). Top-k first and ending inside the prefix: the total is never
/// read. Otherwise it is unneeded when every candidate `pre` keeps passes
/// top-p already at the smallest total the row can have (its candidates'
/// own sum, since every weight is >= 0) and the last column is outside
/// `pre`: `frac_floor` is monotone in the total, so at the true total the
/// kept set, the logprobs, the token and the overflow flag are the same.
#[kernel_fn]
pub fn total_unneeded(w: Tile<u64>, pre: Tile<bool>, last_in: bool, k: i32, n: u32, kfirst: bool, top_p: f32) -> bool {
    let k_inside = (k > 0 && (k as u32) <= n) || !last_in;
    let last_pre = last_in && (k < 0 || (k as u32) >= n);
    let (keep, _) = keep_mask(w, pre, reduce_sum(w), top_p);
    (kfirst && k_inside) || (!last_pre && all(keep | !pre))
}

/// [`row_mass`] for the prefix path, skipping the row's read when
/// [`total_unneeded`] says no output can depend on the total (perf-design
/// 3.4 E; the benchmark's rows: temperature 0.7, top-p 0.9, top-k 50): then
/// program `r * chunks` writes [`MASS_UNNEEDED`] and the others 0, and
/// `process_prefix_draw` checks the claim on its own values (a backend whose
/// two kernels disagreed would flag the row for the full-row rerun, never
/// give a different result). Rows with `n` above the tile are always summed.
///
/// - As `row_mass`, plus `top_p`: `[R]` f32, `top_k`: `[R]` i32 (-1 off),
///   `log_min_p`: `[R]` f32 (`-inf` off), `order`: `[R]` u32 (as `process`).
#[kernel(variants = VOCAB)]
pub fn row_mass_bounded(
    logits: Logits,
    v: u32,
    chunk_len: u32,
    chunks: u32,
    cand: Gm<f32>,
    n: u32,
    temperature: Gm<f32>,
    top_p: Gm<f32>,
    top_k: Gm<i32>,
    log_min_p: Gm<f32>,
    order: Gm<u32>,
    mass: GmMut<u64>,
) {
    let p = row();
    let r = p / chunks;
    let cstart = (p % chunks) * chunk_len;
    let cend = min(cstart + chunk_len, v);
    let base = (r as u64) * (v as u64);
    let t = load_scalar(temperature, r as u64);
    let off = (r as u64) * (n as u64);
    let m = load_scalar(cand, off);
    // The decision on at most a tile of candidates (wider prefixes are summed).
    let nb = min(n, TILE);
    let x = scaled_logits(cand, off, nb, t);
    let k = load_scalar(top_k, r as u64);
    let lmp = load_scalar(log_min_p, r as u64);
    let xl = (load_scalar(cand, off + ((nb - 1) as u64)) - m) / t;
    let pre = prefix_mask(x, lmp, k, nb);
    let kfirst = load_scalar(order, r as u64) != 0;
    let decided = total_unneeded(to_fixed(exp(x)), pre, xl >= lmp, k, nb, kfirst, load_scalar(top_p, r as u64));
    let unneeded = n <= TILE && decided;
    let ntiles = if unneeded { 0u32 } else { (cend - cstart + TILE - 1) / TILE };
    // MASS_UNNEEDED (kernels take literals, not constants).
    let summed = chunk_mass(logits, base, cstart, cend, ntiles, m, t);
    let s = if unneeded && p % chunks == 0 { 18446744073709551615u64 } else { summed };
    store_scalar(mass, p as u64, s);
}

/// Section 4: a draw from the processed distribution with
/// `u = uniform(seed, seq)` (case 0 rows: prefill, fresh, draft).
///
/// - `logprobs`: `[R, n]`, `cand_ids`: `[R, n]`; `seed`, `seq`: `[R]` u64 (`seq = 3 * position + case`).
/// - `token`: `[R]` i32 out (vocabulary id; -1 if nothing has mass).
#[kernel(variants = CANDIDATES)]
pub fn draw(logprobs: Gm<f32>, cand_ids: Gm<i32>, n: u32, seed: Gm<u64>, seq: Gm<u64>, token: GmMut<i32>) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let tok =
        draw_token(load(logprobs, off, n), cand_ids, off, load_scalar(seed, r as u64), load_scalar(seq, r as u64));
    store_scalar(token, r as u64, tok);
}

/// `process` then `draw` in one program per row (one launch, the logprobs
/// kept in registers for the draw): bit for bit the two kernels' outputs.
///
/// - As `process` (`cand`, `n`, `temperature`, `top_p`, `top_k`, `log_min_p`,
///   `order` -> `logprobs`) and `draw` (`cand_ids`, `seed`, `seq` -> `token`).
#[kernel(variants = REGISTER)]
pub fn process_draw(
    cand: Gm<f32>,
    cand_ids: Gm<i32>,
    n: u32,
    temperature: Gm<f32>,
    top_p: Gm<f32>,
    top_k: Gm<i32>,
    log_min_p: Gm<f32>,
    order: Gm<u32>,
    seed: Gm<u64>,
    seq: Gm<u64>,
    logprobs: GmMut<f32>,
    token: GmMut<i32>,
) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let (t, tp, k, lmp, kfirst) = row_params(r, temperature, top_p, top_k, log_min_p, order);
    let sd = load_scalar(seed, r as u64);
    let sq = load_scalar(seq, r as u64);
    let lp = process_row(cand, off, n, t, tp, k, lmp, kfirst);
    store(logprobs, off, lp);
    let tok = draw_token(lp, cand_ids, off, sd, sq);
    store_scalar(token, r as u64, tok);
}

/// Section 3.5 for candidates `start..n` of the row at `off` (any order):
/// their fixed-point softmax weights `to_fixed(exp((c - m) / t))` summed
/// (exact, order-free); their `logprobs` are set to `-inf`
/// (`process_draw_head`: none of them is kept). Whole tiles, four a pass so
/// that their loads overlap, summed per lane and reduced once: the last
/// tiles end at `n` and weigh 0 on the lanes a tile before them counted.
#[kernel_fn]
pub fn rest_mass(cand: Gm<f32>, off: u64, start: u32, n: u32, m: f32, t: f32, logprobs: GmMut<f32>) -> u64 {
    let mut s = 0u64;
    if n - start >= TILE {
        let mut acc = full(TILE, 0u64);
        // Four tiles a pass: the -inf stores first (a store into the
        // buffer a store before it wrote waits at a barrier), then the
        // four loads with nothing between them, in flight together on the
        // GPU (a pass costs about one load latency), then their sums. A
        // tile past the end is the last TILE again, masked off.
        let passes = (n - start + 4 * TILE - 1) / (4 * TILE);
        for q in 0..passes {
            let lo0 = start + 4 * q * TILE;
            let lo1 = lo0 + TILE;
            let lo2 = lo1 + TILE;
            let lo3 = lo2 + TILE;
            let s0 = min(lo0, n - TILE);
            let s1 = min(lo1, n - TILE);
            let s2 = min(lo2, n - TILE);
            let s3 = min(lo3, n - TILE);
            store(logprobs, off + (s0 as u64), full(TILE, NEG_INF));
            store(logprobs, off + (s1 as u64), full(TILE, NEG_INF));
            store(logprobs, off + (s2 as u64), full(TILE, NEG_INF));
            store(logprobs, off + (s3 as u64), full(TILE, NEG_INF));
            let x0 = load(cand, off + (s0 as u64), TILE);
            let x1 = load(cand, off + (s1 as u64), TILE);
            let x2 = load(cand, off + (s2 as u64), TILE);
            let x3 = load(cand, off + (s3 as u64), TILE);
            acc = acc + to_fixed(exp((select(iota(TILE) >= lo0 - s0, x0, NEG_INF) - m) / t));
            acc = acc + to_fixed(exp((select(iota(TILE) >= lo1 - s1, x1, NEG_INF) - m) / t));
            acc = acc + to_fixed(exp((select(iota(TILE) >= lo2 - s2, x2, NEG_INF) - m) / t));
            acc = acc + to_fixed(exp((select(iota(TILE) >= lo3 - s3, x3, NEG_INF) - m) / t));
        }
        s = reduce_sum(acc);
    } else if n > start {
        let o = off + (start as u64);
        s = reduce_sum(to_fixed(exp((load(cand, o, n - start) - m) / t)));
        store(logprobs, o, full(n - start, NEG_INF));
    }
    s
}

/// Sections 3.5-3.9 for a kept head of `head` candidates with scaled
/// logits `x` (`[head]` f32) and the rest's mass `rest`: the head's weights
/// and the total, the filters and the renormalised logprobs (`[head]` f32).
#[kernel_fn]
pub fn kept_logprobs(x: Tile<f32>, rest: u64, tp: f32, k: i32, lmp: f32, kfirst: bool, head: u32) -> Tile<f32> {
    let w = to_fixed(exp(x));
    let total = rest + reduce_sum(w);
    let pre = prefix_mask(x, lmp, k, head);
    let base = filtered_mass(w, pre, kfirst, total);
    let (keep, _) = keep_mask(w, pre, base, tp);
    renormalise(x, w, keep)
}

/// Sections 3.4-3.9 and 4 for one row of a step whose rows keep at most
/// their first `head` of `n` candidates at `cand[off..]` (parameters as
/// `process_row`; `seed`, `seq` of the draw): the head is processed and may
/// be drawn, the rest counts in the softmax total only and gets `-inf`
/// logprobs; every logprob goes to `logprobs`. Returns the head's logprobs
/// (`[head]` f32) and the drawn id (-1: nothing has mass).
#[kernel_fn]
pub fn draw_head_row(
    cand: Gm<f32>,
    cand_ids: Gm<i32>,
    off: u64,
    n: u32,
    head: u32,
    t: f32,
    tp: f32,
    k: i32,
    lmp: f32,
    kfirst: bool,
    seed: u64,
    seq: u64,
    logprobs: GmMut<f32>,
) -> (Tile<f32>, i32) {
    let m = load_scalar(cand, off);
    // 3.5: the total over all n candidates: the rest's weights, then the
    // head's (loaded after the rest: AscendC's UB holds the rest's four
    // tiles of a pass without the head's).
    let rest = rest_mass(cand, off, head, n, m, t, logprobs);
    let x = scaled_logits(cand, off, head, t);
    let lp = kept_logprobs(x, rest, tp, k, lmp, kfirst, head);
    store(logprobs, off, lp);
    let tok = draw_token(lp, cand_ids, off, seed, seq);
    (lp, tok)
}

/// [`draw_head_row`]'s head for `topn_cluster_draw_finish`'s warp scope,
/// given the head's logits `vals` and ids `ids` (`[head]`, in order), the
/// row's largest logit `m` and the rest's mass `rest` (`rest_mass`): the
/// renormalised logprobs (`kept_logprobs`, written to `logprobs` at `off`)
/// and the draw, `draw_token`'s bits with
/// the drawn id taken from `ids`. Returns the head's logprobs (`[head]`
/// f32) and the drawn id (-1: nothing has mass). It reads no global memory,
/// its tiles are `head` long: a warp scope of `head` may hold it.
#[kernel_fn]
pub fn draw_kept_head(
    vals: Tile<f32>,
    ids: Tile<i32>,
    m: f32,
    off: u64,
    rest: u64,
    t: f32,
    tp: f32,
    k: i32,
    lmp: f32,
    kfirst: bool,
    seed: u64,
    seq: u64,
    logprobs: GmMut<f32>,
) -> (Tile<f32>, i32) {
    // scaled_logits' bits: (logit - m) / t.
    let x = (vals - m) / t;
    let lp = kept_logprobs(x, rest, tp, k, lmp, kfirst, len(vals));
    store(logprobs, off, lp);
    let c = categorical(to_fixed(exp(lp)), uniform53(seed, seq));
    let tok = if c >= 0 { get(ids, c as u32) } else { -1i32 };
    (lp, tok)
}

/// `process_draw` for a step whose every row keeps at most its first `head`
/// candidates (top-k on and at most `head`, the host's `sorted_prefix`):
/// only those are processed and may be drawn, the rest of the row's `n`
/// count in the softmax total only (an order-free integer sum, so they may
/// come in any order) and get `-inf` logprobs. Bit for bit `process_draw`'s
/// outputs on such rows; the host never launches it for others (a row with
/// top-k off or above `head` would lose the candidates past the head).
///
/// - As `process_draw`, plus `head`: `1..=min(n, TILE)` leading columns,
///   in the order of section 3.6 (the rest of each row in any order).
#[kernel(variants = REGISTER)]
pub fn process_draw_head(
    cand: Gm<f32>,
    cand_ids: Gm<i32>,
    n: u32,
    head: u32,
    temperature: Gm<f32>,
    top_p: Gm<f32>,
    top_k: Gm<i32>,
    log_min_p: Gm<f32>,
    order: Gm<u32>,
    seed: Gm<u64>,
    seq: Gm<u64>,
    logprobs: GmMut<f32>,
    token: GmMut<i32>,
) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let (t, tp, k, lmp, kfirst) = row_params(r, temperature, top_p, top_k, log_min_p, order);
    let sd = load_scalar(seed, r as u64);
    let sq = load_scalar(seq, r as u64);
    let (_, tok) = draw_head_row(cand, cand_ids, off, n, head, t, tp, k, lmp, kfirst, sd, sq, logprobs);
    store_scalar(token, r as u64, tok);
}

/// Stage 2 of the prefix path for row `r` (the body of
/// `process_prefix_draw`; parameters as `process_row`, `seed` and `seq` of
/// the draw): writes its logprobs and overflow flag and returns the
/// logprobs (`[n]` f32) and the drawn id (-1: nothing has mass).
#[kernel_fn]
pub fn prefix_draw_row(
    cand: Gm<f32>,
    cand_ids: Gm<i32>,
    off: u64,
    n: u32,
    v: u32,
    mass: Gm<u64>,
    chunks: u32,
    r: u32,
    t: f32,
    tp: f32,
    k: i32,
    lmp: f32,
    kfirst: bool,
    seed: u64,
    seq: u64,
    logprobs: GmMut<f32>,
    overflow: GmMut<u32>,
) -> (Tile<f32>, i32) {
    let m = load_scalar(cand, off);
    // row_mass_bounded left the total out: any total >= the candidates' own
    // sum gives the same outputs, if the claim holds on these values too.
    let skipped = load_scalar(mass, (r * chunks) as u64) == 18446744073709551615u64; // MASS_UNNEEDED
    let x = scaled_logits(cand, off, n, t);
    let w = to_fixed(exp(x));
    let pre = prefix_mask(x, lmp, k, n);
    // Whether min-p keeps the last column (then it may keep past the prefix).
    let xl = (load_scalar(cand, off + ((n - 1) as u64)) - m) / t;
    let last_in = xl >= lmp;
    let k_inside = (k > 0 && (k as u32) <= n) || !last_in;
    let mut total = 0u64;
    if skipped {
        total = reduce_sum(w);
    } else {
        // The chunks' masses as tiles (one load each, not a chain of scalar loads).
        for c in 0..(chunks + TILE - 1) / TILE {
            let lo = c * TILE;
            total += reduce_sum(load(mass, (r * chunks + lo) as u64, min(TILE, chunks - lo)));
        }
    }
    let decided = total_unneeded(w, pre, last_in, k, n, kfirst, tp);
    let unsure = skipped && !decided;
    // 10.2: the min-p and top-k mass; past the prefix it is the row's total
    // when both are off, else unknown here (the row overflows).
    let base = filtered_mass(w, pre, kfirst && k_inside, total);
    let base_unknown = kfirst && !k_inside && (k > 0 || lmp > NEG_INF);
    let (keep, thr) = keep_mask(w, pre, base, tp);
    let lp = renormalise(x, w, keep);
    store(logprobs, off, lp);
    let next_kept =
        unsure || (n < v && (base_unknown || (last_in && reduce_sum(w) <= thr && (k < 0 || (k as u32) > n))));
    store_scalar(overflow, r as u64, if next_kept { 1u32 } else { 0u32 });
    let tok = draw_token(lp, cand_ids, off, seed, seq);
    (lp, tok)
}

/// Sections 3.4-3.9 and 4 without force top-k, on the row's first `n`
/// candidates only (stage 2 of the prefix path): `process` with the
/// softmax total taken from `row_mass` (all V tokens) instead of the `n`
/// columns, then `draw`. When the kept set of sections 3.7-3.8 lies within
/// the `n` columns, every logprob and the token equal `process` + `draw`
/// over all V columns bit for bit; `overflow[r] = 1` says it may not (the
/// token after the prefix would be kept), and the host then runs the step
/// on the full-row path. With `order` 1 (section 10.2) the top-p mass is
/// that of the min-p and top-k prefix, known here when that prefix ends
/// within the `n` columns or is the whole row (min-p off, top-k off);
/// otherwise `overflow` is set.
///
/// - `cand`: `[R, n]` f32 candidate logits in order, `cand_ids`: `[R, n]` i32; `v`: the vocabulary size.
/// - `mass`: `[R * chunks]` u64 from `row_mass`.
/// - `temperature`, `top_p`, `log_min_p` (as `process`): `[R]` f32; `top_k`: `[R]` i32 (-1 off);
///   `order`: `[R]` u32 (as `process`); `seed`, `seq`: `[R]` u64.
/// - `logprobs`: `[R, n]` f32 out (`-inf` removed); `overflow`: `[R]` u32 out; `token`: `[R]` i32 out.
#[kernel(variants = REGISTER)]
pub fn process_prefix_draw(
    cand: Gm<f32>,
    cand_ids: Gm<i32>,
    n: u32,
    v: u32,
    mass: Gm<u64>,
    chunks: u32,
    temperature: Gm<f32>,
    top_p: Gm<f32>,
    top_k: Gm<i32>,
    log_min_p: Gm<f32>,
    order: Gm<u32>,
    seed: Gm<u64>,
    seq: Gm<u64>,
    logprobs: GmMut<f32>,
    overflow: GmMut<u32>,
    token: GmMut<i32>,
) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let (t, tp, k, lmp, kfirst) = row_params(r, temperature, top_p, top_k, log_min_p, order);
    let sd = load_scalar(seed, r as u64);
    let sq = load_scalar(seq, r as u64);
    let (_, tok) =
        prefix_draw_row(cand, cand_ids, off, n, v, mass, chunks, r, t, tp, k, lmp, kfirst, sd, sq, logprobs, overflow);
    store_scalar(token, r as u64, tok);
}
