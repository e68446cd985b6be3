//! Python bindings of the sampler (`sampler_py._native`, re-exported by the
//! `sampler_py` package). Spec: `../shared/spec/SAMPLER.md`.
//!
//! - Tensors in through DLPack without copies ([`dlpack`]): host f32 is
//!   borrowed, host f16 / bf16 are widened to f32 on the host (a copy).
//! - CUDA logits (torch or any kDLCUDA producer; f32, bf16, f16) are read in
//!   place on the caller's stream and the outputs stay on the device as
//!   torch tensors ([`cuda`]): no host synchronisation, capturable by
//!   `torch.cuda.graph`.
//! - Host outputs are numpy arrays (torch CPU tensors when the logits were a torch tensor).
//! - A bad request is an error status in the output; a bad call raises
//!   `TypeError` / `ValueError` (or `RuntimeError` for a device failure)
//!   carrying the Rust error text.
//! - The GIL is released while a host step runs (a CUDA step only enqueues
//!   work and returns, holding the GIL).

mod cuda;
mod dlpack;

/// Bench-only clock of the Rust API's share of one call (`bench/overhead.py`,
/// issue 14 item 6): while on, every step records the host time it spent
/// inside the Rust API (`Sampler::sample` on the host; on CUDA the logits
/// handle, `sample_async_into` and the caller-stream join, less our own
/// output-allocation callback), so that the Python call's time minus this is
/// the binding overhead of that very call, free of the call-to-call noise of a
/// separate Rust timing. Off by default: one relaxed atomic load per call.
pub(crate) mod api_clock {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Instant;

    static ON: AtomicBool = AtomicBool::new(false);
    static LAST_NS: AtomicU64 = AtomicU64::new(0);

    /// A start time when the clock is on.
    pub fn start() -> Option<Instant> {
        ON.load(Ordering::Relaxed).then(Instant::now)
    }
    /// Nanoseconds since `t` (0 when the clock is off).
    pub fn since(t: Option<Instant>) -> u64 {
        t.map_or(0, |t| t.elapsed().as_nanos() as u64)
    }
    /// Records the Rust API nanoseconds of the call that just ran.
    pub fn record(ns: u64) {
        if ON.load(Ordering::Relaxed) {
            LAST_NS.store(ns, Ordering::Relaxed);
        }
    }
    /// Adds Rust API nanoseconds spent after the step to the last call's record.
    pub fn add(ns: u64) {
        if ON.load(Ordering::Relaxed) {
            LAST_NS.fetch_add(ns, Ordering::Relaxed);
        }
    }
    pub fn set(on: bool) {
        LAST_NS.store(0, Ordering::Relaxed);
        ON.store(on, Ordering::Relaxed);
    }
    pub fn last() -> u64 {
        LAST_NS.load(Ordering::Relaxed)
    }
}

use std::sync::{Mutex, OnceLock};

use numpy::{PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyModule, PyTuple};

use sampler_host::engine::{EngineError, MtpInfoPool};
use sampler_host::error::{BatchError, ConfigError};
use sampler_host::sampler::ProcessedRows;
use sampler_host::{
    BackendKind, DraftDist, FilterOrder, LogprobsMode, Request, RequestKind, Sampler, SamplerConfig, SamplingParams,
    StepOutput,
};

use dlpack::{Borrowed, Dtype};

// ---------------------------------------------------------------- errors

fn config_err(e: ConfigError) -> PyErr {
    match e {
        ConfigError::BackendUnavailable(..) => PyRuntimeError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

pub(crate) fn device_err(msg: String) -> PyErr {
    PyRuntimeError::new_err(msg)
}

pub(crate) fn batch_err(e: BatchError) -> PyErr {
    match e {
        BatchError::Backend(_) => PyRuntimeError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

fn value_err(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}

// ---------------------------------------------------------------- arguments

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// A Python int in `0..=u64::MAX` (ValueError / TypeError naming `arg`).
fn u64_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<u64> {
    if obj.is_instance_of::<pyo3::types::PyFloat>() || obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!("{arg} must be an int, got {}", type_name(obj))));
    }
    if let Ok(x) = obj.extract::<u64>() {
        return Ok(x);
    }
    match obj.extract::<i128>() {
        Ok(x) => Err(value_err(format!("{arg} must be in 0..=18446744073709551615, got {x}"))),
        Err(_) => Err(PyTypeError::new_err(format!("{arg} must be an int, got {}", type_name(obj)))),
    }
}

fn i64_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<i64> {
    // Python 3.9 would truncate a float through `__int__` (deprecated there);
    // a bool is an int to Python, but `top_k=True` is a mistake, as
    // `temperature=True` is for `f32_arg`.
    if obj.is_instance_of::<pyo3::types::PyFloat>() || obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!("{arg} must be an int, got {}", type_name(obj))));
    }
    if let Ok(x) = obj.extract::<i64>() {
        return Ok(x);
    }
    match obj.extract::<i128>() {
        Ok(x) => Err(value_err(format!("{arg} must fit in int64, got {x}"))),
        Err(_) => Err(PyTypeError::new_err(format!("{arg} must be an int, got {}", type_name(obj)))),
    }
}

/// A Python int that is a size or an index (ValueError / TypeError naming `arg`).
fn usize_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<usize> {
    let v = u64_arg(obj, arg)?;
    usize::try_from(v).map_err(|_| value_err(format!("{arg} must be in 0..={}, got {v}", usize::MAX)))
}

/// An optional Python int in `0..=u32::MAX` (default when absent), errors naming `arg`.
fn u32_opt(obj: Option<&Bound<'_, PyAny>>, arg: &str, default: u32) -> PyResult<u32> {
    let Some(x) = obj.filter(|o| !o.is_none()) else { return Ok(default) };
    let v = i64_arg(x, arg)?;
    u32::try_from(v).map_err(|_| value_err(format!("{arg} must be in 0..=4294967295, got {v}")))
}

fn f32_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<f32> {
    if obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!("{arg} must be a float, got bool")));
    }
    // Rounded to nearest f32, as SAMPLER.md section 1 does for a caller's f64.
    obj.extract::<f64>()
        .map(|x| x as f32)
        .map_err(|_| PyTypeError::new_err(format!("{arg} must be a float, got {}", type_name(obj))))
}

/// A 1-D sequence of ints: a DLPack array of any integer dtype, or a list / tuple.
fn i64_list(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<i64>> {
    if dlpack::is_dlpack(obj)? {
        return dlpack::import(obj, arg, &[1])?.to_i64_vec(arg);
    }
    if obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(PyTypeError::new_err(format!("{arg} must be a sequence of ints, got str")));
    }
    let items: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("{arg} must be a sequence of ints, got {}", type_name(obj))))?
        .collect::<PyResult<_>>()?;
    items.iter().enumerate().map(|(i, x)| i64_arg(x, &format!("{arg}[{i}]"))).collect()
}

/// Token ids (i32): see [`i64_list`].
fn ids_list(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<i32>> {
    i64_list(obj, arg)?
        .into_iter()
        .enumerate()
        .map(|(i, x)| i32::try_from(x).map_err(|_| value_err(format!("{arg}[{i}] = {x} is not a token id (int32)"))))
        .collect()
}

/// A 1-D sequence of floats (DLPack of a float dtype, or a list / tuple).
fn f32_list(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<f32>> {
    if dlpack::is_dlpack(obj)? {
        return dlpack::import(obj, arg, &[1])?.to_f32_vec(arg);
    }
    let items: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("{arg} must be a sequence of floats, got {}", type_name(obj))))?
        .collect::<PyResult<_>>()?;
    items.iter().enumerate().map(|(i, x)| f32_arg(x, &format!("{arg}[{i}]"))).collect()
}

/// Grammar bit masks `[rows, ceil(V/32)]` of int32 / uint32 words (one row:
/// 1-D), or a list of lists of ints. Counts are checked by the sampler (a
/// bad mask fails only its request).
fn masks_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<Vec<u32>>> {
    if dlpack::is_dlpack(obj)? {
        let b = dlpack::import(obj, arg, &[1, 2])?;
        let words = b.to_u32_words(arg)?;
        let w = *b.shape.last().unwrap_or(&0);
        if b.shape.len() == 1 {
            return Ok(vec![words]);
        }
        return Ok(if w == 0 { vec![Vec::new(); b.shape[0]] } else { words.chunks(w).map(|c| c.to_vec()).collect() });
    }
    let rows: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{arg} must be a [rows, words] array or a list of lists of ints, got {}",
                type_name(obj)
            ))
        })?
        .collect::<PyResult<_>>()?;
    rows.iter()
        .enumerate()
        .map(|(j, row)| {
            i64_list(row, &format!("{arg}[{j}]"))?
                .into_iter()
                .enumerate()
                .map(|(c, x)| {
                    // A word may be given as a signed int32 (torch has no uint32 bit ops).
                    if (-(1i64 << 31)..(1i64 << 32)).contains(&x) {
                        Ok(x as u32)
                    } else {
                        Err(value_err(format!("{arg}[{j}][{c}] = {x} is not a 32-bit word")))
                    }
                })
                .collect()
        })
        .collect()
}

