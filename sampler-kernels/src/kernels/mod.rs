//! The sampler kernels (SAMPLER.md sections 3-8), each one program per row
//! (or per request group for `finalize`).
//!
//! Shapes: R rows, V vocabulary, N candidate columns (force top-k width, or
//! V when off), G request groups. Candidates are always kept in the order of
//! section 3.6 (logit descending, ties by lower id), so kept sets are
//! prefixes and the top logprobs are the first columns.
//!
//! Tile variants: register tiles up to 16384 elements on NVIDIA, larger
//! ones (force top-k off) in global scratch. Results never depend on the
//! variant: sums are exact fixed-point integer sums (`rt::math`).

use sampler_macros::{kernel, kernel_fn};

// Every `#[kernel]` registers itself (`crate::registry`): there is no hand-kept list.

/// Section 3.1-3.2: applies the grammar bit mask of each row and checks
/// for bad values.
///
/// - `logits`: `[R, v]` logits (f32, bf16 or f16, read as f32; never written).
/// - `masks`: `[R, ceil(v/32)]` u32 words (bit `t % 32` of word `t / 32` = token t allowed).
/// - `has_mask`: `[R]` u32, nonzero when row r has a mask.
/// - `copy`: nonzero: every row's logits, masked where `has_mask[r] != 0`,
///   are written to `masked` (the host sets it when any row has a mask, and
///   later kernels read `masked`); zero: nothing is written there.
/// - `masked`: `[R, v]` f32 out (when `copy`): the widened, masked logits.
/// - `raw`: `[R]` u32, nonzero when row r reports raw logprobs (section 10.3).
/// - `raw_max`: `[R, T]` f32 out, `raw_sum`: `[R, T]` u64 out (T = ceil(v / 4096),
///   written for raw rows only): per tile of 4096 masked logits, its largest
///   logit `mt` and the fixed-point sum of `exp(logit - mt)` (2^-44 units);
///   `raw_logprobs` merges them into the full-row normaliser, so no pass
///   reads the logits again for it.
/// - `status`: `[R]` i32 out: 0 ok, 1 a NaN or +inf logit, 2 every logit -inf.
#[kernel(tile = [4096], threads = [512])]
pub fn mask_check(
    logits: Logits,
    v: u32,
    masks: Gm<u32>,
    has_mask: Gm<u32>,
    copy: u32,
    masked: GmMut<f32>,
    raw: Gm<u32>,
    raw_max: GmMut<f32>,
    raw_sum: GmMut<u64>,
    status: GmMut<i32>,
) {
    let r = row();
    let base = (r as u64) * (v as u64);
    let words = (v + 31) / 32;
    let use_mask = load_scalar(has_mask, r as u64) != 0;
    let write = copy != 0;
    let want_raw = load_scalar(raw, r as u64) != 0;
    let nchunks = (v + TILE - 1) / TILE;
    let mut bad = 0u32;
    let mut finite = 0u32;
    for c in 0..nchunks {
        let start = c * TILE;
        let n = min(TILE, v - start);
        let x = load(logits, base + (start as u64), n);
        if use_mask {
            let allowed = mask_bits(masks, (r as u64) * (words as u64) + ((start / 32) as u64), n);
            let xm = select(allowed, x, NEG_INF);
            if write {
                store(masked, base + (start as u64), xm);
            }
            bad += count(is_nan(xm) | is_pos_inf(xm));
            finite += count(!is_neg_inf(xm));
            if want_raw {
                let mt = reduce_max(xm);
                store_scalar(raw_max, (r * nchunks + c) as u64, mt);
                store_scalar(raw_sum, (r * nchunks + c) as u64, reduce_sum(to_fixed(exp(xm - mt))));
            }
        } else {
            if write {
                store(masked, base + (start as u64), x);
            }
            bad += count(is_nan(x) | is_pos_inf(x));
            finite += count(!is_neg_inf(x));
            if want_raw {
                let mt = reduce_max(x);
                store_scalar(raw_max, (r * nchunks + c) as u64, mt);
                store_scalar(raw_sum, (r * nchunks + c) as u64, reduce_sum(to_fixed(exp(x - mt))));
            }
        }
    }
    let st = row_status_of(bad, finite);
    store_scalar(status, r as u64, st);
}

