//! Sections 5, 8 and 10.3: the processed logprob of each row's token and
//! its `sum_smaller_probs`, the top logprobs (`token_info*`, `top_logprobs`)
//! and the raw logprobs (`raw_logprobs`); on steps of one-row groups with
//! section 7 too (`finalize_info_top`), and with the draw before it
//! (`process_draw_finish`, `prefix_draw_finish`).

// The draw helpers and those they call (a helper's body is expanded here).
use super::mask::row_status_of;
use super::sample::{
    draw_head_row, draw_kept_head, draw_token, filtered_mass, keep_mask, kept_logprobs, prefix_draw_row, prefix_mask,
    renormalise, rest_mass, row_params, scaled_logits, total_unneeded,
};
use sampler_macros::{kernel, kernel_fn};

/// Sections 5 and 8 for one row: the processed logprob of token `s` (-1:
/// none) among candidates with ids `ids`, logprobs `lps` and logits `vals`
/// (`[n]` each, in order) and its `sum_smaller_probs`, written to
/// `token_lp[r]` and `sum_smaller[r]`.
#[kernel_fn]
fn token_info_tiles(
    ids: Tile<i32>,
    lps: Tile<f32>,
    vals: Tile<f32>,
    s: i32,
    r: u32,
    token_lp: GmMut<f32>,
    sum_smaller: GmMut<f32>,
) {
    let col = if s >= 0 { first_where(ids == s) } else { -1i32 };
    let lp = if col >= 0 { get(lps, col as u32) } else { NEG_INF };
    let vs = if col >= 0 { get(vals, col as u32) } else { NEG_INF };
    // Less likely tokens, plus ties on the logit at or before s's id.
    let smaller = (vals < vs) | ((vals == vs) & (ids <= s));
    let mass = reduce_sum(select(smaller, to_fixed(exp(lps)), 0u64));
    let ssp = if lp > NEG_INF { fixed_to_f32(mass) } else { 0.0f32 };
    store_scalar(token_lp, r as u64, lp);
    store_scalar(sum_smaller, r as u64, ssp);
}

/// `token_info_tiles` on the `n` candidates at `off`, loaded from `cand`,
/// `cand_ids` and `logprobs`. Returns the ids and logprobs (`[n]`), for the
/// top logprobs.
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
    let lps = load(logprobs, off, n);
    let vals = load(cand, off, n);
    token_info_tiles(ids, lps, vals, s, r, token_lp, sum_smaller);
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

/// Row `r`'s group inputs for `finalize_row`, loaded at once: kind, host
/// status, row status and golden token.
#[kernel_fn]
fn group_params(
    r: u32,
    group_kind: Gm<u32>,
    group_status: Gm<i32>,
    row_status: Gm<i32>,
    golden: Gm<i32>,
) -> (u32, i32, i32, i32) {
    let i = r as u64;
    (load_scalar(group_kind, i), load_scalar(group_status, i), load_scalar(row_status, i), load_scalar(golden, i))
}

/// Row `r`'s inputs of a tail that draws and finalizes, loaded at once (one
/// round trip): the filter parameters (`row_params`), the draw's seed and
/// sequence number and the group inputs (`group_params`).
#[kernel_fn]
#[allow(clippy::too_many_arguments)]
fn draw_finish_inputs(
    r: u32,
    temperature: Gm<f32>,
    top_p: Gm<f32>,
    top_k: Gm<i32>,
    log_min_p: Gm<f32>,
    order: Gm<u32>,
    seed: Gm<u64>,
    seq: Gm<u64>,
    group_kind: Gm<u32>,
    group_status: Gm<i32>,
    row_status: Gm<i32>,
    golden: Gm<i32>,
) -> (f32, f32, i32, f32, bool, u64, u64, u32, i32, i32, i32) {
    let (t, tp, tk, lmp, kfirst) = row_params(r, temperature, top_p, top_k, log_min_p, order);
    let sd = load_scalar(seed, r as u64);
    let sq = load_scalar(seq, r as u64);
    let (kind, gs, rs, gold) = group_params(r, group_kind, group_status, row_status, golden);
    (t, tp, tk, lmp, kfirst, sd, sq, kind, gs, rs, gold)
}