/// A per-row parameter: `None` (default), a scalar (broadcast) or `r` values.
fn per_row<T: Clone>(
    obj: Option<&Bound<'_, PyAny>>,
    default: T,
    r: usize,
    arg: &str,
    scalar: impl Fn(&Bound<'_, PyAny>, &str) -> PyResult<T>,
    list: impl Fn(&Bound<'_, PyAny>, &str) -> PyResult<Vec<T>>,
) -> PyResult<Vec<T>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(vec![default; r]) };
    // A Python int or float (the usual scalar) is known without looking up
    // `__dlpack__`, whose AttributeError costs about a microsecond per argument.
    if obj.is_instance_of::<pyo3::types::PyFloat>() || obj.is_instance_of::<pyo3::types::PyInt>() {
        return Ok(vec![scalar(obj, arg)?; r]);
    }
    if let Ok(a) = obj.cast::<numpy::PyUntypedArray>() {
        // A numpy array (numpy's C API: no attribute lookups): 0-d is a scalar.
        if a.ndim() == 0 {
            return Ok(vec![scalar(obj, arg)?; r]);
        }
        let v = list(obj, arg)?;
        if v.len() != r {
            return Err(value_err(format!("{arg}: expected a scalar or {r} values (one per row), got {}", v.len())));
        }
        return Ok(v);
    }
    let is_seq = dlpack::is_dlpack(obj)?
        && obj.getattr("ndim").and_then(|n| n.extract::<usize>()).map_or(true, |n| n > 0)
        || obj.is_instance_of::<PyList>()
        || obj.is_instance_of::<PyTuple>();
    if !is_seq {
        return Ok(vec![scalar(obj, arg)?; r]);
    }
    let v = list(obj, arg)?;
    if v.len() != r {
        return Err(value_err(format!("{arg}: expected a scalar or {r} values (one per row), got {}", v.len())));
    }
    Ok(v)
}

// ---------------------------------------------------------------- outputs

static TORCH: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// Builds the output arrays: numpy (moved from the Rust `Vec`, no copy), or
/// torch CPU tensors (`torch.from_numpy`, no copy) when the input was a torch tensor.
#[derive(Clone, Copy)]
struct Out<'py> {
    py: Python<'py>,
    torch: bool,
}

fn is_torch(obj: &Bound<'_, PyAny>) -> bool {
    if dlpack::is_numpy(obj) {
        return false;
    }
    // Once torch's objects are known, a type check instead of the module's name (a string made per call).
    if let Some(t) = dlpack::torch_api_loaded(obj.py()) {
        if obj.is_instance(t.tensor.bind(obj.py())).unwrap_or(false) {
            return true;
        }
    }
    let module = obj.get_type().module().map(|m| m.to_string()).unwrap_or_default();
    module == "torch" || module.starts_with("torch.")
}

impl<'py> Out<'py> {
    fn for_input(obj: &Bound<'py, PyAny>) -> Out<'py> {
        Out { py: obj.py(), torch: is_torch(obj) }
    }
    fn arr<T: numpy::Element>(&self, data: Vec<T>, shape: &[usize]) -> PyResult<Py<PyAny>> {
        let py = self.py;
        let a1 = numpy::PyArray1::from_vec(py, data);
        let a = if shape.len() == 1 { a1.into_any() } else { a1.reshape(shape.to_vec())?.into_any() };
        if self.torch {
            let torch = TORCH.get_or_try_init(py, || py.import("torch").map(Bound::unbind))?.bind(py);
            return Ok(torch.call_method1("from_numpy", (a,))?.unbind());
        }
        Ok(a.unbind())
    }
}

/// Everything a step returns (SAMPLER.md sections 5-8). R rows, B requests,
/// k = `top_logprobs_width`. Arrays are built on first access (then cached),
/// so a call pays only for the outputs it reads.
#[pyclass(name = "StepOutput", module = "sampler_py", frozen)]
struct PyStepOutput {
    inner: StepOutput,
    row_counts: Vec<usize>,
    torch: bool,
    cache: [PyOnceLock<Py<PyAny>>; 13],
}

impl PyStepOutput {
    fn new(inner: StepOutput, row_counts: Vec<usize>, torch: bool) -> PyStepOutput {
        PyStepOutput { inner, row_counts, torch, cache: std::array::from_fn(|_| PyOnceLock::new()) }
    }
    fn cached(
        &self,
        py: Python<'_>,
        slot: usize,
        make: impl FnOnce(Out<'_>) -> PyResult<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let out = Out { py, torch: self.torch };
        self.cache[slot].get_or_try_init(py, || make(out)).map(|x| x.clone_ref(py))
    }
    fn rows_f32(
        &self,
        py: Python<'_>,
        slot: usize,
        f: impl Fn(&sampler_host::RowOutput) -> f32,
    ) -> PyResult<Py<PyAny>> {
        self.cached(py, slot, |o| o.arr(self.inner.rows.iter().map(f).collect(), &[self.inner.rows.len()]))
    }
    fn top(&self) -> impl Iterator<Item = (i32, f32)> + '_ {
        let k = self.inner.top_logprobs_width;
        self.inner.rows.iter().flat_map(move |row| {
            // Failed requests' rows have no candidates: -1 / -inf.
            (0..k).map(move |c| row.top_logprobs.get(c).copied().unwrap_or((-1, f32::NEG_INFINITY)))
        })
    }
    fn per_request<T: numpy::Element + Copy>(
        &self,
        py: Python<'_>,
        slot: usize,
        f: impl Fn(&sampler_host::RequestOutput) -> &[T],
    ) -> PyResult<Py<PyAny>> {
        self.cached(py, slot, |o| {
            let l = PyList::empty(py);
            for q in &self.inner.requests {
                let v = f(q);
                l.append(o.arr(v.to_vec(), &[v.len()])?)?;
            }
            Ok(l.into_any().unbind())
        })
    }
}

#[pymethods]
impl PyStepOutput {
    /// `[R]` int32: token per row, -1 for none (rows after a rejection, prompt-logprob rows, failed requests).
    #[getter]
    fn tokens(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.cached(py, 0, |o| o.arr(self.inner.rows.iter().map(|r| r.token).collect(), &[self.inner.rows.len()]))
    }
    /// `[R]` float32: processed logprob of the token (-inf when none).
    #[getter]
    fn logprobs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.rows_f32(py, 1, |r| r.logprob)
    }
    /// `[R, k]` int32: ids of the first k candidates (order of section 3.6); -1 on failed requests' rows.
    #[getter]
    fn top_ids(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let shape = [self.inner.rows.len(), self.inner.top_logprobs_width];
        self.cached(py, 2, |o| o.arr(self.top().map(|x| x.0).collect(), &shape))
    }
    /// `[R, k]` float32: their processed logprobs; -inf on failed requests' rows.
    #[getter]
    fn top_logprobs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let shape = [self.inner.rows.len(), self.inner.top_logprobs_width];
        self.cached(py, 3, |o| o.arr(self.top().map(|x| x.1).collect(), &shape))
    }
    /// `[R]` float32: section 5's sum_smaller_probs (0 when the token is -1).
    #[getter]
    fn sum_smaller_probs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.rows_f32(py, 4, |r| r.sum_smaller_probs)
    }
    /// `[B]` int32: drafts accepted per request (verify requests), else 0.
    #[getter]
    fn accepted(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.cached(py, 5, |o| {
            o.arr(self.inner.requests.iter().map(|q| q.accepted as i32).collect(), &[self.inner.requests.len()])
        })
    }
    /// `[B]` bool: whether each request succeeded.
    #[getter]
    fn ok(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.cached(py, 6, |o| {
            o.arr(self.inner.requests.iter().map(|q| q.status.is_ok()).collect(), &[self.inner.requests.len()])
        })
    }
    /// `[B + 1]` int64: request i owns rows `row_offsets[i]:row_offsets[i+1]`.
    #[getter]
    fn row_offsets(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.cached(py, 7, |o| {
            let mut v = Vec::with_capacity(self.row_counts.len() + 1);
            v.push(0i64);
            for &c in &self.row_counts {
                v.push(v[v.len() - 1] + c as i64);
            }
            let n = v.len();
            o.arr(v, &[n])
        })
    }
    /// B entries: `None`, or the error text of a failed request (Rust `RequestError`).
    #[getter]
    fn errors(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.cached(py, 8, |_| {
            let l = PyList::empty(py);
            for q in &self.inner.requests {
                match &q.status {
                    Ok(()) => l.append(py.None())?,
                    Err(e) => l.append(e.to_string())?,
                }
            }
            Ok(l.into_any().unbind())
        })
    }
    /// B arrays int32: the tokens each request emits this step.
    #[getter]
    fn emitted(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.per_request(py, 9, |q| &q.emitted)
    }
    /// B arrays float32: their processed logprobs.
    #[getter]
    fn emitted_logprobs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.per_request(py, 10, |q| &q.emitted_logprobs)
    }
    /// B entries: for a tree request that did not fail, its accepted path
    /// (node indices, root first, `accepted + 1` int32; section 11.9), else None.
    #[getter]
    fn paths(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.cached(py, 12, |o| {
            let l = PyList::empty(py);
            for q in &self.inner.requests {
                match &q.path {
                    Some(p) => l.append(o.arr(p.iter().map(|&n| n as i32).collect::<Vec<i32>>(), &[p.len()])?)?,
                    None => l.append(py.None())?,
                }
            }
            Ok(l.into_any().unbind())
        })
    }
    /// B arrays float32: prompt logprobs (prompt-logprob requests), else empty.
    #[getter]
    fn prompt_logprobs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.per_request(py, 11, |q| &q.prompt_logprobs)
    }
    /// k: width of `top_ids` / `top_logprobs`.
    #[getter]
    fn top_logprobs_width(&self) -> usize {
        self.inner.top_logprobs_width
    }
    /// The CONFORMANCE.md result document of this step, as JSON text.
    fn result_json(&self) -> String {
        sampler_host::conformance::case::result_document(&self.inner).to_string()
    }
    fn __len__(&self) -> usize {
        self.inner.requests.len()
    }
    fn __repr__(&self) -> String {
        let bad = self.inner.requests.iter().filter(|r| r.status.is_err()).count();
        format!(
            "StepOutput(rows={}, requests={}, failed={}, top_logprobs_width={})",
            self.inner.rows.len(),
            self.inner.requests.len(),
            bad,
            self.inner.top_logprobs_width
        )
    }
}

fn step_output(out: &Out<'_>, s: StepOutput, row_counts: &[usize]) -> PyResult<PyStepOutput> {
    Ok(PyStepOutput::new(s, row_counts.to_vec(), out.torch))
}