/// Section 3.1-3.2 for many blocks per row (stage 1 of 2): program
/// `r * chunks + c` masks chunk `c` of row `r` (logits
/// `c * chunk_len ..`, `chunk_len` a multiple of TILE, the last chunk
/// shorter) and counts its bad and finite logits; `status_merge` turns the
/// counts into `mask_check`'s row status.
///
/// - `logits`, `masks`, `has_mask`, `copy`, `masked`, `raw`, `raw_max`,
///   `raw_sum`: as `mask_check` (the same tiles of 4096: `chunk_len` is a
///   multiple of it).
/// - `bad`, `finite`: `[R * chunks]` u32 out.
#[kernel(tile = [4096], threads = [512])]
pub fn mask_check_chunk(
    logits: Logits,
    v: u32,
    chunk_len: u32,
    chunks: u32,
    masks: Gm<u32>,
    has_mask: Gm<u32>,
    copy: u32,
    masked: GmMut<f32>,
    raw: Gm<u32>,
    raw_max: GmMut<f32>,
    raw_sum: GmMut<u64>,
    bad: GmMut<u32>,
    finite: GmMut<u32>,
) {
    let p = row();
    let r = p / chunks;
    let cstart = (p % chunks) * chunk_len;
    let cend = min(cstart + chunk_len, v);
    let base = (r as u64) * (v as u64);
    let words = (v + 31) / 32;
    let use_mask = load_scalar(has_mask, r as u64) != 0;
    let write = copy != 0;
    let want_raw = load_scalar(raw, r as u64) != 0;
    let rtiles = (v + TILE - 1) / TILE;
    let ntiles = (cend - cstart + TILE - 1) / TILE;
    let mut nbad = 0u32;
    let mut nfin = 0u32;
    for t in 0..ntiles {
        let start = cstart + t * TILE;
        let n = min(TILE, cend - start);
        let x = load(logits, base + (start as u64), n);
        // Both counts in one reduction: bad in the high 16 bits (a tile holds at most 4096).
        if use_mask {
            let allowed = mask_bits(masks, (r as u64) * (words as u64) + ((start / 32) as u64), n);
            let xm = select(allowed, x, NEG_INF);
            if write {
                store(masked, base + (start as u64), xm);
            }
            let both =
                reduce_sum(select(is_nan(xm) | is_pos_inf(xm), 65536u32, 0u32) + select(!is_neg_inf(xm), 1u32, 0u32));
            nbad += both >> 16;
            nfin += both & 65535u32;
            if want_raw {
                let mt = reduce_max(xm);
                store_scalar(raw_max, (r * rtiles + start / TILE) as u64, mt);
                store_scalar(raw_sum, (r * rtiles + start / TILE) as u64, reduce_sum(to_fixed(exp(xm - mt))));
            }
        } else {
            if write {
                store(masked, base + (start as u64), x);
            }
            let both =
                reduce_sum(select(is_nan(x) | is_pos_inf(x), 65536u32, 0u32) + select(!is_neg_inf(x), 1u32, 0u32));
            nbad += both >> 16;
            nfin += both & 65535u32;
            if want_raw {
                let mt = reduce_max(x);
                store_scalar(raw_max, (r * rtiles + start / TILE) as u64, mt);
                store_scalar(raw_sum, (r * rtiles + start / TILE) as u64, reduce_sum(to_fixed(exp(x - mt))));
            }
        }
    }
    store_scalar(bad, p as u64, nbad);
    store_scalar(finite, p as u64, nfin);
}

/// Stage 2 of `mask_check_chunk`: each row's status from its chunks' counts
/// (0 ok, 1 a NaN or +inf logit, 2 every logit -inf).
///
/// - `bad`, `finite`: `[R * chunks]` u32; `status`: `[R]` i32 out.
#[kernel]
pub fn status_merge(bad: Gm<u32>, finite: Gm<u32>, chunks: u32, status: GmMut<i32>) {
    merged_status(bad, finite, row(), chunks, status);
}

/// Section 3.2: row `r`'s status from its `chunks` chunks' counts of bad
/// (NaN or +inf) and finite logits (0 ok, 1 a bad logit, 2 every logit
/// -inf), stored at `status[r]`.
/// Section 3.2: a row's status from its bad (NaN / +inf) and finite (not
/// -inf) counts: 1 when any logit is bad, 2 when every one is -inf, else 0.
#[kernel_fn]
fn row_status_of(bad: u32, finite: u32) -> i32 {
    if bad > 0 {
        1i32
    } else {
        if finite == 0 {
            2i32
        } else {
            0i32
        }
    }
}

#[kernel_fn]
fn merged_status(bad: Gm<u32>, finite: Gm<u32>, r: u32, chunks: u32, status: GmMut<i32>) {
    let mut nbad = 0u32;
    let mut nfin = 0u32;
    for c in 0..chunks {
        nbad += load_scalar(bad, (r * chunks + c) as u64);
        nfin += load_scalar(finite, (r * chunks + c) as u64);
    }
    let st = row_status_of(nbad, nfin);
    store_scalar(status, r as u64, st);
}

/// Section 3.3 and 3.6: the `n` largest masked logits of each row, ties by
/// lower id, in the order of section 3.6 (`n == v` sorts the whole row).
///
/// - `logits`: `[R, v]` (masked, checked; f32, bf16 or f16, read as f32).
/// - `cand`: `[R, n]` f32 out, `cand_ids`: `[R, n]` i32 out (vocabulary ids).
#[kernel(
    tile = [64, 256, 1024, 4096, 16384, 131072, 262144, 524288],
    threads = [64, 256, 512, 512, 1024, 1024, 1024, 1024]
)]
pub fn force_topn(logits: Logits, v: u32, n: u32, cand: GmMut<f32>, cand_ids: GmMut<i32>) {
    let r = row();
    let (x, id) = top_n(logits, (r as u64) * (v as u64), v, n);
    let off = (r as u64) * (n as u64);
    store(cand, off, x);
    store(cand_ids, off, id);
}

/// `force_topn` that also does the mask check's work when nothing is left
/// for it but the counts (no grammar mask, no raw-logprobs row: SAMPLER.md
/// 3.2): the row's bad and finite counts come from the top-N's own read of
/// the logits (`top_n_counted`), and its status is written here, so the step
/// reads the logits once and launches neither `mask_check` nor `status_merge`.
///
/// - `logits`, `cand`, `cand_ids`: as `force_topn`.
/// - `status`: `[R]` i32 out: 0 ok, 1 a NaN or +inf logit, 2 every logit -inf.
#[kernel(
    tile = [64, 256, 1024, 4096, 16384, 131072, 262144, 524288],
    threads = [64, 256, 512, 512, 1024, 1024, 1024, 1024]
)]
pub fn force_topn_counted(logits: Logits, v: u32, n: u32, cand: GmMut<f32>, cand_ids: GmMut<i32>, status: GmMut<i32>) {
    let r = row();
    let (x, id, nbad, nfin) = top_n_counted(logits, (r as u64) * (v as u64), v, n);
    let off = (r as u64) * (n as u64);
    store(cand, off, x);
    store(cand_ids, off, id);
    let st = row_status_of(nbad, nfin);
    store_scalar(status, r as u64, st);
}