/// Section 7 for row `r`, a group of its own of kind 0 (fresh) or 2 (no
/// draw) with host status `gs`, row status `rs`, golden token `gold` and
/// fresh draw `fr`: writes `tokens`, `lookup`, `accepted` and `status` as
/// `finalize` does, and returns the token to look up.
#[kernel_fn]
fn finalize_row(
    kind: u32,
    gs: i32,
    rs: i32,
    gold: i32,
    fr: i32,
    r: u32,
    tokens: GmMut<i32>,
    lookup: GmMut<i32>,
    accepted: GmMut<u32>,
    status: GmMut<i32>,
) -> i32 {
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
    s
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
    let (kind, gs, rs, gold) = group_params(r, group_kind, group_status, row_status, golden);
    let fr = load_scalar(fresh, r as u64);
    let s = finalize_row(kind, gs, rs, gold, fr, r, tokens, lookup, accepted, status);
    let off = (r as u64) * (n as u64);
    let (ids, lps) = token_info_row(cand, cand_ids, logprobs, off, len, s, r, token_lp, sum_smaller);
    top_row(ids, lps, r, k, out_ids, out_lps);
}

/// The body of `process_draw_finish` for row `r` (and of
/// `topn_cluster_draw_finish` after its selection): every per-row input
/// first (one round trip for all of them), the draw over the kept head,
/// section 7, the token info and the top logprobs.
#[kernel_fn]
#[allow(clippy::too_many_arguments)]
fn draw_finish_row(
    r: u32,
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
    fresh: GmMut<i32>,
    group_kind: Gm<u32>,
    group_status: Gm<i32>,
    row_status: Gm<i32>,
    golden: Gm<i32>,
    tokens: GmMut<i32>,
    lookup: GmMut<i32>,
    accepted: GmMut<u32>,
    status: GmMut<i32>,
    k: u32,
    token_lp: GmMut<f32>,
    sum_smaller: GmMut<f32>,
    out_ids: GmMut<i32>,
    out_lps: GmMut<f32>,
) {
    let off = (r as u64) * (n as u64);
    let (t, tp, tk, lmp, kfirst, sd, sq, kind, gs, rs, gold) = draw_finish_inputs(
        r,
        temperature,
        top_p,
        top_k,
        log_min_p,
        order,
        seed,
        seq,
        group_kind,
        group_status,
        row_status,
        golden,
    );
    let (lps, fr) = draw_head_row(cand, cand_ids, off, n, head, t, tp, tk, lmp, kfirst, sd, sq, logprobs);
    store_scalar(fresh, r as u64, fr);
    let s = finalize_row(kind, gs, rs, gold, fr, r, tokens, lookup, accepted, status);
    let ids = load(cand_ids, off, head);
    token_info_tiles(ids, lps, load(cand, off, head), s, r, token_lp, sum_smaller);
    top_row(ids, lps, r, k, out_ids, out_lps);
}