// ---------------------------------------------------------------- SamplingParams

/// Per-request sampling parameters (SAMPLER.md section 1), as an engine
/// receives them. Values are validated when the step runs: a bad value gives
/// the request an error status, not an exception (only wrong types raise,
/// naming the field, in the constructor and when an attribute is set).
#[pyclass(name = "SamplingParams", module = "sampler_py")]
#[derive(Clone)]
struct PySamplingParams {
    /// Softmax temperature (f32); error status if negative or NaN; below 1e-5 = greedy-like clamp.
    #[pyo3(get)]
    temperature: f32,
    /// Nucleus mass in (0, 1] (f32); 1 = off.
    #[pyo3(get)]
    top_p: f32,
    /// Top-k; -1 = off; 0, below -1 or above 2**31-1 is an error status.
    #[pyo3(get)]
    top_k: i64,
    /// How many top logprobs to return (error status if above N).
    #[pyo3(get)]
    top_logprobs: u32,
    /// Seed of the request's random streams (u64); None = 64 random bits per step.
    #[pyo3(get)]
    seq_seed: Option<u64>,
    /// Prompt logprobs wanted (section 8; `Request.prompt_logprobs` sets it).
    #[pyo3(get)]
    prompt_logprobs: bool,
    /// Teacher forcing: the output the request must follow (section 7; the
    /// engine turns it into per-step `golden` rows).
    #[pyo3(get)]
    golden_token_ids: Vec<i32>,
    /// min-p (SAMPLER.md 10.1): 0 = off; outside [0, 1] or NaN is an error status.
    #[pyo3(get)]
    min_p: f32,
    /// `"top_p_then_top_k"` (the seed's order) or `"top_k_then_top_p"` (vLLM/HF, 10.2); another string raises ValueError.
    #[pyo3(get)]
    filter_order: String,
    /// `"processed"` or `"raw"` logprobs (10.3); another string raises ValueError.
    #[pyo3(get)]
    logprobs_mode: String,
}

#[pymethods]
impl PySamplingParams {
    #[new]
    #[pyo3(signature = (*, temperature=None, top_p=None, top_k=None, top_logprobs=None, seq_seed=None, prompt_logprobs=false, golden_token_ids=None, min_p=None, filter_order=None, logprobs_mode=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        temperature: Option<&Bound<'_, PyAny>>,
        top_p: Option<&Bound<'_, PyAny>>,
        top_k: Option<&Bound<'_, PyAny>>,
        top_logprobs: Option<&Bound<'_, PyAny>>,
        seq_seed: Option<&Bound<'_, PyAny>>,
        prompt_logprobs: bool,
        golden_token_ids: Option<&Bound<'_, PyAny>>,
        min_p: Option<&Bound<'_, PyAny>>,
        filter_order: Option<String>,
        logprobs_mode: Option<String>,
    ) -> PyResult<Self> {
        // Unknown strings are a bad call (ValueError naming the argument).
        let filter_order = filter_order.unwrap_or_else(|| "top_p_then_top_k".into());
        filter_order.parse::<FilterOrder>().map_err(|e| value_err(format!("filter_order: {e}")))?;
        let logprobs_mode = logprobs_mode.unwrap_or_else(|| "processed".into());
        logprobs_mode.parse::<LogprobsMode>().map_err(|e| value_err(format!("logprobs_mode: {e}")))?;
        // Our own conversions, so every message names the argument on every Python version.
        let tl = top_logprobs.map(|x| i64_arg(x, "top_logprobs")).transpose()?.unwrap_or(0);
        Ok(PySamplingParams {
            temperature: temperature.map(|x| f32_arg(x, "temperature")).transpose()?.unwrap_or(1.0),
            top_p: top_p.map(|x| f32_arg(x, "top_p")).transpose()?.unwrap_or(1.0),
            top_k: top_k.map(|x| i64_arg(x, "top_k")).transpose()?.unwrap_or(-1),
            top_logprobs: u32::try_from(tl)
                .map_err(|_| value_err(format!("top_logprobs must be in 0..=4294967295, got {tl}")))?,
            seq_seed: seq_seed.filter(|s| !s.is_none()).map(|s| u64_arg(s, "seq_seed")).transpose()?,
            prompt_logprobs,
            golden_token_ids: golden_token_ids
                .map(|g| ids_list(g, "golden_token_ids"))
                .transpose()?
                .unwrap_or_default(),
            min_p: min_p.map(|x| f32_arg(x, "min_p")).transpose()?.unwrap_or(0.0),
            filter_order,
            logprobs_mode,
        })
    }
    // Setters convert as the constructor does, so a wrong type or an
    // out-of-range int raises an error naming the field (pyo3's own
    // conversions name nothing: "out of range integral type conversion").
    #[setter]
    fn set_temperature(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.temperature = f32_arg(v, "temperature")?;
        Ok(())
    }
    #[setter]
    fn set_top_p(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.top_p = f32_arg(v, "top_p")?;
        Ok(())
    }
    #[setter]
    fn set_top_k(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.top_k = i64_arg(v, "top_k")?;
        Ok(())
    }
    #[setter]
    fn set_top_logprobs(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.top_logprobs = u32_opt(Some(v), "top_logprobs", 0)?;
        Ok(())
    }
    #[setter]
    fn set_seq_seed(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.seq_seed = if v.is_none() { None } else { Some(u64_arg(v, "seq_seed")?) };
        Ok(())
    }
    #[setter]
    fn set_prompt_logprobs(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.prompt_logprobs = v
            .extract::<bool>()
            .map_err(|_| PyTypeError::new_err(format!("prompt_logprobs must be a bool, got {}", type_name(v))))?;
        Ok(())
    }
    #[setter]
    fn set_golden_token_ids(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.golden_token_ids = ids_list(v, "golden_token_ids")?;
        Ok(())
    }
    #[setter]
    fn set_min_p(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.min_p = f32_arg(v, "min_p")?;
        Ok(())
    }
    #[setter]
    fn set_filter_order(&mut self, v: String) -> PyResult<()> {
        v.parse::<FilterOrder>().map_err(|e| value_err(format!("filter_order: {e}")))?;
        self.filter_order = v;
        Ok(())
    }
    #[setter]
    fn set_logprobs_mode(&mut self, v: String) -> PyResult<()> {
        v.parse::<LogprobsMode>().map_err(|e| value_err(format!("logprobs_mode: {e}")))?;
        self.logprobs_mode = v;
        Ok(())
    }
    fn __repr__(&self) -> String {
        format!(
            "SamplingParams(temperature={:?}, top_p={:?}, top_k={}, top_logprobs={}, seq_seed={}, prompt_logprobs={}, golden_token_ids={:?}, min_p={:?}, filter_order={:?}, logprobs_mode={:?})",
            self.temperature,
            self.top_p,
            self.top_k,
            self.top_logprobs,
            self.seq_seed.map_or("None".into(), |s| s.to_string()),
            if self.prompt_logprobs { "True" } else { "False" },
            self.golden_token_ids,
            self.min_p,
            self.filter_order,
            self.logprobs_mode
        )
    }
}

impl PySamplingParams {
    fn to_rust(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            top_logprobs: self.top_logprobs,
            seq_seed: self.seq_seed,
            prompt_logprobs: self.prompt_logprobs,
            golden_token_ids: self.golden_token_ids.clone(),
            // Checked when the object was built or the attribute set.
            min_p: self.min_p,
            filter_order: self.filter_order.parse().unwrap_or_default(),
            logprobs_mode: self.logprobs_mode.parse().unwrap_or_default(),
        }
    }
}

// ---------------------------------------------------------------- DraftDist, Request

/// The draft model's processed distribution that proposed one draft token
/// (section 6): `ids` int32 and their processed logprobs (natural log);
/// ids not listed have logprob -inf.
#[pyclass(name = "DraftDist", module = "sampler_py", frozen)]
struct PyDraftDist {
    inner: DraftDist,
}

#[pymethods]
impl PyDraftDist {
    #[new]
    fn new(ids: &Bound<'_, PyAny>, logprobs: &Bound<'_, PyAny>) -> PyResult<Self> {
        let ids = ids_list(ids, "ids")?;
        let logprobs = f32_list(logprobs, "logprobs")?;
        if ids.len() != logprobs.len() {
            return Err(value_err(format!("ids and logprobs differ in length: {} != {}", ids.len(), logprobs.len())));
        }
        Ok(PyDraftDist { inner: DraftDist { ids, logprobs } })
    }
    /// `[n]` int32 ids.
    #[getter]
    fn ids(&self) -> Vec<i32> {
        self.inner.ids.clone()
    }
    /// `[n]` float32 processed logprobs.
    #[getter]
    fn logprobs(&self) -> Vec<f32> {
        self.inner.logprobs.clone()
    }
    fn __len__(&self) -> usize {
        self.inner.ids.len()
    }
    fn __repr__(&self) -> String {
        format!("DraftDist(n={})", self.inner.ids.len())
    }
}

fn draft_dists_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<DraftDist>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(Vec::new()) };
    let items: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("draft_dists must be a list of DraftDist, got {}", type_name(obj))))?
        .collect::<PyResult<_>>()?;
    items
        .iter()
        .enumerate()
        .map(|(j, d)| {
            if let Ok(d) = d.cast::<PyDraftDist>() {
                return Ok(d.get().inner.clone());
            }
            let (ids, lps): (Bound<'_, PyAny>, Bound<'_, PyAny>) = d.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "draft_dists[{j}] must be a DraftDist or an (ids, logprobs) pair, got {}",
                    type_name(d)
                ))
            })?;
            let ids = ids_list(&ids, &format!("draft_dists[{j}].ids"))?;
            let logprobs = f32_list(&lps, &format!("draft_dists[{j}].logprobs"))?;
            if ids.len() != logprobs.len() {
                return Err(value_err(format!("draft_dists[{j}]: {} ids but {} logprobs", ids.len(), logprobs.len())));
            }
            Ok(DraftDist { ids, logprobs })
        })
        .collect()
}