/// `force_topn_counted` in one read of each row (issue 22): the
/// `top_n_stream_counted` selection (on NVIDIA a threshold from a fixed
/// sample of the row, one pass of 16-byte loads appending the logits at or
/// above it to a small shared-memory buffer, an exact fallback when too few
/// or too many survive), so several blocks fit on an SM and no `topn_merge`
/// runs. The same results as `force_topn_counted`, for a step with no
/// grammar mask and no raw-logprobs row.
///
/// - `logits`, `cand`, `cand_ids`, `status`: as `force_topn_counted`.
/// - `fallback`: `[R]` u32 out, why row r's device selection fell back
///   (0 it did not; 1 no survivor buffer; 2 the buffer overflowed; 3 fewer
///   than `n` survived): a diagnostic, never an input of a later kernel.
#[kernel(tile = [256, 1024, 4096], threads = [256, 512, 1024])]
pub fn force_topn_stream(
    logits: Logits,
    v: u32,
    n: u32,
    cand: GmMut<f32>,
    cand_ids: GmMut<i32>,
    status: GmMut<i32>,
    fallback: GmMut<u32>,
) {
    let r = row();
    let (x, id, nbad, nfin, fell) = top_n_stream_counted(logits, (r as u64) * (v as u64), v, n);
    let off = (r as u64) * (n as u64);
    store(cand, off, x);
    store(cand_ids, off, id);
    let st = row_status_of(nbad, nfin);
    store_scalar(status, r as u64, st);
    store_scalar(fallback, r as u64, fell);
}

/// Section 3.3 for many blocks per row (stage 1 of 2): program
/// `r * chunks + c` keeps the `n` largest logits of chunk `c` of row `r`
/// (logits `c * chunk_len ..`, the last chunk shorter) with vocabulary ids,
/// unsorted (`top_n_set`: equal logits in ascending id order). Every chunk
/// must hold at least `n` logits. `topn_merge` then picks and sorts the
/// row's `n` from the `chunks * n` candidates; the result equals
/// `force_topn`'s exactly (the order keys are unique, and equal logits stay
/// in id order across and within chunks, which is the merge's tie order).
///
/// - `logits`: `[R, v]` (masked, checked; f32, bf16 or f16, read as f32).
/// - `cand`: `[R * chunks, n]` f32 out, `cand_ids`: `[R * chunks, n]` i32 out.
#[kernel(tile = [256, 1024, 4096, 16384], threads = [256, 1024, 1024, 1024])]
pub fn topn_chunk(logits: Logits, v: u32, chunk_len: u32, chunks: u32, n: u32, cand: GmMut<f32>, cand_ids: GmMut<i32>) {
    let p = row();
    let r = p / chunks;
    let start = (p % chunks) * chunk_len;
    let len = min(chunk_len, v - start);
    let (x, id) = top_n_set(logits, (r as u64) * (v as u64) + (start as u64), len, n);
    let off = (p as u64) * (n as u64);
    store(cand, off, x);
    store(cand_ids, off, id + (start as i32));
}

/// `topn_chunk` that also counts its chunk's bad (NaN or +inf) and finite
/// (not -inf) logits from its own read of them (`top_n_set_counted`: on
/// NVIDIA from the staging histogram), for a step where the mask check has
/// nothing else to do (no grammar mask, no raw-logprobs row); `topn_merge`
/// turns the counts into the row status (`mchunks = chunks`).
///
/// - `logits`, `cand`, `cand_ids`: as `topn_chunk`.
/// - `bad`, `finite`: `[R * chunks]` u32 out, in `mask_check_chunk`'s layout.
#[kernel(tile = [256, 1024, 4096, 16384], threads = [256, 1024, 1024, 1024])]
pub fn topn_chunk_counted(
    logits: Logits,
    v: u32,
    chunk_len: u32,
    chunks: u32,
    n: u32,
    cand: GmMut<f32>,
    cand_ids: GmMut<i32>,
    bad: GmMut<u32>,
    finite: GmMut<u32>,
) {
    let p = row();
    let r = p / chunks;
    let start = (p % chunks) * chunk_len;
    let len = min(chunk_len, v - start);
    let (x, id, nbad, nfin) = top_n_set_counted(logits, (r as u64) * (v as u64) + (start as u64), len, n);
    let off = (p as u64) * (n as u64);
    store(cand, off, x);
    store(cand_ids, off, id + (start as i32));
    store_scalar(bad, p as u64, nbad);
    store_scalar(finite, p as u64, nfin);
}

