//! The CUDA backend without and with a GPU.
//!
//! Without a CUDA driver (CI): `CudaBackend::new` returns a typed
//! `BackendUnavailable` error (never a panic), `Auto` falls back to the CPU,
//! and the GPU comparisons skip saying so. With a GPU: every golden case on
//! CUDA equals the CPU backend (CONFORMANCE.md rule) and the expected document.

use crate::common;

use std::path::Path;

use sampler_host::conformance::case::run_case_str;
use sampler_host::conformance::compare::compare_results;
use sampler_host::runtime::device::cuda::{driver_present, CudaBackend};
use sampler_host::{BackendKind, ConfigError, Sampler, SamplerConfig};

const GOLDEN_DEFAULT: &str = sampler_host::conformance::case::GOLDEN_DIR;

/// The golden cases: `SAMPLER_GOLDEN_DIR` (the GPU round carries them), else the in-tree `conformance/golden`.
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
            let auto =
                Sampler::new(SamplerConfig { backend: BackendKind::Auto, ..SamplerConfig::new(32) }).expect("auto");
            assert_eq!(auto.backend_name(), "cpu");
            skip(&format!("no CUDA GPU here ({e}); GPU tests skipped"));
        }
    }
}

#[test]
fn golden_cases_on_cuda_equal_cpu() {
    if !driver_present() || CudaBackend::new().is_err() {
        skip("no CUDA GPU: golden cases on CUDA not run (scripts/gpu/round.sh check runs them on the H200)");
        return;
    }
    let g = golden_dir();
    let dir = Path::new(&g);
    let mut fails = Vec::new();
    let files = sampler_host::conformance::case::golden_files(dir);
    // No cases is a failure, not a pass.
    assert!(files.len() >= 50, "golden cases not found at {g} ({} files)", files.len());
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
        skip("no CUDA GPU: the device-resident public API is not run (scripts/gpu/round.sh check runs it on the H200)");
        return;
    }
    let mut checked = 0;
    let mut fails = Vec::new();
    for f in sampler_host::conformance::case::golden_files(Path::new(&golden_dir())) {
        let case = sampler_host::conformance::case::parse_case(&std::fs::read_to_string(&f).unwrap()).unwrap();
        if case.force_topk > sampler_kernels::codes::MAX_N_NVIDIA && case.force_topk < case.vocab_size {
            continue;
        }
        let (reqs, logits): (Vec<_>, Vec<_>) = case.requests.iter().flatten().cloned().unzip();
        let logits: Vec<f32> = logits.concat();
        let cfg = |b| SamplerConfig {
            vocab_size: case.vocab_size,
            force_topk: case.force_topk,
            nextn: case.nextn,
            backend: b,
        };
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
                let path = q.path.as_ref().map(|p| {
                    on_device.2.as_ref().map(|d| {
                        d[q.rows.start..q.rows.start + p.len()].iter().map(|&x| x.max(0) as u32).collect::<Vec<_>>()
                    })
                });
                if on_device.0[q.rows.clone()] != toks[..]
                    || on_device.1[g] != q.accepted
                    || path.is_some_and(|d| d.as_ref() != q.path.as_ref())
                {
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

/// One step for [`half_device_logits_equal_their_widening`]: its requests,
/// `[R, V]` f32 logits, V, force top-k and nextn, and a name.
struct HalfCase {
    name: String,
    reqs: Vec<sampler_host::Request>,
    logits: Vec<f32>,
    vocab: u32,
    force_topk: u32,
    nextn: u32,
}

/// Every golden case, then random steps with grammar masks, raw
/// logprobs, draft chains and trees, bad values, force top-k on and off
/// (half of the force-off steps cut every row by top-k: the prefix path),
/// at V up to 40000 (the multi-block mask check and top-N).
fn half_cases() -> Vec<HalfCase> {
    use common::gen::{random_step, GenOpts, Rng};
    let mut out = Vec::new();
    for f in sampler_host::conformance::case::golden_files(Path::new(&golden_dir())) {
        let case = sampler_host::conformance::case::parse_case(&std::fs::read_to_string(&f).unwrap()).unwrap();
        if case.force_topk > sampler_kernels::codes::MAX_N_NVIDIA && case.force_topk < case.vocab_size {
            continue;
        }
        let (reqs, logits): (Vec<_>, Vec<_>) = case.requests.iter().flatten().cloned().unzip();
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        out.push(HalfCase {
            name,
            reqs,
            logits: logits.concat(),
            vocab: case.vocab_size,
            force_topk: case.force_topk,
            nextn: case.nextn,
        });
    }
    for seed in 0..48u64 {
        let mut rng = Rng::new(1000 + seed);
        let v = rng.pick(&[300usize, 4099, 20000, 40000]);
        let force = rng.pick(&[0usize, 16, 1024]);
        let mut step = random_step(&mut rng, v, force, 4, GenOpts { p_error: 0.1, ..Default::default() });
        if force == 0 && rng.chance(0.5) {
            for r in step.requests.iter_mut() {
                r.params.top_k = rng.range(1, 40) as i64;
            }
        }
        out.push(HalfCase {
            name: format!("random seed {seed} V={v} force={force}"),
            reqs: step.requests,
            logits: step.logits,
            vocab: v as u32,
            force_topk: force as u32,
            nextn: 64,
        });
    }
    out
}

/// bf16 / f16 logits in device memory (issue 11): the kernels read them in
/// their own element type, widened exactly at load, with no `[R, V]` f32
/// copy (a grammar mask's f32 copy is the mask check's own output). For
/// every step of [`half_cases`] and both element types, all bitwise equal:
/// `CudaLogits::bf16` / `f16` (eager `sample_async`, the synchronous
/// `sample` with its prefix-path rerun, a captured graph replayed), the
/// same values widened as `CudaLogits::f32`, host bf16 / f16 on CUDA, and
/// the CPU backend on the widened f32 values.
#[test]
fn half_device_logits_equal_their_widening() {
    use half::{bf16, f16};
    use sampler_host::interop::CudaLogits;
    // Without a GPU too: the steps are well-formed for the sampler (a config it refuses would fail on the GPU).
    let cases = half_cases();
    for c in &cases {
        let cfg =
            SamplerConfig { vocab_size: c.vocab, force_topk: c.force_topk, nextn: c.nextn, backend: BackendKind::Cpu };
        assert!(Sampler::new(cfg).is_ok(), "{}: config refused", c.name);
    }
    if !driver_present() || CudaBackend::new().is_err() {
        skip("no CUDA GPU: bf16/f16 device logits are not run (scripts/gpu/round.sh check runs them on the H200)");
        return;
    }
    let (mut checked, mut masked) = (0, 0);
    let mut fails = Vec::new();
    for c in cases {
        let cfg = |b| SamplerConfig { vocab_size: c.vocab, force_topk: c.force_topk, nextn: c.nextn, backend: b };
        let mut cpu = Sampler::new(cfg(BackendKind::Cpu)).unwrap();
        let mut gpu = Sampler::new(cfg(BackendKind::Cuda)).unwrap();
        let stream = gpu.cuda_stream().unwrap();
        let b: Vec<bf16> = c.logits.iter().map(|&x| bf16::from_f32(x)).collect();
        let h: Vec<f16> = c.logits.iter().map(|&x| f16::from_f32(x)).collect();
        let bw: Vec<f32> = b.iter().map(|x| x.to_f32()).collect();
        let hw: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
        let (db, dh) = (stream.clone_htod(&b).unwrap(), stream.clone_htod(&h).unwrap());
        for (what, wide, dev) in [("bf16", &bw, CudaLogits::bf16(&db)), ("f16", &hw, CudaLogits::f16(&dh))] {
            let want = format!("{:?}", cpu.sample(wide, &c.reqs).unwrap());
            let dwide = stream.clone_htod(wide).unwrap();
            let mut got = vec![
                (
                    "f32 device logits of the widened values",
                    format!("{:?}", gpu.sample_async(CudaLogits::f32(&dwide), &c.reqs).unwrap().wait().unwrap()),
                ),
                (
                    "device logits, eager",
                    format!("{:?}", gpu.sample_async(dev.clone(), &c.reqs).unwrap().wait().unwrap()),
                ),
                ("device logits, sample", format!("{:?}", gpu.sample(dev.clone(), &c.reqs).unwrap())),
            ];
            if what == "bf16" {
                got.push(("host logits on CUDA", format!("{:?}", gpu.sample(&b, &c.reqs).unwrap())));
            } else {
                got.push(("host logits on CUDA", format!("{:?}", gpu.sample(&h, &c.reqs).unwrap())));
            }
            if !c.logits.is_empty() {
                let g = gpu.capture(dev.clone(), &c.reqs).unwrap();
                got.push((
                    "device logits, graph replay",
                    format!("{:?}", gpu.replay(&g, dev.clone(), &c.reqs).unwrap().wait().unwrap()),
                ));
            }
            for (how, g) in got {
                if g != want {
                    fails.push(format!("{}: {what} {how} differs from the CPU on the widened f32 logits", c.name));
                }
            }
        }
        masked += c.reqs.iter().any(|r| r.masks.is_some()) as usize;
        checked += 1;
    }
    eprintln!(
        "bf16/f16 device logits: {checked} steps checked ({masked} with grammar masks), {} failures",
        fails.len()
    );
    assert!(fails.is_empty(), "{}", fails.join("\n"));
    // The random steps alone are 48 (the golden cases join them where SAMPLER_GOLDEN_DIR finds them).
    assert!(checked >= 48 && masked > 5, "checked {checked} masked {masked}");
}

/// The backend level, both paths forced (the prefix path and the full-row
/// path, `set_full_row`) and the multi-block top-N at several chunk counts:
/// bf16 device logits equal the f32 device logits of their widening, bit
/// for bit, on every output of the step.
#[test]
fn half_device_logits_at_the_backend_level() {
    use half::bf16;
    use sampler_host::interop::CudaLogits;
    use sampler_host::layout::build_plan;
    if !driver_present() || CudaBackend::new().is_err() {
        skip("no CUDA GPU: bf16 device logits at the backend level are not run");
        return;
    }
    let mut fails = Vec::new();
    let mut runs = 0;
    for c in half_cases().into_iter().filter(|c| c.name.starts_with("random")) {
        let mut be = CudaBackend::new().unwrap();
        let stream = be.stream().clone();
        let b: Vec<bf16> = c.logits.iter().map(|&x| bf16::from_f32(x)).collect();
        let bw: Vec<f32> = b.iter().map(|x| x.to_f32()).collect();
        if b.is_empty() {
            continue;
        }
        let (db, dw) = (stream.clone_htod(&b).unwrap(), stream.clone_htod(&bw).unwrap());
        let n = if c.force_topk == 0 || c.force_topk >= c.vocab { c.vocab } else { c.force_topk };
        let Ok((ph, _)) = build_plan(c.vocab, n, c.nextn, CudaLogits::bf16(&db), &c.reqs) else { continue };
        let (pw, _) = build_plan(c.vocab, n, c.nextn, CudaLogits::f32(&dw), &c.reqs).unwrap();
        for full_row in [false, true] {
            for chunks in [None, Some(1), Some(4)] {
                be.set_full_row(full_row);
                be.set_chunks_override(chunks);
                let (got, want) = (be.run(&ph).unwrap(), be.run(&pw).unwrap());
                if format!("{got:?}") != format!("{want:?}") {
                    fails.push(format!(
                        "{} (full_row {full_row}, chunks {chunks:?}): bf16 differs from its f32 widening",
                        c.name
                    ));
                }
                runs += 1;
            }
        }
    }
    eprintln!("bf16 device logits at the backend level: {runs} runs, {} failures", fails.len());
    assert!(fails.is_empty(), "{}", fails.join("\n"));
    assert!(runs > 100);
}

/// Issue 24 item 3 (SAMPLER.md 10.1) on CUDA: random min-p steps with
/// tokens on and next to the boundary `x == L` (tests/common/gen.rs; the
/// CPU's kept set is checked against `x < f32(ln min_p)` by
/// tests/proptest_vs_reference.rs) give the CPU's outputs bit for bit:
/// full-row path, force top-k, the prefix path (V above its width) and the
/// multi-block paths (V = 40000).
#[test]
fn min_p_boundary_steps_on_cuda_equal_cpu() {
    if !driver_present() || CudaBackend::new().is_err() {
        skip("no CUDA GPU: the min-p boundary steps on CUDA are not run");
        return;
    }
    let configs =
        [(40, 0, false), (300, 64, false), (3000, 0, true), (3000, 0, false), (40000, 0, true), (40000, 1024, false)];
    let mut runs = 0;
    for (i, &(vocab, force, far)) in configs.iter().enumerate() {
        for seed in 0..8u64 {
            let mut rng = common::gen::Rng::new(2400 + 100 * i as u64 + seed);
            let step = common::gen::min_p_boundary_step(&mut rng, vocab, force, 6, far);
            let out = |backend| {
                let cfg = SamplerConfig { vocab_size: vocab as u32, force_topk: force as u32, nextn: 5, backend };
                let o = Sampler::new(cfg).unwrap().sample(&step.logits, &step.requests).unwrap();
                // Debug text: exact (shortest round-trip floats).
                format!("{:?} {:?}", o.rows, o.requests)
            };
            assert_eq!(out(BackendKind::Cuda), out(BackendKind::Cpu), "V={vocab} N={force} seed {seed}");
            runs += 1;
        }
    }
    eprintln!("min-p boundary steps on CUDA: {runs} steps bitwise equal to the CPU");
}
