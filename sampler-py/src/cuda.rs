//! Torch CUDA tensors in and out (issue 14): a step on logits in device
//! memory, enqueued on the caller's stream, outputs left on the device.
//!
//! One call, with no host synchronisation and no allocation of our own:
//! 1. the logits are borrowed in place ([`crate::dlpack::import_cuda`]);
//! 2. the caller's stream (torch's current stream of the logits' device, or
//!    `stream=`) is wrapped, not owned; the sampler's stream waits on it by
//!    an event ([`sampler_host::interop::CudaLogits`]);
//! 3. the step is enqueued ([`sampler_host::Sampler::sample_async`]);
//! 4. the kernels write the outputs straight into ONE torch `uint8` tensor
//!    on the logits' device (no copy; `Sampler::sample_async_into`): a range
//!    of a slab from torch's caching allocator ([`slab_take`]), or a buffer of
//!    its own; typed views of it are made when read;
//! 5. the caller's stream waits on the sampler's stream by an event, so
//!    whatever the caller enqueues next (reading the outputs, freeing or
//!    reusing the logits' memory) runs after the sampler is done.
//!
//! Under `torch.cuda.graph` capture the same call is recorded: the events
//! fork the sampler's stream into the capture and join it back; the step's
//! metadata goes to a pinned range of its own (`CudaDevice::capture_pool`),
//! so a replay repeats the captured step; torch's allocation comes from the
//! graph's pool. Run the same step shape once before capturing (torch's
//! warm-up rule): a capture that would grow a sampler buffer is an error.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::IntoPyDict;

use sampler_host::interop::{CudaLogits, Dtype as LDtype, OutputPtrs};
use sampler_host::{Request, Sampler};

use crate::dlpack::{self, CudaBorrowed, CudaDtype, TorchApi};

fn value_err(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}

/// DLPack / CUDA driver value of the legacy default stream (`CU_STREAM_LEGACY`).
pub const LEGACY_STREAM: u64 = 1;

/// The raw stream of a `stream=` argument: an int (a `cudaStream_t`), or an
/// object with `.cuda_stream` (torch.cuda.Stream) or `.ptr` (cupy). `None`: not given.
pub fn stream_arg(stream: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    let Some(s) = stream.filter(|s| !s.is_none()) else { return Ok(None) };
    let py = s.py();
    for attr in [pyo3::intern!(py, "cuda_stream"), pyo3::intern!(py, "ptr")] {
        if let Ok(v) = s.getattr(attr) {
            return v
                .extract::<u64>()
                .map(Some)
                .map_err(|_| value_err("stream: .cuda_stream / .ptr is not a non-negative int"));
        }
    }
    s.extract::<u64>().map(Some).map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err("stream must be an int (cudaStream_t), a torch.cuda.Stream or None")
    })
}

/// Logits on a CUDA device and the stream that orders them.
pub struct CudaIn<'py> {
    pub t: CudaBorrowed<'py>,
    pub stream: u64,
    /// The stream is torch's current stream of the logits' device (no `stream=`, a torch
    /// tensor): the stream torch's allocator gives the output memory to.
    pub current: bool,
}

impl CudaIn<'_> {
    pub fn vocab(&self) -> usize {
        *self.t.shape.last().unwrap_or(&0)
    }
    pub fn rows(&self) -> usize {
        self.t.shape.iter().rev().skip(1).product()
    }
}

/// `obj` as CUDA logits (`None` when it is not on a CUDA device).
pub fn import<'py>(
    obj: &Bound<'py, PyAny>,
    arg: &str,
    ndims: &[usize],
    stream: Option<&Bound<'py, PyAny>>,
) -> PyResult<Option<CudaIn<'py>>> {
    let explicit = stream_arg(stream)?;
    let Some(t) = dlpack::import_cuda(obj, arg, ndims, explicit.unwrap_or(LEGACY_STREAM))? else {
        if explicit.is_some() && !obj.is_none() {
            // A stream for host logits means nothing: say so rather than ignore it.
            return Err(value_err(format!("stream: given, but {arg} is not a CUDA tensor")));
        }
        return Ok(None);
    };
    let (stream, current) = match explicit {
        Some(s) => (s, false),
        None if t.torch => {
            let api = dlpack::torch_api(obj).expect("a torch tensor");
            let dev = t.device.into_pyobject(obj.py())?;
            (dlpack::call_one(api.raw_stream.bind(obj.py()), dev.as_any())?.extract::<u64>()?, true)
        }
        None => (LEGACY_STREAM, false),
    };
    Ok(Some(CudaIn { t, stream, current }))
}