/// Section 3.3 for many blocks per row (stage 2 of 2): the `n` largest of
/// each row's `m = chunks * n` candidates from `topn_chunk`, ties by lower
/// position (= lower vocabulary id), as (logit, vocabulary id); also
/// `status_merge`'s work when `mchunks > 0` (one graph node fewer).
///
/// - `cand_in`, `ids_in`: `[R, m]`; `cand`: `[R, n]` f32 out, `cand_ids`: `[R, n]` i32 out.
/// - `bad`, `finite`: `[R * mchunks]` u32, `mask_check_chunk`'s counts;
///   `status`: `[R]` i32 out (section 3.2, as `status_merge`), written only
///   when `mchunks > 0`.
#[kernel(tile = [256, 1024, 4096, 16384], threads = [256, 1024, 1024, 1024])]
pub fn topn_merge(
    cand_in: Gm<f32>,
    ids_in: Gm<i32>,
    m: u32,
    n: u32,
    cand: GmMut<f32>,
    cand_ids: GmMut<i32>,
    bad: Gm<u32>,
    finite: Gm<u32>,
    mchunks: u32,
    status: GmMut<i32>,
) {
    let r = row();
    let moff = (r as u64) * (m as u64);
    let (x, pos) = top_n(cand_in, moff, m, n);
    let ids = gather(ids_in, moff, pos, -1i32);
    let off = (r as u64) * (n as u64);
    store(cand, off, x);
    store(cand_ids, off, ids);
    if mchunks > 0 {
        merged_status(bad, finite, r, mchunks, status);
    }
}

/// Section 3.4: `x = (logit - m) / T` of the `n` candidates at `off`, with
/// `m` the row's largest logit (the first candidate), so the largest `x`
/// is exactly 0 and nothing overflows; `[n]` f32.
#[kernel_fn]
fn scaled_logits(cand: Gm<f32>, off: u64, n: u32, temperature: f32) -> Tile<f32> {
    (load(cand, off, n) - load_scalar(cand, off)) / temperature
}

/// Sections 10.1 and 3.8: the prefix min-p and top-k keep, of the scaled
/// logits `x` (`[n]` f32, in order): not `x < log_min_p` (min-p's one f32
/// comparison with the host's `L = ln(min_p)`, `-inf` off, 0 for min_p = 1,
/// which keeps exactly the ties with the largest logit) and the first `k`
/// (`k < 0`: off); `[n]` bool.
#[kernel_fn]
fn prefix_mask(x: Tile<f32>, log_min_p: f32, k: i32, n: u32) -> Tile<bool> {
    (x >= log_min_p) & ((iota(n) < (k as u32)) | (k < 0))
}

/// Section 10.2: the mass top-p is a fraction of (2^-44 units): the mass
/// `pre` keeps (min-p and top-k) when they come first (`kfirst`), else
/// `total` (the row's).
#[kernel_fn]
fn filtered_mass(w: Tile<u64>, pre: Tile<bool>, kfirst: bool, total: u64) -> u64 {
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
fn keep_mask(w: Tile<u64>, pre: Tile<bool>, base: u64, top_p: f32) -> (Tile<bool>, u64) {
    let thr = frac_floor(base, top_p);
    ((exclusive_scan(w) <= thr) & pre, thr)
}

/// Section 3.9: the renormalised logprobs `x - ln(kept mass)` of the kept
/// candidates, `-inf` for the removed ones; `[n]` f32.
#[kernel_fn]
fn renormalise(x: Tile<f32>, w: Tile<u64>, keep: Tile<bool>) -> Tile<f32> {
    let lse = ln_fixed(reduce_sum(select(keep, w, 0u64)));
    select(keep, x - lse, NEG_INF)
}

/// Section 4: the vocabulary id drawn from the logprobs `lp` (`[n]`) with
/// `u = uniform(seed, seq)`, or -1 when nothing has mass.
#[kernel_fn]
fn draw_token(lp: Tile<f32>, cand_ids: Gm<i32>, off: u64, seed: u64, seq: u64) -> i32 {
    let c = categorical(to_fixed(exp(lp)), uniform53(seed, seq));
    if c >= 0 {
        load_scalar(cand_ids, off + (c as u64))
    } else {
        -1i32
    }
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
#[kernel(
    tile = [64, 256, 1024, 4096, 16384, 131072, 262144, 524288],
    threads = [64, 256, 512, 512, 1024, 1024, 1024, 1024]
)]
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
    let x = scaled_logits(cand, off, n, load_scalar(temperature, r as u64));
    let w = to_fixed(exp(x));
    let pre = prefix_mask(x, load_scalar(log_min_p, r as u64), load_scalar(top_k, r as u64), n);
    let base = filtered_mass(w, pre, load_scalar(order, r as u64) != 0, reduce_sum(w));
    let (keep, _) = keep_mask(w, pre, base, load_scalar(top_p, r as u64));
    let lp = renormalise(x, w, keep);
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
#[kernel(tile = [4096], threads = [512])]
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
fn total_unneeded(w: Tile<u64>, pre: Tile<bool>, last_in: bool, k: i32, n: u32, kfirst: bool, top_p: f32) -> bool {
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
#[kernel(tile = [4096], threads = [512])]
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
#[kernel(
    tile = [64, 256, 1024, 4096, 16384, 131072, 262144, 524288],
    threads = [64, 256, 512, 512, 1024, 1024, 1024, 1024]
)]
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
#[kernel(
    tile = [64, 256, 1024, 4096, 16384],
    threads = [64, 256, 512, 512, 1024]
)]
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
    let x = scaled_logits(cand, off, n, load_scalar(temperature, r as u64));
    let w = to_fixed(exp(x));
    let pre = prefix_mask(x, load_scalar(log_min_p, r as u64), load_scalar(top_k, r as u64), n);
    let base = filtered_mass(w, pre, load_scalar(order, r as u64) != 0, reduce_sum(w));
    let (keep, _) = keep_mask(w, pre, base, load_scalar(top_p, r as u64));
    let lp = renormalise(x, w, keep);
    store(logprobs, off, lp);
    let tok = draw_token(lp, cand_ids, off, load_scalar(seed, r as u64), load_scalar(seq, r as u64));
    store_scalar(token, r as u64, tok);
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
#[kernel(
    tile = [64, 256, 1024, 4096, 16384],
    threads = [64, 256, 512, 512, 1024]
)]
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
    let m = load_scalar(cand, off);
    let t = load_scalar(temperature, r as u64);
    let x = scaled_logits(cand, off, n, t);
    let w = to_fixed(exp(x));
    let k = load_scalar(top_k, r as u64);
    let lmp = load_scalar(log_min_p, r as u64);
    let pre = prefix_mask(x, lmp, k, n);
    // Whether min-p keeps the last column (then it may keep past the prefix).
    let xl = (load_scalar(cand, off + ((n - 1) as u64)) - m) / t;
    let last_in = xl >= lmp;
    let k_inside = (k > 0 && (k as u32) <= n) || !last_in;
    let kfirst = load_scalar(order, r as u64) != 0;
    // row_mass_bounded left the total out: any total >= the candidates' own
    // sum gives the same outputs, if the claim holds on these values too.
    let skipped = load_scalar(mass, (r * chunks) as u64) == 18446744073709551615u64; // MASS_UNNEEDED
    let mut total = 0u64;
    if skipped {
        total = reduce_sum(w);
    } else {
        for c in 0..chunks {
            total += load_scalar(mass, (r * chunks + c) as u64);
        }
    }
    let decided = total_unneeded(w, pre, last_in, k, n, kfirst, load_scalar(top_p, r as u64));
    let unsure = skipped && !decided;
    // 10.2: the min-p and top-k mass; past the prefix it is the row's total
    // when both are off, else unknown here (the row overflows).
    let base = filtered_mass(w, pre, kfirst && k_inside, total);
    let base_unknown = kfirst && !k_inside && (k > 0 || lmp > NEG_INF);
    let (keep, thr) = keep_mask(w, pre, base, load_scalar(top_p, r as u64));
    let lp = renormalise(x, w, keep);
    store(logprobs, off, lp);
    let next_kept =
        unsure || (n < v && (base_unknown || (last_in && reduce_sum(w) <= thr && (k < 0 || (k as u32) > n))));
    store_scalar(overflow, r as u64, if next_kept { 1u32 } else { 0u32 });
    let tok = draw_token(lp, cand_ids, off, load_scalar(seed, r as u64), load_scalar(seq, r as u64));
    store_scalar(token, r as u64, tok);
}

