//! Sections 3.3 and 3.6: the force top-k selection of the candidates, in one
//! block a row (`force_topn*`) or many (`topn_chunk*` + `topn_merge`).

use sampler_macros::kernel;

use super::mask::{merged_status, row_status_of};

/// Section 3.3 and 3.6: the `n` largest masked logits of each row, ties by
/// lower id, in the order of section 3.6 (`n == v` sorts the whole row).
///
/// - `logits`: `[R, v]` (masked, checked; f32, bf16 or f16, read as f32).
/// - `cand`: `[R, n]` f32 out, `cand_ids`: `[R, n]` i32 out (vocabulary ids).
#[kernel(variants = CANDIDATES)]
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
#[kernel(variants = CANDIDATES)]
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
/// - `logits`, `cand`, `cand_ids`, `status`: as `force_topn_counted`, except
///   that only the first `sorted` candidates of a row are in the order of
///   section 3.6, the rest in no fixed order (`sorted >= n`: all of them):
///   the host asks for the full order only where a later kernel or output
///   reads past the kept prefix (`pipeline::sorted_prefix`).
/// - `fallback`: `[R]` u32 out, why row r's device selection fell back
///   (0 it did not; 1 no survivor buffer; 2 the buffer overflowed; 3 fewer
///   than `n` survived): a diagnostic, never an input of a later kernel.
#[kernel(variants = STREAM)]
pub fn force_topn_stream(
    logits: Logits,
    v: u32,
    n: u32,
    sorted: u32,
    cand: GmMut<f32>,
    cand_ids: GmMut<i32>,
    status: GmMut<i32>,
    fallback: GmMut<u32>,
) {
    let r = row();
    let (x, id, nbad, nfin, fell) = top_n_stream_counted(logits, (r as u64) * (v as u64), v, n, sorted);
    let off = (r as u64) * (n as u64);
    store(cand, off, x);
    store(cand_ids, off, id);
    let st = row_status_of(nbad, nfin);
    store_scalar(status, r as u64, st);
    store_scalar(fallback, r as u64, fell);
}

