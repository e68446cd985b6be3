//! The `Sampler` class (and its logits import) and the `MtpInfoPool` class.

use super::*;

/// Logits `[R, V]` (or `[.., V]` with `ndims`), borrowed as f32 when they are f32.
pub(crate) struct Logits<'py> {
    pub(crate) b: Borrowed<'py>,
    pub(crate) widened: Option<Vec<f32>>,
}

impl<'py> Logits<'py> {
    pub(crate) fn import(obj: &Bound<'py, PyAny>, arg: &str, ndims: &[usize]) -> PyResult<Logits<'py>> {
        let b = match dlpack::torch_host(obj, arg, ndims)? {
            Some(b) => b,
            None => dlpack::import(obj, arg, ndims)?,
        };
        let widened = match b.dtype {
            Dtype::F32 => None,
            // Host widening until the device API lands (exact for f16 / bf16).
            Dtype::F16 | Dtype::Bf16 => Some(b.to_f32_vec(arg)?),
            d => {
                return Err(PyTypeError::new_err(format!(
                    "{arg}: expected float32, bfloat16 or float16, got {}",
                    d.name()
                )))
            }
        };
        Ok(Logits { b, widened })
    }
    pub(crate) fn data(&self) -> &[f32] {
        self.widened.as_deref().unwrap_or_else(|| self.b.as_f32())
    }
    pub(crate) fn vocab(&self) -> usize {
        *self.b.shape.last().unwrap_or(&0)
    }
    pub(crate) fn rows(&self) -> usize {
        // All dimensions but the last (also when V = 0).
        self.b.shape.iter().rev().skip(1).product()
    }
}

pub(crate) fn check_vocab(l: &Logits<'_>, arg: &str, vocab: u32) -> PyResult<()> {
    if l.vocab() != vocab as usize {
        return Err(value_err(format!("{arg}: expected shape [R, vocab_size = {vocab}], got {:?}", l.b.shape)));
    }
    Ok(())
}

pub(crate) fn parse_backend(s: &str) -> PyResult<BackendKind> {
    s.parse::<BackendKind>().map_err(|e| value_err(e.to_string()))
}

// ---------------------------------------------------------------- Sampler

/// The sampler (mirrors `sampler_host::Sampler`): validates requests, lays
/// out each step and runs it on a backend (`"auto"`: CUDA when a driver and
/// GPU are present, else the CPU).
#[pyclass(name = "Sampler", module = "sampler_py", frozen)]
pub(crate) struct PySampler {
    pub(crate) inner: Mutex<Sampler>,
    /// Output buffers kept for reuse by CUDA steps (`None`: `reuse_outputs=False`).
    pub(crate) pool: Option<Mutex<cuda::OutPool>>,
    pub(crate) cfg: SamplerConfig,
    pub(crate) n: u32,
    pub(crate) backend: &'static str,
    /// The last call's requests, converted ([`ReqCache`]).
    pub(crate) reqs: Mutex<ReqCache>,
}

/// The requests of one call, as the `&[Request]` a step takes, without
/// cloning them (cloning 64 requests took 1.5 us of py-2's 7.2 us binding
/// overhead, docs/bench/py-s6/NOTES.md; these copies 0.8 us): bitwise copies of the `Request`s inside the `Request`
/// objects, which this batch keeps alive and never drops.
pub(crate) struct ReqBatch<'py> {
    /// Strong references: the objects (and the heap data the copies point
    /// to) outlive the batch even if the caller's list changes meanwhile
    /// (another thread, while a host step runs without the GIL).
    pub(crate) _keep: Vec<Bound<'py, PyRequest>>,
    pub(crate) copies: Vec<std::mem::ManuallyDrop<Request>>,
}

impl<'py> ReqBatch<'py> {
    pub(crate) fn new(keep: Vec<Bound<'py, PyRequest>>) -> ReqBatch<'py> {
        // SAFETY: `PyRequest` is frozen and `Request` has no interior mutability (plain values
        // and `Vec`s; keep it so, or clone here), so the
        // originals are never written or dropped while `_keep` holds them; the copies are only
        // read through `&[Request]` and never dropped (`ManuallyDrop`), so nothing is freed twice.
        let copies =
            keep.iter().map(|r| std::mem::ManuallyDrop::new(unsafe { std::ptr::read(&r.get().inner) })).collect();
        ReqBatch { _keep: keep, copies }
    }
}

impl std::ops::Deref for ReqBatch<'_> {
    type Target = [Request];
    fn deref(&self) -> &[Request] {
        // SAFETY: `ManuallyDrop<T>` is `repr(transparent)` over `T`.
        unsafe { std::slice::from_raw_parts(self.copies.as_ptr().cast::<Request>(), self.copies.len()) }
    }
}