/// Which outputs a call copies out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// `[R]` int32 tokens only (the functional sampling call).
    Tokens,
    /// Everything in [`CudaStepOutput`].
    All,
}

/// Offsets (bytes) and element counts of the outputs in the flat buffer.
pub(crate) const SEGS: usize = 8;
/// The segment table of one step's flat buffer.
pub(crate) type Segs = [(usize, usize); SEGS];
/// A step's output: the tensor its outputs live in, the step's byte range in
/// it (`None`: the whole tensor), its segments (relative to that range) and (R, k, G).
pub(crate) type StepBuf = (Py<PyAny>, Option<(usize, usize)>, Segs, (usize, usize, usize));
const ALIGN: usize = 16;

/// The output segments `(byte offset, elements)` of a step of R rows, width
/// k and G requests, the buffer's bytes, and how many segments `want` fills.
/// The last segment, the tree paths `[R]`, is empty unless `tree` (a step with
/// a tree request).
pub(crate) fn layout(r: usize, k: usize, g: usize, want: Want, tree: bool) -> ([(usize, usize); SEGS], usize, usize) {
    let counts = [r, r, r * k, r * k, r, g, g, if tree { r } else { 0 }];
    let mut segs = [(0usize, 0usize); SEGS];
    let mut total = 0;
    let n_seg = if want == Want::All { SEGS } else { 1 };
    for i in 0..n_seg {
        segs[i] = (total, counts[i]);
        total += (counts[i] * 4).div_ceil(ALIGN) * ALIGN;
    }
    (segs, total, n_seg)
}

