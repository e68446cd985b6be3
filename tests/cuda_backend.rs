//! The CUDA backend without and with a GPU.
//!
//! Without a CUDA driver (CI): `CudaBackend::new` returns a typed
//! `BackendUnavailable` error (never a panic), `Auto` falls back to the CPU,
//! and the GPU comparisons skip saying so. With a GPU: every golden case on
//! CUDA equals the CPU backend (CONFORMANCE.md rule) and the expected document.

use std::path::Path;

use sampler_host::backend::cuda::{driver_present, CudaBackend};
use sampler_host::case::run_case_str;
use sampler_host::compare::compare_results;
use sampler_host::{BackendKind, ConfigError, Sampler, SamplerConfig};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/golden");

/// Says so on the real stderr (the test harness captures `eprintln!` of passing tests).
fn skip(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "\n{0}\n!!! SKIPPED: {msg}\n{0}", "!".repeat(78));
}

#[test]
fn no_driver_is_a_typed_error() {
    match CudaBackend::new() {
        Ok(b) => skip(&format!("a CUDA device is present ({}): the no-driver path is not exercised", b.device_name())),
        Err(e) => {
            assert!(matches!(e, ConfigError::BackendUnavailable("cuda", _)), "{e:?}");
            // Forced CUDA fails with the same error; Auto falls back to the CPU.
            let forced = Sampler::new(SamplerConfig { backend: BackendKind::Cuda, ..SamplerConfig::new(32) });
            assert!(matches!(forced, Err(ConfigError::BackendUnavailable("cuda", _))));
            let auto = Sampler::new(SamplerConfig { backend: BackendKind::Auto, ..SamplerConfig::new(32) }).expect("auto");
            assert_eq!(auto.backend_name(), "cpu");
            skip(&format!("no CUDA GPU here ({e}); GPU tests skipped"));
        }
    }
}

#[test]
fn golden_cases_on_cuda_equal_cpu() {
    if !driver_present() || CudaBackend::new().is_err() {
        skip("no CUDA GPU: golden cases on CUDA not run (scripts/gpu-suite.sh runs them on the H200)");
        return;
    }
    let dir = Path::new(GOLDEN);
    if !dir.is_dir() {
        skip(&format!("golden cases not found at {GOLDEN}"));
        return;
    }
    let mut fails = Vec::new();
    let files = sampler_host::case::golden_files(dir);
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let cpu = run_case_str(&text, BackendKind::Cpu).expect("cpu");
        let cuda = run_case_str(&text, BackendKind::Cuda).expect("cuda");
        let d = compare_results(&cpu, &cuda);
        if !d.is_empty() {
            fails.push(format!("{}: {}", f.display(), d.join("; ")));
        }
    }
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}