/// Section 6 (force top-k remap): moves each verify row's draft distribution
/// into the target row's candidate columns.
///
/// - `cand_ids`: `[R, n]` target candidate ids; `draft_ids`/`draft_lps`: `[R, wd]`
///   the draft's processed distribution (id -1 = padding).
/// - `draft_tok`: `[R]` i32, the draft token `d_{j+1}` this row verifies (-1 none).
/// - `col_of`: `[R, v]` i32 scratch (any contents).
/// - `q_logprobs`: `[R, n]` f32 out: draft logprob per target column (-inf absent).
/// - `draft_col`: `[R]` i32 out: target column of the draft token, -1 when absent (forces a reject).
/// - `draft_q`: `[R]` f32 out: the draft's logprob of the draft token.
#[kernel(
    tile = [64, 256, 1024, 4096, 16384, 131072, 262144, 524288],
    threads = [64, 256, 512, 512, 1024, 1024, 1024, 1024]
)]
pub fn remap_draft(
    cand_ids: Gm<i32>,
    n: u32,
    v: u32,
    draft_ids: Gm<i32>,
    draft_lps: Gm<f32>,
    wd: u32,
    draft_tok: Gm<i32>,
    col_of: GmMut<i32>,
    q_logprobs: GmMut<f32>,
    draft_col: GmMut<i32>,
    draft_q: GmMut<f32>,
) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let voff = (r as u64) * (v as u64);
    let doff = (r as u64) * (wd as u64);
    let ids = load(cand_ids, off, n);
    scatter(col_of, voff, ids, iota(n) as i32);
    let dids = load(draft_ids, doff, wd);
    let dlps = load(draft_lps, doff, wd);
    let valid = (dids >= 0) & (dids < (v as i32));
    let cols = gather(col_of, voff, select(valid, dids, -1), -1i32);
    // col_of is scratch (stale entries, possibly from a wider step): keep a
    // column only below n and where it maps back to the same id.
    let cols = select(cols < (n as i32), cols, -1);
    let back = gather(cand_ids, off, cols, -1i32);
    let cols = select(valid & (back == dids), cols, -1);
    store(q_logprobs, off, full(n, NEG_INF));
    scatter(q_logprobs, off, cols, dlps);
    let d = load_scalar(draft_tok, r as u64);
    let dc = if d >= 0 && d < (v as i32) { load_scalar(col_of, voff + (d as u64)) } else { -1i32 };
    let dc = if dc >= 0 && dc < (n as i32) && load_scalar(cand_ids, off + (dc as u64)) == d { dc } else { -1i32 };
    store_scalar(draft_col, r as u64, dc);
    store_scalar(draft_q, r as u64, reduce_max(select(dids == d, dlps, NEG_INF)));
}

