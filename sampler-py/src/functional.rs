//! The FlashInfer-style functional calls and the cache of samplers they run on.

use super::*;

/// Samplers of the functional API, one per (V, force_topk, backend, nextn): a short
/// list searched in order (no hashing, no key string made per call).
pub(crate) type Cached = Vec<(u32, u32, BackendKind, u32, Sampler)>;

/// The functional API's samplers, process-wide.
pub(crate) fn cached() -> &'static Mutex<Cached> {
    static S: OnceLock<Mutex<Cached>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(Vec::new()))
}

/// The index of the cached sampler for (V, force_topk, backend) in `list`, made when missing
/// (by `make`, which may release the GIL).
pub(crate) fn cached_index(
    list: &mut Cached,
    vocab: u32,
    force_topk: u32,
    kind: BackendKind,
    nextn: u32,
    make: impl FnOnce(SamplerConfig) -> Result<Sampler, ConfigError>,
) -> PyResult<usize> {
    if let Some(i) = list.iter().position(|(v, n, k, d, _)| (*v, *n, *k, *d) == (vocab, force_topk, kind, nextn)) {
        return Ok(i);
    }
    let s = make(SamplerConfig { vocab_size: vocab, force_topk, nextn, backend: kind }).map_err(config_err)?;
    list.push((vocab, force_topk, kind, nextn, s));
    Ok(list.len() - 1)
}

/// Runs `reqs` on the cached sampler for (V, force_topk, backend) with the GIL released.
pub(crate) fn run_cached(
    py: Python<'_>,
    vocab: usize,
    force_topk: u32,
    backend: &str,
    data: &[f32],
    reqs: &[Request],
    processed: Option<&[usize]>,
) -> PyResult<(StepOutput, Option<ProcessedRows>)> {
    run_cached_n(py, vocab, force_topk, backend, DEFAULT_NEXTN, data, reqs, processed)
}

/// The functional calls' samplers take `nextn` = 5 (SAMPLER.md's default) unless a call needs more.
pub(crate) const DEFAULT_NEXTN: u32 = 5;

/// [`run_cached`] on the sampler configured with `nextn` drafts per request.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_cached_n(
    py: Python<'_>,
    vocab: usize,
    force_topk: u32,
    backend: &str,
    nextn: u32,
    data: &[f32],
    reqs: &[Request],
    processed: Option<&[usize]>,
) -> PyResult<(StepOutput, Option<ProcessedRows>)> {
    let vocab = u32::try_from(vocab)
        .map_err(|_| value_err(format!("logits: vocabulary size {vocab} is out of range (1..=524288)")))?;
    let kind = parse_backend(backend)?;
    py.detach(|| -> PyResult<_> {
        let mut list = cached().lock().unwrap_or_else(|p| p.into_inner());
        let i = cached_index(&mut list, vocab, force_topk, kind, nextn, Sampler::new)?;
        let s = &mut list[i].4;
        match processed {
            None => {
                let t = api_clock::start();
                let r = s.sample(data, reqs);
                api_clock::record(api_clock::since(t));
                Ok((r.map_err(batch_err)?, None))
            }
            Some(rows) => {
                let (o, p) = s.sample_with_processed(data, reqs, rows).map_err(batch_err)?;
                Ok((o, Some(p)))
            }
        }
    })
}

/// Runs `f` on the cached sampler for (V, force_topk, backend), holding the GIL (CUDA steps only enqueue).
pub(crate) fn with_cached<T>(
    py: Python<'_>,
    vocab: usize,
    force_topk: u32,
    backend: &str,
    nextn: u32,
    f: impl FnOnce(&mut Sampler) -> PyResult<T>,
) -> PyResult<T> {
    let vocab = u32::try_from(vocab)
        .map_err(|_| value_err(format!("logits: vocabulary size {vocab} is out of range (1..=524288)")))?;
    let kind = parse_backend(backend)?;
    let m = cached();
    // As `PySampler::lock_gil`: never block on the lock while holding the GIL.
    let mut list = loop {
        match m.try_lock() {
            Ok(g) => break g,
            Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => py.detach(|| drop(m.lock())),
        }
    };
    let i = cached_index(&mut list, vocab, force_topk, kind, nextn, |c| py.detach(|| Sampler::new(c)))?;
    f(&mut list[i].4)
}

