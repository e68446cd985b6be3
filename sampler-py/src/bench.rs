//! Bench-only entry points (`bench` cargo feature, off in the default wheel):
//! the timing hooks of `bench/*.py`.

use super::*;

/// Seconds per step of `sampler.sample(logits, requests)` timed inside Rust
/// (`iters` steps, after the import and the request conversion): the Python
/// call's time minus this is the binding overhead.
#[pyfunction]
pub(crate) fn _bench_rust_step(
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
pub(crate) fn _bench_convert_requests(requests: &Bound<'_, PyAny>, iters: usize) -> PyResult<f64> {
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
pub(crate) fn _bench_dispatch(
    logits: &Bound<'_, PyAny>,
    requests: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    out: Option<&Bound<'_, cuda::CudaStepOutput>>,
) {
    let _ = (logits, requests, stream, out);
}

/// Turns the bench-only API clock on or off ([`api_clock`]).
#[pyfunction]
pub(crate) fn _bench_api_clock(on: bool) {
    api_clock::set(on)
}

/// Turns the output slabs (`cuda::slab_take`) on or off: off, every fresh output is a
/// torch allocation of its own, as before them (`bench/overhead.py`'s A/B).
#[pyfunction]
pub(crate) fn _bench_slabs(on: bool) {
    cuda::SLABS_ON.store(on, std::sync::atomic::Ordering::Relaxed)
}

/// Nanoseconds the last step spent inside the Rust API (0 when the clock is off or no step ran).
#[pyfunction]
pub(crate) fn _bench_api_ns() -> u64 {
    api_clock::last()
}

/// Host seconds of each of `iters` CUDA steps of `sampler.sample(logits,
/// requests)` inside Rust: enqueueing the step (`sample_async` on the
/// caller's stream, no output copies), timed alone; the stream is
/// synchronised between steps, untimed. The Python call's host time minus
/// this is the binding overhead.
#[pyfunction]
pub(crate) fn _bench_rust_step_cuda(
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
pub(crate) fn _bench_binding_pieces(
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
        out.push(("torch tensor attributes (dtype, shape, strides, data_ptr, device; the fallback)".into(), per(t)));
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(
                dlpack::torch_dl(logits, &[2], api).ok_or_else(|| value_err("torch_dl read nothing"))?,
            );
        }
        out.push((
            "torch tensor read: one torch._C._to_dlpack call (the default; replaces the row above)".into(),
            per(t),
        ));
        let c = cuda::CudaIn { t: dlpack::read_torch(logits, "logits", &[2], api)?, stream: 0, current: true };
        // `torch._C._cuda_getCurrentRawStream(device)` needs a GPU; a torch C call that runs without one.
        let analogue = py.import("torch")?.getattr("_C")?.getattr("_cuda_getDeviceCount")?;
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(cuda::stream_arg(None)?);
            std::hint::black_box(analogue.call0()?);
        }
        out.push(("current stream (analogue: one torch._C call, torch._C._cuda_getDeviceCount())".into(), per(t)));
        let (_, bytes, _) = cuda::layout(r, k, g, cuda::Want::All, false);
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
        // The default (fresh outputs): a range of the current slab, a new slab when it is full.
        let t = std::time::Instant::now();
        for _ in 0..n {
            let got = cuda::slab_take(py, &c, api, false, bytes.max(16))?
                .ok_or_else(|| value_err("no slab range for the output"))?;
            std::hint::black_box(got);
        }
        out.push((format!("output buffer, {bytes} bytes: a slab range (the default; new_empty per slab)"), per(t)));
        let t = std::time::Instant::now();
        for _ in 0..n {
            let (f, off, _) =
                cuda::slab_take(py, &c, api, true, r * 4)?.ok_or_else(|| value_err("no slab range for the tokens"))?;
            std::hint::black_box(f.get_item(cuda::cuda_slice(py, off / 4, r))?);
        }
        out.push((format!("functional tokens, [{r}] int32: a slab range and its slice (the default)"), per(t)));
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
        let (segs, _, _) = cuda::layout(r, k, g, cuda::Want::All, false);
        let t = std::time::Instant::now();
        for _ in 0..n {
            let counts: Vec<usize> = reqs.iter().map(Request::rows).collect();
            std::hint::black_box(Py::new(
                py,
                cuda::CudaStepOutput::new((flat.clone().unbind(), None, segs, (r, k, g)), counts.into()),
            )?);
        }
        out.push(("result object (CudaStepOutput)".into(), per(t)));
        let res = Py::new(
            py,
            cuda::CudaStepOutput::new(
                (flat.clone().unbind(), None, segs, (r, k, g)),
                reqs.iter().map(Request::rows).collect::<Vec<_>>().into(),
            ),
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
    out.push((
        format!("requests ({g} Request objects): converted alone (the cache busy; every call before issue 26)"),
        per(t),
    ));
    // `Sampler.sample`'s requests (issue 26): the sampler's cache of the last call's requests.
    let mut cache = ReqCache::default();
    let t = std::time::Instant::now();
    for _ in 0..n {
        cache.update(requests)?;
        std::hint::black_box(cache.as_slice());
    }
    out.push((
        format!("requests ({g} Request objects): the same objects as the last call (the sampler's cache)"),
        per(t),
    ));
    // Every entry changed: the same list's objects and copies of them, alternately.
    let other = PyList::empty(py);
    for q in requests.try_iter()? {
        let q = q?.cast_into::<PyRequest>()?;
        other.append(Py::new(py, PyRequest { inner: q.get().inner.clone() })?)?;
    }
    let t = std::time::Instant::now();
    for i in 0..n {
        cache.update(if i % 2 == 0 { other.as_any() } else { requests })?;
        std::hint::black_box(cache.as_slice());
    }
    out.push((format!("requests ({g} Request objects): all new since the last call (cache miss)"), per(t)));

    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(row_params(r, top_k, top_p, temperature, seed, positions)?.row_requests(0));
    }
    out.push((format!("functional parameters and its {r} requests"), per(t)));
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(row_params(r, top_k, top_p, temperature, seed, positions)?.requests(0));
    }
    out.push((format!("functional parameters and its {r} requests, made afresh (before issue 26)"), per(t)));
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(row_params(r, top_k, top_p, temperature, seed, positions)?);
    }
    out.push((format!("functional parameters alone ({r} rows)"), per(t)));
    Ok(out)
}

/// Adds the bench entry points to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_bench_rust_step, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_rust_step_cuda, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_convert_requests, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_binding_pieces, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_api_clock, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_api_ns, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_slabs, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_dispatch, m)?)?;
    Ok(())
}
