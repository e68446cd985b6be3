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

const GOLDEN_DEFAULT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/golden");

/// The golden cases: `SAMPLER_GOLDEN_DIR` (the GPU round carries them), else beside the repository.
fn golden_dir() -> String {
    std::env::var("SAMPLER_GOLDEN_DIR").unwrap_or_else(|_| GOLDEN_DEFAULT.to_string())
}

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
    let g = golden_dir();
    let dir = Path::new(&g);
    if !dir.is_dir() {
        skip(&format!("golden cases not found at {g}"));
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

/// The engine's path through the public API (issue 11): every golden case
/// with its logits in device memory (`sample_async` + `wait`), through a
/// captured graph replayed for it, and with bf16 / f16 host logits, all
/// bitwise equal to the CPU backend on the same (widened) logits.
#[test]
fn device_logits_through_the_public_api_equal_cpu() {
    use half::{bf16, f16};
    use sampler_host::interop::CudaLogits;
    if !driver_present() || CudaBackend::new().is_err() {
        skip("no CUDA GPU: the device-resident public API is not run (scripts/engine-gpu-round.sh runs it on the H200)");
        return;
    }
    let mut checked = 0;
    let mut fails = Vec::new();
    for f in sampler_host::case::golden_files(Path::new(&golden_dir())) {
        let case = sampler_host::case::parse_case(&std::fs::read_to_string(&f).unwrap()).unwrap();
        if case.force_topk > sampler_kernels::codes::MAX_N_NVIDIA && case.force_topk < case.vocab_size {
            continue;
        }
        let (reqs, logits): (Vec<_>, Vec<_>) = case.requests.iter().flatten().cloned().unzip();
        let logits: Vec<f32> = logits.concat();
        let cfg = |b| SamplerConfig { vocab_size: case.vocab_size, force_topk: case.force_topk, nextn: case.nextn, backend: b };
        let mut cpu = Sampler::new(cfg(BackendKind::Cpu)).unwrap();
        let mut gpu = Sampler::new(cfg(BackendKind::Cuda)).unwrap();
        let want = format!("{:?}", cpu.sample(&logits, &reqs).unwrap());
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        // Device logits, eager.
        let stream = gpu.cuda_stream().unwrap();
        let dl = stream.clone_htod(&logits).unwrap();
        let got = format!("{:?}", gpu.sample_async(CudaLogits::f32(&dl), &reqs).unwrap().wait().unwrap());
        if got != want {
            fails.push(format!("{name}: device logits (eager) differ from the CPU"));
        }
        // Device logits, graph captured then replayed.
        if !logits.is_empty() {
            let g = gpu.capture(CudaLogits::f32(&dl), &reqs).unwrap();
            let mut pend = gpu.replay(&g, CudaLogits::f32(&dl), &reqs).unwrap();
            // The outputs left on the device (PendingStep::device_outputs), read back by hand.
            let on_device = {
                let o = pend.device_outputs().expect("CUDA steps keep their outputs on the device");
                let read = |v: &sampler_host::interop::CudaView<'_, i32>| stream.clone_dtoh(v).unwrap();
                let acc = stream.clone_dtoh(&o.accepted).unwrap();
                (read(&o.tokens), acc, o.path.as_ref().map(read))
            };
            stream.synchronize().unwrap();
            let out = pend.wait().unwrap();
            if format!("{out:?}") != want {
                fails.push(format!("{name}: graph replay differs from the CPU"));
            }
            for q in out.requests.iter().filter(|q| q.status.is_ok()) {
                let toks: Vec<i32> = out.rows[q.rows.clone()].iter().map(|r| r.token).collect();
                let g = out.requests.iter().position(|x| std::ptr::eq(x, q)).unwrap();
                let path = q.path.as_ref().map(|p| on_device.2.as_ref().map(|d| d[q.rows.start..q.rows.start + p.len()].iter().map(|&x| x.max(0) as u32).collect::<Vec<_>>()));
                if on_device.0[q.rows.clone()] != toks[..] || on_device.1[g] != q.accepted || path.is_some_and(|d| d.as_ref() != q.path.as_ref()) {
                    fails.push(format!("{name}: device outputs of request {g} differ from the waited ones"));
                }
            }
        }
        // Host bf16 / f16 on CUDA vs their f32 widening on the CPU.
        let b: Vec<bf16> = logits.iter().map(|&x| bf16::from_f32(x)).collect();
        let bw: Vec<f32> = b.iter().map(|x| x.to_f32()).collect();
        if format!("{:?}", gpu.sample(&b, &reqs).unwrap()) != format!("{:?}", cpu.sample(&bw, &reqs).unwrap()) {
            fails.push(format!("{name}: bf16 on CUDA differs from its widening on the CPU"));
        }
        let h: Vec<f16> = logits.iter().map(|&x| f16::from_f32(x)).collect();
        let hw: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
        if format!("{:?}", gpu.sample(&h, &reqs).unwrap()) != format!("{:?}", cpu.sample(&hw, &reqs).unwrap()) {
            fails.push(format!("{name}: f16 on CUDA differs from its widening on the CPU"));
        }
        checked += 1;
    }
    eprintln!("device-resident public API: {checked} golden cases checked, {} failures", fails.len());
    assert!(fails.is_empty(), "{}", fails.join("\n"));
    assert!(checked > 10);
}