/// Per-row parameters of the functional API.
pub(crate) struct RowParams {
    pub(crate) temperature: Vec<f32>,
    pub(crate) top_p: Vec<f32>,
    pub(crate) top_k: Vec<i64>,
    pub(crate) seed: Vec<Option<u64>>,
    pub(crate) position: Vec<u64>,
    pub(crate) min_p: Vec<f32>,
    pub(crate) filter_order: FilterOrder,
}

/// Decode sample positions (`seqlen_k - seqlen_q + 1`, SAMPLER.md section 2)
/// are at least 1: the default is 1, and a given 0 raises ValueError naming
/// `positions` (it would be `seqlen_k < seqlen_q`, an error status).
pub(crate) fn sample_positions(p: &mut RowParams, positions: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    if positions.is_none_or(|o| o.is_none()) {
        p.position.iter_mut().for_each(|x| *x = 1);
    }
    if let Some(i) = p.position.iter().position(|&x| x == 0) {
        return Err(value_err(format!("positions[{i}] = 0: a decode request's sample position is at least 1")));
    }
    Ok(())
}

/// Whether a parameter was given as one value for every row (a Python or 0-d numpy scalar).
fn is_scalar(o: &Bound<'_, PyAny>) -> bool {
    o.is_instance_of::<pyo3::types::PyFloat>()
        || o.is_instance_of::<pyo3::types::PyInt>()
        || o.cast::<numpy::PyUntypedArray>().is_ok_and(|a| a.ndim() == 0)
}