/// Runs one step on CUDA logits. Returns the flat output tensor and the
/// segment table `(byte offset, elements)` for tokens, logprobs, top_ids,
/// top_logprobs, sum_smaller_probs, accepted, status, and (R, k, G).
/// The kernels write the outputs straight into the torch buffer (no copy);
/// with [`Want::Tokens`] only the tokens go there (the rest stays in the
/// sampler's own buffers). Errors: a sampler not on CUDA or on another
/// device (ValueError); batch errors as [`crate::batch_err`]. `tree`: whether `reqs` has a tree
/// request ([`has_tree`]; the sampler's request cache knows it without reading the requests).
#[allow(clippy::too_many_arguments)]
pub fn step(
    py: Python<'_>,
    s: &mut Sampler,
    c: &CudaIn<'_>,
    reqs: &[Request],
    want: Want,
    tree: bool,
    reuse: Option<&CudaStepOutput>,
    pool: Option<&mut OutPool>,
) -> PyResult<StepBuf> {
    let Some(cs) = s.cuda_stream() else {
        return Err(value_err("logits: a CUDA tensor needs a sampler on the CUDA backend (backend=\"cuda\", or \"auto\" with a GPU); this one runs on the CPU"));
    };
    let ctx = cs.context().clone();
    if c.t.device < 0 || c.t.device as usize != ctx.ordinal() {
        return Err(value_err(format!(
            "logits: on cuda:{} but the sampler runs on cuda:{}",
            c.t.device,
            ctx.ordinal()
        )));
    }
    // SAFETY: the caller's stream of this context, alive during the call (torch's current
    // stream, or the caller's `stream=`); we never destroy it.
    let caller = unsafe { ctx.wrap_borrowed_stream(c.stream as usize as _) };
    let dtype = match c.t.dtype {
        CudaDtype::F32 => LDtype::F32,
        CudaDtype::Bf16 => LDtype::Bf16,
        CudaDtype::F16 => LDtype::F16,
    };
    let len: usize = c.t.shape.iter().product();
    // The Rust API's share of this call starts here (as `_bench_rust_step_cuda` times it).
    let t_api = crate::api_clock::start();
    let mut callback_ns = 0u64;
    // SAFETY: `len` contiguous elements of `dtype` on this device (checked on import), borrowed
    // for the call: the caller's stream waits for the sampler before it can reuse them.
    let logits = unsafe { CudaLogits::from_raw(c.t.ptr, len, dtype, caller.clone()) };
    // Pooled buffers are for eager steps: a capture allocates from the graph's pool, and a
    // buffer a graph writes on replay must never be handed to an eager step.
    // SAFETY: the caller's live stream (above).
    let eager = || matches!(unsafe { cudarc::driver::result::stream::is_capturing(caller.cu_stream()) }, Ok(st) if st == cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE);
    // Fresh outputs of an eager step on torch's current stream come from a slab (`slab_take`).
    let slab_ok = reuse.is_none() && c.t.torch && c.current;
    let eager_now = reuse.is_none() && (pool.is_some() || slab_ok) && eager();
    let mut pool = pool.filter(|_| eager_now);
    let slab_ok = slab_ok && eager_now && pool.is_none();
    let api = if c.t.torch {
        dlpack::torch_api(c.t.keep()).expect("torch tensor")
    } else {
        dlpack::torch_api_py(py).map_err(|e| value_err(format!("CUDA outputs are torch tensors: {e}")))?
    };
    // The output buffer is allocated by torch (caching allocator; the graph's pool under
    // capture) once the step's shape is known, inside the sampler's callback.
    type Made<'py> = PyResult<(Bound<'py, PyAny>, Option<(usize, usize)>, Segs, (usize, usize, usize))>;
    let mut made: Option<Made<'_>> = None;
    // Tree requests' paths (section 11.9) get a segment of their own, written by the kernels.
    let tree = want == Want::All && tree;
    let enqueued = s
        .sample_async_into(logits, reqs, |r, k, g| {
            // Our own work inside the Rust API's call (the output buffer): binding time.
            let t_cb = crate::api_clock::start();
            let res = (|| -> PyResult<_> {
                let (segs, total, n_seg) = layout(r, k, g, want, tree);
                // The buffer and its device address (known already for a pooled one).
                let tokens = want == Want::Tokens;
                let bytes = if tokens { r * 4 } else { total.max(ALIGN) };
                // The buffer, the step's byte range in it, and its device address (known already
                // for a pooled or slab one).
                let (flat, region, base) = if let Some(o) = reuse {
                    // The caller's earlier output of this shape: its buffer is written again.
                    if (o.r, o.k, o.g) != (r, k, g) || o.segs != segs {
                        return Err(value_err(format!("out: a CudaStepOutput of R = {}, k = {}, B = {} cannot hold a step of R = {r}, k = {k}, B = {g}", o.r, o.k, o.g)));
                    }
                    (o.flat.bind(py).clone(), o.region, None)
                } else if let Some((f, off, base)) = if slab_ok { slab_take(py, c, api, tokens, bytes)? } else { None } {
                    (f, Some((off, bytes)), Some(base))
                } else {
                    match pool.as_deref_mut().and_then(|p| p.take(py, (c.t.device, c.stream), bytes, tokens)) {
                        Some((f, base)) => (f, None, Some(base)),
                        None => {
                            let f = alloc_out(py, c, api, tokens, r, bytes)?;
                            if let Some(p) = pool.as_deref_mut() {
                                p.keep(py, &f, (c.t.device, c.stream), bytes, tokens);
                            }
                            (f, None, None)
                        }
                    }
                };
                let base: u64 = match base {
                    Some(b) => b,
                    None => {
                        let p: u64 = flat.call_method0(pyo3::intern!(py, "data_ptr"))?.extract()?;
                        p + region.map_or(0, |x| x.0) as u64
                    }
                };
                Ok((flat, region, segs, (r, k, g), base, n_seg))
            })();
            callback_ns = crate::api_clock::since(t_cb);
            match res {
                Ok((flat, region, segs, rkg, base, n_seg)) => {
                    let at = |i: usize| (i < n_seg && segs[i].1 > 0).then(|| base + segs[i].0 as u64);
                    made = Some(Ok((flat, region, segs, rkg)));
                    Some(OutputPtrs { tokens: at(0), logprobs: at(1), top_ids: at(2), top_logprobs: at(3), sum_smaller_probs: at(4), accepted: at(5), status: at(6), path: at(7) })
                }
                Err(e) => {
                    made = Some(Err(e));
                    None
                }
            }
        })
        .map_err(crate::batch_err)?;
    let api_ns = crate::api_clock::since(t_api).saturating_sub(callback_ns);
    let (flat, mut region, segs, (r, k, g)) = made.expect("the callback ran")?;
    debug_assert!(enqueued);
    // The pool's own tensor object never reaches the caller (a DLPack export of it would hold
    // the buffer without a view the use count sees): the tokens are handed out as an alias.
    // Tokens in a slab: their `[R]` int32 slice of it.
    let flat = match region.take_if(|_| want == Want::Tokens) {
        // A slice (torch's indexing fast path) costs less than `narrow` (0.8 vs 1.3 us, CPU).
        Some((off, _)) => flat.get_item(cuda_slice(py, off / 4, r))?,
        None if want == Want::Tokens && pool.is_some() => flat.call_method1(pyo3::intern!(py, "view"), (-1,))?,
        None => flat,
    };
    let at = region.map_or(0, |x| x.0);
    if r == 0 && want == Want::All && g > 0 {
        // No rows: no kernel ran. The host knows every status (a request without rows can
        // only fail its host checks); accepted counts are 0.
        let st: Vec<i32> = reqs.iter().map(|q| if s.check(q).is_err() { -1 } else { 0 }).collect();
        let host = pyo3::types::PyList::new(py, &st)?;
        let t = py.import("torch")?.call_method(
            "tensor",
            (host,),
            Some(&[("dtype", api.int32.bind(py))].into_py_dict(py)?),
        )?;
        let (off, n) = (at + segs[6].0, segs[6].1);
        let dst = flat
            .call_method1(pyo3::intern!(py, "narrow"), (0, off, n * 4))?
            .call_method1(pyo3::intern!(py, "view"), (api.int32.bind(py),))?;
        dst.call_method1(pyo3::intern!(py, "copy_"), (t,))?;
        let (off, n) = (at + segs[5].0, segs[5].1);
        flat.call_method1(pyo3::intern!(py, "narrow"), (0, off, n * 4))?
            .call_method1(pyo3::intern!(py, "zero_"), ())?;
    }
    // The caller's next work (reading the outputs, reusing the logits) waits for ours.
    let t_join = crate::api_clock::start();
    caller.join(&cs).map_err(|e| crate::device_err(format!("joining the caller's stream: {e:?}")))?;
    crate::api_clock::record(api_ns + crate::api_clock::since(t_join));
    Ok((flat.unbind(), region, segs, (r, k, g)))
}

