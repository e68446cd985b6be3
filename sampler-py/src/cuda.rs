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
//!    allocated by torch's caching allocator on the logits' device (no copy;
//!    `Sampler::sample_async_into`); typed views of it are made when read;
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
use pyo3::types::{IntoPyDict, PyTuple};

use sampler_host::interop::{CudaLogits, Dtype as LDtype, OutputPtrs};
use sampler_host::{Request, Sampler};

use crate::dlpack::{self, CudaBorrowed, CudaDtype};

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
            return v.extract::<u64>().map(Some).map_err(|_| value_err("stream: .cuda_stream / .ptr is not a non-negative int"));
        }
    }
    s.extract::<u64>().map(Some).map_err(|_| pyo3::exceptions::PyTypeError::new_err("stream must be an int (cudaStream_t), a torch.cuda.Stream or None"))
}

/// Logits on a CUDA device and the stream that orders them.
pub struct CudaIn<'py> {
    pub t: CudaBorrowed<'py>,
    pub stream: u64,
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
pub fn import<'py>(obj: &Bound<'py, PyAny>, arg: &str, ndims: &[usize], stream: Option<&Bound<'py, PyAny>>) -> PyResult<Option<CudaIn<'py>>> {
    let explicit = stream_arg(stream)?;
    let Some(t) = dlpack::import_cuda(obj, arg, ndims, explicit.unwrap_or(LEGACY_STREAM))? else {
        if explicit.is_some() && !obj.is_none() {
            // A stream for host logits means nothing: say so rather than ignore it.
            return Err(value_err(format!("stream: given, but {arg} is not a CUDA tensor")));
        }
        return Ok(None);
    };
    let stream = match explicit {
        Some(s) => s,
        None if t.torch => {
            let api = dlpack::torch_api(obj).expect("a torch tensor");
            api.raw_stream.bind(obj.py()).call1((t.device,))?.extract::<u64>()?
        }
        None => LEGACY_STREAM,
    };
    Ok(Some(CudaIn { t, stream }))
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
const SEGS: usize = 7;
const ALIGN: usize = 16;

/// Runs one step on CUDA logits. Returns the flat output tensor and the
/// segment table `(byte offset, elements)` for tokens, logprobs, top_ids,
/// top_logprobs, sum_smaller_probs, accepted, status, and (R, k, G).
/// The kernels write the outputs straight into the torch buffer (no copy);
/// with [`Want::Tokens`] only the tokens go there (the rest stays in the
/// sampler's own buffers). Errors: a sampler not on CUDA or on another
/// device (ValueError); batch errors as [`crate::batch_err`].
pub fn step(py: Python<'_>, s: &mut Sampler, c: &CudaIn<'_>, reqs: &[Request], want: Want, reuse: Option<&CudaStepOutput>) -> PyResult<(Py<PyAny>, [(usize, usize); SEGS], (usize, usize, usize))> {
    let Some(cs) = s.cuda_stream() else {
        return Err(value_err("logits: a CUDA tensor needs a sampler on the CUDA backend (backend=\"cuda\", or \"auto\" with a GPU); this one runs on the CPU"));
    };
    let ctx = cs.context().clone();
    if c.t.device < 0 || c.t.device as usize != ctx.ordinal() {
        return Err(value_err(format!("logits: on cuda:{} but the sampler runs on cuda:{}", c.t.device, ctx.ordinal())));
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
    // SAFETY: `len` contiguous elements of `dtype` on this device (checked on import), borrowed
    // for the call: the caller's stream waits for the sampler before it can reuse them.
    let logits = unsafe { CudaLogits::from_raw(c.t.ptr, len, dtype, caller.clone()) };
    let api = if c.t.torch { dlpack::torch_api(c.t.keep()).expect("torch tensor") } else { dlpack::torch_api_py(py).map_err(|e| value_err(format!("CUDA outputs are torch tensors: {e}")))? };
    // The output buffer is allocated by torch (caching allocator; the graph's pool under
    // capture) once the step's shape is known, inside the sampler's callback.
    let mut made: Option<PyResult<(Bound<'_, PyAny>, [(usize, usize); SEGS], (usize, usize, usize))>> = None;
    let enqueued = s
        .sample_async_into(logits, reqs, |r, k, g| {
            let res = (|| -> PyResult<_> {
                let counts = [r, r, r * k, r * k, r, g, g];
                let mut segs = [(0usize, 0usize); SEGS];
                let mut total = 0;
                let n_seg = if want == Want::All { SEGS } else { 1 };
                for i in 0..n_seg {
                    segs[i] = (total, counts[i]);
                    total += (counts[i] * 4).div_ceil(ALIGN) * ALIGN;
                }
                let flat = if let Some(o) = reuse {
                    // The caller's earlier output of this shape: its buffer is written again.
                    if (o.r, o.k, o.g) != (r, k, g) || o.segs != segs {
                        return Err(value_err(format!("out: a CudaStepOutput of R = {}, k = {}, B = {} cannot hold a step of R = {r}, k = {k}, B = {g}", o.r, o.k, o.g)));
                    }
                    o.flat.bind(py).clone()
                } else if want == Want::Tokens {
                    new_empty(py, c, &PyTuple::new(py, [r])?, api.kw_int32.bind(py))?
                } else {
                    new_empty(py, c, &PyTuple::new(py, [total.max(ALIGN)])?, api.kw_uint8.bind(py))?
                };
                let base: u64 = flat.call_method0(pyo3::intern!(py, "data_ptr"))?.extract()?;
                Ok((flat, segs, (r, k, g), base, n_seg))
            })();
            match res {
                Ok((flat, segs, rkg, base, n_seg)) => {
                    let at = |i: usize| (i < n_seg && segs[i].1 > 0).then(|| base + segs[i].0 as u64);
                    made = Some(Ok((flat, segs, rkg)));
                    Some(OutputPtrs { tokens: at(0), logprobs: at(1), top_ids: at(2), top_logprobs: at(3), sum_smaller_probs: at(4), accepted: at(5), status: at(6) })
                }
                Err(e) => {
                    made = Some(Err(e));
                    None
                }
            }
        })
        .map_err(crate::batch_err)?;
    let (flat, segs, (r, k, g)) = made.expect("the callback ran")?;
    debug_assert!(enqueued);
    if r == 0 && want == Want::All && g > 0 {
        // No rows: no kernel ran. The host knows every status (a request without rows can
        // only fail its host checks); accepted counts are 0.
        let st: Vec<i32> = reqs.iter().map(|q| if s.check(q).is_err() { -1 } else { 0 }).collect();
        let host = pyo3::types::PyList::new(py, &st)?;
        let t = py.import("torch")?.call_method("tensor", (host,), Some(&[("dtype", api.int32.bind(py))].into_py_dict(py)?))?;
        let (off, n) = segs[6];
        let dst = flat.call_method1(pyo3::intern!(py, "narrow"), (0, off, n * 4))?.call_method1(pyo3::intern!(py, "view"), (api.int32.bind(py),))?;
        dst.call_method1(pyo3::intern!(py, "copy_"), (t,))?;
        let (off, n) = segs[5];
        flat.call_method1(pyo3::intern!(py, "narrow"), (0, off, n * 4))?.call_method1(pyo3::intern!(py, "zero_"), ())?;
    }
    // The caller's next work (reading the outputs, reusing the logits) waits for ours.
    caller.join(&cs).map_err(|e| crate::device_err(format!("joining the caller's stream: {e:?}")))?;
    Ok((flat.unbind(), segs, (r, k, g)))
}

fn new_empty<'py>(py: Python<'py>, c: &CudaIn<'py>, shape: &Bound<'py, PyTuple>, kw: &Bound<'py, pyo3::types::PyDict>) -> PyResult<Bound<'py, PyAny>> {
    if c.t.torch {
        // Same device as the logits, no device object to build.
        return c.t.keep().call_method(pyo3::intern!(py, "new_empty"), (shape,), Some(kw));
    }
    let kw = kw.copy()?;
    kw.set_item(pyo3::intern!(py, "device"), format!("cuda:{}", c.t.device))?;
    py.import("torch")?.call_method("empty", (shape,), Some(&kw))
}

/// Everything a step on CUDA logits returns, as torch tensors on the logits'
/// device (R rows, B requests, k = the step's top-logprobs width). They are
/// views of one buffer the step's outputs were copied into on the caller's
/// stream; a view is made when first read. Rows of a failed request
/// (`status != 0`) hold unspecified values.
#[pyclass(name = "CudaStepOutput", module = "sampler_py", frozen)]
pub struct CudaStepOutput {
    flat: Py<PyAny>,
    segs: [(usize, usize); SEGS],
    r: usize,
    k: usize,
    g: usize,
    row_counts: Vec<usize>,
    cache: [PyOnceLock<Py<PyAny>>; SEGS + 1],
}

impl CudaStepOutput {
    pub fn new(flat: Py<PyAny>, segs: [(usize, usize); SEGS], rkg: (usize, usize, usize), row_counts: Vec<usize>) -> CudaStepOutput {
        let (r, k, g) = rkg;
        CudaStepOutput { flat, segs, r, k, g, row_counts, cache: std::array::from_fn(|_| PyOnceLock::new()) }
    }
    fn view(&self, py: Python<'_>, i: usize, float: bool, two_d: bool) -> PyResult<Py<PyAny>> {
        self.cache[i]
            .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                let flat = self.flat.bind(py);
                let api = dlpack::torch_api(flat).expect("a torch tensor");
                let (off, n) = self.segs[i];
                let dt = if float { api.f32.bind(py) } else { api.int32.bind(py) };
                let v = flat.call_method1(pyo3::intern!(py, "narrow"), (0, off, n * 4))?.call_method1(pyo3::intern!(py, "view"), (dt,))?;
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
            .get_or_try_init(py, || -> PyResult<Py<PyAny>> { Ok(self.status(py)?.bind(py).call_method1(pyo3::intern!(py, "__eq__"), (0,))?.unbind()) })
            .map(|x| x.clone_ref(py))
    }
    /// `B + 1` ints (host): request i owns rows `row_offsets[i]:row_offsets[i+1]`.
    #[getter]
    fn row_offsets(&self) -> Vec<usize> {
        let mut v = Vec::with_capacity(self.row_counts.len() + 1);
        v.push(0);
        for &c in &self.row_counts {
            v.push(v[v.len() - 1] + c);
        }
        v
    }
    /// k: width of `top_ids` / `top_logprobs`.
    #[getter]
    fn top_logprobs_width(&self) -> usize {
        self.k
    }
    /// The one uint8 device tensor the outputs live in.
    #[getter]
    fn buffer(&self, py: Python<'_>) -> Py<PyAny> {
        self.flat.clone_ref(py)
    }
    fn __len__(&self) -> usize {
        self.g
    }
    fn __repr__(&self) -> String {
        format!("CudaStepOutput(rows={}, requests={}, top_logprobs_width={})", self.r, self.g, self.k)
    }
}