/// `filter_order`: `"top_p_then_top_k"` (default) or `"top_k_then_top_p"` (10.2); ValueError otherwise.
pub(crate) fn filter_order_arg(s: Option<&str>) -> PyResult<FilterOrder> {
    s.map_or(Ok(FilterOrder::default()), |s| {
        s.parse::<FilterOrder>().map_err(|e| value_err(format!("filter_order: {e}")))
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn row_params(
    r: usize,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    temperature: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    positions: Option<&Bound<'_, PyAny>>,
) -> PyResult<RowParams> {
    let u64_list = |o: &Bound<'_, PyAny>, a: &str| -> PyResult<Vec<u64>> {
        // A contiguous numpy uint64 array (the usual seeds) through numpy's C API: a third of
        // the functional call's argument cost went to the DLPack capsule of an [R] array.
        if let Ok(arr) = o.cast::<numpy::PyArray1<u64>>() {
            if arr.is_contiguous() {
                // SAFETY: a contiguous array read while the GIL is held and no Python code runs
                // (copied out at once), so nothing can write or free it meanwhile; rust-numpy's
                // borrow tracking (a shared-borrow table per call) buys nothing for this copy.
                return Ok(unsafe { arr.as_slice() }.map_err(|e| value_err(format!("{a}: {e}")))?.to_vec());
            }
        }
        if dlpack::is_dlpack(o)? {
            return dlpack::import(o, a, &[1])?.to_u64_vec(a);
        }
        let items: Vec<Bound<'_, PyAny>> = o.try_iter()?.collect::<PyResult<_>>()?;
        items.iter().enumerate().map(|(i, x)| u64_arg(x, &format!("{a}[{i}]"))).collect()
    };
    Ok(RowParams {
        temperature: per_row(temperature, 1.0f32, r, "temperature", f32_arg, f32_list)?,
        top_p: per_row(top_p, 1.0f32, r, "top_p", f32_arg, f32_list)?,
        top_k: per_row(top_k, -1i64, r, "top_k", i64_arg, i64_list)?,
        seed: per_row(
            seed,
            None,
            r,
            "seed",
            |o, a| u64_arg(o, a).map(Some),
            |o, a| u64_list(o, a).map(|v| v.into_iter().map(Some).collect()),
        )?,
        position: per_row(positions, 0u64, r, "positions", u64_arg, u64_list)?,
        min_p: vec![0.0; r],
        filter_order: FilterOrder::default(),
    })
}

/// [`row_params`] with min-p (scalar or `[R]`, 10.1) and the filter order
/// (10.2). An invalid scalar parameter (one value for every row) raises
/// ValueError naming the argument, before any step runs, as the renorm
/// calls do; a bad value in a per-row array fails only its row (token -1).
#[allow(clippy::too_many_arguments)]
pub(crate) fn row_params_full(
    r: usize,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    temperature: Option<&Bound<'_, PyAny>>,
    min_p: Option<&Bound<'_, PyAny>>,
    filter_order: Option<&str>,
    seed: Option<&Bound<'_, PyAny>>,
    positions: Option<&Bound<'_, PyAny>>,
) -> PyResult<RowParams> {
    let mut p = row_params(r, top_k, top_p, temperature, seed, positions)?;
    p.min_p = per_row(min_p, 0.0f32, r, "min_p", f32_arg, f32_list)?;
    p.filter_order = filter_order_arg(filter_order)?;
    let given = |o: Option<&Bound<'_, PyAny>>| o.is_some_and(|o| !o.is_none() && is_scalar(o));
    // ParamError's text names the field and the value.
    let one = |_arg: &str, q: SamplingParams| -> PyResult<()> {
        q.validate(u32::MAX).map(|_| ()).map_err(|e| value_err(e.to_string()))
    };
    let base = SamplingParams { seq_seed: Some(0), ..Default::default() };
    if given(temperature) {
        let t = f32_arg(temperature.expect("given"), "temperature")?;
        if t == f32::INFINITY {
            return Err(value_err("temperature must be finite (SAMPLER.md section 1), got inf"));
        }
        one("temperature", SamplingParams { temperature: t, ..base.clone() })?;
    }
    if given(top_p) {
        one("top_p", SamplingParams { top_p: f32_arg(top_p.expect("given"), "top_p")?, ..base.clone() })?;
    }
    if given(top_k) {
        one("top_k", SamplingParams { top_k: i64_arg(top_k.expect("given"), "top_k")?, ..base.clone() })?;
    }
    if given(min_p) {
        one("min_p", SamplingParams { min_p: f32_arg(min_p.expect("given"), "min_p")?, ..base })?;
    }
    Ok(p)
}

/// The functional sampling call's requests, kept between calls (issue 26): the next call
/// writes its parameters into them field by field. Making 64 requests afresh cost about
/// 0.9 us of 1.1 us (each 200-odd-byte `Request` built, moved into place and dropped;
/// `bench/binding_profile.py`). Only [`RowParams::requests_into`] writes them, so every field
/// it does not set keeps its default.
static KEPT_REQUESTS: Mutex<Vec<Request>> = Mutex::new(Vec::new());

/// A functional call's prefill requests: the kept ones, or its own when another call holds them
/// (a host step on another thread, the GIL released).
pub(crate) enum RowRequests {
    Kept(std::sync::MutexGuard<'static, Vec<Request>>),
    Own(Vec<Request>),
}

impl std::ops::Deref for RowRequests {
    type Target = [Request];
    fn deref(&self) -> &[Request] {
        match self {
            RowRequests::Kept(g) => g,
            RowRequests::Own(v) => v,
        }
    }
}

impl RowParams {
    /// One prefill request per row (the functional sampling call).
    pub(crate) fn requests(&self, top_logprobs: u32) -> Vec<Request> {
        (0..self.position.len()).map(|i| Request::prefill(self.params(i, top_logprobs), self.position[i])).collect()
    }
    /// [`RowParams::requests`], written into the kept requests when they are free.
    pub(crate) fn row_requests(&self, top_logprobs: u32) -> RowRequests {
        let mut g = match KEPT_REQUESTS.try_lock() {
            Ok(g) => g,
            // Every field this writes is written whole: a panic mid-way leaves valid requests.
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return RowRequests::Own(self.requests(top_logprobs)),
        };
        self.requests_into(&mut g, top_logprobs);
        RowRequests::Kept(g)
    }
    /// Makes `v` equal to `self.requests(top_logprobs)`, given that `v` holds only requests
    /// made by this function (prefill, default fields but those written here).
    pub(crate) fn requests_into(&self, v: &mut Vec<Request>, top_logprobs: u32) {
        let r = self.position.len();
        v.truncate(r);
        v.resize_with(r, || Request::prefill(SamplingParams::default(), 0));
        for (i, q) in v.iter_mut().enumerate() {
            let p = &mut q.params;
            p.temperature = self.temperature[i];
            p.top_p = self.top_p[i];
            p.top_k = self.top_k[i];
            p.top_logprobs = top_logprobs;
            p.seq_seed = self.seed[i];
            p.min_p = self.min_p[i];
            p.filter_order = self.filter_order;
            q.kind = RequestKind::Prefill { seqlen_k: self.position[i] };
        }
        debug_assert!(v
            .iter()
            .enumerate()
            .all(|(i, q)| *q == Request::prefill(self.params(i, top_logprobs), self.position[i])));
    }
    pub(crate) fn params(&self, i: usize, top_logprobs: u32) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature[i],
            top_p: self.top_p[i],
            top_k: self.top_k[i],
            top_logprobs,
            seq_seed: self.seed[i],
            min_p: self.min_p[i],
            filter_order: self.filter_order,
            ..Default::default()
        }
    }
}

/// Samples one token per row of `logits` `[R, V]` (FlashInfer's convention,
/// SAMPLER.md sections 3-5): each row is its own request at `positions[i]`
/// (default 0) with seed `seed[i]` (None: 64 random bits per row).
/// `top_k`, `top_p`, `temperature`, `min_p`, `seed`, `positions`: a scalar or `[R]`;
/// `filter_order`: `"top_p_then_top_k"` (default) or `"top_k_then_top_p"`
/// (vLLM / Hugging Face / FlashInfer's `"top_k_first"`, SAMPLER.md 10.2).
/// An invalid scalar (`top_k=0`, `top_p=0`, a negative or infinite
/// temperature, `min_p` outside [0, 1]) raises ValueError naming it; a bad
/// value in a per-row array gives -1 for that row only. A scalar `seed` is
/// every row's seed (documented, not refused): rows at one position then draw
/// the same u, so pass `positions` or per-row seeds for independent rows and
/// advance the positions between calls (`sampler_py.flashinfer` does both).
/// Returns `[R]` int32 tokens (-1 for a row whose parameters or logits are
/// invalid), or with `return_logprobs=True` the full `StepOutput`.
/// CUDA `logits` (f32 / bf16 / f16): the step runs on `stream` (default
/// torch's current stream) and returns `[R]` int32 tokens on that device
/// (or a `CudaStepOutput`) without waiting; per-row parameters are host
/// values (a CUDA tensor parameter is copied to the host: a sync).
/// The tokens are a range of a torch buffer later calls' tokens share (`cuda::slab_take`).
#[pyfunction]
#[pyo3(signature = (logits, top_k=None, top_p=None, *, temperature=None, min_p=None, filter_order=None, seed=None, positions=None, force_topk=None, return_logprobs=false, top_logprobs=None, backend="auto", stream=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn top_k_top_p_sampling_from_logits(
    py: Python<'_>,
    logits: &Bound<'_, PyAny>,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    temperature: Option<&Bound<'_, PyAny>>,
    min_p: Option<&Bound<'_, PyAny>>,
    filter_order: Option<&str>,
    seed: Option<&Bound<'_, PyAny>>,
    positions: Option<&Bound<'_, PyAny>>,
    force_topk: Option<&Bound<'_, PyAny>>,
    return_logprobs: bool,
    top_logprobs: Option<&Bound<'_, PyAny>>,
    backend: &str,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let force_topk = u32_opt(force_topk, "force_topk", 0)?;
    let top_logprobs = u32_opt(top_logprobs, "top_logprobs", 0)?;
    if let Some(c) = cuda::import(logits, "logits", &[2], stream)? {
        let r = c.rows();
        let reqs = row_params_full(r, top_k, top_p, temperature, min_p, filter_order, seed, positions)?
            .row_requests(top_logprobs);
        let want = if return_logprobs { cuda::Want::All } else { cuda::Want::Tokens };
        // No output pool: its reference checks cost more than torch's allocator (run 13).
        let buf = with_cached(py, c.vocab(), force_topk, backend, DEFAULT_NEXTN, |s| {
            cuda::step(py, s, &c, &reqs, want, false, None, None)
        })?;
        if return_logprobs {
            return Ok(Py::new(py, cuda::CudaStepOutput::new(buf, vec![1; r].into()))?.into_any());
        }
        return Ok(buf.0);
    }
    let l = Logits::import(logits, "logits", &[2])?;
    let r = l.rows();
    let reqs =
        row_params_full(r, top_k, top_p, temperature, min_p, filter_order, seed, positions)?.row_requests(top_logprobs);
    let (res, _) = run_cached(py, l.vocab(), force_topk, backend, l.data(), &reqs, None)?;
    let out = Out::for_input(logits);
    if return_logprobs {
        return Ok(Py::new(py, step_output(&out, res, vec![1; r].into())?)?.into_any());
    }
    let tokens: Vec<i32> = res.rows.iter().map(|x| x.token).collect();
    // Freeing the Rust `StepOutput` is the Rust API's own cost (a Rust caller drops it too).
    let t = api_clock::start();
    drop(res);
    api_clock::add(api_clock::since(t));
    out.arr(tokens, &[r])
}