/// A draft tree of one decode request (SAMPLER.md 11.1): `parent` `[M]`
/// (`parent[0] = -1`, `0 <= parent[n] < n`, siblings in draw order),
/// `tokens` `[M - 1]` (node n's draft token at `tokens[n - 1]`, -1 =
/// placeholder), `draft_dists`: one `DraftDist` per internal node in node
/// order (None = fixed children, 11.3), `without_replacement` (11.4). A
/// malformed tree fails only its request when the step runs (11.10); the
/// static converters raise ValueError naming their argument.
#[pyclass(name = "DraftTree", module = "sampler_py", frozen)]
struct PyDraftTree {
    inner: sampler_host::DraftTree,
}

fn tree_err(e: impl std::fmt::Display) -> PyErr {
    value_err(e.to_string())
}

fn u32_lists(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<Vec<u32>>> {
    let items: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("{arg} must be a list of lists of ints, got {}", type_name(obj))))?
        .collect::<PyResult<_>>()?;
    items
        .iter()
        .enumerate()
        .map(|(i, p)| {
            i64_list(p, &format!("{arg}[{i}]"))?
                .into_iter()
                .map(|x| {
                    u32::try_from(x).map_err(|_| value_err(format!("{arg}[{i}]: {x} is not a rank (0..=4294967295)")))
                })
                .collect()
        })
        .collect()
}

#[pymethods]
impl PyDraftTree {
    #[new]
    #[pyo3(signature = (parent, tokens, draft_dists=None, without_replacement=false))]
    fn new(
        parent: &Bound<'_, PyAny>,
        tokens: &Bound<'_, PyAny>,
        draft_dists: Option<&Bound<'_, PyAny>>,
        without_replacement: bool,
    ) -> PyResult<Self> {
        let draft_dists = match draft_dists.filter(|d| !d.is_none()) {
            None => None,
            Some(d) => Some(draft_dists_arg(Some(d))?),
        };
        Ok(PyDraftTree {
            inner: sampler_host::DraftTree {
                parent: ids_list(parent, "parent")?,
                tokens: ids_list(tokens, "tokens")?,
                draft_dists,
                without_replacement,
            },
        })
    }
    /// A chain (section 6's verify as a tree): node i+1 is `drafts[i]`, child of node i.
    #[staticmethod]
    #[pyo3(signature = (drafts, draft_dists=None))]
    fn chain(drafts: &Bound<'_, PyAny>, draft_dists: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let d = draft_dists.filter(|d| !d.is_none()).map(|d| draft_dists_arg(Some(d))).transpose()?;
        Ok(PyDraftTree { inner: sampler_host::DraftTree::chain(ids_list(drafts, "drafts")?, d) })
    }
    /// `[M]` parents.
    #[getter]
    fn parent(&self) -> Vec<i32> {
        self.inner.parent.clone()
    }
    /// `[M - 1]` draft tokens.
    #[getter]
    fn tokens(&self) -> Vec<i32> {
        self.inner.tokens.clone()
    }
    /// Whether children were drawn without replacement.
    #[getter]
    fn without_replacement(&self) -> bool {
        self.inner.without_replacement
    }
    /// Nodes M (= rows of its request).
    #[getter]
    fn nodes(&self) -> usize {
        self.inner.nodes()
    }
    /// Parents from first-child / next-sibling arrays (`[M]` each, -1 = none).
    #[staticmethod]
    fn parents_from_first_child_next_sibling(
        first_child: &Bound<'_, PyAny>,
        next_sibling: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<i32>> {
        sampler_host::DraftTree::parents_from_first_child_next_sibling(
            &ids_list(first_child, "first_child")?,
            &ids_list(next_sibling, "next_sibling")?,
        )
        .map_err(tree_err)
    }
    /// Parents from rank paths (vLLM `speculative_token_tree`, Medusa / EAGLE-1 choices), root excluded.
    #[staticmethod]
    fn parents_from_rank_paths(paths: &Bound<'_, PyAny>) -> PyResult<Vec<i32>> {
        sampler_host::DraftTree::parents_from_rank_paths(&u32_lists(paths, "rank_paths")?).map_err(tree_err)
    }
    /// Parents of nodes `0..m` from root-to-leaf node paths (EAGLE-2 `retrieve_indices`; -1 padded).
    #[staticmethod]
    fn parents_from_node_paths(m: &Bound<'_, PyAny>, paths: &Bound<'_, PyAny>) -> PyResult<Vec<i32>> {
        let m = usize_arg(m, "m")?;
        let items: Vec<Bound<'_, PyAny>> = paths.try_iter()?.collect::<PyResult<_>>()?;
        let p: Vec<Vec<i32>> =
            items.iter().enumerate().map(|(i, x)| ids_list(x, &format!("node_paths[{i}]"))).collect::<PyResult<_>>()?;
        sampler_host::DraftTree::parents_from_node_paths(m, &p).map_err(tree_err)
    }
    /// Parents from depths in DFS order (FlexFlow).
    #[staticmethod]
    fn parents_from_dfs_depths(depths: &Bound<'_, PyAny>) -> PyResult<Vec<i32>> {
        let d: Vec<u32> = i64_list(depths, "dfs_depths")?
            .into_iter()
            .map(|x| u32::try_from(x).map_err(|_| value_err(format!("dfs_depths: {x} is not a depth"))))
            .collect::<PyResult<_>>()?;
        sampler_host::DraftTree::parents_from_dfs_depths(&d).map_err(tree_err)
    }
    /// One distribution per internal node from per-child table rows (TensorRT-LLM `draftProbIndices`).
    #[staticmethod]
    fn dists_from_child_rows(
        parent: &Bound<'_, PyAny>,
        child_row: &Bound<'_, PyAny>,
        table: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<PyDraftDist>> {
        let t = draft_dists_arg(Some(table))?;
        let d = sampler_host::DraftTree::dists_from_child_rows(
            &ids_list(parent, "parent")?,
            &ids_list(child_row, "child_row")?,
            &t,
        )
        .map_err(tree_err)?;
        Ok(d.into_iter().map(|inner| PyDraftDist { inner }).collect())
    }
    fn __repr__(&self) -> String {
        format!(
            "DraftTree(nodes={}, proposal={})",
            self.inner.nodes(),
            if self.inner.draft_dists.is_some() { "drafted" } else { "fixed" }
        )
    }
}

/// One request of a step; it owns consecutive rows of the logits. Build it
/// with the static constructors (`prefill`, `decode`, `verify`, `draft`,
/// `prompt_logprobs`).
#[pyclass(name = "Request", module = "sampler_py", frozen)]
struct PyRequest {
    inner: Request,
}

fn finish(mut r: Request, golden: Option<&Bound<'_, PyAny>>, masks: Option<&Bound<'_, PyAny>>) -> PyResult<PyRequest> {
    if let Some(g) = golden.filter(|g| !g.is_none()) {
        r.golden = ids_list(g, "golden")?;
    }
    if let Some(m) = masks.filter(|m| !m.is_none()) {
        r.masks = Some(masks_arg(m, "masks")?);
    }
    Ok(PyRequest { inner: r })
}

#[pymethods]
impl PyRequest {
    /// One prefill row at position `seqlen_k` (prompt length after this chunk).
    /// `golden`: `[1]` teacher-forced token (-1 none); `masks`: `[1, ceil(V/32)]` bit mask.
    #[staticmethod]
    #[pyo3(signature = (params, seqlen_k, *, golden=None, masks=None))]
    fn prefill(
        params: PyRef<'_, PySamplingParams>,
        seqlen_k: &Bound<'_, PyAny>,
        golden: Option<&Bound<'_, PyAny>>,
        masks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        finish(Request::prefill(params.to_rust(), u64_arg(seqlen_k, "seqlen_k")?), golden, masks)
    }

    /// A decode request owning `seqlen_q` rows: row j verifies `drafts[j]`
    /// (-1 = placeholder), the last row is fresh (section 6). `drafts` and
    /// `draft_dists` need `seqlen_q - 1` entries (else an error status).
    #[staticmethod]
    #[pyo3(signature = (params, seqlen_k, seqlen_q=None, drafts=None, draft_dists=None, *, golden=None, masks=None))]
    fn decode(
        params: PyRef<'_, PySamplingParams>,
        seqlen_k: &Bound<'_, PyAny>,
        seqlen_q: Option<&Bound<'_, PyAny>>,
        drafts: Option<&Bound<'_, PyAny>>,
        draft_dists: Option<&Bound<'_, PyAny>>,
        golden: Option<&Bound<'_, PyAny>>,
        masks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let drafts = drafts.filter(|d| !d.is_none()).map(|d| ids_list(d, "drafts")).transpose()?.unwrap_or_default();
        let r = Request::decode(
            params.to_rust(),
            u64_arg(seqlen_k, "seqlen_k")?,
            seqlen_q.map_or(Ok(1), |q| u64_arg(q, "seqlen_q"))?,
            drafts,
            draft_dists_arg(draft_dists)?,
        );
        finish(r, golden, masks)
    }

    /// A verify request: `decode` with `seqlen_q = len(drafts) + 1`.
    #[staticmethod]
    #[pyo3(signature = (params, seqlen_k, drafts, draft_dists, *, golden=None, masks=None))]
    fn verify(
        params: PyRef<'_, PySamplingParams>,
        seqlen_k: &Bound<'_, PyAny>,
        drafts: &Bound<'_, PyAny>,
        draft_dists: &Bound<'_, PyAny>,
        golden: Option<&Bound<'_, PyAny>>,
        masks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let drafts = ids_list(drafts, "drafts")?;
        let q = drafts.len() as u64 + 1;
        let r = Request::decode(
            params.to_rust(),
            u64_arg(seqlen_k, "seqlen_k")?,
            q,
            drafts,
            draft_dists_arg(Some(draft_dists))?,
        );
        finish(r, golden, masks)
    }

    /// Draft-model draws, one per row (`rows`): row i-1 draws draft i at
    /// position `sample_position + last_valid_offset + i`, seed `seq_seed + 1000000007`.
    #[staticmethod]
    #[pyo3(signature = (params, seqlen_k, seqlen_q, last_valid_offset, rows, *, masks=None))]
    fn draft(
        params: PyRef<'_, PySamplingParams>,
        seqlen_k: &Bound<'_, PyAny>,
        seqlen_q: &Bound<'_, PyAny>,
        last_valid_offset: &Bound<'_, PyAny>,
        rows: &Bound<'_, PyAny>,
        masks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let rows_v = u64_arg(rows, "rows")?;
        let rows =
            u32::try_from(rows_v).map_err(|_| value_err(format!("rows must be in 0..=4294967295, got {rows_v}")))?;
        let kind = RequestKind::Draft {
            seqlen_k: u64_arg(seqlen_k, "seqlen_k")?,
            seqlen_q: u64_arg(seqlen_q, "seqlen_q")?,
            last_valid_offset: u64_arg(last_valid_offset, "last_valid_offset")?,
            rows,
        };
        finish(Request { params: params.to_rust(), kind, golden: Vec::new(), masks: None }, None, masks)
    }

    /// Prompt logprobs (section 8): one row per prompt position; `targets[i]`
    /// is the next prompt token (-1 = none). No token is drawn.
    #[staticmethod]
    #[pyo3(signature = (params, targets, *, masks=None))]
    fn prompt_logprobs(
        params: PyRef<'_, PySamplingParams>,
        targets: &Bound<'_, PyAny>,
        masks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut p = params.to_rust();
        p.prompt_logprobs = true;
        let kind = RequestKind::PromptLogprobs { targets: ids_list(targets, "targets")? };
        finish(Request { params: p, kind, golden: Vec::new(), masks: None }, None, masks)
    }

    /// A decode request verifying a draft tree (section 11): one row per
    /// node; `seqlen_k` counts the M tree nodes; `golden`: one id per depth
    /// (11.7). The accepted path is `StepOutput.paths`.
    #[staticmethod]
    #[pyo3(signature = (params, seqlen_k, tree, *, golden=None, masks=None))]
    fn tree(
        params: PyRef<'_, PySamplingParams>,
        seqlen_k: &Bound<'_, PyAny>,
        tree: PyRef<'_, PyDraftTree>,
        golden: Option<&Bound<'_, PyAny>>,
        masks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        finish(Request::tree(params.to_rust(), u64_arg(seqlen_k, "seqlen_k")?, tree.inner.clone()), golden, masks)
    }

    /// Rows of the logits this request owns.
    #[getter]
    fn rows(&self) -> usize {
        self.inner.rows()
    }
    /// `"prefill"`, `"decode"`, `"draft"`, `"prompt_logprobs"` or `"tree"`.
    #[getter]
    fn kind(&self) -> &'static str {
        match self.inner.kind {
            RequestKind::Prefill { .. } => "prefill",
            RequestKind::Decode { .. } => "decode",
            RequestKind::Draft { .. } => "draft",
            RequestKind::PromptLogprobs { .. } => "prompt_logprobs",
            RequestKind::Tree { .. } => "tree",
        }
    }
    fn __repr__(&self) -> String {
        format!("Request(kind={:?}, rows={})", self.kind(), self.rows())
    }
}

// ---------------------------------------------------------------- logits

/// Logits `[R, V]` (or `[.., V]` with `ndims`), borrowed as f32 when they are f32.
struct Logits<'py> {
    b: Borrowed<'py>,
    widened: Option<Vec<f32>>,
}

