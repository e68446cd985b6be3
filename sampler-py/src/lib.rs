//! Python bindings of the sampler (`sampler_py._native`, re-exported by the
//! `sampler_py` package). Spec: `docs/spec/SAMPLER.md` (the in-repo contract).
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

mod args;
#[cfg(feature = "bench")]
mod bench;
mod conformance;
mod cuda;
mod dlpack;
mod functional;
mod output;
mod probs;
mod requests;
mod sampler;

/// Bench-only clock of the Rust API's share of one call (`bench/overhead.py`,
/// issue 14 item 6): while on, every step records the host time it spent
/// inside the Rust API (`Sampler::sample` on the host; on CUDA the logits
/// handle, `sample_async_into` and the caller-stream join, less our own
/// output-allocation callback), so that the Python call's time minus this is
/// the binding overhead of that very call, free of the call-to-call noise of a
/// separate Rust timing. Off by default: one relaxed atomic load per call;
/// without the `bench` feature (the default wheel) it is never on and costs nothing.
pub(crate) mod api_clock {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Instant;

    static ON: AtomicBool = AtomicBool::new(false);
    static LAST_NS: AtomicU64 = AtomicU64::new(0);

    fn on() -> bool {
        cfg!(feature = "bench") && ON.load(Ordering::Relaxed)
    }
    /// A start time when the clock is on.
    pub fn start() -> Option<Instant> {
        on().then(Instant::now)
    }
    /// Nanoseconds since `t` (0 when the clock is off).
    pub fn since(t: Option<Instant>) -> u64 {
        t.map_or(0, |t| t.elapsed().as_nanos() as u64)
    }
    /// Records the Rust API nanoseconds of the call that just ran.
    pub fn record(ns: u64) {
        if on() {
            LAST_NS.store(ns, Ordering::Relaxed);
        }
    }
    /// Adds Rust API nanoseconds spent after the step to the last call's record.
    pub fn add(ns: u64) {
        if on() {
            LAST_NS.fetch_add(ns, Ordering::Relaxed);
        }
    }
    #[cfg_attr(not(feature = "bench"), allow(dead_code))]
    pub fn set(on: bool) {
        LAST_NS.store(0, Ordering::Relaxed);
        ON.store(on, Ordering::Relaxed);
    }
    #[cfg_attr(not(feature = "bench"), allow(dead_code))]
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

use args::*;
use conformance::*;
use functional::*;
use output::*;
use probs::*;
use requests::*;
use sampler::*;

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
    m.add_function(wrap_pyfunction!(probs_sample, m)?)?;
    m.add_function(wrap_pyfunction!(probs_verify, m)?)?;
    m.add_function(wrap_pyfunction!(run_case_json, m)?)?;
    m.add_function(wrap_pyfunction!(_dlpack_data_ptr, m)?)?;
    m.add_function(wrap_pyfunction!(golden_files, m)?)?;
    #[cfg(feature = "bench")]
    bench::register(m)?;
    m.add_function(wrap_pyfunction!(is_cuda_tensor, m)?)?;
    m.add("SAMPLING_EPS", sampler_host::params::SAMPLING_EPS)?;
    Ok(())
}