/// Speculative-decoding verification (SAMPLER.md section 6) of B requests
/// with D = m - 1 drafts each. `target_logits`: `[B, m, V]` or `[B*m, V]`;
/// `draft_ids`: `[B, D]` int (-1 = placeholder); `draft_logprobs`: the draft
/// model's processed logprobs `[B, D, V]` (dense), or `[B, D, W]` with
/// `draft_dist_ids` `[B, D, W]` naming the columns (force top-k). `positions`:
/// each request's sample position, at least 1 (default 1; row j uses
/// position + j * 10000019). Any number of drafts D: the call's sampler is configured with `nextn` = D
/// (`nextn=` may ask for more; fewer than D raises ValueError). `min_p` and
/// `filter_order` as in `top_k_top_p_sampling_from_logits`.
/// Returns a `StepOutput` (`accepted`, `emitted` per request).
#[pyfunction]
#[pyo3(signature = (target_logits, draft_ids, draft_logprobs, top_k=None, top_p=None, *, temperature=None, min_p=None, filter_order=None, seed=None, positions=None, draft_dist_ids=None, force_topk=None, top_logprobs=None, nextn=None, backend="auto", stream=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn verify(
    py: Python<'_>,
    target_logits: &Bound<'_, PyAny>,
    draft_ids: &Bound<'_, PyAny>,
    draft_logprobs: &Bound<'_, PyAny>,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    temperature: Option<&Bound<'_, PyAny>>,
    min_p: Option<&Bound<'_, PyAny>>,
    filter_order: Option<&str>,
    seed: Option<&Bound<'_, PyAny>>,
    positions: Option<&Bound<'_, PyAny>>,
    draft_dist_ids: Option<&Bound<'_, PyAny>>,
    force_topk: Option<&Bound<'_, PyAny>>,
    top_logprobs: Option<&Bound<'_, PyAny>>,
    nextn: Option<&Bound<'_, PyAny>>,
    backend: &str,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let force_topk = u32_opt(force_topk, "force_topk", 0)?;
    let top_logprobs = u32_opt(top_logprobs, "top_logprobs", 0)?;
    let cl = cuda::import(target_logits, "target_logits", &[2, 3], stream)?;
    let hl = match cl {
        Some(_) => None,
        None => Some(Logits::import(target_logits, "target_logits", &[2, 3])?),
    };
    let (v, lshape, lrows) = match (&cl, &hl) {
        (Some(c), _) => (c.vocab(), c.t.shape.clone(), c.rows()),
        (_, Some(l)) => (l.vocab(), l.b.shape.clone(), l.rows()),
        _ => unreachable!("one of the two"),
    };
    let d = dlpack::import(draft_ids, "draft_ids", &[2])?;
    let (b, nd) = (d.shape[0], d.shape[1]);
    let m = nd + 1;
    let ids = d.to_i64_vec("draft_ids")?;
    let want_rows = b * m;
    if lshape.len() == 3 && (lshape[0] != b || lshape[1] != m) {
        return Err(value_err(format!(
            "target_logits: expected shape [B = {b}, m = {m}, V] for draft_ids of shape [{b}, {nd}], got {lshape:?}"
        )));
    }
    if lrows != want_rows {
        return Err(value_err(format!("target_logits: expected B * m = {b} * {m} = {want_rows} rows for draft_ids of shape [{b}, {nd}], got {lshape:?}")));
    }
    let dl = dlpack::import(draft_logprobs, "draft_logprobs", &[3])?;
    let w = dl.shape[2];
    if dl.shape[0] != b || dl.shape[1] != nd {
        return Err(value_err(format!("draft_logprobs: expected shape [{b}, {nd}, W], got {:?}", dl.shape)));
    }
    let dlv = dl.to_f32_vec("draft_logprobs")?;
    let col_ids: Option<Vec<i64>> = match draft_dist_ids.filter(|o| !o.is_none()) {
        None => {
            if w != v {
                return Err(value_err(format!("draft_logprobs: dense draft logprobs need W = V = {v} columns, got {w} (pass draft_dist_ids for top-N columns)")));
            }
            None
        }
        Some(o) => {
            let di = dlpack::import(o, "draft_dist_ids", &[3])?;
            if di.shape != dl.shape {
                return Err(value_err(format!(
                    "draft_dist_ids: expected the shape of draft_logprobs {:?}, got {:?}",
                    dl.shape, di.shape
                )));
            }
            Some(di.to_i64_vec("draft_dist_ids")?)
        }
    };
    // The cached sampler takes as many drafts as this call has (`nextn` at least that).
    let nextn = u32_opt(nextn, "nextn", (nd as u32).max(1))?;
    if (nextn as usize) < nd {
        return Err(value_err(format!("nextn: {nextn} is smaller than the {nd} drafts per request of draft_ids")));
    }
    let mut p = row_params_full(b, top_k, top_p, temperature, min_p, filter_order, seed, positions)?;
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
            let base = (i * nd + j) * w;
            let mut dist = DraftDist::default();
            for c in 0..w {
                let lp = dlv[base + c];
                if lp == f32::NEG_INFINITY {
                    continue; // no mass: same distribution, smaller plan
                }
                let id = match &col_ids {
                    None => c as i64,
                    Some(ci) => ci[base + c],
                };
                dist.ids.push(i32::try_from(id).map_err(|_| {
                    value_err(format!("draft_dist_ids[{i}][{j}][{c}] = {id} is not a token id (int32)"))
                })?);
                dist.logprobs.push(lp);
            }
            dists.push(dist);
        }
        let seqlen_k = p.position[i]
            .checked_add(nd as u64)
            .ok_or_else(|| value_err(format!("positions[{i}] = {} is too large", p.position[i])))?;
        reqs.push(Request::decode(p.params(i, top_logprobs), seqlen_k, m as u64, drafts, dists));
    }
    if let Some(c) = &cl {
        let buf = with_cached(py, v, force_topk, backend, nextn, |s| {
            cuda::step(py, s, c, &reqs, cuda::Want::All, cuda::has_tree(&reqs), None, None)
        })?;
        return Ok(Py::new(py, cuda::CudaStepOutput::new(buf, vec![m; b].into()))?.into_any());
    }
    let l = hl.expect("host logits");
    let (res, _) = run_cached_n(py, v, force_topk, backend, nextn, l.data(), &reqs, None)?;
    Ok(Py::new(py, step_output(&Out::for_input(target_logits), res, vec![m; b].into())?)?.into_any())
}