/// Whether `reqs` has a tree request (its paths get an output segment).
pub fn has_tree(reqs: &[Request]) -> bool {
    reqs.iter().any(|q| matches!(q.kind, sampler_host::RequestKind::Tree { .. }))
}

/// The slice `start..start + n` (elements), to index a 1-D tensor with.
pub(crate) fn cuda_slice(py: Python<'_>, start: usize, n: usize) -> Bound<'_, pyo3::types::PySlice> {
    pyo3::types::PySlice::new(py, start as isize, (start + n) as isize, 1)
}

/// A slab: one torch buffer whose consecutive ranges are fresh steps' outputs.
struct Slab {
    flat: Py<PyAny>,
    base: u64,
    /// (device, stream, int32 tokens-only slab).
    key: (i32, u64, bool),
    used: usize,
    cap: usize,
}

/// Fresh outputs (no `out=`, no output pool) of eager steps on torch's current
/// stream: ranges of a larger torch buffer, each handed out once and never
/// written again, so torch's allocator (and, when the result is dropped, its
/// free) runs once per slab instead of once per step: about 4.7 us of the
/// call at R = 64 on the H200 (docs/bench/run16-check). A slab goes back to
/// torch's allocator when its last result and every view of it are gone: a
/// result held keeps up to `SLAB_BYTES` alive. As for any torch tensor, a
/// result read on another stream must be `record_stream`-ed or read before
/// it is dropped.
static SLABS: std::sync::Mutex<Vec<Slab>> = std::sync::Mutex::new(Vec::new());
const SLAB_BYTES: usize = 64 << 10;
/// Off only by the bench hook `_bench_slabs` (an A/B of the slabs in one run).
pub(crate) static SLABS_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
/// Ranges start on torch's allocation alignment (512 bytes; 256 suffices for the kernels' 16).
const SLOT_ALIGN: usize = 256;
/// Slabs kept (one per device, stream and kind in use).
const SLABS_KEPT: usize = 4;

/// A fresh range of `bytes` for a step on `c` (the slab tensor, the range's byte
/// offset, its device address); `None` for outputs too large for a slab (a quarter
/// of it), or when the slab list is in use (a re-entrant call): allocate alone then.
pub(crate) fn slab_take<'py>(
    py: Python<'py>,
    c: &CudaIn<'py>,
    api: &TorchApi,
    tokens: bool,
    bytes: usize,
) -> PyResult<Option<(Bound<'py, PyAny>, usize, u64)>> {
    let need = bytes.div_ceil(SLOT_ALIGN) * SLOT_ALIGN;
    if need == 0 || need * 4 > SLAB_BYTES || !SLABS_ON.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(None);
    }
    let Ok(mut list) = SLABS.try_lock() else { return Ok(None) };
    let key = (c.t.device, c.stream, tokens);
    if let Some(i) = list.iter().position(|s| s.key == key) {
        let s = &mut list[i];
        if s.used + need <= s.cap {
            let f = s.flat.bind(py);
            // Still the same memory (a `resize_` of a view may have moved the shared storage).
            let p: u64 = f.call_method0(pyo3::intern!(py, "data_ptr"))?.extract()?;
            if p == s.base {
                let off = s.used;
                s.used += need;
                return Ok(Some((f.clone(), off, p + off as u64)));
            }
        }
        // Full (or moved): the results made from it keep it alive; new ranges come from a new one.
        list.remove(i);
    }
    let f = if tokens {
        new_empty(py, c, SLAB_BYTES / 4, api.kw_int32.bind(py))?
    } else {
        new_empty(py, c, SLAB_BYTES, api.kw_uint8.bind(py))?
    };
    let base: u64 = f.call_method0(pyo3::intern!(py, "data_ptr"))?.extract()?;
    if list.len() >= SLABS_KEPT {
        list.remove(0);
    }
    list.push(Slab { flat: f.clone().unbind(), base, key, used: need, cap: SLAB_BYTES });
    Ok(Some((f, 0, base)))
}