impl<'py> Logits<'py> {
    fn import(obj: &Bound<'py, PyAny>, arg: &str, ndims: &[usize]) -> PyResult<Logits<'py>> {
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
    fn data(&self) -> &[f32] {
        self.widened.as_deref().unwrap_or_else(|| self.b.as_f32())
    }
    fn vocab(&self) -> usize {
        *self.b.shape.last().unwrap_or(&0)
    }
    fn rows(&self) -> usize {
        // All dimensions but the last (also when V = 0).
        self.b.shape.iter().rev().skip(1).product()
    }
}

fn check_vocab(l: &Logits<'_>, arg: &str, vocab: u32) -> PyResult<()> {
    if l.vocab() != vocab as usize {
        return Err(value_err(format!("{arg}: expected shape [R, vocab_size = {vocab}], got {:?}", l.b.shape)));
    }
    Ok(())
}

fn parse_backend(s: &str) -> PyResult<BackendKind> {
    s.parse::<BackendKind>().map_err(|e| value_err(e.to_string()))
}

// ---------------------------------------------------------------- Sampler

/// The sampler (mirrors `sampler_host::Sampler`): validates requests, lays
/// out each step and runs it on a backend (`"auto"`: CUDA when a driver and
/// GPU are present, else the CPU).
#[pyclass(name = "Sampler", module = "sampler_py", frozen)]
struct PySampler {
    inner: Mutex<Sampler>,
    /// Output buffers kept for reuse by CUDA steps (`None`: `reuse_outputs=False`).
    pool: Option<Mutex<cuda::OutPool>>,
    cfg: SamplerConfig,
    n: u32,
    backend: &'static str,
}

/// The requests of one call, as the `&[Request]` a step takes, without
/// cloning them (cloning 64 requests took 1.5 us of py-2's 7.2 us binding
/// overhead, docs/GPU_NOTES.md; these copies 0.8 us): bitwise copies of the `Request`s inside the `Request`
/// objects, which this batch keeps alive and never drops.
struct ReqBatch<'py> {
    /// Strong references: the objects (and the heap data the copies point
    /// to) outlive the batch even if the caller's list changes meanwhile
    /// (another thread, while a host step runs without the GIL).
    _keep: Vec<Bound<'py, PyRequest>>,
    copies: Vec<std::mem::ManuallyDrop<Request>>,
}

impl<'py> ReqBatch<'py> {
    fn new(keep: Vec<Bound<'py, PyRequest>>) -> ReqBatch<'py> {
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

fn requests_arg<'py>(requests: &Bound<'py, PyAny>) -> PyResult<ReqBatch<'py>> {
    let bad = |i: usize, r: &Bound<'_, PyAny>| {
        PyTypeError::new_err(format!("requests[{i}] must be a Request, got {}", type_name(r)))
    };
    // Fast path for the usual list.
    if let Ok(list) = requests.cast::<PyList>() {
        let mut keep = Vec::with_capacity(list.len());
        for (i, r) in list.iter().enumerate() {
            keep.push(r.cast_into::<PyRequest>().map_err(|e| bad(i, &e.into_inner()))?);
        }
        return Ok(ReqBatch::new(keep));
    }
    let items: Vec<Bound<'_, PyAny>> = requests
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("requests must be a list of Request, got {}", type_name(requests))))?
        .collect::<PyResult<_>>()?;
    let keep = items
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.cast_into::<PyRequest>().map_err(|e| bad(i, &e.into_inner())))
        .collect::<PyResult<_>>()?;
    Ok(ReqBatch::new(keep))
}