fn not_a_request(i: usize, r: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!("requests[{i}] must be a Request, got {}", type_name(r)))
}

fn not_a_list(requests: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!("requests must be a list of Request, got {}", type_name(requests)))
}

pub(crate) fn requests_arg<'py>(requests: &Bound<'py, PyAny>) -> PyResult<ReqBatch<'py>> {
    // Fast path for the usual list.
    if let Ok(list) = requests.cast::<PyList>() {
        let mut keep = Vec::with_capacity(list.len());
        for (i, r) in list.iter().enumerate() {
            keep.push(r.cast_into::<PyRequest>().map_err(|e| not_a_request(i, &e.into_inner()))?);
        }
        return Ok(ReqBatch::new(keep));
    }
    let items: Vec<Bound<'_, PyAny>> =
        requests.try_iter().map_err(|_| not_a_list(requests))?.collect::<PyResult<_>>()?;
    let keep = items
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.cast_into::<PyRequest>().map_err(|e| not_a_request(i, &e.into_inner())))
        .collect::<PyResult<_>>()?;
    Ok(ReqBatch::new(keep))
}

/// The requests of a `Sampler`'s last call, converted, kept for the next one
/// (issue 26): an engine passes the same `Request` objects step after step
/// (or changes a few), and a `Request` is frozen, so an entry whose object
/// is the one at the same index last time is reused as it is (one pointer
/// compare) and only the others are converted (the bitwise copies of
/// [`ReqBatch`]). Converting 64 requests cost about 1.2 us of a call on the
/// H200 host. The strong references keep the last call's requests alive until
/// the next call changes them, or the sampler goes.
#[derive(Default)]
pub(crate) struct ReqCache {
    /// The objects the copies come from (index i: `requests[i]` of the last call).
    keep: Vec<Py<PyRequest>>,
    copies: Vec<std::mem::ManuallyDrop<Request>>,
    /// Rows per request, shared with the outputs, and whether one is a tree request
    /// (remade only when an entry changes).
    rows: Option<RowCounts>,
    tree: bool,
}

impl ReqCache {
    /// Makes the cache hold `requests` (a list, or any iterable of `Request`).
    /// On an error (not a Request) every entry stays a valid copy of the object kept beside it.
    pub(crate) fn update(&mut self, requests: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = if let Ok(list) = requests.cast::<PyList>() {
            let n = list.len();
            for i in 0..n {
                // SAFETY: `i < len(list)`; a borrowed reference, compared, or made an owned
                // one at once: no Python code runs in between that could change the list.
                let item = unsafe { pyo3::ffi::PyList_GetItem(list.as_ptr(), i as pyo3::ffi::Py_ssize_t) };
                if self.keep.get(i).is_some_and(|k| k.as_ptr() == item) {
                    continue; // the same (frozen) object as last call
                }
                self.set(i, unsafe { Bound::from_borrowed_ptr(list.py(), item) })?;
            }
            n
        } else {
            let mut n = 0;
            for (i, r) in requests.try_iter().map_err(|_| not_a_list(requests))?.enumerate() {
                let r = r?;
                if self.keep.get(i).is_none_or(|k| k.as_ptr() != r.as_ptr()) {
                    self.set(i, r)?;
                }
                n = i + 1;
            }
            n
        };
        if self.keep.len() != n {
            self.copies.truncate(n); // copies only: nothing to drop
            for k in self.keep.drain(n..) {
                drop(k.into_bound(requests.py())); // (a `Bound`'s drop: no thread-local GIL check)
            }
            self.rows = None;
        }
        if self.rows.is_none() {
            self.rows = Some(self.as_slice().iter().map(Request::rows).collect());
            self.tree = cuda::has_tree(self.as_slice());
        }
        Ok(())
    }
    /// Entry `i` (at most one past the last) becomes a copy of `r`'s request.
    fn set(&mut self, i: usize, r: Bound<'_, PyAny>) -> PyResult<()> {
        let r = r.cast_into::<PyRequest>().map_err(|e| not_a_request(i, &e.into_inner()))?;
        let src: *const Request = &r.get().inner;
        self.rows = None;
        let new = i == self.copies.len();
        if new {
            self.copies.reserve(1);
        }
        // SAFETY: as in `ReqBatch::new` (`keep[i]` holds the frozen original while the copy
        // lives): written in place, one copy of 200-odd bytes (`i <= len`, capacity reserved).
        // An old copy there is overwritten, never dropped, before its original goes.
        unsafe {
            std::ptr::copy_nonoverlapping(src, self.copies.as_mut_ptr().add(i).cast::<Request>(), 1);
            if new {
                self.copies.set_len(i + 1);
            }
        }
        if new {
            self.keep.push(r.unbind());
        } else {
            // Released as a `Bound`: a `Py`'s drop looks up the thread's GIL state.
            let py = r.py();
            drop(std::mem::replace(&mut self.keep[i], r.unbind()).into_bound(py));
        }
        Ok(())
    }
    pub(crate) fn as_slice(&self) -> &[Request] {
        // SAFETY: `ManuallyDrop<T>` is `repr(transparent)` over `T`.
        unsafe { std::slice::from_raw_parts(self.copies.as_ptr().cast::<Request>(), self.copies.len()) }
    }
}