/// Output buffers of earlier eager steps, reused automatically when a step
/// of the same size runs on the same stream and nothing refers to the
/// buffer any more: no `CudaStepOutput`, no `buffer`, no tensor viewing it
/// (torch's storage use count, calibrated on the buffer when it is first
/// kept; the tracked tensor object itself is never handed out, only views
/// and aliases of it). That saved torch's allocator call before slabs
/// ([`slab_take`], the default now) did the same for every fresh output. A result the caller still holds, or
/// any view of it, is never written again. As with torch's own allocator, a
/// buffer last read on ANOTHER stream must be `record_stream`-ed or read
/// before it is dropped; `Sampler(reuse_outputs=False)` turns this off.
#[derive(Default)]
pub struct OutPool {
    entries: Vec<PoolEntry>,
    /// Set when the use-count sensor is missing or does not behave as
    /// calibrated (another torch): then every step allocates, as before.
    off: bool,
    /// The use count of a kept buffer nothing else refers to, measured on
    /// the first one (with a view made and dropped to prove the sensor sees it).
    free_count: Option<i64>,
}

struct PoolEntry {
    flat: Py<PyAny>,
    /// The buffer's storage object: keeps the `StorageImpl` that `cdata` names alive.
    _storage: Py<PyAny>,
    cdata: Py<PyAny>,
    /// Storage use count with only the pool holding the buffer.
    free_count: i64,
    base: u64,
    /// (device, caller's stream) it was last written on.
    stream: (i32, u64),
    bytes: usize,
    tokens: bool,
}

