//! The GPU suite (run on a machine with a CUDA GPU; `scripts/gpu/round.sh check`
//! builds it here and runs it there in one call).
//!
//! ```text
//! gpu_suite golden DIR          every golden case on CUDA and on the CPU backend:
//!                               CUDA vs expected (CONFORMANCE.md rule), CUDA vs CPU
//!                               (same rule, ids/statuses exact) and bitwise equality;
//!                               then every case with its logits rounded to bf16 and to
//!                               f16 in device memory (read in place, widened at load)
//!                               vs the CPU on their f32 widening, bitwise
//! gpu_suite step CASE.json..    each case once on CUDA, compared with the CPU
//!                               (the representative step for compute-sanitizer)
//! gpu_suite synth R:N..         one step of the benchmark's inputs per shape (N 0: off) on
//!                               CUDA, bitwise vs the CPU (compute-sanitizer at full size)
//! gpu_suite timing [--quick]    kernel and step times, R in 1,16,64,256 x N in 1024,4096,off
//!                               at V = 129280 (CUDA events), bitwise check vs CPU for R <= 16
//! gpu_suite adversarial         selection edge cases at V = 129280 (all equal, two levels,
//!                               few distinct values, extremes, a crowded boundary bin under
//!                               and over the candidate list, exactly n above a bin edge,
//!                               mostly -inf) for N in 1, 50, 1024, 4096, off: CUDA vs CPU bitwise;
//!                               then those rows and rows of NaNs as bf16 / f16 device logits
//!                               through the streaming top-N (1 and 8 blocks a row) and without
//!                               it, top-k off and 50, vs the CPU on their f32 widening
//! gpu_suite tree                tree verification (SAMPLER.md 11) at R = 64, V = 129280, N in
//!                               4096, off: per-kernel times of 64 plain decode rows vs one
//!                               64-node tree / four 16-node trees (fixed, with replacement),
//!                               bitwise check vs CPU (tokens, paths)
//! ```
//!
//! Exit status: 0 when everything matched, 1 on any mismatch or device error,
//! 77 when no CUDA device is present (nothing was run).

#[allow(dead_code)]
#[path = "benchmark.rs"]
mod bench;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use sampler_host::conformance::case::{parse_case, result_document, run_case};
use sampler_host::conformance::compare::compare_results;
use sampler_host::layout::build_plan;
use sampler_host::runtime::device::cpu::CpuBackend;
use sampler_host::runtime::device::cuda::CudaBackend;
use sampler_host::runtime::plan::{StepPlan, StepResult};
use sampler_host::{BackendKind, DraftDist, DraftTree, FilterOrder, LogprobsMode, Request, SamplingParams};
use serde_json::Value;

fn cuda_or_exit() -> Result<CudaBackend, ExitCode> {
    match CudaBackend::new() {
        Ok(b) => {
            println!("device: {}", b.device_name());
            Ok(b)
        }
        Err(e) => {
            println!("SKIPPED: no CUDA backend on this machine: {e}");
            Err(ExitCode::from(77))
        }
    }
}

/// Whether two result documents are identical value for value (floats bit for bit, as f32 -> f64 is exact).
fn docs_identical(a: &Value, b: &Value) -> bool {
    a == b
}

/// One case on both backends: (cuda vs expected diffs, cuda vs cpu diffs, bitwise equal, times).
struct CaseRun {
    vs_expected: Option<Vec<String>>,
    vs_cpu: Vec<String>,
    bitwise: bool,
    cuda_ms: f64,
    cpu_ms: f64,
}

fn run_one(text: &str) -> Result<CaseRun, String> {
    let case = parse_case(text).map_err(|e| format!("case error: {e}"))?;
    let t0 = Instant::now();
    let cpu = result_document(&run_case(&case, BackendKind::Cpu).map_err(|e| format!("cpu: {e}"))?);
    let cpu_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let cuda = result_document(&run_case(&case, BackendKind::Cuda).map_err(|e| format!("cuda: {e}"))?);
    let cuda_ms = t1.elapsed().as_secs_f64() * 1e3;
    let raw: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let vs_expected = raw.get("expected").map(|exp| compare_results(exp, &cuda));
    Ok(CaseRun {
        vs_expected,
        vs_cpu: compare_results(&cpu, &cuda),
        bitwise: docs_identical(&cpu, &cuda),
        cuda_ms,
        cpu_ms,
    })
}

