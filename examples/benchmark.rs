//! The speed benchmark of the CUDA backend (issue 6), timed the way the
//! peers are timed: logits already on the device, median of many runs, CUDA
//! events around each run, L2 flushed before each run (as
//! `triton.testing.do_bench` does), plus a CUDA-graph replay of the step.
//!
//! ```text
//! benchmark run [--v 129280] [--rows 1,16,64,256,384] [--n 1024,4096,0] [--reps 50]
//!               [--check-rows 16] [--chunks C] [--logprobs-mode processed|raw] [--dtype f32|bf16|f16]
//!               [--json F] [--csv F]
//!     per shape: copy (one D2D copy of the logits), floor (one read at the
//!     measured copy bandwidth = copy / 2), our step eager (events around the
//!     kernel launches), our step as a CUDA graph replay, each kernel's time
//!     (events between kernels), the chunk count of the multi-block top-N,
//!     and for R <= check-rows a bit-for-bit comparison with the CPU backend.
//!     `--logprobs-mode raw`: every request reports raw logprobs (SAMPLER.md
//!     10.3: mask_check's per-tile sums and the raw_logprobs kernel).
//!     `--dtype bf16` (or `f16`): the same logits rounded to half precision,
//!     in device memory as such; the kernels read them in place, widened at
//!     load (issue 11), so copy and floor are of 2 bytes per logit, and the
//!     check compares with the CPU backend on the same half logits.
//! benchmark table OURS.json [--fi fi.json] [--torch torch.json] [--bf16 BF16.json] [--md F]
//!     the target table of issue 6 with ratios, from one run's files (and
//!     the bf16 rows beside the f32 ones, floor at 2 bytes per logit).
//! benchmark chart OURS.json [--fi fi.json] [--torch torch.json] OUT.svg
//!     time vs R per N (log-log): ours (graph), floor, FlashInfer (graph),
//!     torch; SVG (`scripts/gpu/round.sh chart` renders the PNG).
//! benchmark cpu [--v 129280] [--n 1024,4096,0] [--reps 7] [--threads 1] [--clock cpu|wall] [--filters on|off]
//!               [--peer ../shared/peers/numpy_sampler.py] [--python python3] [--json F]
//!     the CPU backend beside the numpy peer (issue 12 item 7), ms per row
//!     per core: our verify-like step (R = 16: three decode requests with
//!     seqlen_q 6, 6, 4 and their drafts) and an R = 16 prefill step (the
//!     peer's own workload), both through the public `Sampler` API on a
//!     rayon pool of `--threads` threads; the peer on one core. `--clock cpu`
//!     (default; one thread) times CPU time on both sides, which a busy
//!     shared machine disturbs far less than wall time. `--filters off`:
//!     top-p 1 and top-k off on both sides (every token kept, issue 22 item 6).
//! ```
//! Workload (the peers'): V = 129280 f32 logits ~ 3 x normal, temperature
//! 0.7, top-p 0.9, top-k 50, top-5 logprobs, force top-N (0 = off).

use std::process::ExitCode;

use cudarc::driver::sys::CUevent_flags;
use sampler_host::layout::build_plan;
use sampler_host::runtime::device::cpu::CpuBackend;
use sampler_host::runtime::device::cuda::CudaBackend;
use sampler_host::runtime::plan::{StepPlan, StepResult};
use sampler_host::{
    BackendKind, DraftDist, LogprobsMode, Request, RequestKind, Sampler, SamplerConfig, SamplingParams,
};
use serde_json::{json, Value};

/// Element type of the benchmark's logits (`--dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dt {
    F32,
    Bf16,
    F16,
}

impl Dt {
    pub fn parse(s: &str) -> Option<Dt> {
        Some(match s {
            "f32" => Dt::F32,
            "bf16" => Dt::Bf16,
            "f16" => Dt::F16,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Dt::F32 => "f32",
            Dt::Bf16 => "bf16",
            Dt::F16 => "f16",
        }
    }
    pub fn bytes(self) -> usize {
        if self == Dt::F32 {
            4
        } else {
            2
        }
    }
}

/// The logits of one shape on the host in one element type (half
/// precision: the f32 values rounded to nearest), borrowed by plans.
pub enum HostLogits {
    F32(Vec<f32>),
    Bf16(Vec<half::bf16>),
    F16(Vec<half::f16>),
}

impl HostLogits {
    pub fn new(l: Vec<f32>, dt: Dt) -> HostLogits {
        match dt {
            Dt::F32 => HostLogits::F32(l),
            Dt::Bf16 => HostLogits::Bf16(l.iter().map(|&x| half::bf16::from_f32(x)).collect()),
            Dt::F16 => HostLogits::F16(l.iter().map(|&x| half::f16::from_f32(x)).collect()),
        }
    }
    pub fn plan_logits(&self) -> sampler_host::runtime::plan::Logits<'_> {
        match self {
            HostLogits::F32(v) => v.into(),
            HostLogits::Bf16(v) => v.into(),
            HostLogits::F16(v) => v.into(),
        }
    }
}

/// The logits of one shape in device memory, in their element type.
pub enum DevLogits {
    F32(cudarc::driver::CudaSlice<f32>),
    Bf16(cudarc::driver::CudaSlice<half::bf16>),
    F16(cudarc::driver::CudaSlice<half::f16>),
}

impl DevLogits {
    pub fn up(
        st: &std::sync::Arc<cudarc::driver::CudaStream>,
        h: &HostLogits,
    ) -> Result<DevLogits, cudarc::driver::DriverError> {
        Ok(match h {
            HostLogits::F32(v) => DevLogits::F32(st.clone_htod(v)?),
            HostLogits::Bf16(v) => DevLogits::Bf16(st.clone_htod(v)?),
            HostLogits::F16(v) => DevLogits::F16(st.clone_htod(v)?),
        })
    }
    pub fn view(&self) -> sampler_host::interop::CudaLogits<'_> {
        use sampler_host::interop::CudaLogits;
        match self {
            DevLogits::F32(s) => CudaLogits::f32(s),
            DevLogits::Bf16(s) => CudaLogits::bf16(s),
            DevLogits::F16(s) => CudaLogits::f16(s),
        }
    }
}