/// The processed distribution (section 3) of every row: `(ids, logprobs)`,
/// `[R, N]` each, N = V or `force_topk`.
pub(crate) fn processed_all<'py>(
    py: Python<'py>,
    l: &Logits<'_>,
    arg: &str,
    p: &RowParams,
    force_topk: u32,
    backend: &str,
) -> PyResult<ProcessedRows> {
    let r = l.rows();
    let reqs: Vec<Request> = (0..r)
        .map(|i| {
            let mut q = p.params(i, 0);
            q.seq_seed = Some(0); // no draw is reported; keep the call deterministic
            Request::prefill(q, 0)
        })
        .collect();
    let rows: Vec<usize> = (0..r).collect();
    let (res, proc_) = run_cached(py, l.vocab(), force_topk, backend, l.data(), &reqs, Some(&rows))?;
    if let Some((i, e)) = res.requests.iter().enumerate().find_map(|(i, q)| q.status.as_ref().err().map(|e| (i, e))) {
        return Err(value_err(format!("{arg}: row {i}: {e}")));
    }
    Ok(proc_.expect("asked for processed rows"))
}

/// The processed (renormalised) distribution of each row of `logits` `[R, V]`
/// (SAMPLER.md section 3: force top-k, temperature, top-p, top-k,
/// renormalise): `(ids [R, N] int32, logprobs [R, N] float32)`, candidates in
/// the order of section 3.6, -inf for removed ones. Raises ValueError for a
/// row with invalid parameters or logits.
#[pyfunction]
#[pyo3(signature = (logits, top_k=None, top_p=None, *, temperature=None, min_p=None, filter_order=None, force_topk=None, backend="auto"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn top_k_top_p_renorm_logprobs(
    py: Python<'_>,
    logits: &Bound<'_, PyAny>,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    temperature: Option<&Bound<'_, PyAny>>,
    min_p: Option<&Bound<'_, PyAny>>,
    filter_order: Option<&str>,
    force_topk: Option<&Bound<'_, PyAny>>,
    backend: &str,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    let force_topk = u32_opt(force_topk, "force_topk", 0)?;
    let l = Logits::import(logits, "logits", &[2])?;
    let p = row_params_full(l.rows(), top_k, top_p, temperature, min_p, filter_order, None, None)?;
    let pr = processed_all(py, &l, "logits", &p, force_topk, backend)?;
    let out = Out::for_input(logits);
    let (nr, n) = (pr.rows.len(), pr.n);
    Ok((out.arr(pr.ids, &[nr, n])?, out.arr(pr.logprobs, &[nr, n])?))
}