fn golden(dir: &Path) -> ExitCode {
    if let Err(c) = cuda_or_exit() {
        return c;
    }
    let files: Vec<PathBuf> = sampler_host::conformance::case::golden_files(dir);
    if files.is_empty() {
        println!("FAILED: no golden cases in {}", dir.display());
        return ExitCode::from(1);
    }
    let (mut pass_exp, mut pass_cpu, mut bitwise, mut errors) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    println!("{:<34} {:>8} {:>8} {:>8} {:>9} {:>9}", "case", "expected", "cpu", "bitwise", "cuda ms", "cpu ms");
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) => {
                errors += 1;
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        match run_one(&text) {
            Err(e) => {
                errors += 1;
                println!("{name:<34} ERROR {e}");
                failures.push(format!("{name}: {e}"));
            }
            Ok(r) => {
                let exp_ok = r.vs_expected.as_ref().is_none_or(|d| d.is_empty());
                let cpu_ok = r.vs_cpu.is_empty();
                pass_exp += exp_ok as usize;
                pass_cpu += cpu_ok as usize;
                bitwise += r.bitwise as usize;
                let yn = |b: bool| if b { "ok" } else { "FAIL" };
                println!(
                    "{name:<34} {:>8} {:>8} {:>8} {:>9.2} {:>9.2}",
                    yn(exp_ok),
                    yn(cpu_ok),
                    if r.bitwise { "yes" } else { "no" },
                    r.cuda_ms,
                    r.cpu_ms
                );
                if !exp_ok {
                    let d = r.vs_expected.unwrap();
                    failures.push(format!(
                        "{name} vs expected: {} diff(s): {}",
                        d.len(),
                        d.into_iter().take(6).collect::<Vec<_>>().join("; ")
                    ));
                }
                if !cpu_ok {
                    failures.push(format!(
                        "{name} vs cpu: {} diff(s): {}",
                        r.vs_cpu.len(),
                        r.vs_cpu.into_iter().take(6).collect::<Vec<_>>().join("; ")
                    ));
                }
            }
        }
    }
    let n = files.len();
    println!("\nGOLDEN on CUDA: {pass_exp}/{n} match expected, {pass_cpu}/{n} match the CPU backend, {bitwise}/{n} bitwise identical to CPU, {errors} errors");
    let (checked, half_fails) = half_pass(&files);
    println!("GOLDEN bf16 / f16 device logits on CUDA: {}/{checked} case-dtype pairs bitwise identical to the CPU on their f32 widening", checked - half_fails.len());
    failures.extend(half_fails);
    for f in &failures {
        println!("  {f}");
    }
    if failures.is_empty() && n > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Every golden case with its logits rounded to bf16 and to f16, in device
/// memory as such (`CudaLogits::bf16` / `f16`: the kernels read them in
/// place, widened at load, issue 11), against the CPU backend on the exact
/// f32 widening of the same values: the whole output, bit for bit. Returns
/// the (case, dtype) pairs checked and the failures.
fn half_pass(files: &[PathBuf]) -> (usize, Vec<String>) {
    use half::{bf16, f16};
    use sampler_host::{Sampler, SamplerConfig};
    let (mut checked, mut fails) = (0, Vec::new());
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let Some(case) = std::fs::read_to_string(f).ok().and_then(|t| parse_case(&t).ok()) else { continue };
        if case.force_topk > sampler_kernels::codes::MAX_N_NVIDIA && case.force_topk < case.vocab_size {
            continue; // CUDA refuses this N (a config error, checked in the f32 pass)
        }
        let (reqs, logits): (Vec<_>, Vec<_>) = case.requests.iter().flatten().cloned().unzip();
        let logits: Vec<f32> = logits.concat();
        let cfg = |b| SamplerConfig {
            vocab_size: case.vocab_size,
            force_topk: case.force_topk,
            nextn: case.nextn,
            backend: b,
        };
        let (Ok(mut cpu), Ok(mut gpu)) = (Sampler::new(cfg(BackendKind::Cpu)), Sampler::new(cfg(BackendKind::Cuda)))
        else {
            fails.push(format!("{name}: sampler config refused"));
            continue;
        };
        let Some(stream) = gpu.cuda_stream() else { continue };
        let b: Vec<bf16> = logits.iter().map(|&x| bf16::from_f32(x)).collect();
        let h: Vec<f16> = logits.iter().map(|&x| f16::from_f32(x)).collect();
        for dt in ["bf16", "f16"] {
            let wide: Vec<f32> = if dt == "bf16" {
                b.iter().map(|x| x.to_f32()).collect()
            } else {
                h.iter().map(|x| x.to_f32()).collect()
            };
            let want = format!("{:?}", cpu.sample(&wide, &reqs));
            let got = sample_half(&mut gpu, &stream, dt == "bf16", &b, &h, &reqs);
            checked += 1;
            match got {
                Ok(g) if g == want => {}
                Ok(_) => fails.push(format!("{name} {dt} device logits: differ from the CPU on their f32 widening")),
                Err(e) => fails.push(format!("{name} {dt}: upload failed: {e}")),
            }
        }
    }
    (checked, fails)
}

/// One step of `reqs` on `gpu` with its logits uploaded as bf16 `b` (when
/// `bf16`) or f16 `h` and read in place (`CudaLogits`): the result's Debug
/// text, or the upload's error.
fn sample_half(
    gpu: &mut sampler_host::Sampler,
    stream: &std::sync::Arc<sampler_host::interop::CudaStream>,
    bf16: bool,
    b: &[half::bf16],
    h: &[half::f16],
    reqs: &[Request],
) -> Result<String, String> {
    use sampler_host::interop::CudaLogits;
    let run = |gpu: &mut sampler_host::Sampler, l: CudaLogits| {
        format!("{:?}", gpu.sample_async(l, reqs).and_then(|p| p.wait()))
    };
    if bf16 {
        stream.clone_htod(b).map(|d| run(gpu, CudaLogits::bf16(&d))).map_err(|e| format!("{e:?}"))
    } else {
        stream.clone_htod(h).map(|d| run(gpu, CudaLogits::f16(&d))).map_err(|e| format!("{e:?}"))
    }
}

