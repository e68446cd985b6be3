//! Sampling and chain verification from probability rows (SAMPLER.md
//! section 12), for `sampler_py.flashinfer`: host numpy in, numpy out; the
//! Python layer moves torch tensors (CUDA ones through the host).

use super::*;

/// Draws one token per row of `probs` `[R, V]` (section 12: prefill rows at
/// `positions[i]` with seed `seed[i]`): `(tokens [R] int32, valid [R] bool)`;
/// an invalid row (or a bad per-row parameter) gives -1 and valid False.
/// A bad scalar parameter raises ValueError naming it.
#[pyfunction]
#[pyo3(signature = (probs, top_k=None, top_p=None, min_p=None, *, filter_order=None, seed=None, positions=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn probs_sample(
    py: Python<'_>,
    probs: &Bound<'_, PyAny>,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    min_p: Option<&Bound<'_, PyAny>>,
    filter_order: Option<&str>,
    seed: Option<&Bound<'_, PyAny>>,
    positions: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    let b = dlpack::import(probs, "probs", &[2])?;
    let data = b.to_f32_vec("probs")?;
    let (r, v) = (b.shape[0], b.shape[1]);
    let vocab = u32::try_from(v).map_err(|_| value_err(format!("probs: {v} columns is too many")))?;
    let reqs = row_params_full(r, top_k, top_p, None, min_p, filter_order, seed, positions)?.requests(0);
    let (out, _) =
        py.detach(|| sampler_host::probs::sample(vocab, vocab, DEFAULT_NEXTN, &data, &reqs)).map_err(batch_err)?;
    let o = Out { py, torch: false };
    let tokens: Vec<i32> = out.rows.iter().map(|x| x.token).collect();
    let ok: Vec<bool> = out.requests.iter().map(|q| q.status.is_ok()).collect();
    Ok((o.arr(tokens, &[r])?, o.arr(ok, &[r])?))
}

/// Chain speculative verification from probabilities (section 6 on section
/// 12's rows): `draft_probs` `[B, D, V]`, `draft_ids` `[B, D]`,
/// `target_probs` `[B, D + 1, V]`; request i at `positions[i]` (its sample
/// position, at least 1; default 1) with seed `seed[i]`. Returns `(tokens [B, D + 1] int32, -1
/// after the stop; independent [B] int32: drafts whose acceptance test
/// passes on its own; accepted [B] int32)`. A request that fails gives -1
/// tokens and 0 counts.
#[pyfunction]
#[pyo3(signature = (draft_probs, draft_ids, target_probs, *, seed=None, positions=None))]
pub(crate) fn probs_verify(
    py: Python<'_>,
    draft_probs: &Bound<'_, PyAny>,
    draft_ids: &Bound<'_, PyAny>,
    target_probs: &Bound<'_, PyAny>,
    seed: Option<&Bound<'_, PyAny>>,
    positions: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Py<PyAny>, Py<PyAny>, Py<PyAny>)> {
    let d = dlpack::import(draft_ids, "draft_ids", &[2])?;
    let (b, nd) = (d.shape[0], d.shape[1]);
    let ids = d.to_i64_vec("draft_ids")?;
    let t = dlpack::import(target_probs, "target_probs", &[3])?;
    let v = t.shape[2];
    if t.shape[0] != b || t.shape[1] != nd + 1 {
        return Err(value_err(format!("target_probs: expected shape [{b}, {}, V], got {:?}", nd + 1, t.shape)));
    }
    let q = dlpack::import(draft_probs, "draft_probs", &[3])?;
    if q.shape != [b, nd, v] {
        return Err(value_err(format!("draft_probs: expected shape [{b}, {nd}, {v}], got {:?}", q.shape)));
    }
    let target = t.to_f32_vec("target_probs")?;
    let qv = q.to_f32_vec("draft_probs")?;
    let vocab = u32::try_from(v).map_err(|_| value_err(format!("target_probs: {v} columns is too many")))?;
    let mut p = row_params(b, None, None, None, seed, positions)?;
    sample_positions(&mut p, positions)?;
    let mut reqs = Vec::with_capacity(b);
    for i in 0..b {
        let mut drafts = Vec::with_capacity(nd);
        let mut dists = Vec::with_capacity(nd);
        for j in 0..nd {
            let x = ids[i * nd + j];
            drafts.push(
                i32::try_from(x)
                    .map_err(|_| value_err(format!("draft_ids[{i}][{j}] = {x} is not a token id (int32)")))?,
            );
            let row = &qv[(i * nd + j) * v..(i * nd + j + 1) * v];
            let mut dist = DraftDist::default();
            for (c, &x) in row.iter().enumerate() {
                if x > 0.0 {
                    dist.ids.push(c as i32);
                    dist.logprobs.push(x.ln());
                }
            }
            dists.push(dist);
        }
        let seqlen_k = p.position[i]
            .checked_add(nd as u64)
            .ok_or_else(|| value_err(format!("positions[{i}] = {} is too large", p.position[i])))?;
        reqs.push(Request::decode(p.params(i, 0), seqlen_k, nd as u64 + 1, drafts, dists));
    }
    let nextn = (nd as u32).max(1);
    let (out, independent) =
        py.detach(|| sampler_host::probs::sample(vocab, vocab, nextn, &target, &reqs)).map_err(batch_err)?;
    let o = Out { py, torch: false };
    let tokens: Vec<i32> = out.rows.iter().map(|x| x.token).collect();
    let acc: Vec<i32> = out.requests.iter().map(|q| q.accepted as i32).collect();
    let ind: Vec<i32> = independent.iter().map(|&x| x as i32).collect();
    Ok((o.arr(tokens, &[b, nd + 1])?, o.arr(ind, &[b])?, o.arr(acc, &[b])?))
}
