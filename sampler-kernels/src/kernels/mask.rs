//! Sections 3.1-3.2: the grammar mask and the bad-value check of each row
//! (`mask_check`, or `mask_check_chunk` + `status_merge` for many blocks a
//! row), and the row status helpers the selection kernels share
//! (`row_status_of`, `merged_status`, `pub` so that `select` can import them).

use sampler_macros::{kernel, kernel_fn};

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
#[kernel(variants = VOCAB)]
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
#[kernel(variants = VOCAB)]
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

/// Section 3.2: a row's status from its bad (NaN / +inf) and finite (not
/// -inf) counts: 1 when any logit is bad, 2 when every one is -inf, else 0.
#[kernel_fn]
pub fn row_status_of(bad: u32, finite: u32) -> i32 {
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

/// Section 3.2: row `r`'s status from its `chunks` chunks' counts of bad
/// (NaN or +inf) and finite logits (0 ok, 1 a bad logit, 2 every logit
/// -inf), stored at `status[r]`.
#[kernel_fn]
pub fn merged_status(bad: Gm<u32>, finite: Gm<u32>, r: u32, chunks: u32, status: GmMut<i32>) {
    let mut nbad = 0u32;
    let mut nfin = 0u32;
    for c in 0..chunks {
        nbad += load_scalar(bad, (r * chunks + c) as u64);
        nfin += load_scalar(finite, (r * chunks + c) as u64);
    }
    let st = row_status_of(nbad, nfin);
    store_scalar(status, r as u64, st);
}