fn step(files: &[PathBuf]) -> ExitCode {
    if let Err(c) = cuda_or_exit() {
        return c;
    }
    let mut bad = 0;
    for f in files {
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) => {
                println!("{}: {e}", f.display());
                bad += 1;
                continue;
            }
        };
        match run_one(&text) {
            Ok(r) => {
                let ok = r.vs_cpu.is_empty() && r.vs_expected.as_ref().is_none_or(|d| d.is_empty());
                bad += (!ok) as usize;
                println!("step {}: {} (bitwise {})", f.display(), if ok { "ok" } else { "MISMATCH" }, r.bitwise);
            }
            Err(e) => {
                bad += 1;
                println!("step {}: ERROR {e}", f.display());
            }
        }
    }
    if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// One step per `R:N` argument (`N` 0: force top-k off) on the benchmark's
/// own inputs (`bench_inputs`: V = 129280, logits ~ 3 x N(0, 1), temperature
/// 0.7, top-p 0.9, top-k 50, top-5 logprobs), in the backend's default configuration (at
/// R <= 16, N = 4096: 8 blocks a row and only the kept prefix ordered),
/// bitwise against the CPU backend. Small enough for compute-sanitizer,
/// which the golden cases' steps (N <= 64) leave short of those paths.
fn synth(shapes: &[String]) -> ExitCode {
    let mut cuda = match cuda_or_exit() {
        Ok(b) => b,
        Err(c) => return c,
    };
    let mut bad = 0;
    for sh in shapes {
        // R:N or R:N:V (V 129280 unless given).
        let f: Vec<Option<u32>> = sh.split(':').map(|x| x.parse().ok()).collect();
        let (r, n, v) = match f[..] {
            [Some(r), Some(n)] => (r, n, 129_280),
            [Some(r), Some(n), Some(v)] if v > 0 => (r, n, v),
            _ => {
                println!("synth {sh}: expected R:N or R:N:V");
                bad += 1;
                continue;
            }
        };
        let (logits, requests) = bench::bench_inputs(r, v, 7 + r as u64, LogprobsMode::Processed);
        let width = if n == 0 { v } else { n };
        let plan = match build_plan(v, width, u32::MAX, &logits, &requests) {
            Ok(p) => p.0.into_owned(),
            Err(e) => {
                println!("synth R={r} N={n} V={v}: plan error {e}");
                bad += 1;
                continue;
            }
        };
        let names = kernel_names(&mut cuda, &plan).join(", ");
        let verdict = match (cuda.run(&plan), CpuBackend::default().run(&plan)) {
            (Ok(a), Ok(b)) if bits_eq(&a, &b) => "bitwise ok".to_string(),
            (Ok(_), Ok(_)) => {
                bad += 1;
                "MISMATCH vs cpu".to_string()
            }
            (Err(e), _) => {
                bad += 1;
                format!("cuda error {e}")
            }
            (_, Err(e)) => format!("cpu error {e}"),
        };
        // The cluster top-N's CTAs a row (0: its leader alone).
        let ctas = cluster_ctas(&mut cuda, &plan).map_or(String::new(), |c| {
            let (lo, hi) = (c.iter().min().copied().unwrap_or(0), c.iter().max().copied().unwrap_or(0));
            format!("; cluster CTAs a row {lo}..{hi}")
        });
        println!("synth R={r} N={n} V={v}: {verdict} ({names}{ctas})");
    }
    if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// SplitMix64 stream for synthetic logits.
struct Rng(u64);
impl Rng {
    fn unit(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        (sampler_kernels::rt::math::mix64(self.0) >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// A step of `r` prefill rows at vocabulary `v`, width `n`, synthetic logits,
/// parameters cycling over five settings; laid out by the host's `build_plan`.
fn synthetic_plan(r: u32, v: u32, n: u32, seed: u64) -> StepPlan<'static> {
    let mut g = Rng(seed);
    let logits: Vec<f32> =
        (0..r as usize * v as usize).map(|_| 3.0 * (g.unit() + g.unit() + g.unit() - 1.5) * 2.0).collect();
    let requests: Vec<Request> = (0..r as u64)
        .map(|i| {
            // Settings 3-4 (rows 3, 4, 8, 9, ...): SAMPLER.md section 10 (min-p,
            // top-k first, raw logprobs) at the full vocabulary.
            let j = i as usize % 5;
            let p = SamplingParams {
                temperature: [1.0, 0.7, 1.3, 0.8, 1.0][j],
                top_p: [0.9, 1.0, 0.5, 0.95, 1.0][j],
                top_k: [50, -1, 5, 40, -1][j],
                top_logprobs: 5,
                seq_seed: Some(1000 + i),
                min_p: [0.0, 0.0, 0.0, 0.05, 0.1][j],
                filter_order: if j == 3 { FilterOrder::TopKThenTopP } else { FilterOrder::TopPThenTopK },
                logprobs_mode: if j >= 3 { LogprobsMode::Raw } else { LogprobsMode::Processed },
                ..Default::default()
            };
            Request::prefill(p, 17 + i)
        })
        .collect();
    build_plan(v, n, u32::MAX, &logits, &requests).expect("a well-formed synthetic batch").0.into_owned()
}

fn bits_eq(a: &StepResult, b: &StepResult) -> bool {
    let f = |x: &[f32], y: &[f32]| x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
    a.row_status == b.row_status
        && a.tokens == b.tokens
        && f(&a.token_lp, &b.token_lp)
        && f(&a.sum_smaller, &b.sum_smaller)
        && a.top_ids == b.top_ids
        && f(&a.top_lps, &b.top_lps)
        && a.accepted == b.accepted
        && a.group_status == b.group_status
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn timing(quick: bool) -> ExitCode {
    let mut cuda = match cuda_or_exit() {
        Ok(b) => b,
        Err(c) => return c,
    };
    cuda.set_timing(true);
    let v = 129_280u32;
    let rs: &[u32] = if quick { &[1, 16] } else { &[1, 16, 64, 256] };
    let ns: &[(u32, &str)] = &[(1024, "1024"), (4096, "4096"), (v, "off")];
    let reps = if quick { 5 } else { 20 };
    let mut lines = Vec::new();
    let mut bad = 0;
    for &(n, nname) in ns {
        for &r in rs {
            let plan = synthetic_plan(r, v, n, 42 + r as u64 + n as u64);
            let mut first = None;
            let mut err = None;
            for _ in 0..3 {
                match cuda.run(&plan) {
                    Ok(res) => first = Some(res),
                    Err(e) => err = Some(e),
                }
            }
            if let Some(e) = err {
                println!("R={r} N={nname}: DEVICE ERROR {e}");
                bad += 1;
                continue;
            }
            let (mut kern, mut wall) = (Vec::new(), Vec::new());
            for _ in 0..reps {
                let t = Instant::now();
                if let Err(e) = cuda.run(&plan) {
                    println!("R={r} N={nname}: DEVICE ERROR {e}");
                    bad += 1;
                    break;
                }
                wall.push(t.elapsed().as_secs_f64() * 1e3);
                kern.push(cuda.last_kernel_ms().unwrap_or(f32::NAN) as f64);
            }
            if kern.is_empty() {
                continue;
            }
            let check = if r <= 16 {
                let t = Instant::now();
                let cpu = CpuBackend::full_row().run(&plan);
                let cms = t.elapsed().as_secs_f64() * 1e3;
                match (cpu, &first) {
                    (Ok(c), Some(g)) if bits_eq(&c, g) => format!("bitwise ok (cpu {cms:.1} ms)"),
                    (Ok(_), _) => {
                        bad += 1;
                        "MISMATCH vs cpu".to_string()
                    }
                    (Err(e), _) => format!("cpu error {e}"),
                }
            } else {
                "-".to_string()
            };
            let k = median(&mut kern);
            let w = median(&mut wall);
            let gbs = r as f64 * v as f64 * 4.0 / (k * 1e-3) / 1e9;
            let line = format!("| {r:>4} | {nname:>5} | {k:>10.3} | {w:>10.3} | {gbs:>8.1} | {check} |");
            println!("{line}");
            lines.push(line);
        }
    }
    println!("\nTIMING (V = {v}, median of {reps}; kernels = CUDA events around the 9-kernel sequence; step = host wall time of Backend::run incl. H2D logits and D2H outputs; GB/s = R*V*4 bytes / kernel time)");
    println!("|    R |     N | kernels ms |    step ms | logits GB/s | check |");
    println!("|-----:|------:|-----------:|-----------:|---------:|-------|");
    for l in &lines {
        println!("{l}");
    }
    if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("golden") => golden(Path::new(args.get(1).map(String::as_str).unwrap_or("conformance/golden"))),
        Some("step") => step(&args[1..].iter().map(PathBuf::from).collect::<Vec<_>>()),
        Some("timing") => timing(args.iter().any(|a| a == "--quick")),
        Some("tree") => tree_timing(),
        Some("adversarial") => adversarial(),
        Some("synth") => synth(&args[1..]),
        _ => {
            eprintln!(
                "usage: gpu_suite golden DIR | step CASE.json.. | synth R:N.. | timing [--quick] | adversarial | tree"
            );
            ExitCode::from(2)
        }
    }
}

/// Rows that stress the selection (the radix select's wide first digit, its
/// candidate list and fallback, ties by id): see `adversarial`.
fn adversarial_rows(v: usize) -> Vec<(&'static str, Vec<f32>)> {
    let mut g = Rng(11);
    let normal = |g: &mut Rng| 3.0 * (g.unit() + g.unit() + g.unit() + g.unit() - 2.0);
    let mut rows = Vec::new();
    rows.push(("all equal", vec![1.5f32; v]));
    // 5000 ids at 2.0, the rest 1.0: every boundary is a tie.
    let mut two = vec![1.0f32; v];
    for i in 0..5000 {
        two[(i * 7919) % v] = 2.0;
    }
    rows.push(("two levels", two));
    rows.push(("few values", (0..v).map(|_| (normal(&mut g) * 2.0).round() / 2.0).collect()));
    let ext = [
        f32::MAX,
        -f32::MAX,
        f32::MIN_POSITIVE,
        1e-40,
        -1e-40,
        0.0,
        -0.0,
        f32::NEG_INFINITY,
        3.4e38,
        -3.4e38,
        1e30,
        -1e30,
    ];
    rows.push((
        "extremes",
        (0..v).map(|i| if i % 3 == 0 { ext[(i / 3) % ext.len()] } else { normal(&mut g) }).collect(),
    ));
    // A 12-bit bin [5, 5.125) holding ~3000 distinct keys per 32K chunk (compacted),
    // then ~12000 per chunk (over the 4096-key list: the full-row fallback).
    for (name, every) in [("crowded bin", 10usize), ("overfull bin", 3)] {
        rows.push((
            name,
            (0..v)
                .map(|i| if i % every == 0 { 5.0 + 0.125 * g.unit() * 0.999 } else { normal(&mut g).min(4.9) })
                .collect(),
        ));
    }
    // Exactly 1024 keys in [7, 7.5), the rest below 4.9: a boundary at a bin edge.
    rows.push((
        "bin edge",
        (0..v)
            .map(
                |i| if i % 126 == 0 && i / 126 < 1024 { 7.0 + 0.5 * g.unit() * 0.999 } else { normal(&mut g).min(4.9) },
            )
            .collect(),
    ));
    let mut inf = vec![f32::NEG_INFINITY; v];
    for i in 0..10 {
        inf[(i * 9001) % v] = normal(&mut g);
    }
    rows.push(("mostly -inf", inf));
    rows
}

/// The kernels CUDA launches for `plan` (none when it cannot build it).
fn kernel_names(cuda: &mut CudaBackend, plan: &StepPlan) -> Vec<&'static str> {
    use sampler_host::runtime::pipeline;
    pipeline::build_for(cuda.device(), plan, pipeline::PrefixPolicy::Eager.width(plan))
        .map(|p| p.kernel_names())
        .unwrap_or_default()
}

/// Each row's `Buf::SelFallback` word of the last step, if that step ran a
/// kernel `ran` accepts: `force_topn_stream`'s fallback code, or the CTAs
/// that selected the row in `topn_cluster*` (0: its leader alone).
fn sel_words(cuda: &mut CudaBackend, plan: &StepPlan, ran: impl Fn(&str) -> bool) -> Option<Vec<u32>> {
    use sampler_host::runtime::pipeline::{Buf, Device, HostSliceMut};
    if !kernel_names(cuda, plan).iter().any(|k| ran(k)) {
        return None;
    }
    let mut w = vec![0u32; plan.rows as usize];
    let d = cuda.device();
    d.download(Buf::SelFallback, 0, HostSliceMut::U32(&mut w)).ok()?;
    d.finish().ok()?;
    Some(w)
}

/// Each row's `force_topn_stream` fallback code of the last step, if that step ran it.
fn stream_fallback_codes(cuda: &mut CudaBackend, plan: &StepPlan) -> Option<Vec<u32>> {
    sel_words(cuda, plan, |k| k == "force_topn_stream")
}

/// Each row's CTAs of the last step's cluster top-N, if that step ran one.
fn cluster_ctas(cuda: &mut CudaBackend, plan: &StepPlan) -> Option<Vec<u32>> {
    sel_words(cuda, plan, |k| k.starts_with("topn_cluster"))
}

/// `adversarial_rows` on CUDA and on the CPU backend, bitwise, N in 1, 50,
/// 1024, 4096 and off; top-p 1 and top-k off, so every candidate's logit
/// enters the normaliser.
fn adversarial() -> ExitCode {
    let mut cuda = match cuda_or_exit() {
        Ok(b) => b,
        Err(c) => return c,
    };
    let v = 129_280u32;
    let rows = adversarial_rows(v as usize);
    let logits: Vec<f32> = rows.iter().flat_map(|(_, r)| r.iter().copied()).collect();
    let requests = adversarial_requests(rows.len(), -1, 77);
    let mut bad = 0;
    // The streaming top-N (force_topn_stream, N <= 4096) as the environment
    // set it, then the other way round.
    let env_sel = cuda.stream_select();
    let env_stream = env_sel.unwrap_or(false);
    for stream in [env_stream, !env_stream] {
        cuda.set_stream_select(Some(stream));
        for n in [1u32, 50, 1024, 4096, v] {
            let plan = match build_plan(v, n, u32::MAX, &logits, &requests) {
                Ok(p) => p.0.into_owned(),
                Err(e) => {
                    println!("adversarial N={n}: plan error {e}");
                    bad += 1;
                    continue;
                }
            };
            let gpu = cuda.run(&plan);
            let fell = stream_fallback_codes(&mut cuda, &plan);
            let cpu = CpuBackend::full_row().run(&plan);
            let verdict = match (&gpu, &cpu) {
                (Ok(a), Ok(b)) if bits_eq(a, b) => "bitwise ok".to_string(),
                (Ok(a), Ok(b)) => {
                    bad += 1;
                    let diff: Vec<&str> = rows
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| {
                            a.tokens.get(*i) != b.tokens.get(*i)
                                || a.token_lp.get(*i).map(|x| x.to_bits()) != b.token_lp.get(*i).map(|x| x.to_bits())
                                || a.row_status.get(*i) != b.row_status.get(*i)
                        })
                        .map(|(_, (name, _))| *name)
                        .collect();
                    format!("MISMATCH vs cpu (rows: {diff:?})")
                }
                (Err(e), _) => {
                    bad += 1;
                    format!("cuda error {e}")
                }
                (_, Err(e)) => format!("cpu error {e}"),
            };
            println!(
                "adversarial N={n}, stream select {stream}: {} rows ({}): {verdict}{}",
                rows.len(),
                rows.iter().map(|r| r.0).collect::<Vec<_>>().join(", "),
                fell.map_or(String::new(), |f| format!(
                    "; stream fallback codes per row (0 streamed, 2 overflow, 3 too few) {f:?}"
                ))
            );
        }
    }
    cuda.set_stream_select(env_sel);
    bad += half_adversarial(v, &rows);
    bad += short_chunks(&mut cuda);
    if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The streaming top-N over 8 blocks a row at V = 8195, N = 1024: chunks
/// of 1025 logits and a last one of 1020, shorter than N. Every chunk must
/// take the row's sampled threshold (the merge is exact only then). Row
/// "short last chunk": the first 602 sampled positions at 10, the other
/// sampled ones at 1, the last chunk's other logits at 5 and the rest at 0,
/// so the row's top 1024 holds 422 fives, all below the 602nd sample: a last
/// chunk with its own threshold from its 1020 (one at 10) would drop them.
/// Then the generic adversarial rows at this V.
fn short_chunks(cuda: &mut CudaBackend) -> usize {
    let (v, n, chunks) = (8195u32, 1024u32, 8u32);
    let sampled: Vec<usize> = (0..4096u64).map(|s| ((s * v as u64) >> 12) as usize).collect();
    let last = (v.div_ceil(chunks) * (chunks - 1)) as usize;
    let mut row: Vec<f32> = (0..v as usize).map(|i| if i >= last { 5.0 } else { 0.0 }).collect();
    for (j, &p) in sampled.iter().enumerate() {
        row[p] = if j < 602 { 10.0 } else { 1.0 };
    }
    let mut rows = vec![("short last chunk", row)];
    rows.extend(adversarial_rows(v as usize));
    let logits: Vec<f32> = rows.iter().flat_map(|(_, r)| r.iter().copied()).collect();
    let requests = adversarial_requests(rows.len(), -1, 91);
    let (sel, sc) = (cuda.stream_select(), cuda.stream_chunks());
    cuda.set_stream_select(Some(true));
    cuda.set_stream_chunks(Some(chunks));
    let plan = build_plan(v, n, u32::MAX, &logits, &requests).expect("a well-formed adversarial batch").0.into_owned();
    let names = kernel_names(cuda, &plan).join(", ");
    let verdict = match (cuda.run(&plan), CpuBackend::full_row().run(&plan)) {
        _ if !names.contains("topn_chunk_stream") => "not over several blocks".to_string(),
        (Ok(a), Ok(b)) if bits_eq(&a, &b) => "bitwise ok".to_string(),
        (Ok(a), Ok(b)) => {
            let diff: Vec<&str> = (0..rows.len()).filter(|&i| a.tokens[i] != b.tokens[i]).map(|i| rows[i].0).collect();
            format!("MISMATCH vs cpu (tokens differ in rows {diff:?})")
        }
        (Err(e), _) => format!("cuda error {e}"),
        (_, Err(e)) => format!("cpu error {e}"),
    };
    cuda.set_stream_select(sel);
    cuda.set_stream_chunks(sc);
    println!("adversarial short chunks V={v} N={n} over {chunks} blocks: {} rows: {verdict} ({names})", rows.len());
    (verdict != "bitwise ok") as usize
}

/// One prefill request a row of the adversarial suites: temperature 1,
/// top-p 1 (every candidate's logit enters the normaliser), top-k `top_k`
/// (-1 off), 5 top logprobs, row `i` seeded `seed + i`.
fn adversarial_requests(rows: usize, top_k: i64, seed: u64) -> Vec<Request> {
    (0..rows as u64)
        .map(|i| {
            let p = SamplingParams {
                temperature: 1.0,
                top_p: 1.0,
                top_k,
                top_logprobs: 5,
                seq_seed: Some(seed + i),
                ..Default::default()
            };
            Request::prefill(p, 3 + i)
        })
        .collect()
}

/// Rows of NaN bit patterns for [`half_adversarial`], as (name, bf16 bits,
/// f16 bits): every logit NaN (quiet and signalling, payloads and signs
/// varied), and NaNs, +-inf and -0.0 among normal logits. A NaN fails its row
/// (SAMPLER.md 3.2), so these rows check the bad-logit counts and statuses of
/// the stream paths (every key of an all-NaN row survives the sample's
/// threshold), not an order among NaNs.
fn half_nan_rows(v: usize) -> Vec<(&'static str, Vec<u16>, Vec<u16>)> {
    use half::{bf16, f16};
    let mut g = Rng(29);
    let nan = |i: usize, f16: bool| -> u16 {
        let sign = if i % 2 == 1 { 0x8000 } else { 0 };
        let payload = (i as u16).wrapping_mul(0x9e37) & 0x3f;
        // Every 4th the plain quiet NaN, the rest quiet or signalling with a payload.
        let quiet = if i.is_multiple_of(3) {
            0
        } else if f16 {
            0x0200
        } else {
            0x0040
        };
        match (i.is_multiple_of(4), f16) {
            (true, true) => sign | 0x7e00,
            (true, false) => sign | 0x7fc0,
            (false, true) => sign | 0x7c01 | quiet | (payload << 3),
            (false, false) => sign | 0x7f81 | quiet | payload,
        }
    };
    let all: (Vec<u16>, Vec<u16>) = (0..v).map(|i| (nan(i, false), nan(i, true))).unzip();
    let mut rows = vec![("all NaN", all.0, all.1)];
    let mut mixed = (Vec::with_capacity(v), Vec::with_capacity(v));
    for i in 0..v {
        let x = 3.0 * (g.unit() + g.unit() + g.unit() + g.unit() - 2.0);
        let (b, h) = match i % 11 {
            0 => (nan(i, false), nan(i, true)),
            3 if i % 3 == 0 => (bf16::NEG_INFINITY.to_bits(), f16::NEG_INFINITY.to_bits()),
            5 if i % 5 == 0 => (0x8000, 0x8000),
            7 if i % 1001 == 7 => (bf16::INFINITY.to_bits(), f16::INFINITY.to_bits()),
            _ => (bf16::from_f32(x).to_bits(), f16::from_f32(x).to_bits()),
        };
        mixed.0.push(b);
        mixed.1.push(h);
    }
    rows.push(("NaNs among logits", mixed.0, mixed.1));
    rows
}

/// [`adversarial_rows`] and [`half_nan_rows`] as bf16 and as f16 logits in
/// device memory, through the streaming top-N on one block a row and on 8
/// (`SAMPLER_STREAM_SELECT` / `SAMPLER_STREAM_CHUNKS` set for each sampler's
/// backend) and with it off, N in 1, 50, 1024, 4096, top-k off and 50 (only
/// the kept prefix ordered): against the CPU on the same values widened to
/// f32, bitwise. The half paths take their own select (`Source::flat_bits`).
/// Returns the mismatches.
fn half_adversarial(v: u32, rows: &[(&'static str, Vec<f32>)]) -> usize {
    use half::{bf16, f16};
    use sampler_host::{Sampler, SamplerConfig};
    let mut all: Vec<(&str, Vec<u16>, Vec<u16>)> = rows
        .iter()
        .map(|(name, r)| {
            let b = r.iter().map(|&x| bf16::from_f32(x).to_bits()).collect();
            let h = r.iter().map(|&x| f16::from_f32(x).to_bits()).collect();
            (*name, b, h)
        })
        .collect();
    all.extend(half_nan_rows(v as usize));
    let names: Vec<&str> = all.iter().map(|r| r.0).collect();
    let concat = |f16: bool| -> Vec<u16> { all.iter().flat_map(|r| if f16 { &r.2 } else { &r.1 }).copied().collect() };
    let (bits_b, bits_h) = (concat(false), concat(true));
    let wide_b: Vec<f32> = bits_b.iter().map(|&b| bf16::from_bits(b).to_f32()).collect();
    let wide_h: Vec<f32> = bits_h.iter().map(|&b| f16::from_bits(b).to_f32()).collect();
    let dev_b: Vec<bf16> = bits_b.iter().map(|&b| bf16::from_bits(b)).collect();
    let dev_h: Vec<f16> = bits_h.iter().map(|&b| f16::from_bits(b)).collect();
    let saved: Vec<(&str, Option<String>)> =
        ["SAMPLER_STREAM_SELECT", "SAMPLER_STREAM_CHUNKS"].iter().map(|k| (*k, std::env::var(k).ok())).collect();
    let mut bad = 0;
    for n in [1u32, 50, 1024, 4096] {
        let cfg = |backend| SamplerConfig { vocab_size: v, force_topk: n, nextn: 5, backend };
        let Ok(mut cpu) = Sampler::new(cfg(BackendKind::Cpu)) else {
            println!("adversarial half N={n}: CPU sampler refused");
            bad += 1;
            continue;
        };
        for (label, sel, chunks) in
            [("stream, 1 block", "1", "0"), ("stream, 8 blocks", "1", "8"), ("staged", "0", "0")]
        {
            // Read once, when the backend is created (single-threaded here).
            std::env::set_var("SAMPLER_STREAM_SELECT", sel);
            std::env::set_var("SAMPLER_STREAM_CHUNKS", chunks);
            let gpu = Sampler::new(cfg(BackendKind::Cuda));
            let Ok(mut gpu) = gpu else {
                println!("adversarial half N={n} {label}: CUDA sampler refused");
                bad += 1;
                continue;
            };
            let Some(stream) = gpu.cuda_stream() else {
                println!("adversarial half N={n} {label}: the CUDA sampler has no stream");
                bad += 1;
                continue;
            };
            for top_k in [-1i64, 50] {
                let reqs = adversarial_requests(all.len(), top_k, 91);
                for (dt, wide) in [("bf16", &wide_b), ("f16", &wide_h)] {
                    let want = format!("{:?}", cpu.sample(&wide[..], &reqs));
                    let got = sample_half(&mut gpu, &stream, dt == "bf16", &dev_b, &dev_h, &reqs);
                    let verdict = match got {
                        Ok(g) if g == want => "bitwise ok".to_string(),
                        Ok(_) => {
                            bad += 1;
                            "MISMATCH vs cpu".to_string()
                        }
                        Err(e) => {
                            bad += 1;
                            format!("upload failed: {e}")
                        }
                    };
                    println!(
                        "adversarial half N={n}, {dt}, {label}, top-k {top_k}: {} rows ({}): {verdict}",
                        names.len(),
                        names.join(", ")
                    );
                }
            }
        }
    }
    for (k, x) in saved {
        match x {
            Some(x) => std::env::set_var(k, x),
            None => std::env::remove_var(k),
        }
    }
    bad
}

/// A batch of `trees` trees of `m` nodes each (EAGLE-like: root with 4
/// children, then each level's best node expands), or 64 plain decode rows
/// when `trees == 0`. Children are their parent row's top tokens, so walks
/// go deep; `dists`: one draft distribution (the parent row's top N) per internal node.
fn tree_plan(v: u32, n: u32, trees: usize, m: usize, dists: bool, seed: u64) -> StepPlan<'static> {
    let mut g = Rng(seed);
    let rows = if trees == 0 { 64 } else { trees * m };
    let logits: Vec<f32> = (0..rows * v as usize).map(|_| 3.0 * (g.unit() + g.unit() + g.unit() - 1.5) * 2.0).collect();
    let params = |i: u64| SamplingParams {
        temperature: 1.0,
        top_p: 0.9,
        top_k: -1,
        top_logprobs: 5,
        seq_seed: Some(1000 + i),
        ..Default::default()
    };
    let top = |row: usize, k: usize| -> Vec<i32> {
        let r = &logits[row * v as usize..(row + 1) * v as usize];
        let mut ids: Vec<usize> = (0..v as usize).collect();
        ids.select_nth_unstable_by(k, |&a, &b| r[b].partial_cmp(&r[a]).unwrap().then(a.cmp(&b)));
        let mut t: Vec<usize> = ids[..k].to_vec();
        t.sort_by(|&a, &b| r[b].partial_cmp(&r[a]).unwrap().then(a.cmp(&b)));
        t.iter().map(|&x| x as i32).collect()
    };
    let requests: Vec<Request> = if trees == 0 {
        (0..64u64).map(|i| Request::decode(params(i), 500 + i, 1, Vec::new(), Vec::new())).collect()
    } else {
        (0..trees)
            .map(|t| {
                let base = t * m;
                // Levels: root -> 4 children; then the first node of each level gets 4 children.
                let mut parent = vec![-1i32];
                let mut tokens = Vec::new();
                let mut expand = 0usize;
                while parent.len() < m {
                    let kids = top(base + expand, 4);
                    let first_new = parent.len();
                    for &k in kids.iter().take(m - parent.len()) {
                        parent.push(expand as i32);
                        tokens.push(k);
                    }
                    expand = first_new;
                }
                let internal: Vec<usize> = (0..m).filter(|&c| parent.contains(&(c as i32))).collect();
                let draft_dists = dists.then(|| {
                    internal
                        .iter()
                        .map(|&c| {
                            let ids = top(base + c, (n as usize).min(4096));
                            let lps = (0..ids.len()).map(|j| -1.0 - j as f32 * 0.01).collect::<Vec<f32>>();
                            let z = lps.iter().map(|x| x.exp()).sum::<f32>().ln();
                            DraftDist { ids, logprobs: lps.iter().map(|x| (x - z).min(0.0)).collect() }
                        })
                        .collect()
                });
                Request::tree(
                    params(t as u64),
                    800 + m as u64,
                    DraftTree { parent, tokens, draft_dists, without_replacement: false },
                )
            })
            .collect()
    };
    build_plan(v, n, u32::MAX, &logits, &requests).expect("a well-formed tree batch").0.into_owned()
}

fn tree_timing() -> ExitCode {
    let mut cuda = match cuda_or_exit() {
        Ok(b) => b,
        Err(c) => return c,
    };
    let v = 129_280u32;
    let reps = 15;
    let mut bad = 0;
    let mut lines = Vec::new();
    for (n, nname) in [(4096u32, "4096"), (v, "off")] {
        for (label, trees, m, dists) in [
            ("64 decode rows", 0usize, 1usize, false),
            ("1 tree x 64, fixed", 1, 64, false),
            ("1 tree x 64, with repl.", 1, 64, true),
            ("4 trees x 16, fixed", 4, 16, false),
        ] {
            let plan = tree_plan(v, n, trees, m, dists, 7 + n as u64);
            let gpu = match cuda.run(&plan) {
                Ok(r) => r,
                Err(e) => {
                    println!("{label} N={nname}: DEVICE ERROR {e}");
                    bad += 1;
                    continue;
                }
            };
            let cpu = CpuBackend::full_row().run(&plan);
            let check = match &cpu {
                Ok(c) if bits_eq(c, &gpu) && c.path == gpu.path => "bitwise ok".to_string(),
                Ok(_) => {
                    bad += 1;
                    "MISMATCH vs cpu".to_string()
                }
                Err(e) => format!("cpu error {e}"),
            };
            let mut per: std::collections::BTreeMap<&'static str, Vec<f64>> = Default::default();
            let mut total = Vec::new();
            for _ in 0..reps {
                if let Err(e) = cuda.prepare_step(&plan) {
                    println!("{label}: DEVICE ERROR {e}");
                    bad += 1;
                    break;
                }
                match cuda.launch_step_timed(&plan) {
                    Ok(ks) => {
                        total.push(ks.iter().map(|k| k.1 as f64).sum::<f64>());
                        for (name, ms) in ks {
                            per.entry(name).or_default().push(ms as f64);
                        }
                    }
                    Err(e) => {
                        println!("{label}: DEVICE ERROR {e}");
                        bad += 1;
                        break;
                    }
                }
            }
            if total.is_empty() {
                continue;
            }
            let launches = per.len();
            let walk =
                per.get_mut("tree_walk").map(|x| median(x)).map_or("-".to_string(), |x| format!("{:.1}", x * 1e3));
            let verify: f64 = ["remap_draft", "verify"].iter().filter_map(|k| per.get_mut(k).map(|x| median(x))).sum();
            let acc: Vec<u32> = gpu.accepted.clone();
            let line = format!(
                "| {nname:>5} | {label:<24} | {:>8.1} | {launches:>2} | {walk:>9} | {:>9.1} | accepted {acc:?} | {check} |",
                median(&mut total) * 1e3,
                verify * 1e3
            );
            println!("{line}");
            lines.push(line);
        }
    }
    println!("\nTREE TIMING (R = 64 rows, V = {v}, median of {reps}; us of device time per step, CUDA events between kernels)");
    println!(
        "|     N | batch                    | step us  | kernels | tree_walk us | remap+verify us | walk | check |"
    );
    for l in &lines {
        println!("{l}");
    }
    if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