/// A call's requests: the sampler's [`ReqCache`], or converted for this call
/// alone when another call holds the cache (a host step on another thread, a
/// re-entrant call).
pub(crate) enum Reqs<'s, 'py> {
    Cached(std::sync::MutexGuard<'s, ReqCache>),
    Fresh(ReqBatch<'py>, RowCounts),
}

impl std::ops::Deref for Reqs<'_, '_> {
    type Target = [Request];
    fn deref(&self) -> &[Request] {
        match self {
            Reqs::Cached(c) => c.as_slice(),
            Reqs::Fresh(b, _) => b,
        }
    }
}

impl Reqs<'_, '_> {
    /// Rows per request (shared, not copied).
    pub(crate) fn rows(&self) -> RowCounts {
        match self {
            Reqs::Cached(c) => c.rows.clone().expect("set by update"),
            Reqs::Fresh(_, r) => r.clone(),
        }
    }
    /// Whether a request is a tree request.
    pub(crate) fn any_tree(&self) -> bool {
        match self {
            Reqs::Cached(c) => c.tree,
            Reqs::Fresh(b, _) => cuda::has_tree(b),
        }
    }
}

impl PySampler {
    /// `requests` converted for a step: through the cache when no other call holds it.
    pub(crate) fn requests<'s, 'py>(&'s self, requests: &Bound<'py, PyAny>) -> PyResult<Reqs<'s, 'py>> {
        match self.reqs.try_lock() {
            Ok(mut c) => {
                c.update(requests)?;
                Ok(Reqs::Cached(c))
            }
            // A panic cannot leave an entry half-written (each is set whole): reuse it.
            Err(std::sync::TryLockError::Poisoned(p)) => {
                let mut c = p.into_inner();
                c.update(requests)?;
                Ok(Reqs::Cached(c))
            }
            Err(std::sync::TryLockError::WouldBlock) => {
                let b = requests_arg(requests)?;
                let rows = b.iter().map(Request::rows).collect();
                Ok(Reqs::Fresh(b, rows))
            }
        }
    }
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Sampler> {
        // A panic inside a step cannot leave the sampler half-updated (steps are pure).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// The lock taken while holding the GIL: when another thread holds it (in
    /// a host step, GIL released), wait for it with the GIL released, so that
    /// thread can take the GIL back to finish.
    pub(crate) fn lock_gil(&self, py: Python<'_>) -> std::sync::MutexGuard<'_, Sampler> {
        loop {
            match self.inner.try_lock() {
                Ok(g) => return g,
                Err(std::sync::TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => py.detach(|| drop(self.lock())),
            }
        }
    }
}

#[pymethods]
impl PySampler {
    /// `vocab_size` V (1..=524288), `force_topk` N (0 or >= V = off), `nextn`
    /// draft tokens per step, `backend` `"auto"|"cpu"|"cuda"|"ascend"`.
    /// `reuse_outputs` (CUDA, off by default): a step's output buffer may be
    /// one of an earlier step's that nothing refers to any more (no result,
    /// no view; same stream, same size) instead of a new torch allocation; a
    /// result still held is never overwritten (see `CudaStepOutput`). Off by
    /// default: on the H200 (docs/bench/run13/NOTES.md) its reference checks cost more
    /// host time than torch's allocator saves; `out=` is the cheap reuse.
    /// Raises ValueError for a bad configuration (section 9), RuntimeError
    /// when a forced backend is unavailable.
    #[new]
    #[pyo3(signature = (vocab_size, *, force_topk=None, nextn=None, backend="auto", reuse_outputs=false))]
    pub(crate) fn new(
        py: Python<'_>,
        vocab_size: &Bound<'_, PyAny>,
        force_topk: Option<&Bound<'_, PyAny>>,
        nextn: Option<&Bound<'_, PyAny>>,
        backend: &str,
        reuse_outputs: bool,
    ) -> PyResult<Self> {
        let cfg = SamplerConfig {
            vocab_size: u32_opt(Some(vocab_size), "vocab_size", 0)?,
            force_topk: u32_opt(force_topk, "force_topk", 0)?,
            nextn: u32_opt(nextn, "nextn", 5)?,
            backend: parse_backend(backend)?,
        };
        let c = cfg.clone();
        let s = py.detach(move || Sampler::new(c)).map_err(config_err)?;
        let pool = reuse_outputs.then(|| Mutex::new(cuda::OutPool::default()));
        Ok(PySampler { n: s.n(), backend: s.backend_name(), inner: Mutex::new(s), pool, cfg, reqs: Mutex::default() })
    }

    /// Samples one step. `logits`: `[R, V]` row-major contiguous, R = sum of
    /// the requests' rows, in request order:
    /// - on the host: float32 (borrowed, no copy) or bfloat16 / float16
    ///   (widened to f32); returns a `StepOutput` (numpy / torch CPU), the
    ///   GIL released while the step runs;
    /// - on a CUDA device (torch, or any DLPack kDLCUDA producer): float32,
    ///   bfloat16 or float16, read in place; the step is enqueued on
    ///   `stream` (default: torch's current stream of that device; the
    ///   legacy default stream for other producers) and a `CudaStepOutput`
    ///   of torch tensors on that device is returned without waiting.
    /// `out` (CUDA): an earlier `CudaStepOutput` of the same shape whose
    /// buffer is written again (and returned) instead of a new allocation;
    /// ValueError with host logits.
    /// A bad request only gets an error status. A `Request` object at the same
    /// index as in this sampler's last call is not converted again (`ReqCache`):
    /// the sampler keeps the last call's requests until its next call.
    #[pyo3(signature = (logits, requests, *, stream=None, out=None))]
    pub(crate) fn sample(
        &self,
        py: Python<'_>,
        logits: &Bound<'_, PyAny>,
        requests: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
        out: Option<&Bound<'_, cuda::CudaStepOutput>>,
    ) -> PyResult<Py<PyAny>> {
        if let Some(c) = cuda::import(logits, "logits", &[2], stream)? {
            if c.vocab() != self.cfg.vocab_size as usize {
                return Err(value_err(format!(
                    "logits: expected shape [R, vocab_size = {}], got {:?}",
                    self.cfg.vocab_size, c.t.shape
                )));
            }
            let reqs = self.requests(requests)?;
            let mut guard = self.lock_gil(py);
            // Never blocks: the GIL is held, so a pool lock held elsewhere is a re-entrant call.
            let mut pool = self.pool.as_ref().and_then(|p| p.try_lock().ok());
            let buf = cuda::step(
                py,
                &mut guard,
                &c,
                &reqs,
                cuda::Want::All,
                reqs.any_tree(),
                out.map(|o| o.get()),
                pool.as_deref_mut(),
            )?;
            drop(pool);
            drop(guard);
            if let Some(o) = out {
                return Ok(o.clone().into_any().unbind());
            }
            return Ok(Py::new(py, cuda::CudaStepOutput::new(buf, reqs.rows()).with_trees(&reqs))?.into_any());
        }
        if out.is_some() {
            // Host logits return a new host StepOutput: an ignored `out=` would look written.
            return Err(value_err("out: a CudaStepOutput is written only by a step on CUDA logits; these logits are on the host (drop out=)"));
        }
        let l = Logits::import(logits, "logits", &[2])?;
        check_vocab(&l, "logits", self.cfg.vocab_size)?;
        let reqs = self.requests(requests)?;
        let (data, rs): (&[f32], &[Request]) = (l.data(), &reqs);
        let res = py
            .detach(|| {
                let mut g = self.lock();
                let t = api_clock::start();
                let r = g.sample(data, rs);
                api_clock::record(api_clock::since(t));
                r
            })
            .map_err(batch_err)?;
        Ok(Py::new(py, step_output(&Out::for_input(logits), res, reqs.rows())?)?.into_any())
    }

    /// Samples one step from probability rows (SAMPLER.md section 12):
    /// `probs` `[R, V]` host float32 (or f16 / bf16, widened), each row valid
    /// when finite, non-negative and not all zero; prefill and decode
    /// (verify) requests, whose temperature must be 1 (the rows take none).
    /// Computed on the host whatever the backend (section 12's order is not
    /// any logit row's); returns a `StepOutput`. ValueError for CUDA tensors.
    fn sample_probs(
        &self,
        py: Python<'_>,
        probs: &Bound<'_, PyAny>,
        requests: &Bound<'_, PyAny>,
    ) -> PyResult<PyStepOutput> {
        if dlpack::is_cuda(probs) {
            return Err(value_err(
                "probs: probability rows are sampled on the host (SAMPLER.md section 12); pass a host array",
            ));
        }
        let l = Logits::import(probs, "probs", &[2])?;
        check_vocab(&l, "probs", self.cfg.vocab_size)?;
        let reqs = self.requests(requests)?;
        let (data, rs): (&[f32], &[Request]) = (l.data(), &reqs);
        let (v, n, nextn) = (self.cfg.vocab_size, self.n, self.cfg.nextn);
        let (res, _) = py.detach(|| sampler_host::probs::sample(v, n, nextn, data, rs)).map_err(batch_err)?;
        step_output(&Out::for_input(probs), res, reqs.rows())
    }

    /// The host-side error text of `request` on this sampler (its
    /// parameters, kind and shape; section 1), or None when it is valid.
    /// A `CudaStepOutput` status of -1 means this check failed.
    pub(crate) fn check(&self, py: Python<'_>, request: PyRef<'_, PyRequest>) -> Option<String> {
        self.lock_gil(py).check(&request.inner).err().map(|e| e.to_string())
    }

    /// Like `sample`, and also returns the processed top-N distribution of
    /// the logits rows `rows`: `(output, ids [len(rows), N] int32,
    /// logprobs [len(rows), N] float32)` in the order of section 3.6 (-inf
    /// for removed candidates). Used to fill the MTP info pool from draft draws.
    pub(crate) fn sample_with_processed(
        &self,
        py: Python<'_>,
        logits: &Bound<'_, PyAny>,
        requests: &Bound<'_, PyAny>,
        rows: &Bound<'_, PyAny>,
    ) -> PyResult<(PyStepOutput, Py<PyAny>, Py<PyAny>)> {
        let l = Logits::import(logits, "logits", &[2])?;
        check_vocab(&l, "logits", self.cfg.vocab_size)?;
        let reqs = self.requests(requests)?;
        let rows: Vec<usize> = i64_list(rows, "rows")?
            .into_iter()
            .map(|r| usize::try_from(r).map_err(|_| value_err(format!("rows: {r} is not a row index"))))
            .collect::<PyResult<_>>()?;
        let (data, rs): (&[f32], &[Request]) = (l.data(), &reqs);
        let (res, p) = py.detach(|| self.lock().sample_with_processed(data, rs, &rows)).map_err(batch_err)?;
        let out = Out::for_input(logits);
        let (nr, n) = (p.rows.len(), p.n);
        let ids = out.arr(p.ids, &[nr, n])?;
        let lps = out.arr(p.logprobs, &[nr, n])?;
        Ok((step_output(&out, res, reqs.rows())?, ids, lps))
    }

    /// Vocabulary size V.
    #[getter]
    pub(crate) fn vocab_size(&self) -> u32 {
        self.cfg.vocab_size
    }
    /// Force top-k as configured (0 = off).
    #[getter]
    pub(crate) fn force_topk(&self) -> u32 {
        self.cfg.force_topk
    }
    /// Candidate width N (V when force top-k is off).
    #[getter]
    pub(crate) fn n(&self) -> u32 {
        self.n
    }
    /// Draft tokens per step.
    #[getter]
    pub(crate) fn nextn(&self) -> u32 {
        self.cfg.nextn
    }
    /// Backend in use: `"cpu"` or `"cuda"`.
    #[getter]
    pub(crate) fn backend(&self) -> &'static str {
        self.backend
    }
    pub(crate) fn __repr__(&self) -> String {
        format!(
            "Sampler(vocab_size={}, force_topk={}, nextn={}, backend={:?})",
            self.cfg.vocab_size, self.cfg.force_topk, self.cfg.nextn, self.backend
        )
    }
}

// ---------------------------------------------------------------- MTP info pool

/// The MTP info pool (sections 6 and 9): the draft model's processed
/// distribution of every pending draft token, `(max_num_seqs + 1) * nextn`
/// rows of N logprobs (+ N ids when N < V). Slot `max_num_seqs` is scratch.
#[pyclass(name = "MtpInfoPool", module = "sampler_py")]
pub(crate) struct PyMtpInfoPool {
    pub(crate) inner: MtpInfoPool,
}

pub(crate) fn engine_err(e: EngineError) -> PyErr {
    value_err(e.to_string())
}

#[pymethods]
impl PyMtpInfoPool {
    /// `n >= vocab` means force top-k off (N = V). Raises ValueError for zero
    /// sizes, negative ints or a pool too large to allocate (naming the argument).
    #[new]
    pub(crate) fn new(
        max_num_seqs: &Bound<'_, PyAny>,
        nextn: &Bound<'_, PyAny>,
        n: &Bound<'_, PyAny>,
        vocab: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let (m, k) = (usize_arg(max_num_seqs, "max_num_seqs")?, usize_arg(nextn, "nextn")?);
        Ok(PyMtpInfoPool {
            inner: MtpInfoPool::new(m, k, usize_arg(n, "n")?, usize_arg(vocab, "vocab")?).map_err(engine_err)?,
        })
    }
    /// A free slot, or None when all are in use.
    pub(crate) fn alloc(&mut self) -> Option<usize> {
        self.inner.alloc()
    }
    /// Returns a slot (freeing a free slot is a no-op).
    pub(crate) fn release(&mut self, slot: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.release(usize_arg(slot, "slot")?);
        Ok(())
    }
    /// Stores the processed top-N distribution (`ids`, `logprobs`: N each)
    /// that proposed draft `i` (0-based) of `slot`. ValueError on bad sizes.
    pub(crate) fn write(
        &mut self,
        slot: &Bound<'_, PyAny>,
        i: &Bound<'_, PyAny>,
        ids: &Bound<'_, PyAny>,
        logprobs: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (slot, i) = (usize_arg(slot, "slot")?, usize_arg(i, "i")?);
        let ids = ids_list(ids, "ids")?;
        let lps = f32_list(logprobs, "logprobs")?;
        self.inner.write(slot, i, &ids, &lps).map_err(engine_err)
    }
    /// The stored distribution of draft `i` of `slot` as a `DraftDist`
    /// (never written: q = 0, one id at -inf, so its draft is always rejected).
    pub(crate) fn read(&self, slot: &Bound<'_, PyAny>, i: &Bound<'_, PyAny>) -> PyResult<PyDraftDist> {
        Ok(PyDraftDist { inner: self.inner.read(usize_arg(slot, "slot")?, usize_arg(i, "i")?) })
    }
    /// Pool rows `(max_num_seqs + 1) * nextn`.
    #[getter]
    pub(crate) fn rows(&self) -> usize {
        self.inner.rows()
    }
    /// Width N.
    #[getter]
    pub(crate) fn n(&self) -> usize {
        self.inner.n()
    }
    /// Draft tokens per slot.
    #[getter]
    pub(crate) fn nextn(&self) -> usize {
        self.inner.nextn()
    }
    /// Bytes held (section 9's formula).
    #[getter]
    pub(crate) fn nbytes(&self) -> u64 {
        self.inner.bytes()
    }
    /// The scratch slot (never handed out).
    #[getter]
    pub(crate) fn scratch_slot(&self) -> usize {
        self.inner.scratch_slot()
    }
}
