//! Sections 5, 8 and 10.3: the processed logprob of each row's token and
//! its `sum_smaller_probs`, the top logprobs (`token_info*`, `top_logprobs`)
//! and the raw logprobs (`raw_logprobs`).

use sampler_macros::{kernel, kernel_fn};

/// Sections 5 and 8 for one row: the processed logprob of token `s` (-1:
/// none) among the `n` candidates at `off` and its `sum_smaller_probs`,
/// written to `token_lp[r]` and `sum_smaller[r]`. Returns the candidate
/// ids and logprobs (`[n]`), for the top logprobs.
#[kernel_fn]
fn token_info_row(
    cand: Gm<f32>,
    cand_ids: Gm<i32>,
    logprobs: Gm<f32>,
    off: u64,
    n: u32,
    s: i32,
    r: u32,
    token_lp: GmMut<f32>,
    sum_smaller: GmMut<f32>,
) -> (Tile<i32>, Tile<f32>) {
    let ids = load(cand_ids, off, n);
    let col = if s >= 0 { first_where(ids == s) } else { -1i32 };
    let lps = load(logprobs, off, n);
    let lp = if col >= 0 { get(lps, col as u32) } else { NEG_INF };
    let vals = load(cand, off, n);
    let vs = if col >= 0 { get(vals, col as u32) } else { NEG_INF };
    // Less likely tokens, plus ties on the logit at or before s's id.
    let smaller = (vals < vs) | ((vals == vs) & (ids <= s));
    let mass = reduce_sum(select(smaller, to_fixed(exp(lps)), 0u64));
    let ssp = if lp > NEG_INF { fixed_to_f32(mass) } else { 0.0f32 };
    store_scalar(token_lp, r as u64, lp);
    store_scalar(sum_smaller, r as u64, ssp);
    (ids, lps)
}

/// Section 5: the first `k` of the candidate ids and logprobs, at row `r`
/// of `out_ids` / `out_lps` (`[R, k]`).
#[kernel_fn]
fn top_row(ids: Tile<i32>, lps: Tile<f32>, r: u32, k: u32, out_ids: GmMut<i32>, out_lps: GmMut<f32>) {
    let ooff = (r as u64) * (k as u64);
    store_head(out_ids, ooff, ids, k);
    store_head(out_lps, ooff, lps, k);
}

/// Sections 5 and 8: the processed logprob of each row's token (output
/// token, golden token or prompt target) and its `sum_smaller_probs`.
///
/// - `cand`, `cand_ids`, `logprobs`: `[R, n]`; `tokens`: `[R]` i32 (-1 none).
/// - `token_lp`: `[R]` f32 out (-inf when removed or absent); `sum_smaller`: `[R]` f32 out.
#[kernel(variants = CANDIDATES)]
pub fn token_info(
    cand: Gm<f32>,
    cand_ids: Gm<i32>,
    logprobs: Gm<f32>,
    n: u32,
    tokens: Gm<i32>,
    token_lp: GmMut<f32>,
    sum_smaller: GmMut<f32>,
) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let s = load_scalar(tokens, r as u64);
    let (_, _) = token_info_row(cand, cand_ids, logprobs, off, n, s, r, token_lp, sum_smaller);
}

/// Section 5: the first `k` candidates in order, as (id, processed logprob).
///
/// - `cand_ids`, `logprobs`: `[R, n]`; `out_ids`: `[R, k]` i32 out; `out_lps`: `[R, k]` f32 out.
#[kernel(variants = CANDIDATES)]
pub fn top_logprobs(cand_ids: Gm<i32>, logprobs: Gm<f32>, n: u32, k: u32, out_ids: GmMut<i32>, out_lps: GmMut<f32>) {
    let r = row();
    let off = (r as u64) * (n as u64);
    top_row(load(cand_ids, off, n), load(logprobs, off, n), r, k, out_ids, out_lps);
}

/// `token_info` then `top_logprobs` in one program per row: bit for bit the
/// two kernels' outputs (`k == 0`: no top logprobs are written), looking at
/// the first `len` of the row's `n` candidates only: all of them (`len ==
/// n`), or a head holding every kept candidate and the top `k` (the host's
/// `sorted_prefix`; past it every logprob is `-inf`, so a token found there
/// reports `-inf` and 0 either way).
///
/// - As `token_info` (`cand`, `cand_ids`, `logprobs`, `n`, `tokens` ->
///   `token_lp`, `sum_smaller`) and `top_logprobs` (`k` -> `out_ids`, `out_lps`);
///   `len`: `k..=n` leading columns read, at most `TILE`.
#[kernel(variants = REGISTER)]
pub fn token_info_top(
    cand: Gm<f32>,
    cand_ids: Gm<i32>,
    logprobs: Gm<f32>,
    n: u32,
    len: u32,
    tokens: Gm<i32>,
    k: u32,
    token_lp: GmMut<f32>,
    sum_smaller: GmMut<f32>,
    out_ids: GmMut<i32>,
    out_lps: GmMut<f32>,
) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let s = load_scalar(tokens, r as u64);
    let (ids, lps) = token_info_row(cand, cand_ids, logprobs, off, len, s, r, token_lp, sum_smaller);
    top_row(ids, lps, r, k, out_ids, out_lps);
}