/// Section 6 steps 2-4 for one verify row: the accept test (case 1) and the
/// residual draw (case 2) used when this row rejects.
///
/// - `logprobs`, `cand_ids`, `q_logprobs`: `[R, n]`; `draft_col`: `[R]` i32; `draft_q`: `[R]` f32.
/// - `seed`, `seq_accept`, `seq_residual`: `[R]` u64.
/// - `accepted`: `[R]` u32 out (1 accept); `residual`: `[R]` i32 out (vocabulary id).
#[kernel(
    tile = [64, 256, 1024, 4096, 16384, 131072, 262144, 524288],
    threads = [64, 256, 512, 512, 1024, 1024, 1024, 1024]
)]
pub fn verify(
    logprobs: Gm<f32>,
    cand_ids: Gm<i32>,
    q_logprobs: Gm<f32>,
    n: u32,
    draft_col: Gm<i32>,
    draft_q: Gm<f32>,
    seed: Gm<u64>,
    seq_accept: Gm<u64>,
    seq_residual: Gm<u64>,
    accepted: GmMut<u32>,
    residual: GmMut<i32>,
) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let p = exp(load(logprobs, off, n));
    let dc = load_scalar(draft_col, r as u64);
    let pd = if dc >= 0 { exp(load_scalar(logprobs, off + (dc as u64))) } else { 0.0f32 };
    let qd = exp(load_scalar(draft_q, r as u64));
    let s = load_scalar(seed, r as u64);
    let ok = accept(uniform53(s, load_scalar(seq_accept, r as u64)), qd, pd);
    let q = exp(load(q_logprobs, off, n));
    let k2 = uniform53(s, load_scalar(seq_residual, r as u64));
    let c = categorical(to_fixed(max(p - q, 0.0)), k2);
    let c = if c < 0 { categorical(to_fixed(p), k2) } else { c };
    let tok = if c >= 0 { load_scalar(cand_ids, off + (c as u64)) } else { -1i32 };
    store_scalar(accepted, r as u64, if ok { 1u32 } else { 0u32 });
    store_scalar(residual, r as u64, tok);
}

/// Sections 6-7, per request group: walks the group's rows in order and
/// decides each row's output token and the accepted count.
///
/// - `group_first`, `group_rows`: `[G]` u32 first row and row count.
/// - `group_kind`: `[G]` u32: 0 independent fresh rows (sample, draft), 1 verify
///   (rows `0..m-1` verify, the last is fresh), 2 no draw (prompt logprobs),
///   3 a draft tree (rows left at -1 here; `tree_walk` decides them).
/// - `group_status`: `[G]` i32, nonzero = the request already failed on the host.
/// - `row_status`: `[R]` i32 from `mask_check`; any nonzero row fails its group.
/// - `golden`: `[R]` i32 golden token (kind 2: the prompt target); `drafts`,
///   `fresh`, `residual`: `[R]` i32; `accept_flags`: `[R]` u32.
/// - `tokens`: `[R]` i32 out (-1 none); `lookup`: `[R]` i32 out, the token whose
///   logprob the row reports (the output token, or the prompt target);
///   `accepted`: `[G]` u32 out; `status`: `[G]` i32 out (0 ok, else the first bad row status).
#[kernel]
pub fn finalize(
    group_first: Gm<u32>,
    group_rows: Gm<u32>,
    group_kind: Gm<u32>,
    group_status: Gm<i32>,
    row_status: Gm<i32>,
    golden: Gm<i32>,
    drafts: Gm<i32>,
    accept_flags: Gm<u32>,
    residual: Gm<i32>,
    fresh: Gm<i32>,
    tokens: GmMut<i32>,
    lookup: GmMut<i32>,
    accepted: GmMut<u32>,
    status: GmMut<i32>,
) {
    let g = row() as u64;
    let first = load_scalar(group_first, g);
    let m = load_scalar(group_rows, g);
    let kind = load_scalar(group_kind, g);
    let mut st = load_scalar(group_status, g);
    for j in 0..m {
        let rs = load_scalar(row_status, (first + j) as u64);
        if st == 0 && rs != 0 {
            st = rs;
        }
    }
    // GROUP_NO_DRAW (2) and GROUP_TREE (3) draw nothing here; GROUP_VERIFY = 1 (codes.rs).
    let mut stopped = st != 0 || kind >= 2;
    let mut acc = 0u32;
    for j in 0..m {
        let r = (first + j) as u64;
        let gold = load_scalar(golden, r);
        let mut tok = -1i32;
        if !stopped {
            if kind == 1 && j + 1 < m {
                let d = load_scalar(drafts, r);
                if gold >= 0 {
                    tok = gold;
                    if d == gold {
                        acc += 1;
                    } else {
                        stopped = true;
                    }
                } else {
                    if load_scalar(accept_flags, r) != 0 {
                        tok = d;
                        acc += 1;
                    } else {
                        tok = load_scalar(residual, r);
                        stopped = true;
                    }
                }
            } else {
                tok = if gold >= 0 { gold } else { load_scalar(fresh, r) };
            }
        }
        store_scalar(tokens, r, tok);
        store_scalar(lookup, r, if st == 0 && kind == 2 { gold } else { tok });
    }
    store_scalar(accepted, g, acc);
    store_scalar(status, g, st);
}