impl PySampler {
    fn lock(&self) -> std::sync::MutexGuard<'_, Sampler> {
        // A panic inside a step cannot leave the sampler half-updated (steps are pure).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// The lock taken while holding the GIL: when another thread holds it (in
    /// a host step, GIL released), wait for it with the GIL released, so that
    /// thread can take the GIL back to finish.
    fn lock_gil(&self, py: Python<'_>) -> std::sync::MutexGuard<'_, Sampler> {
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
    /// default: on the H200 (GPU_NOTES run 13) its reference checks cost more
    /// host time than torch's allocator saves; `out=` is the cheap reuse.
    /// Raises ValueError for a bad configuration (section 9), RuntimeError
    /// when a forced backend is unavailable.
    #[new]
    #[pyo3(signature = (vocab_size, *, force_topk=None, nextn=None, backend="auto", reuse_outputs=false))]
    fn new(
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
        Ok(PySampler { n: s.n(), backend: s.backend_name(), inner: Mutex::new(s), pool, cfg })
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
    /// A bad request only gets an error status.
    #[pyo3(signature = (logits, requests, *, stream=None, out=None))]
    fn sample(
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
            let reqs = requests_arg(requests)?;
            let mut guard = self.lock_gil(py);
            // Never blocks: the GIL is held, so a pool lock held elsewhere is a re-entrant call.
            let mut pool = self.pool.as_ref().and_then(|p| p.try_lock().ok());
            let (flat, segs, rkg) =
                cuda::step(py, &mut guard, &c, &reqs, cuda::Want::All, out.map(|o| o.get()), pool.as_deref_mut())?;
            drop(pool);
            drop(guard);
            if let Some(o) = out {
                return Ok(o.clone().into_any().unbind());
            }
            let counts: Vec<usize> = reqs.iter().map(Request::rows).collect();
            return Ok(Py::new(py, cuda::CudaStepOutput::new(flat, segs, rkg, counts))?.into_any());
        }
        if out.is_some() {
            // Host logits return a new host StepOutput: an ignored `out=` would look written.
            return Err(value_err("out: a CudaStepOutput is written only by a step on CUDA logits; these logits are on the host (drop out=)"));
        }
        let l = Logits::import(logits, "logits", &[2])?;
        check_vocab(&l, "logits", self.cfg.vocab_size)?;
        let reqs = requests_arg(requests)?;
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
        let counts: Vec<usize> = reqs.iter().map(Request::rows).collect();
        Ok(Py::new(py, step_output(&Out::for_input(logits), res, &counts)?)?.into_any())
    }

    /// The host-side error text of `request` on this sampler (its
    /// parameters, kind and shape; section 1), or None when it is valid.
    /// A `CudaStepOutput` status of -1 means this check failed.
    fn check(&self, py: Python<'_>, request: PyRef<'_, PyRequest>) -> Option<String> {
        self.lock_gil(py).check(&request.inner).err().map(|e| e.to_string())
    }

    /// Like `sample`, and also returns the processed top-N distribution of
    /// the logits rows `rows`: `(output, ids [len(rows), N] int32,
    /// logprobs [len(rows), N] float32)` in the order of section 3.6 (-inf
    /// for removed candidates). Used to fill the MTP info pool from draft draws.
    fn sample_with_processed(
        &self,
        py: Python<'_>,
        logits: &Bound<'_, PyAny>,
        requests: &Bound<'_, PyAny>,
        rows: &Bound<'_, PyAny>,
    ) -> PyResult<(PyStepOutput, Py<PyAny>, Py<PyAny>)> {
        let l = Logits::import(logits, "logits", &[2])?;
        check_vocab(&l, "logits", self.cfg.vocab_size)?;
        let reqs = requests_arg(requests)?;
        let rows: Vec<usize> = i64_list(rows, "rows")?
            .into_iter()
            .map(|r| usize::try_from(r).map_err(|_| value_err(format!("rows: {r} is not a row index"))))
            .collect::<PyResult<_>>()?;
        let (data, rs): (&[f32], &[Request]) = (l.data(), &reqs);
        let (res, p) = py.detach(|| self.lock().sample_with_processed(data, rs, &rows)).map_err(batch_err)?;
        let out = Out::for_input(logits);
        let counts: Vec<usize> = reqs.iter().map(Request::rows).collect();
        let (nr, n) = (p.rows.len(), p.n);
        let ids = out.arr(p.ids, &[nr, n])?;
        let lps = out.arr(p.logprobs, &[nr, n])?;
        Ok((step_output(&out, res, &counts)?, ids, lps))
    }

    /// Vocabulary size V.
    #[getter]
    fn vocab_size(&self) -> u32 {
        self.cfg.vocab_size
    }
    /// Force top-k as configured (0 = off).
    #[getter]
    fn force_topk(&self) -> u32 {
        self.cfg.force_topk
    }
    /// Candidate width N (V when force top-k is off).
    #[getter]
    fn n(&self) -> u32 {
        self.n
    }
    /// Draft tokens per step.
    #[getter]
    fn nextn(&self) -> u32 {
        self.cfg.nextn
    }
    /// Backend in use: `"cpu"` or `"cuda"`.
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend
    }
    fn __repr__(&self) -> String {
        format!(
            "Sampler(vocab_size={}, force_topk={}, nextn={}, backend={:?})",
            self.cfg.vocab_size, self.cfg.force_topk, self.cfg.nextn, self.backend
        )
    }
}

// ---------------------------------------------------------------- functional API

/// Samplers of the functional API, one per (V, force_topk, backend): a short
/// list searched in order (no hashing, no key string made per call).
type Cached = Vec<(u32, u32, BackendKind, Sampler)>;

/// The functional API's samplers, process-wide.
fn cached() -> &'static Mutex<Cached> {
    static S: OnceLock<Mutex<Cached>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(Vec::new()))
}

/// The index of the cached sampler for (V, force_topk, backend) in `list`, made when missing
/// (by `make`, which may release the GIL).
fn cached_index(
    list: &mut Cached,
    vocab: u32,
    force_topk: u32,
    kind: BackendKind,
    make: impl FnOnce(SamplerConfig) -> Result<Sampler, ConfigError>,
) -> PyResult<usize> {
    if let Some(i) = list.iter().position(|(v, n, k, _)| (*v, *n, *k) == (vocab, force_topk, kind)) {
        return Ok(i);
    }
    let s = make(SamplerConfig { vocab_size: vocab, force_topk, nextn: 5, backend: kind }).map_err(config_err)?;
    list.push((vocab, force_topk, kind, s));
    Ok(list.len() - 1)
}

/// Runs `reqs` on the cached sampler for (V, force_topk, backend) with the GIL released.
fn run_cached(
    py: Python<'_>,
    vocab: usize,
    force_topk: u32,
    backend: &str,
    data: &[f32],
    reqs: &[Request],
    processed: Option<&[usize]>,
) -> PyResult<(StepOutput, Option<ProcessedRows>)> {
    let vocab = u32::try_from(vocab)
        .map_err(|_| value_err(format!("logits: vocabulary size {vocab} is out of range (1..=524288)")))?;
    let kind = parse_backend(backend)?;
    py.detach(|| -> PyResult<_> {
        let mut list = cached().lock().unwrap_or_else(|p| p.into_inner());
        let i = cached_index(&mut list, vocab, force_topk, kind, Sampler::new)?;
        let s = &mut list[i].3;
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
fn with_cached<T>(
    py: Python<'_>,
    vocab: usize,
    force_topk: u32,
    backend: &str,
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
    let i = cached_index(&mut list, vocab, force_topk, kind, |c| py.detach(|| Sampler::new(c)))?;
    f(&mut list[i].3)
}

/// Per-row parameters of the functional API.
struct RowParams {
    temperature: Vec<f32>,
    top_p: Vec<f32>,
    top_k: Vec<i64>,
    seed: Vec<Option<u64>>,
    position: Vec<u64>,
}

#[allow(clippy::too_many_arguments)]
fn row_params(
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
    })
}

impl RowParams {
    /// One prefill request per row (the functional sampling call).
    fn requests(&self, top_logprobs: u32) -> Vec<Request> {
        (0..self.position.len()).map(|i| Request::prefill(self.params(i, top_logprobs), self.position[i])).collect()
    }
    fn params(&self, i: usize, top_logprobs: u32) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature[i],
            top_p: self.top_p[i],
            top_k: self.top_k[i],
            top_logprobs,
            seq_seed: self.seed[i],
            ..Default::default()
        }
    }
}

/// Samples one token per row of `logits` `[R, V]` (FlashInfer's convention,
/// SAMPLER.md sections 3-5): each row is its own request at `positions[i]`
/// (default 0) with seed `seed[i]` (None: 64 random bits per row).
/// `top_k`, `top_p`, `temperature`, `seed`, `positions`: a scalar or `[R]`.
/// Returns `[R]` int32 tokens (-1 for a row whose parameters or logits are
/// invalid), or with `return_logprobs=True` the full `StepOutput`.
/// CUDA `logits` (f32 / bf16 / f16): the step runs on `stream` (default
/// torch's current stream) and returns `[R]` int32 tokens on that device
/// (or a `CudaStepOutput`) without waiting; per-row parameters are host
/// values (a CUDA tensor parameter is copied to the host: a sync).
/// Each call allocates its output buffer from torch's caching allocator.
#[pyfunction]
#[pyo3(signature = (logits, top_k=None, top_p=None, *, temperature=None, seed=None, positions=None, force_topk=None, return_logprobs=false, top_logprobs=None, backend="auto", stream=None))]
#[allow(clippy::too_many_arguments)]
fn top_k_top_p_sampling_from_logits(
    py: Python<'_>,
    logits: &Bound<'_, PyAny>,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    temperature: Option<&Bound<'_, PyAny>>,
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
        let reqs = row_params(r, top_k, top_p, temperature, seed, positions)?.requests(top_logprobs);
        let want = if return_logprobs { cuda::Want::All } else { cuda::Want::Tokens };
        // No output pool: its reference checks cost more than torch's allocator (run 13).
        let (flat, segs, rkg) =
            with_cached(py, c.vocab(), force_topk, backend, |s| cuda::step(py, s, &c, &reqs, want, None, None))?;
        if return_logprobs {
            return Ok(Py::new(py, cuda::CudaStepOutput::new(flat, segs, rkg, vec![1; r]))?.into_any());
        }
        return Ok(flat);
    }
    let l = Logits::import(logits, "logits", &[2])?;
    let r = l.rows();
    let reqs = row_params(r, top_k, top_p, temperature, seed, positions)?.requests(top_logprobs);
    let (res, _) = run_cached(py, l.vocab(), force_topk, backend, l.data(), &reqs, None)?;
    let out = Out::for_input(logits);
    if return_logprobs {
        return Ok(Py::new(py, step_output(&out, res, &vec![1; r])?)?.into_any());
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
/// each request's sample position (row j uses position + j * 10000019).
/// Returns a `StepOutput` (`accepted`, `emitted` per request).
#[pyfunction]
#[pyo3(signature = (target_logits, draft_ids, draft_logprobs, top_k=None, top_p=None, *, temperature=None, seed=None, positions=None, draft_dist_ids=None, force_topk=None, top_logprobs=None, backend="auto", stream=None))]
#[allow(clippy::too_many_arguments)]
fn verify(
    py: Python<'_>,
    target_logits: &Bound<'_, PyAny>,
    draft_ids: &Bound<'_, PyAny>,
    draft_logprobs: &Bound<'_, PyAny>,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    temperature: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    positions: Option<&Bound<'_, PyAny>>,
    draft_dist_ids: Option<&Bound<'_, PyAny>>,
    force_topk: Option<&Bound<'_, PyAny>>,
    top_logprobs: Option<&Bound<'_, PyAny>>,
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
    let p = row_params(b, top_k, top_p, temperature, seed, positions)?;
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
        let (flat, segs, rkg) =
            with_cached(py, v, force_topk, backend, |s| cuda::step(py, s, c, &reqs, cuda::Want::All, None, None))?;
        return Ok(Py::new(py, cuda::CudaStepOutput::new(flat, segs, rkg, vec![m; b]))?.into_any());
    }
    let l = hl.expect("host logits");
    let (res, _) = run_cached(py, v, force_topk, backend, l.data(), &reqs, None)?;
    Ok(Py::new(py, step_output(&Out::for_input(target_logits), res, &vec![m; b])?)?.into_any())
}