/// Dense renormalised probabilities `[R, V]` of probs `[R, V]` after top-k /
/// top-p / min-p: SAMPLER.md section 12 (probabilities ordered by p, ties by
/// lower id; p itself renormalised), on the host whatever `backend` says.
/// ValueError naming the row for an invalid row or parameter.
#[allow(clippy::too_many_arguments)]
pub(crate) fn renorm_probs(
    probs: &Bound<'_, PyAny>,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    min_p: Option<&Bound<'_, PyAny>>,
    filter_order: Option<&str>,
    backend: &str,
) -> PyResult<Py<PyAny>> {
    parse_backend(backend)?;
    let b = dlpack::import(probs, "probs", &[2])?;
    let data = b.to_f32_vec("probs")?;
    let (r, v) = (b.shape[0], b.shape[1]);
    let p = row_params_full(r, top_k, top_p, None, min_p, filter_order, None, None)?;
    let mut dense = vec![0f32; r * v];
    for i in 0..r {
        let row = &data[i * v..(i + 1) * v];
        let bad = |e: &dyn std::fmt::Display| value_err(format!("probs: row {i}: {e}"));
        let vp = p.params(i, 0).validate(v as u32).map_err(|e| bad(&e))?;
        sampler_host::probs::check_row(row, 0).map_err(|e| bad(&e))?;
        let pr = sampler_host::probs::process_row(row, &vp, v);
        for c in 0..pr.kept {
            dense[i * v + pr.order[c] as usize] = pr.prob(c) as f32;
        }
    }
    Out::for_input(probs).arr(dense, &[r, v])
}