struct Rng(u64);
impl Rng {
    fn unit(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        (sampler_kernels::rt::math::mix64(self.0) >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// The peers' workload: `[R, V]` logits ~ 3 x N(0, 1) (sum of 4 uniforms), T 0.7, top-p 0.9, top-k 50, k 5.
/// One prefill row per request (seed 1000 + i, position 41 + i), laid out by the host's own `build_plan`.
pub fn bench_plan(r: u32, v: u32, n: u32, seed: u64) -> StepPlan<'static> {
    bench_plan_mode(r, v, n, seed, LogprobsMode::Processed)
}

/// [`bench_plan`] with every request's `logprobs_mode` set to `mode`.
pub fn bench_plan_mode(r: u32, v: u32, n: u32, seed: u64, mode: LogprobsMode) -> StepPlan<'static> {
    let (logits, requests) = bench_inputs(r, v, seed, mode);
    build_plan(v, if n == 0 { v } else { n }, u32::MAX, &logits, &requests)
        .expect("a well-formed synthetic batch")
        .0
        .into_owned()
}

/// The logits and requests of [`bench_plan_mode`].
pub fn bench_inputs(r: u32, v: u32, seed: u64, mode: LogprobsMode) -> (Vec<f32>, Vec<Request>) {
    let mut g = Rng(seed);
    let s = 3.0 * 3.0f32.sqrt(); // the sum of 4 uniforms has variance 1/3
    let logits: Vec<f32> =
        (0..r as usize * v as usize).map(|_| s * (g.unit() + g.unit() + g.unit() + g.unit() - 2.0)).collect();
    let requests: Vec<Request> = (0..r as u64)
        .map(|i| {
            let p = SamplingParams {
                temperature: 0.7,
                top_p: 0.9,
                top_k: 50,
                top_logprobs: 5,
                seq_seed: Some(1000 + i),
                logprobs_mode: mode,
                ..Default::default()
            };
            Request::prefill(p, 41 + i)
        })
        .collect();
    (logits, requests)
}

/// The whole step through the public API (`Sampler` with device logits,
/// issue 11), eager (`sample_async` + `wait`) and graph replay (`capture`
/// once, then `replay` + `wait`), as an engine runs it: the logits written on
/// the engine's own stream, the sampler's stream waiting for them. Figures:
///
/// - `device`: the device span of the call, from the logits being ready on
///   the engine's stream (an event after the engine's last work, here a gate
///   of L2 flushes) to the sampler's last kernel: metadata upload + kernels.
///   The gate is queued before the call, so the call's host work and its
///   metadata copy (a side stream) run while the engine's stream is busy, as
///   behind an engine's forward pass; a rep whose gate drained before the
///   call returned is redone with a longer gate (`api_gate_misses`). Issue
///   11 bounds it against the backend-level figure: graph within 10%, eager
///   within 25%.
/// - `enqueue`: host time of the call (plan, upload, launches), no wait.
/// - `wall`: the call and `wait` (outputs copied to pinned host memory and
///   assembled) from an idle device.
/// - `api_graph1_device_us`: the graph's device span with the logits and
///   the gate on the sampler's own stream (an engine that runs its forward
///   on [`Sampler::cuda_stream`]): the metadata copy waits only for the
///   previous step's kernels, so it overlaps the gate there too.
///
/// And the outputs against the CPU `Sampler`'s, bit for bit, when `check`.
pub fn time_api(r: u32, v: u32, n: u32, reps: usize, check: bool, mode: LogprobsMode, dt: Dt) -> Res<Value> {
    use sampler_host::{BackendKind, Sampler, SamplerConfig};
    let d = |x: cudarc::driver::DriverError| format!("{x:?}");
    let b = |x: sampler_host::error::BatchError| x.to_string();
    let (logits, reqs) = bench_inputs(r, v, 7 + r as u64, mode);
    let logits = HostLogits::new(logits, dt);
    let cfg = |backend| SamplerConfig { vocab_size: v, force_topk: n, nextn: 5, backend };
    let mut s = Sampler::new(cfg(BackendKind::Cuda)).map_err(|e| e.to_string())?;
    let st = s.cuda_stream().ok_or("no CUDA stream")?;
    // The engine's stream: it writes the logits (and here runs the gate).
    let es = st.context().new_stream().map_err(d)?;
    let dl = DevLogits::up(&es, &logits).map_err(d)?;
    let dl1 = DevLogits::up(&st, &logits).map_err(d)?;
    let mut flush = es.alloc_zeros::<u8>(256 << 20).map_err(d)?;
    let mut flush1 = st.alloc_zeros::<u8>(256 << 20).map_err(d)?;
    es.synchronize().map_err(d)?;
    st.synchronize().map_err(d)?;
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let want = if check {
        Some(format!(
            "{:?}",
            Sampler::new(cfg(BackendKind::Cpu))
                .map_err(|e| e.to_string())?
                .sample(logits.plan_logits(), &reqs)
                .map_err(b)?
        ))
    } else {
        None
    };
    let mut ok = true;
    let (mut gate, mut misses) = (1usize, 0usize);
    let mut doc = serde_json::Map::new();
    for (name, graphed, own) in [("eager", false, false), ("graph", true, false), ("graph1", true, true)] {
        let (ls, fl) = if own { (&st, &mut flush1) } else { (&es, &mut flush) };
        let lg = if own { &dl1 } else { &dl };
        let graph = if graphed { Some(s.capture(lg.view(), &reqs).map_err(b)?) } else { None };
        macro_rules! call {
            () => {
                match &graph {
                    Some(g) => s.replay(g, lg.view(), &reqs),
                    None => s.sample_async(lg.view(), &reqs),
                }
                .map_err(b)?
            };
        }
        let (mut dev, mut enq, mut wall) = (Vec::new(), Vec::new(), Vec::new());
        let mut i = 0;
        while i < reps + 3 {
            // Wall time from an idle device, outputs to the host included.
            ls.memset_zeros(fl).map_err(d)?;
            ls.synchronize().map_err(d)?;
            let t = std::time::Instant::now();
            let pend = call!();
            let te = t.elapsed().as_secs_f64() * 1e6;
            let out = pend.wait().map_err(b)?;
            let tw = t.elapsed().as_secs_f64() * 1e6;
            if i == 0 {
                ok &= want.as_ref().is_none_or(|w| *w == format!("{out:?}"));
            }
            // Device span: the engine's stream busy (the gate), the logits ready at `a`.
            for _ in 0..gate {
                ls.memset_zeros(fl).map_err(d)?;
            }
            let a = ls.record_event(flags).map_err(d)?;
            let pend = call!();
            let e = st.record_event(flags).map_err(d)?;
            let held = !a.try_is_complete().map_err(d)?;
            pend.wait().map_err(b)?;
            if !held {
                misses += 1;
                gate = (gate * 2).min(256);
                continue;
            }
            if i >= 3 {
                dev.push(a.elapsed_ms(&e).map_err(d)? as f64 * 1e3);
                enq.push(te);
                wall.push(tw);
            }
            i += 1;
        }
        doc.insert(format!("api_{name}_device_us"), json!(median(&mut dev)));
        if !own {
            doc.insert(format!("api_{name}_enqueue_us"), json!(median(&mut enq)));
            doc.insert(format!("api_{name}_wall_us"), json!(median(&mut wall)));
        }
    }
    doc.insert("api_gate_misses".into(), json!(misses));
    doc.insert("api_check_cpu_bitwise".into(), json!(if check { Some(ok) } else { None }));
    Ok(Value::Object(doc))
}

pub fn bits_eq(a: &StepResult, b: &StepResult) -> bool {
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

pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn list(s: &str) -> Vec<u32> {
    s.split(',').filter(|x| !x.is_empty()).map(|x| x.trim().parse().expect("a number list")).collect()
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

type Res<T> = Result<T, String>;

/// Times one shape; returns its JSON record.
pub fn time_shape(cuda: &mut CudaBackend, r: u32, v: u32, n: u32, reps: usize, check: bool) -> Res<Value> {
    time_shape_mode(cuda, r, v, n, reps, check, LogprobsMode::Processed, Dt::F32)
}

/// [`time_shape`] with the requests' `logprobs_mode` set to `mode` and the
/// logits in element type `dt` (half precision: uploaded as such, read by
/// the kernels in place).
#[allow(clippy::too_many_arguments)]
pub fn time_shape_mode(
    cuda: &mut CudaBackend,
    r: u32,
    v: u32,
    n: u32,
    reps: usize,
    check: bool,
    mode: LogprobsMode,
    dt: Dt,
) -> Res<Value> {
    let e = |x: sampler_host::error::BackendError| x.to_string();
    let d = |x: cudarc::driver::DriverError| format!("{x:?}");
    let (host, requests) = bench_inputs(r, v, 7 + r as u64, mode);
    let host = HostLogits::new(host, dt);
    let plan = build_plan(v, if n == 0 { v } else { n }, u32::MAX, host.plan_logits(), &requests)
        .map_err(|x| x.to_string())?
        .0;
    let st = cuda.stream().clone();
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let mut flush = st.alloc_zeros::<u8>(256 << 20).map_err(d)?;
    cuda.prepare_step(&plan).map_err(e)?;
    // Force top-k off: the prefix path's width (StepPlan::prefix_width), else N.
    let (width, prefix) = cuda.width(&plan);
    let chunks = cuda.chunks_for(v, width, plan.rows);
    // Warm-up, then the check against the CPU.
    for _ in 0..3 {
        cuda.launch_step(&plan).map_err(e)?;
    }
    let checked = if check {
        let g = cuda.collect_step(&plan).map_err(e)?;
        let c = CpuBackend::full_row().run(&plan).map_err(e)?;
        Some(bits_eq(&g, &c))
    } else {
        None
    };
    // The floor: one device-to-device copy of the logits (in their element type).
    let bytes = r as usize * v as usize * dt.bytes();
    // f32: the step's own logits buffer; half precision: a buffer of as many bytes.
    let (src, mut dst) = if dt == Dt::F32 {
        (None, st.alloc_zeros::<u8>(1).map_err(d)?)
    } else {
        (Some(st.alloc_zeros::<u8>(bytes).map_err(d)?), st.alloc_zeros::<u8>(bytes).map_err(d)?)
    };
    let mut dst32 = if dt == Dt::F32 { Some(st.alloc_zeros::<f32>(r as usize * v as usize).map_err(d)?) } else { None };
    let mut copy = Vec::new();
    for i in 0..reps + 3 {
        st.memset_zeros(&mut flush).map_err(d)?;
        let a = st.record_event(flags).map_err(d)?;
        match (&src, &mut dst32) {
            (Some(s), _) => st.memcpy_dtod(s, &mut dst).map_err(d)?,
            (None, Some(d32)) => {
                st.memcpy_dtod(&cuda.logits_buffer().slice(0..r as usize * v as usize), d32).map_err(d)?
            }
            (None, None) => unreachable!("one of the two is allocated"),
        }
        let b = st.record_event(flags).map_err(d)?;
        b.synchronize().map_err(d)?;
        if i >= 3 {
            copy.push(a.elapsed_ms(&b).map_err(d)? as f64 * 1e3);
        }
    }
    drop((src, dst, dst32));
    // Eager step.
    let mut eager = Vec::new();
    for _ in 0..reps {
        st.memset_zeros(&mut flush).map_err(d)?;
        let a = st.record_event(flags).map_err(d)?;
        cuda.launch_step(&plan).map_err(e)?;
        let b = st.record_event(flags).map_err(d)?;
        b.synchronize().map_err(d)?;
        eager.push(a.elapsed_ms(&b).map_err(d)? as f64 * 1e3);
    }
    // Per kernel.
    let mut per: Vec<(&'static str, Vec<f64>)> = Vec::new();
    for _ in 0..reps.min(30) {
        st.memset_zeros(&mut flush).map_err(d)?;
        let t = cuda.launch_step_timed(&plan).map_err(e)?;
        for (i, (name, ms)) in t.into_iter().enumerate() {
            if per.len() <= i {
                per.push((name, Vec::new()));
            }
            per[i].1.push(ms as f64 * 1e3);
        }
    }
    // Graph replay.
    let graph = cuda.capture_step(&plan).map_err(e)?;
    let mut gt = Vec::new();
    for i in 0..reps + 3 {
        st.memset_zeros(&mut flush).map_err(d)?;
        let a = st.record_event(flags).map_err(d)?;
        graph.launch().map_err(d)?;
        let b = st.record_event(flags).map_err(d)?;
        b.synchronize().map_err(d)?;
        if i >= 3 {
            gt.push(a.elapsed_ms(&b).map_err(d)? as f64 * 1e3);
        }
    }
    // The graph's results too must equal the CPU's.
    let graph_checked = if check {
        let g = cuda.collect_step(&plan).map_err(e)?;
        let c = CpuBackend::full_row().run(&plan).map_err(e)?;
        Some(bits_eq(&g, &c))
    } else {
        None
    };
    drop(graph);
    let copy_us = median(&mut copy);
    let bytes = bytes as f64;
    let kernels: serde_json::Map<String, Value> =
        per.iter_mut().map(|(k, t)| (k.to_string(), json!(median(t)))).collect();
    let graph_us = median(&mut gt);
    Ok(json!({
        "rows": r, "n": n, "vocab": v, "logprobs_mode": mode.as_str(), "dtype": dt.name(), "bytes_per_logit": dt.bytes(), "chunks": chunks, "width": width, "prefix_path": prefix,
        "copy_us": copy_us, "copy_gbs": 2.0 * bytes / (copy_us * 1e-6) / 1e9,
        "floor_us": copy_us / 2.0, "floor_43_us": bytes / 4.3e12 * 1e6,
        "eager_us": median(&mut eager), "graph_us": graph_us,
        "graph_read_gbs": bytes / (graph_us * 1e-6) / 1e9,
        "kernels_us": kernels,
        // Launches of the step (= kernel nodes of its graph) and whether the top-N counted (SAMPLER_COUNTS_IN_TOPN).
        "nodes": per.len(), "counts_in_topn": cuda.counts_in_topn(),
        // Which top-N ran: "cluster" (topn_cluster*, SAMPLER_CLUSTER), "stream" (force_topn_stream,
        // SAMPLER_STREAM_SELECT=1), "chunked" (topn_chunk + topn_merge) or "one block".
        "select": if per.iter().any(|(k, _)| k.starts_with("topn_cluster")) { "cluster" } else if per.iter().any(|(k, _)| k.starts_with("force_topn_stream")) { "stream" } else if per.iter().any(|(k, _)| k.starts_with("topn_merge")) { "chunked" } else { "one block" },
        "stream_select": cuda.stream_select(),
        "check_cpu_bitwise": checked, "graph_check_cpu_bitwise": graph_checked,
    }))
}

fn run(args: &[String]) -> ExitCode {
    let v: u32 = arg(args, "--v").map(|s| s.parse().unwrap()).unwrap_or(129_280);
    let rows = list(&arg(args, "--rows").unwrap_or("1,16,64,256,384".into()));
    let ns = list(&arg(args, "--n").unwrap_or("1024,4096,0".into()));
    let reps: usize = arg(args, "--reps").map(|s| s.parse().unwrap()).unwrap_or(50);
    let check_rows: u32 = arg(args, "--check-rows").map(|s| s.parse().unwrap()).unwrap_or(16);
    let mode: LogprobsMode =
        arg(args, "--logprobs-mode").map(|s| s.parse().expect("--logprobs-mode processed|raw")).unwrap_or_default();
    let dt = match arg(args, "--dtype").map(|s| Dt::parse(&s).ok_or(s)) {
        None => Dt::F32,
        Some(Ok(d)) => d,
        Some(Err(s)) => {
            eprintln!("error: --dtype must be f32, bf16 or f16, got `{s}`");
            return ExitCode::from(2);
        }
    };
    let mut cuda = match CudaBackend::new() {
        Ok(b) => b,
        Err(e) => {
            println!("SKIPPED: no CUDA backend: {e}");
            return ExitCode::from(77);
        }
    };
    if let Some(c) = arg(args, "--chunks") {
        cuda.set_chunks_override(Some(c.parse().expect("--chunks C")));
    }
    println!(
        "device: {}; tuning: {}; chunks override: {:?}; cluster top-N up to {} CTAs (clusters of 2..16 CTAs at once: {:?}); PDL {}; logprobs: {}; logits: {} ({} bytes each)",
        cuda.device_name(),
        cuda.tuning().source,
        arg(args, "--chunks"),
        cuda.cluster_max(),
        &cuda.active_clusters()[2..],
        match cuda.pdl() {
            Some(true) => "on",
            Some(false) => "off",
            None => "auto",
        },
        mode.as_str(),
        dt.name(),
        dt.bytes()
    );
    // api_*: the same step through `Sampler` with device logits (issue 11): device span of the
    // call (upload + kernels) and its ratio to the backend-level figure (bounds: eager 1.25,
    // graph 1.10), host time of the call, and wall time with the outputs copied to the host.
    // api graph1 dev: the same with the logits and the gate on the sampler's own stream.
    println!("|    R |     N | chunks | copy us | floor us | eager us | graph us | x floor | api eager dev | x eager | api graph dev | x graph | api graph1 dev | api eager enq | api graph enq | api eager wall | api graph wall | check | kernels us");
    let mut out = Vec::new();
    let mut bad = 0;
    for &n in &ns {
        for &r in &rows {
            let timed = time_shape_mode(&mut cuda, r, v, n, reps, r <= check_rows, mode, dt).and_then(|mut j| {
                let api = time_api(r, v, n, reps, r <= check_rows, mode, dt)?;
                let o = j.as_object_mut().unwrap();
                o.extend(api.as_object().unwrap().clone());
                let ratio =
                    |a: &str, b: &str| json!(o[a].as_f64().unwrap_or(f64::NAN) / o[b].as_f64().unwrap_or(f64::NAN));
                let (re, rg) = (ratio("api_eager_device_us", "eager_us"), ratio("api_graph_device_us", "graph_us"));
                o.insert("api_eager_ratio".into(), re);
                o.insert("api_graph_ratio".into(), rg);
                Ok(j)
            });
            match timed {
                Ok(j) => {
                    let f = |k: &str| j[k].as_f64().unwrap_or(f64::NAN);
                    let mut ks: Vec<String> = vec![format!(
                        "{} nodes{}, select {}",
                        j["nodes"],
                        if j["counts_in_topn"] == true { " (counts in top-N)" } else { "" },
                        j["select"].as_str().unwrap_or("?")
                    )];
                    ks.extend(
                        j["kernels_us"]
                            .as_object()
                            .unwrap()
                            .iter()
                            .map(|(k, t)| format!("{k} {:.1}", t.as_f64().unwrap())),
                    );
                    let chk = match (
                        j["check_cpu_bitwise"].as_bool(),
                        j["graph_check_cpu_bitwise"].as_bool(),
                        j["api_check_cpu_bitwise"].as_bool(),
                    ) {
                        (Some(true), Some(true), Some(true)) => "bitwise ok",
                        (None, _, _) => "-",
                        _ => {
                            bad += 1;
                            "MISMATCH"
                        }
                    };
                    println!(
                        "| {r:>4} | {:>5} | {:>6} | {:>7.1} | {:>8.1} | {:>8.1} | {:>8.1} | {:>7.1} | {:>13.1} | {:>7.3} | {:>13.1} | {:>7.3} | {:>14.1} | {:>13.1} | {:>13.1} | {:>14.1} | {:>14.1} | {chk} | {}",
                        if n == 0 { "off".to_string() } else { n.to_string() },
                        j["chunks"],
                        f("copy_us"),
                        f("floor_us"),
                        f("eager_us"),
                        f("graph_us"),
                        f("graph_us") / f("floor_us"),
                        f("api_eager_device_us"),
                        f("api_eager_ratio"),
                        f("api_graph_device_us"),
                        f("api_graph_ratio"),
                        f("api_graph1_device_us"),
                        f("api_eager_enqueue_us"),
                        f("api_graph_enqueue_us"),
                        f("api_eager_wall_us"),
                        f("api_graph_wall_us"),
                        ks.join(", ")
                    );
                    out.push(j);
                }
                Err(e) => {
                    println!("R={r} N={n}: ERROR {e}");
                    bad += 1;
                }
            }
        }
    }
    let tuning = match arg(args, "--chunks") {
        Some(c) => format!("chunks forced to {c}"),
        None => cuda.tuning().source.clone(),
    };
    let doc = json!({"device": cuda.device_name(), "tuning": tuning, "dtype": dt.name(), "results": out});
    if let Some(p) = arg(args, "--json") {
        std::fs::write(&p, serde_json::to_string_pretty(&doc).unwrap()).expect("write json");
    }
    if let Some(p) = arg(args, "--csv") {
        let mut s = String::from("rows,n,vocab,chunks,copy_us,floor_us,eager_us,graph_us,kernels\n");
        for j in &out {
            let ks: Vec<String> = j["kernels_us"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, t)| format!("{k}={:.2}", t.as_f64().unwrap()))
                .collect();
            s += &format!(
                "{},{},{},{},{:.2},{:.2},{:.2},{:.2},{}\n",
                j["rows"],
                j["n"],
                j["vocab"],
                j["chunks"],
                j["copy_us"].as_f64().unwrap(),
                j["floor_us"].as_f64().unwrap(),
                j["eager_us"].as_f64().unwrap(),
                j["graph_us"].as_f64().unwrap(),
                ks.join(";")
            );
        }
        std::fs::write(&p, s).expect("write csv");
    }
    // Issue 11's bounds on the public API's device span, read off the ratio columns.
    let within = |k: &str, bound: f64| out.iter().filter(|j| j[k].as_f64().is_some_and(|x| x <= bound)).count();
    println!(
        "issue 11: api graph within 10% of the backend graph at {}/{} shapes, api eager within 25% of the backend eager at {}/{}",
        within("api_graph_ratio", 1.10),
        out.len(),
        within("api_eager_ratio", 1.25),
        out.len()
    );
    println!("benchmark: {} shapes, {bad} problems", out.len());
    if bad > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn load(p: &str) -> Value {
    // Python's json writes NaN / Infinity, which JSON has not: read them as null.
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p}: {e}"));
    let text = text.replace("-Infinity", "null").replace("Infinity", "null").replace("NaN", "null");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn find(doc: &Value, r: u32, n: u32) -> Option<&Value> {
    doc["results"]
        .as_array()?
        .iter()
        .find(|x| x["rows"].as_u64() == Some(r as u64) && x["n"].as_u64() == Some(n as u64))
}

/// The bf16 rows beside the f32 ones (`table --bf16`): floor at 2 bytes per logit.
fn bf16_section(ours: &Value, bf: &Value, fi: Option<&Value>) -> String {
    let mut md = String::from(
        "\nbf16 logits (issue 12 item 4; read in place by the kernels, widened at load): floor = one read at 2 bytes per logit.\n\n\
         | R | N | floor bf16 | ours bf16 graph | ours bf16 eager | api bf16 graph wall | ours f32 graph | bf16 / f32 | bf16 / floor | FlashInfer f32 (graph) | check |\n\
         |--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:--|\n",
    );
    for j in bf["results"].as_array().into_iter().flatten() {
        let (r, n) = (j["rows"].as_u64().unwrap_or(0) as u32, j["n"].as_u64().unwrap_or(0) as u32);
        let (fl, g) = (num(Some(j), "floor_us"), num(Some(j), "graph_us"));
        let g32 = num(find(ours, r, n), "graph_us");
        let chk = match (
            j["check_cpu_bitwise"].as_bool(),
            j["graph_check_cpu_bitwise"].as_bool(),
            j["api_check_cpu_bitwise"].as_bool(),
        ) {
            (Some(true), Some(true), Some(true)) => "bitwise ok",
            (None, _, _) => "-",
            _ => "MISMATCH",
        };
        md += &format!(
            "| {r} | {} | {fl:.1} | {g:.1} | {:.1} | {:.1} | {g32:.1} | {:.2} | {:.1} | {:.1} | {chk} |\n",
            if n == 0 { "off".into() } else { n.to_string() },
            num(Some(j), "eager_us"),
            num(Some(j), "api_graph_wall_us"),
            g / g32,
            g / fl,
            num(fi.and_then(|d| find(d, r, n)), "graph_us"),
        );
    }
    md
}

fn num(v: Option<&Value>, k: &str) -> f64 {
    v.and_then(|x| x[k].as_f64()).unwrap_or(f64::NAN)
}

/// The target table of issue 6 (rows in its order), from one run's files.
fn table(args: &[String]) -> ExitCode {
    let ours = load(&args[0]);
    // A peer's file may be missing (PEERS=0): its columns are NaN then.
    let fi = arg(args, "--fi").filter(|p| std::path::Path::new(p).exists()).map(|p| load(&p));
    let torch = arg(args, "--torch").filter(|p| std::path::Path::new(p).exists()).map(|p| load(&p));
    let targets: &[(u32, u32, f64)] = &[
        (1, 1024, 8.0),
        (16, 1024, 10.0),
        (64, 1024, 20.0),
        (256, 4096, 55.0),
        (384, 4096, 80.0),
        (64, 0, 60.0),
        (384, 0, 200.0),
    ];
    let mut md = String::new();
    md += &format!(
        "Device: {}; tuning: {}. Median us, L2 flushed, f32 logits on the device.\n\n",
        ours["device"].as_str().unwrap_or("?"),
        ours["tuning"].as_str().unwrap_or("?")
    );
    md += "| R | N | floor | ours graph | ours eager | torch peer | FlashInfer (graph) | target | ours/floor | ours/FI | met |\n|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:--|\n";
    for &(r, n, t) in targets {
        let o = find(&ours, r, n);
        let fl = num(o, "floor_us");
        let g = num(o, "graph_us");
        let tp = num(torch.as_ref().and_then(|d| find(d, r, n)), "peer_us");
        let fg = num(fi.as_ref().and_then(|d| find(d, r, n)), "graph_us");
        md += &format!(
            "| {r} | {} | {fl:.1} | {g:.1} | {:.1} | {tp:.1} | {fg:.1} | <= {t} | {:.1} | {:.2} | {} |\n",
            if n == 0 { "off".into() } else { n.to_string() },
            num(o, "eager_us"),
            g / fl,
            g / fg,
            if g <= t { "yes" } else { "no" }
        );
    }
    // Issue 11: the whole step through the public `Sampler` (device span, upload + kernels) against the backend level.
    md += "\nThrough the public API (issue 11; bounds: graph <= 1.10, eager <= 1.25 x the backend level):\n\n| R | N | graph | api graph | x | eager | api eager | x | api graph wall |\n|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
    for j in ours["results"].as_array().unwrap() {
        let n = j["n"].as_u64().unwrap_or(0);
        md += &format!(
            "| {} | {} | {:.1} | {:.1} | {:.3} | {:.1} | {:.1} | {:.3} | {:.1} |\n",
            j["rows"],
            if n == 0 { "off".into() } else { n.to_string() },
            num(Some(j), "graph_us"),
            num(Some(j), "api_graph_device_us"),
            num(Some(j), "api_graph_ratio"),
            num(Some(j), "eager_us"),
            num(Some(j), "api_eager_device_us"),
            num(Some(j), "api_eager_ratio"),
            num(Some(j), "api_graph_wall_us"),
        );
    }
    md += "\nEvery shape of the run (kernels: median us each, events between kernels):\n\n| R | N | chunks | floor | graph | eager | FI graph | torch | per kernel |\n|--:|--:|--:|--:|--:|--:|--:|--:|:--|\n";
    for j in ours["results"].as_array().unwrap() {
        let (r, n) = (j["rows"].as_u64().unwrap() as u32, j["n"].as_u64().unwrap() as u32);
        let ks: Vec<String> = j["kernels_us"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, t)| format!("{k} {:.1}", t.as_f64().unwrap()))
            .collect();
        md += &format!(
            "| {r} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |\n",
            if n == 0 { "off".into() } else { n.to_string() },
            j["chunks"],
            num(Some(j), "floor_us"),
            num(Some(j), "graph_us"),
            num(Some(j), "eager_us"),
            num(fi.as_ref().and_then(|d| find(d, r, n)), "graph_us"),
            num(torch.as_ref().and_then(|d| find(d, r, n)), "peer_us"),
            ks.join(", ")
        );
    }
    if let Some(bf) = arg(args, "--bf16").filter(|p| std::path::Path::new(p).exists()).map(|p| load(&p)) {
        md += &bf16_section(&ours, &bf, fi.as_ref());
    }
    print!("{md}");
    if let Some(p) = arg(args, "--md") {
        std::fs::write(p, &md).expect("write md");
    }
    ExitCode::SUCCESS
}

/// The chart: time vs R (log-log), one panel per N: ours (graph), floor,
/// FlashInfer (graph), torch peer. Writes SVG (text as SVG text: no fonts
/// needed at write time); `scripts/gpu/round.sh chart` turns it into PNG.
fn chart(args: &[String]) -> ExitCode {
    let ours = load(&args[0]);
    // A peer's file may be missing (PEERS=0): its columns are NaN then.
    let fi = arg(args, "--fi").filter(|p| std::path::Path::new(p).exists()).map(|p| load(&p));
    let torch = arg(args, "--torch").filter(|p| std::path::Path::new(p).exists()).map(|p| load(&p));
    let out = args.last().expect("OUT.svg").clone();
    let res = ours["results"].as_array().unwrap();
    let mut ns: Vec<u32> = res.iter().map(|j| j["n"].as_u64().unwrap() as u32).collect();
    ns.sort_by_key(|&n| if n == 0 { u32::MAX } else { n });
    ns.dedup();
    let mut rows: Vec<u32> = res.iter().map(|j| j["rows"].as_u64().unwrap() as u32).collect();
    rows.sort();
    rows.dedup();
    let (pw, ph, top, left) = (360.0f64, 300.0f64, 60.0f64, 60.0f64);
    let w = left + ns.len() as f64 * (pw + 20.0) + 10.0;
    let h = top + ph + 70.0;
    let (ylo, yhi) = (1.0f64.log10(), 30000.0f64.log10());
    let (xlo, xhi) = ((rows[0].max(1) as f64).log10() - 0.1, (*rows.last().unwrap() as f64).log10() + 0.1);
    let mut svg = format!("<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n");
    svg += &format!("<text x='{left}' y='22' font-size='15'>Sampler step on {} (V = 129280): median us vs rows R, log-log; L2 flushed, logits on the device</text>\n", ours["device"].as_str().unwrap_or("?"));
    let series: [(&str, &str); 4] = [
        ("ours (CUDA graph)", "#1f77b4"),
        ("floor (one read)", "#7f7f7f"),
        ("FlashInfer joint (graph)", "#ff7f0e"),
        ("torch peer", "#d62728"),
    ];
    for (i, (name, col)) in series.iter().enumerate() {
        let x = left + i as f64 * 200.0;
        svg += &format!("<line x1='{x}' y1='40' x2='{}' y2='40' stroke='{col}' stroke-width='3'/><text x='{}' y='44'>{name}</text>\n", x + 24.0, x + 30.0);
    }
    for (pi, &n) in ns.iter().enumerate() {
        let x0 = left + pi as f64 * (pw + 20.0);
        let px = |r: f64| x0 + (r.log10() - xlo) / (xhi - xlo) * pw;
        let py = |t: f64| top + ph - (t.max(1.0).log10() - ylo) / (yhi - ylo) * ph;
        svg += &format!("<rect x='{x0}' y='{top}' width='{pw}' height='{ph}' fill='none' stroke='black'/>\n");
        svg += &format!(
            "<text x='{}' y='{}' font-size='13'>N = {}</text>\n",
            x0 + 8.0,
            top + 16.0,
            if n == 0 { "off".to_string() } else { n.to_string() }
        );
        for t in [1.0, 10.0, 100.0, 1000.0, 10000.0] {
            let y = py(t);
            svg += &format!("<line x1='{x0}' y1='{y}' x2='{}' y2='{y}' stroke='#ddd'/><text x='{}' y='{}' text-anchor='end' font-size='10'>{t}</text>\n", x0 + pw, x0 - 3.0, y + 4.0);
        }
        for &r in &rows {
            svg += &format!(
                "<text x='{}' y='{}' text-anchor='middle' font-size='10'>{r}</text>\n",
                px(r as f64),
                top + ph + 14.0
            );
        }
        let pts = |f: &dyn Fn(u32) -> f64| -> String {
            rows.iter()
                .filter_map(|&r| {
                    let t = f(r);
                    if t.is_finite() {
                        Some(format!("{:.1},{:.1}", px(r as f64), py(t)))
                    } else {
                        None
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let lines: [Box<dyn Fn(u32) -> f64>; 4] = [
            Box::new(|r| num(find(&ours, r, n), "graph_us")),
            Box::new(|r| num(find(&ours, r, n), "floor_us")),
            Box::new(|r| num(fi.as_ref().and_then(|d| find(d, r, n)), "graph_us")),
            Box::new(|r| num(torch.as_ref().and_then(|d| find(d, r, n)), "peer_us")),
        ];
        for (f, (_, col)) in lines.iter().zip(series.iter()) {
            svg += &format!("<polyline points='{}' fill='none' stroke='{col}' stroke-width='2'/>\n", pts(f.as_ref()));
        }
    }
    svg += &format!("<text x='{}' y='{}' text-anchor='middle'>rows R</text>\n", w / 2.0, top + ph + 34.0);
    svg += "</svg>\n";
    std::fs::write(&out, svg).expect("write svg");
    println!("wrote {out}");
    ExitCode::SUCCESS
}

/// `[rows, v]` logits ~ 3 x N(0, 1) (Box-Muller), the numpy peer's distribution.
fn normal_logits(rows: usize, v: usize, seed: u64) -> Vec<f32> {
    let mut g = Rng(seed);
    (0..rows * v)
        .map(|_| {
            let u1 = (g.unit() as f64 + 0.5 / (1u64 << 24) as f64).min(1.0);
            let u2 = g.unit() as f64;
            (3.0 * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
        })
        .collect()
}

/// The peer's sampling parameters (T 0.7, top-p 0.9, top-k 50; with
/// `unfiltered`, top-p 1 and top-k off: every token kept) with `k` top logprobs.
fn peer_params(seed: u64, k: u32, unfiltered: bool) -> SamplingParams {
    SamplingParams {
        temperature: 0.7,
        top_p: if unfiltered { 1.0 } else { 0.9 },
        top_k: if unfiltered { -1 } else { 50 },
        top_logprobs: k,
        seq_seed: Some(seed),
        ..Default::default()
    }
}

/// A verify-like step of R = 16 (decode requests with seqlen_q 6, 6, 4, as
/// `examples/sample.rs`): the drafts and their distributions come from an
/// untimed draft step on the target logits plus noise.
fn verify_requests(sampler: &mut Sampler, target: &[f32], v: usize, k: u32, unfiltered: bool) -> Res<Vec<Request>> {
    let qs = [6u64, 6, 4];
    let mut aligned = Vec::new();
    let mut first = 0;
    for &q in &qs {
        aligned.extend_from_slice(&target[first * v..(first + q as usize - 1) * v]);
        first += q as usize;
    }
    let noise = normal_logits(1, aligned.len(), 99);
    let draft: Vec<f32> = aligned.iter().zip(noise).map(|(t, z)| t + 0.5 * z / 3.0).collect();
    let dreqs: Vec<Request> = qs
        .iter()
        .enumerate()
        .map(|(i, &q)| Request {
            params: peer_params(1 + i as u64, 64, unfiltered),
            kind: RequestKind::Draft { seqlen_k: 100 + q, seqlen_q: q, last_valid_offset: 0, rows: q as u32 - 1 },
            golden: vec![],
            masks: None,
        })
        .collect();
    let dout = sampler.sample(&draft, &dreqs).map_err(|e| e.to_string())?;
    let mut row = 0;
    let mut out = Vec::new();
    for (i, &q) in qs.iter().enumerate() {
        let dists = (0..q as usize - 1)
            .map(|j| {
                let t = &dout.rows[row + j].top_logprobs;
                DraftDist { ids: t.iter().map(|x| x.0).collect(), logprobs: t.iter().map(|x| x.1).collect() }
            })
            .collect();
        row += q as usize - 1;
        let params = peer_params(1 + i as u64, k, unfiltered);
        out.push(Request::decode(params, 100 + q, q, dout.requests[i].emitted.clone(), dists));
    }
    Ok(out)
}

/// CPU time of the calling thread, ns: `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`
/// (Linux; std links the C library). Exact, unlike `/proc/thread-self/schedstat`,
/// which a running thread advances only at scheduler ticks (4 ms on the CI-class
/// machine: a 16-row step of about 4 ms read as 0, 4 or 8 ms).
#[cfg(target_os = "linux")]
fn thread_cpu_ns() -> Option<u64> {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: a valid pointer to a timespec (64-bit time_t on the 64-bit Linux targets we build).
    let ok = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    ok.then(|| ts.sec as u64 * 1_000_000_000 + ts.nsec as u64)
}
#[cfg(not(target_os = "linux"))]
fn thread_cpu_ns() -> Option<u64> {
    None
}

/// Median ms of `reps` calls of `f` after one warm-up call: CPU time of this
/// thread (`cpu`: with a one-thread pool, the thread that runs every
/// program) or wall time.
fn time_ms(reps: usize, cpu: bool, mut f: impl FnMut() -> Res<()>) -> Res<f64> {
    f()?;
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps {
        let (c0, t0) = (thread_cpu_ns(), std::time::Instant::now());
        f()?;
        let wall = t0.elapsed().as_secs_f64() * 1e3;
        t.push(match (cpu, c0, thread_cpu_ns()) {
            (true, Some(a), Some(b)) => (b - a) as f64 * 1e-6,
            (true, _, _) => return Err("no thread CPU clock (clock_gettime); use --clock wall".into()),
            _ => wall,
        });
    }
    Ok(median(&mut t))
}

/// Runs the numpy peer on one core; its per-shape records, or why not.
fn run_peer(
    args: &[String],
    v: u32,
    ns: &[u32],
    rows: u32,
    reps: usize,
    cpu: bool,
    unfiltered: bool,
) -> Res<Vec<Value>> {
    let default = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/peers/numpy_sampler.py");
    let peer = arg(args, "--peer").unwrap_or(default.into());
    let python = arg(args, "--python").unwrap_or("python3".into());
    let json = std::env::temp_dir().join(format!("numpy-peer-{}.json", std::process::id()));
    let nl: Vec<String> = ns.iter().map(|n| n.to_string()).collect();
    // --clock cpu: the peer's own timer (time.perf_counter) reads process CPU time instead.
    // --filters off: its `step` samples with top-p 1 and top-k off (the file is not changed).
    let wrap = "import importlib.util, sys, time\n\
        if sys.argv[1] == 'cpu': time.perf_counter = time.process_time\n\
        off = sys.argv[2] == 'off'\n\
        sys.argv = sys.argv[3:]\n\
        spec = importlib.util.spec_from_file_location('numpy_peer', sys.argv[0])\n\
        m = importlib.util.module_from_spec(spec)\n\
        spec.loader.exec_module(m)\n\
        if off: m.step = lambda x, n, seed=1, position=41: [m.sample_row(x[r], n, 0.7, 1.0, -1, m.uniform(seed + r, 3 * position)) for r in range(x.shape[0])]\n\
        m.main()";
    let st = std::process::Command::new(&python)
        .args(["-c", wrap, if cpu { "cpu" } else { "wall" }, if unfiltered { "off" } else { "on" }])
        .arg(&peer)
        .args([
            "--vocab",
            &v.to_string(),
            "--rows",
            &rows.to_string(),
            "--n",
            &nl.join(","),
            "--reps",
            &reps.to_string(),
            "--json",
        ])
        .arg(&json)
        // One core: numpy's own kernels are serial, and these keep any BLAS pool to one thread.
        .envs([("OMP_NUM_THREADS", "1"), ("OPENBLAS_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("{python} {peer}: {e}"))?;
    if !st.success() {
        return Err(format!("{python} {peer} exited with {st} (needs numpy: pip install numpy)"));
    }
    let doc = load(json.to_str().unwrap_or_default());
    let _ = std::fs::remove_file(&json);
    doc.as_array().cloned().ok_or_else(|| "peer JSON is not a list".into())
}

/// `benchmark cpu`: the CPU backend beside the numpy peer, per row per core.
fn cpu(args: &[String]) -> ExitCode {
    let v: u32 = arg(args, "--v").map(|s| s.parse().expect("--v V")).unwrap_or(129_280);
    let ns = list(&arg(args, "--n").unwrap_or("1024,4096,0".into()));
    let reps: usize = arg(args, "--reps").map(|s| s.parse().expect("--reps K")).unwrap_or(7);
    let threads: usize = arg(args, "--threads").map(|s| s.parse().expect("--threads T")).unwrap_or(1);
    let cpu = match arg(args, "--clock").as_deref() {
        None | Some("cpu") => true,
        Some("wall") => false,
        Some(x) => {
            eprintln!("--clock {x}: expected cpu or wall");
            return ExitCode::from(2);
        }
    };
    if cpu && threads != 1 {
        eprintln!("--clock cpu times one thread: use --threads 1 (or --clock wall)");
        return ExitCode::from(2);
    }
    let unfiltered = match arg(args, "--filters").as_deref() {
        None | Some("on") => false,
        Some("off") => true,
        Some(x) => {
            eprintln!("--filters {x}: expected on or off");
            return ExitCode::from(2);
        }
    };
    let rows = 16u32;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a rayon pool");
    let target = normal_logits(rows as usize, v as usize, 7);
    let ours: Vec<Res<(f64, f64)>> = ns
        .iter()
        .map(|&n| {
            pool.install(|| {
                let cfg = SamplerConfig { vocab_size: v, force_topk: n, nextn: 5, backend: BackendKind::Cpu };
                let mut s = Sampler::new(cfg).map_err(|e| e.to_string())?;
                let vreqs = verify_requests(&mut s, &target, v as usize, 5, unfiltered)?;
                let verify = time_ms(reps, cpu, || s.sample(&target, &vreqs).map(drop).map_err(|e| e.to_string()))?;
                let preqs: Vec<Request> =
                    (0..rows as u64).map(|i| Request::prefill(peer_params(1 + i, 5, unfiltered), 41)).collect();
                let prefill = time_ms(reps, cpu, || s.sample(&target, &preqs).map(drop).map_err(|e| e.to_string()))?;
                Ok((verify, prefill))
            })
        })
        .collect();
    // Launches per step (one program per row each): the verify and prefill steps' launch lists.
    let launches: Vec<Res<(usize, usize)>> = ns
        .iter()
        .map(|&n| {
            let cfg = SamplerConfig { vocab_size: v, force_topk: n, nextn: 5, backend: BackendKind::Cpu };
            let mut s = Sampler::new(cfg).map_err(|e| e.to_string())?;
            let vreqs = verify_requests(&mut s, &target, v as usize, 5, unfiltered)?;
            let preqs: Vec<Request> =
                (0..rows as u64).map(|i| Request::prefill(peer_params(1 + i, 5, unfiltered), 41)).collect();
            let count = |reqs: &[Request]| -> Res<usize> {
                let width = if n == 0 { v } else { n };
                let (p, _) =
                    sampler_host::layout::build_plan(v, width, 5, &target[..], reqs).map_err(|e| e.to_string())?;
                let dev = sampler_host::runtime::device::cpu::CpuDevice::default();
                let prog = sampler_host::runtime::pipeline::build_for(
                    &dev,
                    &p,
                    sampler_host::runtime::pipeline::PrefixPolicy::Eager.width(&p),
                )
                .map_err(|e| e.to_string())?;
                Ok(prog.launches.len())
            };
            Ok((count(&vreqs)?, count(&preqs)?))
        })
        .collect();
    let peer = run_peer(args, v, &ns, rows, reps, cpu, unfiltered);
    let per_row = |ms: f64| ms * threads as f64 / rows as f64;
    let filters = if unfiltered { "top-p 1, top-k off" } else { "top-p 0.9, top-k 50" };
    println!("CPU backend vs numpy peer: V = {v}, R = {rows}, T 0.7, {filters}, top-5 logprobs; ms per row per core");
    println!(
        "clock: {}; ours: {threads} rayon thread(s), median of {reps}; peer: {}",
        if cpu { "CPU time" } else { "wall" },
        match &peer {
            Ok(_) => "numpy_sampler.py, one core".to_string(),
            Err(e) => format!("unavailable ({e})"),
        }
    );
    println!();
    println!("| N | ours verify R=16 | ours prefill R=16 | numpy peer | peer / ours verify | peer / ours prefill | launches verify / prefill |");
    println!("|--:|--:|--:|--:|--:|--:|--:|");
    let mut out = Vec::new();
    let mut bad = 0;
    for ((&n, o), l) in ns.iter().zip(&ours).zip(&launches) {
        let p = peer
            .as_ref()
            .ok()
            .and_then(|d| d.iter().find(|x| x["n"].as_u64() == Some(n as u64)))
            .map_or(f64::NAN, |x| num(Some(x), "row_ms"));
        let nn = if n == 0 { "off".to_string() } else { n.to_string() };
        let (lv, lp) = match l {
            Ok((a, b)) => (a.to_string(), b.to_string()),
            Err(e) => (format!("? ({e})"), "?".to_string()),
        };
        match o {
            Ok((vf, pf)) => {
                let (vr, pr) = (per_row(*vf), per_row(*pf));
                println!("| {nn} | {vr:.3} | {pr:.3} | {p:.3} | {:.2} | {:.2} | {lv} / {lp} |", p / vr, p / pr);
                out.push(json!({"n": n, "vocab": v, "rows": rows, "threads": threads, "clock": if cpu { "cpu" } else { "wall" }, "verify_row_ms": vr, "prefill_row_ms": pr, "peer_row_ms": p, "launches_verify": lv, "launches_prefill": lp}));
            }
            Err(e) => {
                println!("| {nn} | ERROR {e} | | {p:.3} | | |");
                bad += 1;
            }
        }
    }
    if let Some(f) = arg(args, "--json") {
        std::fs::write(&f, serde_json::to_string_pretty(&out).unwrap()).expect("write json");
    }
    if bad > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("cpu") => cpu(&args[1..]),
        Some("table") if args.len() > 1 => table(&args[1..]),
        Some("chart") if args.len() > 2 => chart(&args[1..]),
        _ => {
            eprintln!("usage: benchmark run [--rows ..] [--n ..] [--reps ..] [--dtype f32|bf16|f16] [--json F] [--csv F] | cpu [--n ..] [--reps ..] [--threads T] [--json F] | table OURS.json [--fi F] [--torch F] [--bf16 F] [--md F]");
            ExitCode::from(2)
        }
    }
}
