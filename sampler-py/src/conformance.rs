//! Conformance cases (CONFORMANCE.md) run from Python.

use super::*;

/// Runs a conformance case (CONFORMANCE.md) entirely in Rust and returns its
/// result document as JSON text (the reference the Python path is compared
/// with). Raises ValueError when the case itself cannot be run.
#[pyfunction]
#[pyo3(signature = (case_json, backend="cpu"))]
pub(crate) fn run_case_json(py: Python<'_>, case_json: &str, backend: &str) -> PyResult<String> {
    let kind = parse_backend(backend)?;
    let doc = py
        .detach(|| sampler_host::conformance::case::run_case_str(case_json, kind))
        .map_err(|e| value_err(e.to_string()))?;
    Ok(doc.to_string())
}

/// Every golden case file under `dir` (the repository's `conformance/golden`): `dir/*.json`
/// plus the landed cases of `dir/next/` (`sampler_host::conformance::case::golden_files`), sorted.
#[pyfunction]
pub(crate) fn golden_files(dir: std::path::PathBuf) -> Vec<String> {
    sampler_host::conformance::case::golden_files(&dir).into_iter().map(|p| p.to_string_lossy().into_owned()).collect()
}