/// [`draw_finish_row`] with the kept head in a warp scope, for
/// `topn_cluster_draw_finish`: the rest's mass on the whole block, then
/// the head (`head` <= 64) on one warp in its lanes, shuffles instead of
/// the leader's 1024-thread block collectives (run 55: R = 1, N = 1024
/// 30.4 -> 27.6 us; in `process_draw_finish`'s 256 threads the warp was
/// slower, 8.3 -> 10.1 us, so it keeps `draw_finish_row`). The same bits.
#[kernel_fn]
#[allow(clippy::too_many_arguments)]
fn draw_finish_row_warp(
    r: u32,
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
    fresh: GmMut<i32>,
    group_kind: Gm<u32>,
    group_status: Gm<i32>,
    row_status: Gm<i32>,
    golden: Gm<i32>,
    tokens: GmMut<i32>,
    lookup: GmMut<i32>,
    accepted: GmMut<u32>,
    status: GmMut<i32>,
    k: u32,
    token_lp: GmMut<f32>,
    sum_smaller: GmMut<f32>,
    out_ids: GmMut<i32>,
    out_lps: GmMut<f32>,
) {
    let off = (r as u64) * (n as u64);
    let (t, tp, tk, lmp, kfirst, sd, sq, kind, gs, rs, gold) = draw_finish_inputs(
        r,
        temperature,
        top_p,
        top_k,
        log_min_p,
        order,
        seed,
        seq,
        group_kind,
        group_status,
        row_status,
        golden,
    );
    let m = load_scalar(cand, off);
    let rest = rest_mass(cand, off, head, n, m, t, logprobs);
    // The head's two loads first, together: nothing after them reads global memory.
    if warp_scope(head) {
        let vals = load(cand, off, head);
        let ids = load(cand_ids, off, head);
        let (lps, fr) = draw_kept_head(vals, ids, m, off, rest, t, tp, tk, lmp, kfirst, sd, sq, logprobs);
        store_scalar(fresh, r as u64, fr);
        let s = finalize_row(kind, gs, rs, gold, fr, r, tokens, lookup, accepted, status);
        token_info_tiles(ids, lps, vals, s, r, token_lp, sum_smaller);
        top_row(ids, lps, r, k, out_ids, out_lps);
    }
}

/// `process_draw_head` then `finalize_info_top` in one program per row, on
/// a step whose every group is one fresh or no-draw row (the host's
/// `single_row_groups`): the drawn token and the head's logprobs stay in
/// registers for section 7 and the token info, one node instead of two.
/// With `head == n` it is `process_draw` then `finalize_info_top`. Bit for
/// bit the two kernels' outputs.
///
/// - As `process_draw_head` (`cand`, `cand_ids`, `n`, `head`, `temperature`,
///   `top_p`, `top_k`, `log_min_p`, `order`, `seed`, `seq` -> `logprobs`,
///   `fresh`: `[R]` i32, the drawn id) and `finalize_info_top` (`group_kind`
///   .. `status`, `k` -> `token_lp`, `sum_smaller`, `out_ids`, `out_lps`),
///   the token info over the `head` leading columns.
#[kernel(variants = REGISTER)]
pub fn process_draw_finish(
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
    fresh: GmMut<i32>,
    group_kind: Gm<u32>,
    group_status: Gm<i32>,
    row_status: Gm<i32>,
    golden: Gm<i32>,
    tokens: GmMut<i32>,
    lookup: GmMut<i32>,
    accepted: GmMut<u32>,
    status: GmMut<i32>,
    k: u32,
    token_lp: GmMut<f32>,
    sum_smaller: GmMut<f32>,
    out_ids: GmMut<i32>,
    out_lps: GmMut<f32>,
) {
    let r = row();
    draw_finish_row(
        r,
        cand,
        cand_ids,
        n,
        head,
        temperature,
        top_p,
        top_k,
        log_min_p,
        order,
        seed,
        seq,
        logprobs,
        fresh,
        group_kind,
        group_status,
        row_status,
        golden,
        tokens,
        lookup,
        accepted,
        status,
        k,
        token_lp,
        sum_smaller,
        out_ids,
        out_lps,
    );
}