/// The processed distribution (section 3) of every row: `(ids, logprobs)`,
/// `[R, N]` each, N = V or `force_topk`.
fn processed_all<'py>(
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
#[pyo3(signature = (logits, top_k=None, top_p=None, *, temperature=None, force_topk=None, backend="auto"))]
fn top_k_top_p_renorm_logprobs(
    py: Python<'_>,
    logits: &Bound<'_, PyAny>,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    temperature: Option<&Bound<'_, PyAny>>,
    force_topk: Option<&Bound<'_, PyAny>>,
    backend: &str,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    let force_topk = u32_opt(force_topk, "force_topk", 0)?;
    let l = Logits::import(logits, "logits", &[2])?;
    let p = row_params(l.rows(), top_k, top_p, temperature, None, None)?;
    let pr = processed_all(py, &l, "logits", &p, force_topk, backend)?;
    let out = Out::for_input(logits);
    let (nr, n) = (pr.rows.len(), pr.n);
    Ok((out.arr(pr.ids, &[nr, n])?, out.arr(pr.logprobs, &[nr, n])?))
}

/// Dense renormalised probabilities `[R, V]` of probs `[R, V]` after top-k /
/// top-p: section 3 with logits `ln(probs)` and temperature 1, so the order
/// and ties are the spec's (probs compared via their logs).
fn renorm_probs(
    py: Python<'_>,
    probs: &Bound<'_, PyAny>,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    backend: &str,
) -> PyResult<Py<PyAny>> {
    let b = dlpack::import(probs, "probs", &[2])?;
    let mut logs = b.to_f32_vec("probs")?;
    for x in logs.iter_mut() {
        // ln(0) = -inf (removed); a negative or NaN prob becomes NaN: an invalid row.
        *x = x.ln();
    }
    let l = Logits { b, widened: Some(logs) };
    let (r, v) = (l.rows(), l.vocab());
    let p = row_params(r, top_k, top_p, None, None, None)?;
    let pr = processed_all(py, &l, "probs", &p, 0, backend)?;
    let mut dense = vec![0f32; r * v];
    for i in 0..r {
        let (ids, lps) = pr.row(i).map_err(|e| value_err(e.to_string()))?;
        for (&id, &lp) in ids.iter().zip(lps) {
            if id >= 0 && (id as usize) < v {
                dense[i * v + id as usize] = lp.exp();
            }
        }
    }
    Out::for_input(probs).arr(dense, &[r, v])
}

/// Keeps the `top_k` most likely tokens of each row of probs `[R, V]` and
/// renormalises (FlashInfer's `top_k_renorm_probs`, through SAMPLER.md
/// section 3 with logits ln(probs)). `top_k`: scalar or `[R]`, -1 = off.
#[pyfunction]
#[pyo3(signature = (probs, top_k, *, backend="auto"))]
fn top_k_renorm_probs(
    py: Python<'_>,
    probs: &Bound<'_, PyAny>,
    top_k: &Bound<'_, PyAny>,
    backend: &str,
) -> PyResult<Py<PyAny>> {
    renorm_probs(py, probs, Some(top_k), None, backend)
}

/// Keeps the smallest prefix of each row of probs `[R, V]` whose mass
/// exceeds `top_p` and renormalises (FlashInfer's `top_p_renorm_probs`,
/// through SAMPLER.md section 3). `top_p`: scalar or `[R]` in (0, 1].
#[pyfunction]
#[pyo3(signature = (probs, top_p, *, backend="auto"))]
fn top_p_renorm_probs(
    py: Python<'_>,
    probs: &Bound<'_, PyAny>,
    top_p: &Bound<'_, PyAny>,
    backend: &str,
) -> PyResult<Py<PyAny>> {
    renorm_probs(py, probs, None, Some(top_p), backend)
}

// ---------------------------------------------------------------- MTP info pool

/// The MTP info pool (sections 6 and 9): the draft model's processed
/// distribution of every pending draft token, `(max_num_seqs + 1) * nextn`
/// rows of N logprobs (+ N ids when N < V). Slot `max_num_seqs` is scratch.
#[pyclass(name = "MtpInfoPool", module = "sampler_py")]
struct PyMtpInfoPool {
    inner: MtpInfoPool,
}

fn engine_err(e: EngineError) -> PyErr {
    value_err(e.to_string())
}