/// Buffers kept per pool: two per shape let a caller hold the previous result while the next step runs.
const POOL_CAP: usize = 4;

static USE_COUNT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn use_count(py: Python<'_>, cdata: &Bound<'_, PyAny>) -> PyResult<i64> {
    let f = USE_COUNT.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import("torch")?.getattr("_C")?.getattr("_storage_Use_Count")?.unbind())
    })?;
    f.bind(py).call1((cdata,))?.extract()
}

impl OutPool {
    /// A kept buffer of `bytes` for `stream` (device, stream) that nothing
    /// else refers to, and its device address.
    pub(crate) fn take<'py>(
        &mut self,
        py: Python<'py>,
        stream: (i32, u64),
        bytes: usize,
        tokens: bool,
    ) -> Option<(Bound<'py, PyAny>, u64)> {
        if self.off {
            return None;
        }
        for e in &self.entries {
            if e.stream != stream || e.bytes != bytes || e.tokens != tokens {
                continue;
            }
            let f = e.flat.bind(py);
            // Held only by the pool (a `CudaStepOutput` or `buffer` holds this very object).
            // SAFETY: a live object (held by the pool).
            if unsafe { pyo3::ffi::Py_REFCNT(f.as_ptr()) } != 1 {
                continue;
            }
            match use_count(py, e.cdata.bind(py)) {
                // No view of it anywhere.
                Ok(n) if n == e.free_count => {}
                Ok(_) => continue,
                Err(_) => {
                    self.off = true;
                    return None;
                }
            }
            // Still the same memory (a `resize_` of an alias may have moved the shared storage).
            match f.call_method0(pyo3::intern!(py, "data_ptr")).and_then(|p| p.extract::<u64>()) {
                Ok(p) if p == e.base => return Some((f.clone(), p)),
                _ => continue,
            }
        }
        None
    }

    /// Keeps a freshly allocated buffer (the first one calibrates the
    /// use-count sensor: it must see a view of it, else the pool turns off).
    pub(crate) fn keep(
        &mut self,
        py: Python<'_>,
        flat: &Bound<'_, PyAny>,
        stream: (i32, u64),
        bytes: usize,
        tokens: bool,
    ) {
        if self.off || bytes == 0 {
            return;
        }
        let entry = (|| -> PyResult<Option<PoolEntry>> {
            let storage = flat.call_method0(pyo3::intern!(py, "untyped_storage"))?;
            let cdata = storage.getattr(pyo3::intern!(py, "_cdata"))?;
            let free_count = use_count(py, &cdata)?;
            match self.free_count {
                Some(n) if n != free_count => return Ok(None),
                Some(_) => {}
                None => {
                    let view = flat.call_method1(pyo3::intern!(py, "view"), (-1,))?;
                    let with_view = use_count(py, &cdata)?;
                    drop(view);
                    if with_view != free_count + 1 || use_count(py, &cdata)? != free_count {
                        return Ok(None);
                    }
                    self.free_count = Some(free_count);
                }
            }
            let base: u64 = flat.call_method0(pyo3::intern!(py, "data_ptr"))?.extract()?;
            Ok(Some(PoolEntry {
                flat: flat.clone().unbind(),
                _storage: storage.unbind(),
                cdata: cdata.unbind(),
                free_count,
                base,
                stream,
                bytes,
                tokens,
            }))
        })();
        match entry {
            Ok(Some(e)) => {
                if self.entries.len() >= POOL_CAP {
                    self.entries.remove(0);
                }
                self.entries.push(e);
            }
            _ => {
                self.off = true;
                self.entries.clear();
            }
        }
    }
}