/// Keeps the `top_k` most likely tokens of each row of probs `[R, V]` and
/// renormalises (FlashInfer's `top_k_renorm_probs`, through SAMPLER.md
/// section 3 with logits ln(probs)). `top_k`: scalar or `[R]`, -1 = off.
#[pyfunction]
#[pyo3(signature = (probs, top_k, *, backend="auto"))]
pub(crate) fn top_k_renorm_probs(
    py: Python<'_>,
    probs: &Bound<'_, PyAny>,
    top_k: &Bound<'_, PyAny>,
    backend: &str,
) -> PyResult<Py<PyAny>> {
    let _ = py;
    renorm_probs(probs, Some(top_k), None, None, None, backend)
}

/// Keeps the smallest prefix of each row of probs `[R, V]` whose mass
/// exceeds `top_p` and renormalises (FlashInfer's `top_p_renorm_probs`,
/// through SAMPLER.md section 3). `top_p`: scalar or `[R]` in (0, 1].
#[pyfunction]
#[pyo3(signature = (probs, top_p, *, backend="auto"))]
pub(crate) fn top_p_renorm_probs(
    py: Python<'_>,
    probs: &Bound<'_, PyAny>,
    top_p: &Bound<'_, PyAny>,
    backend: &str,
) -> PyResult<Py<PyAny>> {
    let _ = py;
    renorm_probs(probs, None, Some(top_p), None, None, backend)
}