/// `force_topn_stream`'s outputs with each row selected by the CTAs of a
/// thread-block cluster together (issue 22, small R: a row's read spread
/// over up to 16 SMs in one kernel, no second node): `top_n_cluster` (each
/// CTA holds a slice of the row in shared memory; an exact radix select
/// over the whole cluster through distributed shared memory; the kept keys
/// gathered in the cluster's leader, which writes the row). The host picks
/// the cluster size by the batch (SAMPLER.md section 9); a plain launch is a
/// cluster of one CTA a row. The same results as `force_topn_counted`, for
/// a step with no grammar mask and no raw-logprobs row.
///
/// - `logits`: `[R, v]` (f32, bf16 or f16, read as f32).
/// - `cand`: `[R, n]` f32 out, `cand_ids`: `[R, n]` i32 out: the first
///   `sorted` of a row in the order of section 3.6, the rest in no fixed
///   order (as `force_topn_stream`).
/// - `status`: `[R]` i32 out: 0 ok, 1 a NaN or +inf logit, 2 every logit -inf.
/// - `ctas`: `[R]` u32 out, how many CTAs selected row r together (the
///   cluster's size; 0: its leader alone, the launch not shaped for the
///   cluster path): a diagnostic, never an input of a later kernel.
#[kernel(variants = CLUSTER, cluster = 16)]
pub fn topn_cluster(
    logits: Logits,
    v: u32,
    n: u32,
    sorted: u32,
    cand: GmMut<f32>,
    cand_ids: GmMut<i32>,
    status: GmMut<i32>,
    ctas: GmMut<u32>,
) {
    let r = row();
    let (x, id, nbad, nfin, nctas) = top_n_cluster(logits, (r as u64) * (v as u64), v, n, sorted);
    let off = (r as u64) * (n as u64);
    store(cand, off, x);
    store(cand_ids, off, id);
    let st = row_status_of(nbad, nfin);
    store_scalar(status, r as u64, st);
    store_scalar(ctas, r as u64, nctas);
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
#[kernel(variants = CHUNKS)]
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
#[kernel(variants = CHUNKS)]
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
#[kernel(variants = CHUNKS)]
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

/// Section 3.3 over several blocks per row with the one-read selection
/// (stage 1 of 2, issue 22; a row's read spread over several SMs at small
/// R): program `r * chunks + c` reads chunk `c` of row `r` once against the
/// threshold of the row's fixed sample (`top_n_chunk_stream`, the same for
/// every chunk of the row) and keeps its candidates: at most `n` (logit,
/// vocabulary id) pairs, in no fixed order, with their count and the chunk's
/// bad and finite logit counts. `topn_merge_stream` picks and sorts the
/// row's `n`; the result equals `force_topn_counted`'s exactly.
///
/// - `logits`: `[R, v]` (f32, bf16 or f16, read as f32; a step with no
///   grammar mask and no raw-logprobs row).
/// - `cand`: `[R * chunks, n]` f32 out, `cand_ids`: `[R * chunks, n]` i32 out
///   (the first `count[p]` entries of slot `p`).
/// - `count`, `bad`, `finite`: `[R * chunks]` u32 out.
#[kernel(variants = STREAM)]
pub fn topn_chunk_stream(
    logits: Logits,
    v: u32,
    chunk_len: u32,
    chunks: u32,
    n: u32,
    cand: GmMut<f32>,
    cand_ids: GmMut<i32>,
    count: GmMut<u32>,
    bad: GmMut<u32>,
    finite: GmMut<u32>,
) {
    let p = row();
    let r = p / chunks;
    let start = (p % chunks) * chunk_len;
    let clen = if start < v { min(chunk_len, v - start) } else { 0u32 };
    let (x, id, nbad, nfin) = top_n_chunk_stream(logits, (r as u64) * (v as u64), v, start, clen, n);
    let off = (p as u64) * (n as u64);
    store(cand, off, x);
    store(cand_ids, off, id + (start as i32));
    store_scalar(count, p as u64, len(x));
    store_scalar(bad, p as u64, nbad);
    store_scalar(finite, p as u64, nfin);
}

/// Section 3.3 over several blocks per row with the one-read selection
/// (stage 2 of 2): the `n` largest of row `r`'s chunk candidates from
/// `topn_chunk_stream`, ties by lower vocabulary id, in the order of section
/// 3.6 (`top_n_merge_stream`: when the chunks kept fewer than `n`, the
/// sampled threshold misled, the row's exact top `n` from the logits), and
/// the row status from the chunks' counts (section 3.2).
///
/// - `cand_in`, `ids_in`: `[R * chunks, n]`; `count`, `bad`, `finite`: `[R * chunks]` u32.
/// - `logits`: `[R, v]`, read only on the fallback.
/// - `cand`: `[R, n]` f32 out, `cand_ids`: `[R, n]` i32 out, the first
///   `sorted` of a row in order, the rest not (as `force_topn_stream`);
///   `status`: `[R]` i32 out.
#[kernel(variants = STREAM)]
pub fn topn_merge_stream(
    cand_in: Gm<f32>,
    ids_in: Gm<i32>,
    count: Gm<u32>,
    chunks: u32,
    logits: Logits,
    v: u32,
    n: u32,
    sorted: u32,
    cand: GmMut<f32>,
    cand_ids: GmMut<i32>,
    bad: Gm<u32>,
    finite: Gm<u32>,
    status: GmMut<i32>,
) {
    let r = row();
    let base = (r as u64) * (chunks as u64);
    let (x, id) = top_n_merge_stream(
        cand_in,
        ids_in,
        count,
        base * (n as u64),
        n,
        base,
        chunks,
        logits,
        (r as u64) * (v as u64),
        v,
        n,
        sorted,
    );
    let off = (r as u64) * (n as u64);
    store(cand, off, x);
    store(cand_ids, off, id);
    merged_status(bad, finite, r, chunks, status);
}