/// A new output buffer on the logits' device: `[r]` int32 tokens only, or
/// `bytes` uint8 for every output (torch's caching allocator; the graph's
/// pool under capture).
pub(crate) fn alloc_out<'py>(
    py: Python<'py>,
    c: &CudaIn<'py>,
    api: &TorchApi,
    tokens: bool,
    r: usize,
    bytes: usize,
) -> PyResult<Bound<'py, PyAny>> {
    if tokens {
        new_empty(py, c, r, api.kw_int32.bind(py))
    } else {
        new_empty(py, c, bytes, api.kw_uint8.bind(py))
    }
}

/// A 1-D tensor of `n` elements. The size goes as an int, not a 1-tuple: torch
/// parses it faster (1.5 vs 2.4 us a call from Python on the CPU, `bench/binding_profile.py`).
fn new_empty<'py>(
    py: Python<'py>,
    c: &CudaIn<'py>,
    n: usize,
    kw: &Bound<'py, pyo3::types::PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    if c.t.torch {
        // Same device as the logits, no device object to build.
        return c.t.keep().call_method(pyo3::intern!(py, "new_empty"), (n,), Some(kw));
    }
    let kw = kw.copy()?;
    kw.set_item(pyo3::intern!(py, "device"), format!("cuda:{}", c.t.device))?;
    py.import("torch")?.call_method("empty", (n,), Some(&kw))
}

/// Everything a step on CUDA logits returns, as torch tensors on the logits'
/// device (R rows, B requests, k = the step's top-logprobs width). They are
/// views of one buffer (this step's range of it, `region`) the step's outputs
/// were written into on the caller's stream; a view is made when first read. Rows of a failed request
/// (`status != 0`) hold unspecified values.
#[pyclass(name = "CudaStepOutput", module = "sampler_py", frozen)]
pub struct CudaStepOutput {
    flat: Py<PyAny>,
    /// The step's byte range in `flat` (a slab), `None`: all of it.
    region: Option<(usize, usize)>,
    segs: [(usize, usize); SEGS],
    r: usize,
    k: usize,
    g: usize,
    row_counts: crate::RowCounts,
    /// Which requests are tree requests (their `paths` entry is a view).
    trees: Vec<bool>,
    /// Typed views, `ok`, and the `buffer` alias.
    cache: [PyOnceLock<Py<PyAny>>; SEGS + 2],
}

impl CudaStepOutput {
    pub fn new(buf: StepBuf, row_counts: crate::RowCounts) -> CudaStepOutput {
        let (flat, region, segs, (r, k, g)) = buf;
        let trees = Vec::new();
        let cache = std::array::from_fn(|_| PyOnceLock::new());
        CudaStepOutput { flat, region, segs, r, k, g, row_counts, trees, cache }
    }
    /// Marks the tree requests of `reqs` (the step's requests), whose `paths` entries are views.
    pub fn with_trees(mut self, reqs: &[Request]) -> CudaStepOutput {
        // Only a step with a tree request has a path segment (no allocation otherwise).
        if self.segs[SEGS - 1].1 > 0 {
            self.trees = reqs.iter().map(|q| matches!(q.kind, sampler_host::RequestKind::Tree { .. })).collect();
        }
        self
    }
    fn view(&self, py: Python<'_>, i: usize, float: bool, two_d: bool) -> PyResult<Py<PyAny>> {
        self.cache[i]
            .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                let flat = self.flat.bind(py);
                let api = dlpack::torch_api(flat).expect("a torch tensor");
                let (off, n) = (self.region.map_or(0, |x| x.0) + self.segs[i].0, self.segs[i].1);
                let dt = if float { api.f32.bind(py) } else { api.int32.bind(py) };
                // A slice, not `narrow`: torch's indexing fast path (1.5 vs 2.1 us with the view, CPU).
                let v = flat.get_item(cuda_slice(py, off, n * 4))?.call_method1(pyo3::intern!(py, "view"), (dt,))?;
                let v = if two_d { v.call_method1(pyo3::intern!(py, "view"), ((self.r, self.k),))? } else { v };
                Ok(v.unbind())
            })
            .map(|x| x.clone_ref(py))
    }
}