#[pymethods]
impl PyMtpInfoPool {
    /// `n >= vocab` means force top-k off (N = V). Raises ValueError for zero
    /// sizes, negative ints or a pool too large to allocate (naming the argument).
    #[new]
    fn new(
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
    fn alloc(&mut self) -> Option<usize> {
        self.inner.alloc()
    }
    /// Returns a slot (freeing a free slot is a no-op).
    fn release(&mut self, slot: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.release(usize_arg(slot, "slot")?);
        Ok(())
    }
    /// Stores the processed top-N distribution (`ids`, `logprobs`: N each)
    /// that proposed draft `i` (0-based) of `slot`. ValueError on bad sizes.
    fn write(
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
    fn read(&self, slot: &Bound<'_, PyAny>, i: &Bound<'_, PyAny>) -> PyResult<PyDraftDist> {
        Ok(PyDraftDist { inner: self.inner.read(usize_arg(slot, "slot")?, usize_arg(i, "i")?) })
    }
    /// Pool rows `(max_num_seqs + 1) * nextn`.
    #[getter]
    fn rows(&self) -> usize {
        self.inner.rows()
    }
    /// Width N.
    #[getter]
    fn n(&self) -> usize {
        self.inner.n()
    }
    /// Draft tokens per slot.
    #[getter]
    fn nextn(&self) -> usize {
        self.inner.nextn()
    }
    /// Bytes held (section 9's formula).
    #[getter]
    fn nbytes(&self) -> u64 {
        self.inner.bytes()
    }
    /// The scratch slot (never handed out).
    #[getter]
    fn scratch_slot(&self) -> usize {
        self.inner.scratch_slot()
    }
}

// ---------------------------------------------------------------- helpers

/// Runs a conformance case (CONFORMANCE.md) entirely in Rust and returns its
/// result document as JSON text (the reference the Python path is compared
/// with). Raises ValueError when the case itself cannot be run.
#[pyfunction]
#[pyo3(signature = (case_json, backend="cpu"))]
fn run_case_json(py: Python<'_>, case_json: &str, backend: &str) -> PyResult<String> {
    let kind = parse_backend(backend)?;
    let doc = py
        .detach(|| sampler_host::conformance::case::run_case_str(case_json, kind))
        .map_err(|e| value_err(e.to_string()))?;
    Ok(doc.to_string())
}

/// Every golden case file under `dir` (`../shared/golden`): `dir/*.json`
/// plus the landed cases of `dir/next/` (`sampler_host::conformance::case::golden_files`), sorted.
#[pyfunction]
fn golden_files(dir: std::path::PathBuf) -> Vec<String> {
    sampler_host::conformance::case::golden_files(&dir).into_iter().map(|p| p.to_string_lossy().into_owned()).collect()
}

/// Seconds per step of `sampler.sample(logits, requests)` timed inside Rust
/// (`iters` steps, after the import and the request conversion): the Python
/// call's time minus this is the binding overhead.
#[pyfunction]
fn _bench_rust_step(
    py: Python<'_>,
    sampler: &Bound<'_, PySampler>,
    logits: &Bound<'_, PyAny>,
    requests: &Bound<'_, PyAny>,
    iters: usize,
) -> PyResult<f64> {
    let l = Logits::import(logits, "logits", &[2])?;
    let reqs = requests_arg(requests)?;
    let s = sampler.get();
    let (data, rs): (&[f32], &[Request]) = (l.data(), &reqs);
    py.detach(|| {
        let mut guard = s.lock();
        let t = std::time::Instant::now();
        for _ in 0..iters.max(1) {
            guard.sample(data, rs).map_err(batch_err)?;
        }
        Ok(t.elapsed().as_secs_f64() / iters.max(1) as f64)
    })
}

/// Seconds per call of the binding's request conversion (`requests` ->
/// the Rust requests a step takes), timed inside Rust over `iters` calls:
/// one part of the binding overhead (`bench/binding_parts.py`).
#[pyfunction]
fn _bench_convert_requests(requests: &Bound<'_, PyAny>, iters: usize) -> PyResult<f64> {
    let t = std::time::Instant::now();
    for _ in 0..iters.max(1) {
        std::hint::black_box(requests_arg(requests)?);
    }
    Ok(t.elapsed().as_secs_f64() / iters.max(1) as f64)
}

/// Does nothing, with `Sampler.sample`'s signature: the pyo3 call dispatch
/// and argument parsing of a call, timed from Python (`bench/binding_profile.py`).
#[pyfunction]
#[pyo3(signature = (logits, requests, *, stream=None, out=None))]
fn _bench_dispatch(
    logits: &Bound<'_, PyAny>,
    requests: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    out: Option<&Bound<'_, cuda::CudaStepOutput>>,
) {
    let _ = (logits, requests, stream, out);
}

/// Turns the bench-only API clock on or off ([`api_clock`]).
#[pyfunction]
fn _bench_api_clock(on: bool) {
    api_clock::set(on)
}

/// Nanoseconds the last step spent inside the Rust API (0 when the clock is off or no step ran).
#[pyfunction]
fn _bench_api_ns() -> u64 {
    api_clock::last()
}

/// Host seconds of each of `iters` CUDA steps of `sampler.sample(logits,
/// requests)` inside Rust: enqueueing the step (`sample_async` on the
/// caller's stream, no output copies), timed alone; the stream is
/// synchronised between steps, untimed. The Python call's host time minus
/// this is the binding overhead.
#[pyfunction]
fn _bench_rust_step_cuda(
    py: Python<'_>,
    sampler: &Bound<'_, PySampler>,
    logits: &Bound<'_, PyAny>,
    requests: &Bound<'_, PyAny>,
    iters: usize,
) -> PyResult<Vec<f64>> {
    let c = cuda::import(logits, "logits", &[2], None)?.ok_or_else(|| value_err("logits: expected a CUDA tensor"))?;
    let reqs = requests_arg(requests)?;
    let s = sampler.get();
    let mut guard = s.lock_gil(py);
    let cs = guard.cuda_stream().ok_or_else(|| value_err("the sampler is not on CUDA"))?;
    // SAFETY: as in `cuda::step`.
    let caller = unsafe { cs.context().wrap_borrowed_stream(c.stream as usize as _) };
    let dtype = match c.t.dtype {
        dlpack::CudaDtype::F32 => sampler_host::interop::Dtype::F32,
        dlpack::CudaDtype::Bf16 => sampler_host::interop::Dtype::Bf16,
        dlpack::CudaDtype::F16 => sampler_host::interop::Dtype::F16,
    };
    let len: usize = c.t.shape.iter().product();
    let mut out = Vec::with_capacity(iters);
    for _ in 0..iters.max(1) {
        let t = std::time::Instant::now();
        // SAFETY: as in `cuda::step`.
        let l = unsafe { sampler_host::interop::CudaLogits::from_raw(c.t.ptr, len, dtype, caller.clone()) };
        // As the binding's call: the outputs written by the kernels into caller-owned memory
        // (here the sampler's own, allocated once), no copy.
        guard.sample_async_into(l, &reqs, |_, _, _| Some(Default::default())).map_err(batch_err)?;
        caller.join(&cs).map_err(|e| device_err(format!("{e:?}")))?;
        out.push(t.elapsed().as_secs_f64());
        caller.synchronize().map_err(|e| device_err(format!("{e:?}")))?;
    }
    Ok(out)
}

/// Host nanoseconds per call of each piece of the binding's work at the
/// given inputs, timed inside Rust over `iters` calls: the host-only profile
/// of `bench/binding_profile.py` (issue 14 item 6). `logits`: a torch tensor
/// (CPU is fine: the pieces of the CUDA path are run on it, the CUDA-only
/// ones through their nearest host analogue, named in the piece) or another
/// DLPack array (the host path's import). Each piece calls the same
/// function the call does. `top_k` .. `positions`: the functional call's
/// per-row parameters.
#[pyfunction]
#[pyo3(signature = (logits, requests, iters, *, top_k=None, top_p=None, temperature=None, seed=None, positions=None))]
#[allow(clippy::too_many_arguments)]
fn _bench_binding_pieces(
    py: Python<'_>,
    logits: &Bound<'_, PyAny>,
    requests: &Bound<'_, PyAny>,
    iters: usize,
    top_k: Option<&Bound<'_, PyAny>>,
    top_p: Option<&Bound<'_, PyAny>>,
    temperature: Option<&Bound<'_, PyAny>>,
    seed: Option<&Bound<'_, PyAny>>,
    positions: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<(String, f64)>> {
    let n = iters.max(1);
    let per = |t: std::time::Instant| t.elapsed().as_nanos() as f64 / n as f64;
    let mut out: Vec<(String, f64)> = Vec::new();
    let api = dlpack::torch_api(logits).filter(|a| logits.is_instance(a.tensor.bind(py)).unwrap_or(false));
    let reqs = requests_arg(requests)?;
    let (r, g) = (reqs.iter().map(Request::rows).sum::<usize>(), reqs.len());
    let k = reqs.iter().map(|q| q.params.top_logprobs as usize).max().unwrap_or(0);
    if let Some(api) = api {
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(dlpack::read_torch(logits, "logits", &[2], api)?);
        }
        out.push(("torch tensor attributes (dtype, shape, strides, data_ptr, device)".into(), per(t)));
        let c = cuda::CudaIn { t: dlpack::read_torch(logits, "logits", &[2], api)?, stream: 0 };
        // `torch._C._cuda_getCurrentRawStream(device)` needs a GPU; a torch C call that runs without one.
        let analogue = py.import("torch")?.getattr("_C")?.getattr("_cuda_getDeviceCount")?;
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(cuda::stream_arg(None)?);
            std::hint::black_box(analogue.call0()?);
        }
        out.push(("current stream (analogue: one torch._C call, torch._C._cuda_getDeviceCount())".into(), per(t)));
        let (_, bytes, _) = cuda::layout(r, k, g, cuda::Want::All);
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(cuda::alloc_out(py, &c, api, false, r, bytes.max(16))?);
        }
        out.push((format!("output buffer, {bytes} bytes (torch new_empty; on the CPU device here)"), per(t)));
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(cuda::alloc_out(py, &c, api, true, r, 0)?);
        }
        out.push((format!("functional tokens buffer, [{r}] int32 (torch new_empty; CPU device)"), per(t)));
        // `reuse_outputs=True`: a dropped result's buffer taken back from the pool (its reference
        // checks; the CUDA-only capture check, one `cuStreamIsCapturing`, is not in it).
        let mut pool = cuda::OutPool::default();
        pool.keep(py, &cuda::alloc_out(py, &c, api, false, r, bytes.max(16))?, (0, 0), bytes.max(16), false);
        let t = std::time::Instant::now();
        for _ in 0..n {
            let got =
                pool.take(py, (0, 0), bytes.max(16), false).ok_or_else(|| value_err("the pool gave no buffer back"))?;
            std::hint::black_box(got);
        }
        out.push((
            "output pool (reuse_outputs=True): a free buffer taken back, its checks (CPU tensor)".into(),
            per(t),
        ));
        let flat = cuda::alloc_out(py, &c, api, false, r, bytes.max(16))?;
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(flat.call_method0(pyo3::intern!(py, "data_ptr"))?.extract::<u64>()?);
        }
        out.push(("the buffer's data_ptr()".into(), per(t)));
        let (segs, _, _) = cuda::layout(r, k, g, cuda::Want::All);
        let t = std::time::Instant::now();
        for _ in 0..n {
            let counts: Vec<usize> = reqs.iter().map(Request::rows).collect();
            std::hint::black_box(Py::new(
                py,
                cuda::CudaStepOutput::new(flat.clone().unbind(), segs, (r, k, g), counts),
            )?);
        }
        out.push(("result object (CudaStepOutput)".into(), per(t)));
        let res = Py::new(
            py,
            cuda::CudaStepOutput::new(flat.clone().unbind(), segs, (r, k, g), reqs.iter().map(Request::rows).collect()),
        )?;
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(res.bind(py).clone().into_any().unbind());
        }
        out.push(("out= result returned (a reference)".into(), per(t)));
    }
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(cuda::import(logits, "logits", &[2], None)?.is_none());
    }
    out.push(("host path: the CUDA probe of host logits (cuda::import -> None)".into(), per(t)));
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(Logits::import(logits, "logits", &[2])?);
    }
    out.push(("host path: import of the logits (zero copy; f32)".into(), per(t)));
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(Out::for_input(logits));
    }
    out.push(("host path: output kind (numpy or torch)".into(), per(t)));
    let t = std::time::Instant::now();
    for _ in 0..n {
        py.detach(|| std::hint::black_box(()));
    }
    out.push(("host path: GIL released and taken back (py.detach)".into(), per(t)));
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(requests_arg(requests)?);
    }
    out.push((format!("requests ({g} Request objects)"), per(t)));
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(row_params(r, top_k, top_p, temperature, seed, positions)?.requests(0));
    }
    out.push((format!("functional parameters and its {r} requests"), per(t)));
    Ok(out)
}

/// Address of the first element the binding reads from `array`: through
/// DLPack for host arrays and non-torch CUDA producers, through the
/// tensor's attributes for torch CUDA tensors and float torch CPU tensors (equals the producer's data
/// pointer: the import does not copy).
#[pyfunction]
fn _dlpack_data_ptr(array: &Bound<'_, PyAny>) -> PyResult<usize> {
    if let Some(c) = dlpack::import_cuda(array, "array", &[0, 1, 2, 3, 4], cuda::LEGACY_STREAM)? {
        return Ok(c.ptr as usize);
    }
    // Host logits given as a float torch CPU tensor are read through its attributes.
    if let Some(b) = dlpack::torch_host(array, "array", &[0, 1, 2, 3, 4])? {
        return Ok(b.data_ptr());
    }
    Ok(dlpack::import(array, "array", &[0, 1, 2, 3, 4])?.data_ptr())
}

/// Whether `tensor` lives on a CUDA device (DLPack kDLCUDA).
#[pyfunction]
fn is_cuda_tensor(tensor: &Bound<'_, PyAny>) -> bool {
    dlpack::is_cuda(tensor)
}

/// Sampler kernels for LLM inference from Python (SAMPLER.md).
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySamplingParams>()?;
    m.add_class::<PyDraftDist>()?;
    m.add_class::<PyDraftTree>()?;
    m.add_class::<PyRequest>()?;
    m.add_class::<PySampler>()?;
    m.add_class::<PyStepOutput>()?;
    m.add_class::<PyMtpInfoPool>()?;
    m.add_class::<cuda::CudaStepOutput>()?;
    m.add_function(wrap_pyfunction!(top_k_top_p_sampling_from_logits, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(top_k_top_p_renorm_logprobs, m)?)?;
    m.add_function(wrap_pyfunction!(top_k_renorm_probs, m)?)?;
    m.add_function(wrap_pyfunction!(top_p_renorm_probs, m)?)?;
    m.add_function(wrap_pyfunction!(run_case_json, m)?)?;
    m.add_function(wrap_pyfunction!(_dlpack_data_ptr, m)?)?;
    m.add_function(wrap_pyfunction!(golden_files, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_rust_step, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_rust_step_cuda, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_convert_requests, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_binding_pieces, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_api_clock, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_api_ns, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_dispatch, m)?)?;
    m.add_function(wrap_pyfunction!(is_cuda_tensor, m)?)?;
    m.add("SAMPLING_EPS", sampler_host::params::SAMPLING_EPS)?;
    Ok(())
}
