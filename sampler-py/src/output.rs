//! Host outputs: numpy arrays / torch CPU tensors and `StepOutput`.

use super::*;

/// Rows per request of a step, shared by the sampler's request cache and the step's outputs.
pub(crate) type RowCounts = std::sync::Arc<[usize]>;

pub(crate) static TORCH: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// Builds the output arrays: numpy (moved from the Rust `Vec`, no copy), or
/// torch CPU tensors (`torch.from_numpy`, no copy) when the input was a torch tensor.
#[derive(Clone, Copy)]
pub(crate) struct Out<'py> {
    pub(crate) py: Python<'py>,
    pub(crate) torch: bool,
}

pub(crate) fn is_torch(obj: &Bound<'_, PyAny>) -> bool {
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
    pub(crate) fn for_input(obj: &Bound<'py, PyAny>) -> Out<'py> {
        Out { py: obj.py(), torch: is_torch(obj) }
    }
    pub(crate) fn arr<T: numpy::Element>(&self, data: Vec<T>, shape: &[usize]) -> PyResult<Py<PyAny>> {
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
pub(crate) struct PyStepOutput {
    pub(crate) inner: StepOutput,
    pub(crate) row_counts: RowCounts,
    pub(crate) torch: bool,
    pub(crate) cache: [PyOnceLock<Py<PyAny>>; 13],
}

impl PyStepOutput {
    pub(crate) fn new(inner: StepOutput, row_counts: RowCounts, torch: bool) -> PyStepOutput {
        PyStepOutput { inner, row_counts, torch, cache: std::array::from_fn(|_| PyOnceLock::new()) }
    }
    pub(crate) fn cached(
        &self,
        py: Python<'_>,
        slot: usize,
        make: impl FnOnce(Out<'_>) -> PyResult<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let out = Out { py, torch: self.torch };
        self.cache[slot].get_or_try_init(py, || make(out)).map(|x| x.clone_ref(py))
    }
    pub(crate) fn rows_f32(
        &self,
        py: Python<'_>,
        slot: usize,
        f: impl Fn(&sampler_host::RowOutput) -> f32,
    ) -> PyResult<Py<PyAny>> {
        self.cached(py, slot, |o| o.arr(self.inner.rows.iter().map(f).collect(), &[self.inner.rows.len()]))
    }
    pub(crate) fn top(&self) -> impl Iterator<Item = (i32, f32)> + '_ {
        let k = self.inner.top_logprobs_width;
        self.inner.rows.iter().flat_map(move |row| {
            // Failed requests' rows have no candidates: -1 / -inf.
            (0..k).map(move |c| row.top_logprobs.get(c).copied().unwrap_or((-1, f32::NEG_INFINITY)))
        })
    }
    pub(crate) fn per_request<T: numpy::Element + Copy>(
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
    pub(crate) fn tokens(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.cached(py, 0, |o| o.arr(self.inner.rows.iter().map(|r| r.token).collect(), &[self.inner.rows.len()]))
    }
    /// `[R]` float32: processed logprob of the token (-inf when none).
    #[getter]
    pub(crate) fn logprobs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.rows_f32(py, 1, |r| r.logprob)
    }
    /// `[R, k]` int32: ids of the first k candidates (order of section 3.6); -1 on failed requests' rows.
    #[getter]
    pub(crate) fn top_ids(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let shape = [self.inner.rows.len(), self.inner.top_logprobs_width];
        self.cached(py, 2, |o| o.arr(self.top().map(|x| x.0).collect(), &shape))
    }
    /// `[R, k]` float32: their processed logprobs; -inf on failed requests' rows.
    #[getter]
    pub(crate) fn top_logprobs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let shape = [self.inner.rows.len(), self.inner.top_logprobs_width];
        self.cached(py, 3, |o| o.arr(self.top().map(|x| x.1).collect(), &shape))
    }
    /// `[R]` float32: section 5's sum_smaller_probs (0 when the token is -1).
    #[getter]
    pub(crate) fn sum_smaller_probs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.rows_f32(py, 4, |r| r.sum_smaller_probs)
    }
    /// `[B]` int32: drafts accepted per request (verify requests), else 0.
    #[getter]
    pub(crate) fn accepted(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.cached(py, 5, |o| {
            o.arr(self.inner.requests.iter().map(|q| q.accepted as i32).collect(), &[self.inner.requests.len()])
        })
    }
    /// `[B]` bool: whether each request succeeded.
    #[getter]
    pub(crate) fn ok(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.cached(py, 6, |o| {
            o.arr(self.inner.requests.iter().map(|q| q.status.is_ok()).collect(), &[self.inner.requests.len()])
        })
    }
    /// `[B + 1]` int64: request i owns rows `row_offsets[i]:row_offsets[i+1]`.
    #[getter]
    pub(crate) fn row_offsets(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.cached(py, 7, |o| {
            let mut v = Vec::with_capacity(self.row_counts.len() + 1);
            v.push(0i64);
            for &c in self.row_counts.iter() {
                v.push(v[v.len() - 1] + c as i64);
            }
            let n = v.len();
            o.arr(v, &[n])
        })
    }
    /// B entries: `None`, or the error text of a failed request (Rust `RequestError`).
    #[getter]
    pub(crate) fn errors(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
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
    pub(crate) fn emitted(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.per_request(py, 9, |q| &q.emitted)
    }
    /// B arrays float32: their processed logprobs.
    #[getter]
    pub(crate) fn emitted_logprobs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.per_request(py, 10, |q| &q.emitted_logprobs)
    }
    /// B entries: for a tree request that did not fail, its accepted path
    /// (node indices, root first, `accepted + 1` int32; section 11.9), else None.
    #[getter]
    pub(crate) fn paths(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
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
    pub(crate) fn prompt_logprobs(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.per_request(py, 11, |q| &q.prompt_logprobs)
    }
    /// k: width of `top_ids` / `top_logprobs`.
    #[getter]
    pub(crate) fn top_logprobs_width(&self) -> usize {
        self.inner.top_logprobs_width
    }
    /// The CONFORMANCE.md result document of this step, as JSON text.
    pub(crate) fn result_json(&self) -> String {
        sampler_host::conformance::case::result_document(&self.inner).to_string()
    }
    pub(crate) fn __len__(&self) -> usize {
        self.inner.requests.len()
    }
    pub(crate) fn __repr__(&self) -> String {
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

pub(crate) fn step_output(out: &Out<'_>, s: StepOutput, row_counts: RowCounts) -> PyResult<PyStepOutput> {
    Ok(PyStepOutput::new(s, row_counts, out.torch))
}