/// `topn_cluster` then `process_draw_finish` in one kernel (issue 22: the
/// whole step one node at small R): the CTAs of a row's thread-block
/// cluster select its top `n` together (`top_n_cluster`, the first `head`
/// in order), and the cluster's leader writes them and goes on with the
/// draw, section 7 and the token info of `process_draw_finish` over that
/// head. For a step whose every group is one fresh or no-draw row, with no
/// grammar mask and no raw-logprobs row, and only the kept head ordered (the
/// host's `sorted_prefix`). Bit for bit the two kernels' outputs.
///
/// - `logits`: `[R, v]` (f32, bf16 or f16, read as f32); `cand`, `cand_ids`:
///   `[R, n]` out (as `topn_cluster`, the first `head` in order); `row_status`:
///   `[R]` i32 out (section 3.2); `ctas`: `[R]` u32 out (as `topn_cluster`'s).
/// - The rest as `process_draw_finish`.
#[kernel(variants = CLUSTER_TAIL, cluster = 16)]
pub fn topn_cluster_draw_finish(
    logits: Logits,
    v: u32,
    n: u32,
    head: u32,
    cand: GmMut<f32>,
    cand_ids: GmMut<i32>,
    row_status: GmMut<i32>,
    ctas: GmMut<u32>,
    temperature: Gm<f32>,
    top_p: Gm<f32>,
    top_k: Gm<i32>,
    log_min_p: Gm<f32>,
    order: Gm<u32>,
    seed: Gm<u64>,
    seq: Gm<u64>,
    logprobs: GmMut<f32>,
    fresh: GmMut<i32>,
    group_kind: Gm<u32>,
    group_status: Gm<i32>,
    golden: Gm<i32>,
    tokens: GmMut<i32>,
    lookup: GmMut<i32>,
    accepted: GmMut<u32>,
    status: GmMut<i32>,
    k: u32,
    token_lp: GmMut<f32>,
    sum_smaller: GmMut<f32>,
    out_ids: GmMut<i32>,
    out_lps: GmMut<f32>,
) {
    let r = row();
    let (x, id, nbad, nfin, nctas) = top_n_cluster(logits, (r as u64) * (v as u64), v, n, head);
    let off = (r as u64) * (n as u64);
    store(cand, off, x);
    store(cand_ids, off, id);
    let rst = row_status_of(nbad, nfin);
    store_scalar(row_status, r as u64, rst);
    store_scalar(ctas, r as u64, nctas);
    // process_draw_finish's body, on the candidates just written (the
    // leader's own writes), the kept head on one warp.
    draw_finish_row_warp(
        r,
        cand,
        cand_ids,
        n,
        head,
        temperature,
        top_p,
        top_k,
        log_min_p,
        order,
        seed,
        seq,
        logprobs,
        fresh,
        group_kind,
        group_status,
        row_status,
        golden,
        tokens,
        lookup,
        accepted,
        status,
        k,
        token_lp,
        sum_smaller,
        out_ids,
        out_lps,
    );
}

/// `process_prefix_draw` then `finalize_info_top` (over all `n` columns) in
/// one program per row, on a step of one-row fresh or no-draw groups: bit
/// for bit the two kernels' outputs. A row that overflows is run again on
/// the full-row path, whose outputs replace these.
///
/// - As `process_prefix_draw` (`cand` .. `seq` -> `logprobs`, `overflow`,
///   `fresh`: `[R]` i32, the drawn id) and `finalize_info_top` (`group_kind`
///   .. `status`, `k` -> `token_lp`, `sum_smaller`, `out_ids`, `out_lps`).
#[kernel(variants = REGISTER)]
pub fn prefix_draw_finish(
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
    fresh: GmMut<i32>,
    group_kind: Gm<u32>,
    group_status: Gm<i32>,
    row_status: Gm<i32>,
    golden: Gm<i32>,
    tokens: GmMut<i32>,
    lookup: GmMut<i32>,
    accepted: GmMut<u32>,
    status: GmMut<i32>,
    k: u32,
    token_lp: GmMut<f32>,
    sum_smaller: GmMut<f32>,
    out_ids: GmMut<i32>,
    out_lps: GmMut<f32>,
) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let (t, tp, tk, lmp, kfirst, sd, sq, kind, gs, rs, gold) = draw_finish_inputs(
        r,
        temperature,
        top_p,
        top_k,
        log_min_p,
        order,
        seed,
        seq,
        group_kind,
        group_status,
        row_status,
        golden,
    );
    let (lps, fr) =
        prefix_draw_row(cand, cand_ids, off, n, v, mass, chunks, r, t, tp, tk, lmp, kfirst, sd, sq, logprobs, overflow);
    store_scalar(fresh, r as u64, fr);
    let s = finalize_row(kind, gs, rs, gold, fr, r, tokens, lookup, accepted, status);
    let ids = load(cand_ids, off, n);
    token_info_tiles(ids, lps, load(cand, off, n), s, r, token_lp, sum_smaller);
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