/// Section 11.4, per request group: walks a draft tree over its rows, already
/// processed (`logprobs`, `cand_ids`) and drawn (`fresh`, the bonus of each
/// node), and writes the tokens of the rows on the accepted path. Runs after
/// `finalize` (which leaves tree rows at -1 and merges the row statuses);
/// groups of other kinds, and failed ones, are left as they are. The draft
/// distribution of a visited node is matched to its row's candidates by
/// token id here (section 11.6), so a tree step needs no other kernel.
///
/// - `group_first`, `group_rows`, `group_kind`: `[G]` u32 (kind 3 = tree);
///   `tree_mode`: `[G]` u32, 0 fixed, 1 with replacement, 2 without (11.3).
/// - `status`: `[G]` i32 from `finalize` (nonzero = failed: the walk skips it).
/// - `tree_parent`: `[R]` i32 local parent of each row's node (-1 root);
///   `tree_token`: `[R]` i32 its draft token (-1 placeholder); `golden`: `[R]`
///   i32 the golden token of the node's depth (-1 none); `fresh`: `[R]` i32.
/// - `logprobs`, `cand_ids`: `[R, n]`; `draft_ids`, `draft_lps`: `[R, wd]` the
///   node's draft distribution (id -1 = padding; read only in modes 1-2);
///   `dpos`: `[R, v]` i32 scratch (any contents; written only in modes 1-2).
/// - `seed`, `seq_accept` (of the child's own row, 11.5), `seq_residual`: `[R]` u64.
/// - `tokens`, `lookup`: `[R]` i32 out (the token emitted at a path row, -1 off
///   the path); `accepted`: `[G]` u32 out (depth of the last accepted node);
///   `path`: `[R]` i32 out, `path[first + j]` = the path node at depth j, -1 after.
#[kernel(
    tile = [64, 256, 1024, 4096, 16384, 131072, 262144, 524288],
    threads = [64, 256, 512, 512, 1024, 1024, 1024, 1024]
)]
pub fn tree_walk(
    group_first: Gm<u32>,
    group_rows: Gm<u32>,
    group_kind: Gm<u32>,
    tree_mode: Gm<u32>,
    status: Gm<i32>,
    tree_parent: Gm<i32>,
    tree_token: Gm<i32>,
    golden: Gm<i32>,
    fresh: Gm<i32>,
    logprobs: Gm<f32>,
    cand_ids: Gm<i32>,
    n: u32,
    v: u32,
    draft_ids: Gm<i32>,
    draft_lps: Gm<f32>,
    wd: u32,
    dpos: GmMut<i32>,
    seed: Gm<u64>,
    seq_accept: Gm<u64>,
    seq_residual: Gm<u64>,
    tokens: GmMut<i32>,
    lookup: GmMut<i32>,
    accepted: GmMut<u32>,
    path: GmMut<i32>,
) {
    let g = row() as u64;
    let kind = load_scalar(group_kind, g);
    if kind == 3 {
        // GROUP_TREE (codes.rs)
        let first = load_scalar(group_first, g);
        let m = load_scalar(group_rows, g);
        for j in 0..m {
            store_scalar(path, (first + j) as u64, -1i32);
        }
        if load_scalar(status, g) == 0 {
            let mode = load_scalar(tree_mode, g);
            let s = load_scalar(seed, first as u64);
            let mut c = 0u32;
            let mut done = false;
            let mut acc = 0u32;
            // Children have larger indices than their parent, so the current
            // node only moves forward: one pass over the nodes visits the path.
            for node in 0..m {
                if !done && node == c {
                    let r = (first + c) as u64;
                    store_scalar(path, (first + acc) as u64, c as i32);
                    let gold = load_scalar(golden, r);
                    let mut next = 0u32;
                    let mut out = gold;
                    if gold >= 0 {
                        // 11.7: emit the golden token; follow its first child, if any.
                        for ch in (c + 1)..m {
                            let rc = (first + ch) as u64;
                            if next == 0
                                && load_scalar(tree_parent, rc) == (c as i32)
                                && load_scalar(tree_token, rc) == gold
                            {
                                next = ch;
                            }
                        }
                    } else {
                        let off = r * (n as u64);
                        let ids = load(cand_ids, off, n);
                        let p = exp(load(logprobs, off, n));
                        let pfix = reduce_sum(to_fixed(p));
                        // Residual weights w and their mass S (S = 1 exactly until a rejection, 11.4).
                        let mut w = p;
                        let mut sf = 1.0f32;
                        let mut sx = pfix;
                        let mut tried = 0u32;
                        let mut kids = 0u32;
                        for ch in (c + 1)..m {
                            if load_scalar(tree_parent, (first + ch) as u64) == (c as i32) {
                                kids += 1;
                            }
                        }
                        // A leaf reads no draft row (a tree without internal nodes has none).
                        if mode == 0 || kids == 0 {
                            // TREE_FIXED; 1 = TREE_WITH_REPLACEMENT, 2 = TREE_WITHOUT_REPLACEMENT (codes.rs)
                            for ch in (c + 1)..m {
                                let rc = (first + ch) as u64;
                                if next == 0 && load_scalar(tree_parent, rc) == (c as i32) {
                                    tried += 1;
                                    let x = load_scalar(tree_token, rc);
                                    let col = if x >= 0 { first_where(ids == x) } else { -1i32 };
                                    let wx = if col >= 0 { get(w, col as u32) } else { 0.0f32 };
                                    let qx = if x >= 0 { 1.0f32 } else { 0.0f32 };
                                    if accept(uniform53(s, load_scalar(seq_accept, rc)), qx * sf, wx) {
                                        next = ch;
                                    } else {
                                        // Fixed: q is one-hot at x, so only w(x) changes (a scalar update).
                                        if col >= 0 {
                                            w = select(iota(n) == (col as u32), 0.0f32, w);
                                            sx -= to_fixed(wx);
                                        }
                                        if sx == 0 {
                                            w = p;
                                            sf = 1.0f32;
                                            sx = pfix;
                                        } else {
                                            sf = fixed_to_f32(sx);
                                        }
                                    }
                                }
                            }
                        } else {
                            let doff = r * (wd as u64);
                            let voff = r * (v as u64);
                            let dids = load(draft_ids, doff, wd);
                            let dlps = load(draft_lps, doff, wd);
                            // q_c over row c's columns, matched by token id (the
                            // section 6 remap): dpos[id] = the id's draft entry; a
                            // stale scratch entry fails the check that it maps back.
                            let valid = (dids >= 0) & (dids < (v as i32));
                            scatter(dpos, voff, select(valid, dids, -1), iota(wd) as i32);
                            let pos = gather(dpos, voff, ids, -1i32);
                            let pos = select(pos < (wd as i32), pos, -1);
                            let back = gather(draft_ids, doff, pos, -1i32);
                            let pos = select(back == ids, pos, -1);
                            // Without replacement the earlier siblings' columns are
                            // zeroed and the rest renormalised.
                            let mut qrem = exp(gather(draft_lps, doff, pos, NEG_INF));
                            let mut qsum = 0.0f32;
                            for ch in (c + 1)..m {
                                let rc = (first + ch) as u64;
                                if next == 0 && load_scalar(tree_parent, rc) == (c as i32) {
                                    tried += 1;
                                    let x = load_scalar(tree_token, rc);
                                    let col = if x >= 0 { first_where(ids == x) } else { -1i32 };
                                    let wx = if col >= 0 { get(w, col as u32) } else { 0.0f32 };
                                    let qcx =
                                        if x >= 0 { exp(reduce_max(select(dids == x, dlps, NEG_INF))) } else { 0.0f32 };
                                    // Without replacement: x drawn before among its siblings has q = 0.
                                    let mut dup = false;
                                    if mode == 2 {
                                        for e in (c + 1)..ch {
                                            let re = (first + e) as u64;
                                            if x >= 0
                                                && load_scalar(tree_parent, re) == (c as i32)
                                                && load_scalar(tree_token, re) == x
                                            {
                                                dup = true;
                                            }
                                        }
                                    }
                                    let den = 1.0f32 - qsum;
                                    let live = mode == 1 || den > 0.0f32;
                                    let qkx = if mode == 1 {
                                        qcx
                                    } else {
                                        if live && !dup {
                                            qcx / den
                                        } else {
                                            0.0f32
                                        }
                                    };
                                    if accept(uniform53(s, load_scalar(seq_accept, rc)), qkx * sf, wx) {
                                        next = ch;
                                    } else {
                                        if live {
                                            if mode == 1 {
                                                w = max(w - sf * qrem, 0.0f32);
                                            } else {
                                                w = max(w - sf * (qrem / den), 0.0f32);
                                            }
                                        }
                                        sx = reduce_sum(to_fixed(w));
                                        if sx == 0 {
                                            w = p;
                                            sf = 1.0f32;
                                        } else {
                                            sf = fixed_to_f32(sx);
                                        }
                                        if mode == 2 && x >= 0 && !dup {
                                            qsum += qcx;
                                            qrem = select(ids == x, 0.0f32, qrem);
                                        }
                                    }
                                }
                            }
                        }
                        if next != 0 {
                            out = load_scalar(tree_token, (first + next) as u64);
                        } else {
                            if tried == 0 {
                                // A leaf: the bonus draw (case 0 at pos(depth, 0)).
                                out = load_scalar(fresh, r);
                            } else {
                                // Every child rejected: draw from w / S (case 2 at pos(depth, 0)).
                                let k2 = uniform53(s, load_scalar(seq_residual, r));
                                let cc = categorical(to_fixed(w), k2);
                                out = if cc >= 0 { get(ids, cc as u32) } else { -1i32 };
                            }
                        }
                    }
                    store_scalar(tokens, r, out);
                    store_scalar(lookup, r, out);
                    if next != 0 {
                        c = next;
                        acc += 1;
                    } else {
                        done = true;
                    }
                }
            }
            store_scalar(accepted, g, acc);
        }
    }
}

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
#[kernel(
    tile = [64, 256, 1024, 4096, 16384, 131072, 262144, 524288],
    threads = [64, 256, 512, 512, 1024, 1024, 1024, 1024]
)]
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
#[kernel(
    tile = [64, 256, 1024, 4096, 16384, 131072, 262144, 524288],
    threads = [64, 256, 512, 512, 1024, 1024, 1024, 1024]
)]
pub fn top_logprobs(cand_ids: Gm<i32>, logprobs: Gm<f32>, n: u32, k: u32, out_ids: GmMut<i32>, out_lps: GmMut<f32>) {
    let r = row();
    let off = (r as u64) * (n as u64);
    top_row(load(cand_ids, off, n), load(logprobs, off, n), r, k, out_ids, out_lps);
}

/// `token_info` then `top_logprobs` in one program per row: bit for bit the
/// two kernels' outputs (`k == 0`: no top logprobs are written).
///
/// - As `token_info` (`cand`, `cand_ids`, `logprobs`, `n`, `tokens` ->
///   `token_lp`, `sum_smaller`) and `top_logprobs` (`k` -> `out_ids`, `out_lps`).
#[kernel(
    tile = [64, 256, 1024, 4096, 16384],
    threads = [64, 256, 512, 512, 1024]
)]
pub fn token_info_top(
    cand: Gm<f32>,
    cand_ids: Gm<i32>,
    logprobs: Gm<f32>,
    n: u32,
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
    let (ids, lps) = token_info_row(cand, cand_ids, logprobs, off, n, s, r, token_lp, sum_smaller);
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
#[kernel(
    tile = [64, 256, 1024, 4096, 16384, 131072, 262144, 524288],
    threads = [64, 256, 512, 512, 1024, 1024, 1024, 1024]
)]
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