/// Section 7 for a step whose every group is one row of kind 0 (fresh) or
/// 2 (no draw), `group_first[g] == g`, then `token_info_top` on the token it
/// decides: one program per row instead of `finalize`'s one thread per
/// group in a node of its own. Bit for bit `finalize` then `token_info_top`
/// on such steps; the host never launches it for others.
///
/// - `group_kind`, `group_status`: `[G = R]` (as `finalize`); `row_status`,
///   `golden`, `fresh`: `[R]` i32.
/// - `tokens`, `lookup`: `[R]` i32 out, `accepted`: `[R]` u32 out (0),
///   `status`: `[R]` i32 out (as `finalize`).
/// - The rest as `token_info_top`, the token being `lookup`.
#[kernel(variants = REGISTER)]
pub fn finalize_info_top(
    group_kind: Gm<u32>,
    group_status: Gm<i32>,
    row_status: Gm<i32>,
    golden: Gm<i32>,
    fresh: Gm<i32>,
    tokens: GmMut<i32>,
    lookup: GmMut<i32>,
    accepted: GmMut<u32>,
    status: GmMut<i32>,
    cand: Gm<f32>,
    cand_ids: Gm<i32>,
    logprobs: Gm<f32>,
    n: u32,
    len: u32,
    k: u32,
    token_lp: GmMut<f32>,
    sum_smaller: GmMut<f32>,
    out_ids: GmMut<i32>,
    out_lps: GmMut<f32>,
) {
    let r = row();
    let kind = load_scalar(group_kind, r as u64);
    let gs = load_scalar(group_status, r as u64);
    let rs = load_scalar(row_status, r as u64);
    let gold = load_scalar(golden, r as u64);
    let fr = load_scalar(fresh, r as u64);
    let st = if gs != 0 { gs } else { rs };
    // GROUP_NO_DRAW (2) draws nothing; its lookup is the prompt target.
    let tok = if st != 0 || kind >= 2 {
        -1i32
    } else if gold >= 0 {
        gold
    } else {
        fr
    };
    let s = if st == 0 && kind == 2 { gold } else { tok };
    store_scalar(tokens, r as u64, tok);
    store_scalar(lookup, r as u64, s);
    store_scalar(accepted, r as u64, 0u32);
    store_scalar(status, r as u64, st);
    let off = (r as u64) * (n as u64);
    let (ids, lps) = token_info_row(cand, cand_ids, logprobs, off, len, s, r, token_lp, sum_smaller);
    top_row(ids, lps, r, k, out_ids, out_lps);
}

/// Section 10.3: the raw logprobs of the rows that ask for them, over the
/// outputs of `token_info` / `top_logprobs`: `(logit - M) - ln(sum over all V
/// of exp(logit_j - M))` of the masked logits at temperature 1, for the
/// row's token (`lookup`, any id, inside the top N or not) and its top-`k`
/// ids. The normaliser merges `mask_check`'s per-tile partial sums: each
/// tile's fixed-point sum is scaled by `exp(mt - M)` in f32 and summed
/// exactly as fixed point, so it is batch-invariant and the same on every
/// backend (the tiles depend on V only). Rows with `raw[r] == 0` are untouched.
///
/// - `logits`: `[R, v]` (masked; f32, bf16 or f16, read as f32); `raw`: `[R]` u32; `raw_max`, `raw_sum`:
///   `[R, tiles]` from `mask_check` (`tiles = ceil(v / 4096)`).
/// - `lookup`: `[R]` i32 (-1 none); `top_ids`: `[R, k]` i32.
/// - `token_lp`: `[R]` f32 out; `top_lps`: `[R, k]` f32 out (raw rows only).
#[kernel(variants = CANDIDATES)]
pub fn raw_logprobs(
    logits: Logits,
    v: u32,
    raw: Gm<u32>,
    raw_max: Gm<f32>,
    raw_sum: Gm<u64>,
    tiles: u32,
    lookup: Gm<i32>,
    k: u32,
    top_ids: Gm<i32>,
    token_lp: GmMut<f32>,
    top_lps: GmMut<f32>,
) {
    let r = row();
    if load_scalar(raw, r as u64) != 0 {
        let mut m = NEG_INF;
        for t in 0..tiles {
            m = max(m, load_scalar(raw_max, (r * tiles + t) as u64));
        }
        let mut s = 0u64;
        for t in 0..tiles {
            let i = (r * tiles + t) as u64;
            s += to_fixed(fixed_to_f32(load_scalar(raw_sum, i)) * exp(load_scalar(raw_max, i) - m));
        }
        let lse = ln_fixed(s);
        let base = (r as u64) * (v as u64);
        let tok = load_scalar(lookup, r as u64);
        let lp =
            if tok >= 0 && tok < (v as i32) { (load_scalar(logits, base + (tok as u64)) - m) - lse } else { NEG_INF };
        store_scalar(token_lp, r as u64, lp);
        if k > 0 {
            let ooff = (r as u64) * (k as u64);
            let vals = gather(logits, base, load(top_ids, ooff, k), NEG_INF);
            store(top_lps, ooff, (vals - m) - lse);
        }
    }
}