#[pymethods]
impl CudaStepOutput {
    /// `[R]` int32: token per row, -1 for none.
    #[getter]
    fn tokens(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.view(py, 0, false, false)
    }
    /// `[R]` float32: processed logprob of the row's token (or prompt target).
    #[getter]
    fn logprobs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.view(py, 1, true, false)
    }
    /// `[R, k]` int32: ids of the first k candidates (order of section 3.6).
    #[getter]
    fn top_ids(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.view(py, 2, false, true)
    }
    /// `[R, k]` float32: their processed logprobs.
    #[getter]
    fn top_logprobs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.view(py, 3, true, true)
    }
    /// `[R]` float32: section 5's sum_smaller_probs of the row's token.
    #[getter]
    fn sum_smaller_probs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.view(py, 4, true, false)
    }
    /// `[B]` int32: drafts accepted per request (verify requests), else 0.
    #[getter]
    fn accepted(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.view(py, 5, false, false)
    }
    /// `[B]` int32 status per request: 0 ok, -1 rejected on the host (its
    /// parameters or shape: `Sampler.check` gives the text), > 0 a device
    /// row status (1 a bad logit value, 2 every token masked).
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.view(py, 6, false, false)
    }
    /// `[B]` bool on the device: `status == 0`.
    #[getter]
    fn ok(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.cache[SEGS]
            .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                Ok(self.status(py)?.bind(py).call_method1(pyo3::intern!(py, "__eq__"), (0,))?.unbind())
            })
            .map(|x| x.clone_ref(py))
    }
    /// B entries: for a tree request, its rows of the device path buffer
    /// (`[M]` int32 view, no copy): the accepted path's node indices, root
    /// first (`accepted + 1` of them, section 11.9), then -1 (all -1 when the
    /// request failed); None for every other request.
    #[getter]
    fn paths(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let l = pyo3::types::PyList::empty(py);
        let mut first = 0usize;
        let all = if self.segs[SEGS - 1].1 > 0 { Some(self.view(py, SEGS - 1, false, false)?) } else { None };
        for (q, &n) in self.row_counts.iter().enumerate() {
            match (&all, self.trees.get(q).copied().unwrap_or(false)) {
                (Some(a), true) => l.append(a.bind(py).call_method1(pyo3::intern!(py, "narrow"), (0, first, n))?)?,
                _ => l.append(py.None())?,
            }
            first += n;
        }
        Ok(l.into_any().unbind())
    }
    /// `B + 1` ints (host): request i owns rows `row_offsets[i]:row_offsets[i+1]`.
    #[getter]
    fn row_offsets(&self) -> Vec<usize> {
        let mut v = Vec::with_capacity(self.row_counts.len() + 1);
        v.push(0);
        for &c in self.row_counts.iter() {
            v.push(v[v.len() - 1] + c);
        }
        v
    }
    /// k: width of `top_ids` / `top_logprobs`.
    #[getter]
    fn top_logprobs_width(&self) -> usize {
        self.k
    }
    /// The uint8 device tensor the outputs live in (this step's range of a shared buffer).
    #[getter]
    fn buffer(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        // An alias, not the tensor object a reused buffer is tracked by (`OutPool`): anything
        // the caller keeps of it, a DLPack export included, counts as a view.
        self.cache[SEGS + 1]
            .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                let flat = self.flat.bind(py);
                Ok(match self.region {
                    Some((off, n)) => flat.call_method1(pyo3::intern!(py, "narrow"), (0, off, n))?,
                    None => flat.call_method1(pyo3::intern!(py, "view"), (-1,))?,
                }
                .unbind())
            })
            .map(|x| x.clone_ref(py))
    }
    fn __len__(&self) -> usize {
        self.g
    }
    fn __repr__(&self) -> String {
        format!("CudaStepOutput(rows={}, requests={}, top_logprobs_width={})", self.r, self.g, self.k)
    }
}
