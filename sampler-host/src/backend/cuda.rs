//! The CUDA backend: the kernels' PTX entry points (committed PTX, built
//! from the same DSL source by rustc's nvptx64 target: `examples/regenerate.rs`),
//! launched through `cudarc` (driver API, loaded at run time: no CUDA at
//! build time), in the kernel sequence of [`crate::plan`].
//!
//! - One context and one module load per process (shared by every backend);
//!   each backend has its own stream and device buffers, kept across steps
//!   and grown when a step needs more.
//! - Variant choice depends on V and N only (never on R), so a row's results
//!   do not depend on the batch (SAMPLER.md section 9).
//! - Within a step nothing synchronises the host until the outputs are read
//!   back at the end.
//! - No driver: [`CudaBackend::new`] returns a typed
//!   [`ConfigError::BackendUnavailable`]; nothing panics.

pub use cudarc;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits};
use sampler_kernels::kernels as k;
use sampler_kernels::spec::{gpu_stage_bytes, Variant, GPU_SMEM_BASE};

use crate::error::{BackendError, ConfigError};
use crate::plan::{mass_chunks, raw_tiles, Backend, StepPlan, StepResult, MASS_CHUNK};

/// Committed tuning tables, `(file name, JSON)`: the one whose `"device"`
/// equals the device's name is used (`examples/autotune.rs` writes them;
/// `SAMPLER_CUDA_TUNING=path` overrides). Unknown devices: [`default_chunks`].
pub const TUNING_TABLES: &[(&str, &str)] = &[("nvidia-h200.json", include_str!("../../tuning/nvidia-h200.json"))];

/// Logits per block of the multi-block mask/bad-value check (a multiple of
/// its tile, 4096, so mask words stay aligned).
pub const MASK_CHUNK: u32 = 16384;

/// Widest N of the fused kernels (`process_draw`, `process_prefix_draw`,
/// `token_info_top`: register tiles only); wider steps run them unfused.
pub const FUSED_MAX: u32 = 16384;

/// Blocks per row of the mask/bad-value check (by V only).
pub fn mask_chunks(v: u32) -> u32 {
    v.div_ceil(MASK_CHUNK).max(1)
}

/// Candidate chunk counts of the multi-block top-N (what autotune sweeps).
pub const CHUNK_CANDIDATES: &[u32] = &[1, 2, 4, 8, 16, 32, 64, 128];

/// Whether `chunks` blocks per row are valid for V = `v`, N = `n`: every
/// chunk (`ceil(v / chunks)` logits, the last one shorter) holds at least N.
pub fn chunks_valid(v: u32, n: u32, chunks: u32) -> bool {
    if chunks <= 1 {
        return true;
    }
    if n > 16384 || n == 0 {
        return false;
    }
    let len = v.div_ceil(chunks);
    let last = v as i64 - (chunks as i64 - 1) * len as i64;
    last >= n as i64
}

/// The chunk count without a tuning entry: the most chunks whose candidates
/// (chunks x N) still fit one 16384-key tile of the merge.
pub fn default_chunks(v: u32, n: u32) -> u32 {
    CHUNK_CANDIDATES.iter().copied().filter(|&c| c * n.max(1) <= 16384 && chunks_valid(v, n, c)).max().unwrap_or(1)
}

/// The tuning table of one device: chunk counts by (V, N).
#[derive(Debug, Clone, Default)]
pub struct Tuning {
    /// Where it came from (file name, or "defaults").
    pub source: String,
    entries: Vec<(u32, u32, u32)>,
}

impl Tuning {
    /// Parses a table (`{"device": .., "entries": [{"v":.., "n":.., "chunks":..}, ..]}`).
    pub fn parse(source: &str, text: &str) -> Option<(String, Tuning)> {
        let j: serde_json::Value = serde_json::from_str(text).ok()?;
        let dev = j.get("device")?.as_str()?.to_string();
        let mut entries = Vec::new();
        for e in j.get("entries")?.as_array()? {
            let g = |k: &str| e.get(k).and_then(|x| x.as_u64()).map(|x| x as u32);
            if let (Some(v), Some(n), Some(c)) = (g("v"), g("n"), g("chunks")) {
                entries.push((v, n, c));
            }
        }
        Some((dev, Tuning { source: source.to_string(), entries }))
    }

    /// The table for `device`: `SAMPLER_CUDA_TUNING`, else a committed one, else defaults.
    pub fn for_device(device: &str) -> Tuning {
        if let Ok(path) = std::env::var("SAMPLER_CUDA_TUNING") {
            if let Some((_, t)) = std::fs::read_to_string(&path).ok().and_then(|s| Tuning::parse(&path, &s)) {
                return t;
            }
        }
        for (name, text) in TUNING_TABLES {
            if let Some((dev, t)) = Tuning::parse(name, text) {
                if dev == device {
                    return t;
                }
            }
        }
        Tuning { source: "defaults".into(), entries: Vec::new() }
    }

    /// Chunks for (V, N): the table's entry when valid, else [`default_chunks`]. Never depends on R.
    pub fn chunks(&self, v: u32, n: u32) -> u32 {
        match self.entries.iter().find(|e| e.0 == v && e.1 == n) {
            Some(&(_, _, c)) if chunks_valid(v, n, c) => c,
            _ => default_chunks(v, n),
        }
    }
}

/// The committed PTX of every kernel (`cargo run --example regenerate`).
pub const PTX: &str = include_str!("../../ptx/sampler_kernels.ptx");

/// Whether a CUDA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

struct Shared {
    ctx: Arc<CudaContext>,
    module: Arc<CudaModule>,
    device: String,
}

static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();

fn shared() -> Result<&'static Shared, ConfigError> {
    let unavailable = |m: String| ConfigError::BackendUnavailable("cuda", m);
    if !driver_present() {
        return Err(unavailable("no CUDA driver library (libcuda) found".into()));
    }
    let r = SHARED.get_or_init(|| {
        let made = std::panic::catch_unwind(|| -> Result<Shared, String> {
            let ctx = CudaContext::new(0).map_err(|e| format!("no usable CUDA device: {e:?}"))?;
            // One stream per backend, no multi-stream sharing of buffers: no event tracking needed.
            // SAFETY: called before any buffer exists.
            unsafe { ctx.disable_event_tracking() };
            let module = ctx.load_module(cudarc::nvrtc::Ptx::from_src(PTX)).map_err(|e| format!("loading the embedded PTX failed: {e:?}"))?;
            let device = ctx.name().unwrap_or_else(|_| "CUDA device".into());
            Ok(Shared { ctx, module, device })
        });
        match made {
            Ok(r) => r,
            Err(_) => Err("the CUDA driver panicked during initialisation".into()),
        }
    });
    r.as_ref().map_err(|m| unavailable(m.clone()))
}

/// A device buffer that grows (never shrinks) to the sizes steps need.
struct DBuf<T> {
    s: CudaSlice<T>,
}

impl<T: DeviceRepr + ValidAsZeroBits> DBuf<T> {
    fn new(stream: &Arc<CudaStream>) -> Result<Self, BackendError> {
        Ok(DBuf { s: stream.alloc_zeros::<T>(1).map_err(dev)? })
    }
    /// Makes room for `len` elements (contents undefined after growing).
    fn ensure(&mut self, stream: &Arc<CudaStream>, len: usize) -> Result<(), BackendError> {
        if self.s.len() < len.max(1) {
            let want = len.max(1).max(self.s.len() + self.s.len() / 2);
            self.s = stream.alloc_zeros::<T>(want).map_err(dev)?;
        }
        Ok(())
    }
    /// Uploads `h` to the start of the buffer (growing it first).
    fn upload(&mut self, stream: &Arc<CudaStream>, h: &[T]) -> Result<(), BackendError> {
        self.ensure(stream, h.len())?;
        if !h.is_empty() {
            stream.memcpy_htod(h, &mut self.s).map_err(dev)?;
        }
        Ok(())
    }
    /// Downloads the first `len` elements.
    fn download(&self, stream: &Arc<CudaStream>, len: usize) -> Result<Vec<T>, BackendError>
    where
        T: Default + Clone,
    {
        let mut out = vec![T::default(); len];
        if len > 0 {
            stream.memcpy_dtoh(&self.s.slice(0..len), &mut out).map_err(dev)?;
        }
        Ok(out)
    }
}

fn dev(e: impl std::fmt::Debug) -> BackendError {
    BackendError::Device { backend: "cuda", msg: format!("{e:?}") }
}

macro_rules! bufs {
    ($($name:ident: $t:ty),* $(,)?) => {
        struct Bufs { $($name: DBuf<$t>,)* }
        impl Bufs {
            fn new(stream: &Arc<CudaStream>) -> Result<Self, BackendError> {
                Ok(Bufs { $($name: DBuf::new(stream)?,)* })
            }
        }
    };
}

bufs! {
    logits: f32, masks: u32, has_mask: u32, row_status: i32,
    cand: f32, cand_ids: i32, logprobs: f32,
    temperature: f32, top_p: f32, top_k: i32, min_p: f32, filter_order: u32, raw: u32, raw_max: f32, raw_sum: u64,
    seed: u64, seq_draw: u64, seq_accept: u64, seq_residual: u64,
    fresh: i32, golden: i32, drafts: i32,
    draft_ids: i32, draft_lps: f32, col_of: i32, q_lps: f32, draft_col: i32, draft_q: f32,
    accept: u32, residual: i32,
    group_first: u32, group_rows: u32, group_kind: u32, group_status_in: i32,
    tokens: i32, lookup: i32, accepted: u32, group_status: i32,
    token_lp: f32, sum_smaller: f32, top_ids: i32, top_lps: f32,
    chunk_cand: f32, chunk_ids: i32, chunk_bad: u32, chunk_finite: u32,
    mass: u64, overflow: u32,
    tree_parent: i32, tree_token: i32, tree_mode: u32, path: i32,
}

/// Runs every kernel on the first CUDA device.
pub struct CudaBackend {
    stream: Arc<CudaStream>,
    /// Side stream for grammar-mask uploads; the sampling stream waits on its event.
    mask_stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
    funcs: HashMap<&'static str, CudaFunction>,
    b: Bufs,
    device: String,
    timing: bool,
    last_kernel_ms: Option<f32>,
    tuning: Tuning,
    chunks_override: Option<u32>,
    full_row: bool,
}

// SAFETY: the backend is used by one thread at a time (`&mut self`); cudarc's
// handles are Send, and the context is bound to the calling thread per call.
unsafe impl Send for CudaBackend {}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend").field("device", &self.device).finish()
    }
}

/// The variant of `kernel` for `n` elements per row (by V and N only).
fn pick(kernel: &'static str, variants: &'static [Variant], n: u32) -> Result<&'static Variant, BackendError> {
    Variant::pick(variants, n)
        .ok_or_else(|| BackendError::Device { backend: "cuda", msg: format!("kernel `{kernel}` has no tile variant for {n} elements per row") })
}

impl CudaBackend {
    /// The CUDA backend on device 0, or [`ConfigError::BackendUnavailable`]
    /// when there is no driver, no device, or the PTX does not load.
    pub fn new() -> Result<CudaBackend, ConfigError> {
        let sh = shared()?;
        let unavailable = |e: BackendError| ConfigError::BackendUnavailable("cuda", e.to_string());
        let stream = sh.ctx.new_stream().map_err(|e| unavailable(dev(e)))?;
        let mask_stream = sh.ctx.new_stream().map_err(|e| unavailable(dev(e)))?;
        let b = Bufs::new(&stream).map_err(unavailable)?;
        Ok(CudaBackend {
            stream,
            mask_stream,
            module: sh.module.clone(),
            funcs: HashMap::new(),
            b,
            device: sh.device.clone(),
            timing: false,
            last_kernel_ms: None,
            tuning: Tuning::for_device(&sh.device),
            chunks_override: None,
            full_row: false,
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        &self.device
    }

    /// The stream every launch goes to (for timing with events).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Records CUDA events around each step's kernel sequence (after the
    /// uploads, before the downloads); read with [`Self::last_kernel_ms`].
    pub fn set_timing(&mut self, on: bool) {
        self.timing = on;
    }

    /// Device time of the last step's kernels, when timing is on (the first
    /// pass: a prefix-path step rerun on the full-row path is not included).
    pub fn last_kernel_ms(&self) -> Option<f32> {
        self.last_kernel_ms
    }

    /// The tuning table in use.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// Forces the chunk count of the multi-block top-N (autotune; `None` = table).
    pub fn set_chunks_override(&mut self, c: Option<u32>) {
        self.chunks_override = c;
    }

    /// Always takes the full-row path without force top-k (no prefix path,
    /// [`StepPlan::prefix_width`]); for comparisons.
    pub fn set_full_row(&mut self, on: bool) {
        self.full_row = on;
    }

    /// The candidate width the kernels run on for `p`, and whether it is the
    /// prefix path ([`StepPlan::prefix_width`]) rather than N.
    pub fn width(&self, p: &StepPlan) -> (u32, bool) {
        match p.prefix_width().filter(|_| !self.full_row) {
            Some(w) => (w, true),
            None => (p.n, false),
        }
    }

    /// Blocks per row of the top-N selection for (V, N) (by V and N only).
    pub fn chunks_for(&self, v: u32, n: u32) -> u32 {
        match self.chunks_override {
            Some(c) if chunks_valid(v, n, c) => c,
            _ => self.tuning.chunks(v, n),
        }
    }

    /// Device-resident use (benchmarks, engines holding logits on the GPU):
    /// uploads every input of `p` and sizes the buffers; afterwards
    /// [`Self::launch_step`] runs the kernels on the device copy only.
    pub fn prepare_step(&mut self, p: &StepPlan) -> Result<(), BackendError> {
        self.prepare(p)
    }

    /// Launches the step's kernels (inputs from [`Self::prepare_step`]); no host sync.
    pub fn launch_step(&mut self, p: &StepPlan) -> Result<(), BackendError> {
        self.launch_all(p, &mut |_, _| Ok(()))
    }

    /// Launches the step with an event after each kernel, waits, and returns
    /// each kernel's device time in ms, in launch order.
    pub fn launch_step_timed(&mut self, p: &StepPlan) -> Result<Vec<(&'static str, f32)>, BackendError> {
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let e0 = self.stream.record_event(flags).map_err(dev)?;
        let mut evs = Vec::new();
        self.launch_all(p, &mut |s, name| {
            evs.push((name, s.stream.record_event(flags).map_err(dev)?));
            Ok(())
        })?;
        self.stream.synchronize().map_err(dev)?;
        let mut out = Vec::new();
        let mut prev = &e0;
        for (name, e) in &evs {
            out.push((*name, prev.elapsed_ms(e).map_err(dev)?));
            prev = e;
        }
        Ok(out)
    }

    /// Captures the step's kernels (fixed shapes, inputs already prepared) as a CUDA graph.
    pub fn capture_step(&mut self, p: &StepPlan) -> Result<cudarc::driver::CudaGraph, BackendError> {
        // One eager launch first: functions are loaded and attributes set outside the capture.
        self.launch_step(p)?;
        self.stream.synchronize().map_err(dev)?;
        self.stream.begin_capture(cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(dev)?;
        let r = self.launch_step(p);
        let g = self.stream.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0)).map_err(dev)?;
        r?;
        let g = g.ok_or_else(|| BackendError::Device { backend: "cuda", msg: "empty graph".into() })?;
        g.upload().map_err(dev)?;
        Ok(g)
    }

    /// Reads the outputs of the last launched step back. On the prefix path
    /// ([`StepPlan::prefix_width`]) a step whose kept sets do not all fit is
    /// run again here, eagerly, on the full-row path (a captured graph holds
    /// the prefix path only), so the results are always the full-row path's.
    pub fn collect_step(&mut self, p: &StepPlan) -> Result<StepResult, BackendError> {
        let res = self.collect(p)?;
        self.full_row_if_overflowed(p, res)
    }

    /// `res` when the step took the full-row path or every kept set fitted
    /// the prefix; else the step again on the full-row path (inputs uploaded
    /// again from `p`; masking twice changes nothing).
    fn full_row_if_overflowed(&mut self, p: &StepPlan, res: StepResult) -> Result<StepResult, BackendError> {
        if !self.width(p).1 {
            return Ok(res);
        }
        let overflow = self.b.overflow.download(&self.stream, p.rows as usize)?;
        if !p.prefix_overflowed(&res.group_status, &overflow) {
            return Ok(res);
        }
        let keep = self.full_row;
        self.full_row = true;
        let r = self.prepare(p).and_then(|_| self.launch_all(p, &mut |_, _| Ok(()))).and_then(|_| self.collect(p));
        self.full_row = keep;
        r
    }

    /// The device buffer holding the logits (`[R, V]` f32 after [`Self::prepare_step`]).
    pub fn logits_buffer(&mut self) -> &mut CudaSlice<f32> {
        &mut self.b.logits.s
    }

    fn func(&mut self, v: &'static Variant) -> Result<CudaFunction, BackendError> {
        if let Some(f) = self.funcs.get(v.entry) {
            return Ok(f.clone());
        }
        let f = self.module.load_function(v.entry).map_err(dev)?;
        // Selection kernels may get top_n's staging area on top of v.shared.
        let most = if v.shared > GPU_SMEM_BASE { 227 * 1024 } else { v.shared };
        if most > 48 * 1024 {
            f.set_attribute(CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, most as i32).map_err(dev)?;
        }
        self.funcs.insert(v.entry, f.clone());
        Ok(f)
    }
}

/// `launch!(self, variant, grid; args..)`: one launch of `variant` on the backend's stream.
macro_rules! launch {
    ($s:ident, $v:expr, $grid:expr; $($a:expr),* $(,)?) => {{
        launch!($s, $v, $grid, stage 0; $($a),*)
    }};
    // `stage len`: top_n reads `len` logits per program; they are staged in shared memory when they fit.
    ($s:ident, $v:expr, $grid:expr, stage $len:expr; $($a:expr),* $(,)?) => {{
        let v: &'static Variant = $v;
        let f = $s.func(v)?;
        let smem = v.shared + gpu_stage_bytes(v.shared, $len);
        let cfg = LaunchConfig { grid_dim: ($grid, 1, 1), block_dim: (v.threads, 1, 1), shared_mem_bytes: smem };
        let mut lb = $s.stream.launch_builder(&f);
        $( lb.arg($a); )*
        // SAFETY: argument order and types follow the kernel's PARAMS (the
        // DSL signature); every buffer is sized for the step's shapes above.
        unsafe { lb.launch(cfg) }.map_err(dev)?;
    }};
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn run(&mut self, p: &StepPlan) -> Result<StepResult, BackendError> {
        if p.rows == 0 {
            return Ok(StepResult { accepted: vec![0; p.groups()], group_status: p.group_status.clone(), ..Default::default() });
        }
        self.prepare(p)?;
        let ev = |s: &Arc<CudaStream>| s.record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(dev);
        let t0 = if self.timing { Some(ev(&self.stream)?) } else { None };
        self.launch_all(p, &mut |_, _| Ok(()))?;
        let t1 = if self.timing { Some(ev(&self.stream)?) } else { None };
        let res = self.collect(p)?;
        let res = self.full_row_if_overflowed(p, res)?;
        self.last_kernel_ms = match (t0, t1) {
            (Some(a), Some(b)) => Some(a.elapsed_ms(&b).map_err(dev)?),
            _ => None,
        };
        Ok(res)
    }
}

impl CudaBackend {
    fn prepare(&mut self, p: &StepPlan) -> Result<(), BackendError> {
        let (r, v, kk) = (p.rows as usize, p.vocab, p.k);
        let (n, prefix) = self.width(p);
        let g = p.groups();
        let _ = (v, g);
        let (rn, rv) = (r * n as usize, r * v as usize);
        let chunks = self.chunks_for(v, n) as usize;
        let st = self.stream.clone();
        let ms = self.mask_stream.clone();
        let b = &mut self.b;
        // Grammar masks go up on a side stream (SAMPLER.md section 9, the seed's
        // mask copy); the sampling stream waits on its event before any kernel.
        // Event tracking is off in this context, so this event is the only ordering.
        ms.wait(&st.record_event(None).map_err(dev)?).map_err(dev)?;
        b.has_mask.upload(&ms, &p.has_mask)?;
        b.masks.upload(&ms, &p.masks)?;
        st.wait(&ms.record_event(None).map_err(dev)?).map_err(dev)?;
        // Inputs.
        b.logits.upload(&st, &p.logits)?;
        b.temperature.upload(&st, &p.temperature)?;
        b.top_p.upload(&st, &p.top_p)?;
        b.top_k.upload(&st, &p.top_k)?;
        b.min_p.upload(&st, &p.min_p)?;
        b.filter_order.upload(&st, &p.filter_order)?;
        b.raw.upload(&st, &p.raw_logprobs)?;
        // mask_check writes the raw partial sums of raw rows only.
        b.raw_max.ensure(&st, r * raw_tiles(v) as usize)?;
        b.raw_sum.ensure(&st, r * raw_tiles(v) as usize)?;
        b.seed.upload(&st, &p.seed)?;
        b.seq_draw.upload(&st, &p.seq_draw)?;
        b.golden.upload(&st, &p.golden)?;
        b.drafts.upload(&st, &p.drafts)?;
        b.group_first.upload(&st, &p.group_first)?;
        b.group_rows.upload(&st, &p.group_rows)?;
        b.group_kind.upload(&st, &p.group_kind)?;
        b.group_status_in.upload(&st, &p.group_status)?;
        // Outputs and intermediates.
        b.row_status.ensure(&st, r)?;
        b.cand.ensure(&st, rn)?;
        b.cand_ids.ensure(&st, rn)?;
        b.logprobs.ensure(&st, rn)?;
        b.fresh.ensure(&st, r)?;
        b.accept.upload(&st, &vec![0u32; r])?;
        b.residual.upload(&st, &vec![-1i32; r])?;
        b.tokens.ensure(&st, r)?;
        if g > 0 {
            b.lookup.ensure(&st, r)?;
        } else {
            b.lookup.upload(&st, &vec![-1i32; r])?;
        }
        b.accepted.ensure(&st, g)?;
        b.group_status.ensure(&st, g)?;
        b.token_lp.ensure(&st, r)?;
        b.sum_smaller.ensure(&st, r)?;
        b.top_ids.ensure(&st, r * kk as usize)?;
        b.top_lps.ensure(&st, r * kk as usize)?;
        let mchunks = mask_chunks(v) as usize;
        if mchunks > 1 {
            b.chunk_bad.ensure(&st, r * mchunks)?;
            b.chunk_finite.ensure(&st, r * mchunks)?;
        }
        if chunks > 1 {
            b.chunk_cand.ensure(&st, rn * chunks)?;
            b.chunk_ids.ensure(&st, rn * chunks)?;
        }
        if prefix {
            b.mass.ensure(&st, r * mass_chunks(v) as usize)?;
            b.overflow.ensure(&st, r)?;
        }
        if p.any_verify {
            b.draft_ids.upload(&st, &p.draft_ids)?;
            b.draft_lps.upload(&st, &p.draft_lps)?;
            b.seq_accept.upload(&st, &p.seq_accept)?;
            b.seq_residual.upload(&st, &p.seq_residual)?;
            b.col_of.ensure(&st, rv)?;
            b.q_lps.ensure(&st, rn)?;
            b.draft_col.ensure(&st, r)?;
            b.draft_q.ensure(&st, r)?;
        }
        if p.any_tree {
            // Section 11 (tree_walk): the draft rows and the col_of scratch stay
            // 1-element dummies for fixed trees, whose walk never reads them.
            if !p.any_verify {
                b.seq_accept.upload(&st, &p.seq_accept)?;
                b.seq_residual.upload(&st, &p.seq_residual)?;
                if p.draft_width > 0 {
                    b.draft_ids.upload(&st, &p.draft_ids)?;
                    b.draft_lps.upload(&st, &p.draft_lps)?;
                    b.col_of.ensure(&st, rv)?;
                }
            }
            b.tree_parent.upload(&st, &p.tree_parent)?;
            b.tree_token.upload(&st, &p.tree_token)?;
            b.tree_mode.upload(&st, &p.tree_mode)?;
            b.path.ensure(&st, r)?;
        }
        Ok(())
    }
    /// Launches the step's kernels on the stream (buffers prepared by
    /// [`Self::prepare`]); `mark` is called after each kernel with its name.
    fn launch_all(&mut self, p: &StepPlan, mark: &mut dyn FnMut(&mut Self, &'static str) -> Result<(), BackendError>) -> Result<(), BackendError> {
        let (r, v, kk) = (p.rows as usize, p.vocab, p.k);
        let (n, prefix) = self.width(p);
        let g = p.groups();
        let rows = r as u32;
        if r == 0 {
            return Ok(());
        }

        // 1. mask_check
        let mchunks = mask_chunks(v);
        if mchunks > 1 {
            let var = pick(k::mask_check_chunk::NAME, k::mask_check_chunk::VARIANTS, 1)?;
            let clen = MASK_CHUNK;
            launch!(self, var, rows * mchunks;
                &mut self.b.logits.s, &v, &clen, &mchunks, &self.b.masks.s, &self.b.has_mask.s,
                &self.b.raw.s, &mut self.b.raw_max.s, &mut self.b.raw_sum.s, &mut self.b.chunk_bad.s, &mut self.b.chunk_finite.s);
            mark(self, "mask_check_chunk")?;
            let var = pick(k::status_merge::NAME, k::status_merge::VARIANTS, 1)?;
            launch!(self, var, rows; &self.b.chunk_bad.s, &self.b.chunk_finite.s, &mchunks, &mut self.b.row_status.s);
            mark(self, "status_merge")?;
        } else {
            let var = pick(k::mask_check::NAME, k::mask_check::VARIANTS, 1)?;
            launch!(self, var, rows;
                &mut self.b.logits.s, &v, &self.b.masks.s, &self.b.has_mask.s,
                &self.b.raw.s, &mut self.b.raw_max.s, &mut self.b.raw_sum.s, &mut self.b.row_status.s);
            mark(self, "mask_check")?;
        }
        // 2. force_topn
        let chunks = self.chunks_for(v, n);
        if chunks > 1 {
            // Several blocks per row: each keeps its chunk's top N, a merge picks the row's.
            let chunk_len = v.div_ceil(chunks);
            let m = chunks * n;
            let var = pick(k::topn_chunk::NAME, k::topn_chunk::VARIANTS, n)?;
            launch!(self, var, rows * chunks, stage chunk_len; &self.b.logits.s, &v, &chunk_len, &chunks, &n, &mut self.b.chunk_cand.s, &mut self.b.chunk_ids.s);
            mark(self, "topn_chunk")?;
            let var = pick(k::topn_merge::NAME, k::topn_merge::VARIANTS, n)?;
            launch!(self, var, rows, stage m; &self.b.chunk_cand.s, &self.b.chunk_ids.s, &m, &n, &mut self.b.cand.s, &mut self.b.cand_ids.s);
            mark(self, "topn_merge")?;
        } else {
            let var = pick(k::force_topn::NAME, k::force_topn::VARIANTS, n)?;
            launch!(self, var, rows, stage v; &self.b.logits.s, &v, &n, &mut self.b.cand.s, &mut self.b.cand_ids.s);
            mark(self, "force_topn")?;
        }
        // 3. process (prefix path: the softmax total over all V from row_mass)
        if prefix {
            let mc = mass_chunks(v);
            let var = pick(k::row_mass::NAME, k::row_mass::VARIANTS, 1)?;
            launch!(self, var, rows * mc; &self.b.logits.s, &v, &MASS_CHUNK, &mc, &self.b.cand.s, &n, &self.b.temperature.s, &mut self.b.mass.s);
            mark(self, "row_mass")?;
            // 3-4. process_prefix_draw (the prefix path: process with the total of all V, then draw)
            let var = pick(k::process_prefix_draw::NAME, k::process_prefix_draw::VARIANTS, n)?;
            launch!(self, var, rows;
                &self.b.cand.s, &self.b.cand_ids.s, &n, &v, &self.b.mass.s, &mc, &self.b.temperature.s, &self.b.top_p.s, &self.b.top_k.s,
                &self.b.min_p.s, &self.b.filter_order.s, &self.b.seed.s, &self.b.seq_draw.s, &mut self.b.logprobs.s, &mut self.b.overflow.s, &mut self.b.fresh.s);
            mark(self, "process_prefix_draw")?;
        } else if n <= FUSED_MAX {
            // 3-4. process + draw, fused
            let var = pick(k::process_draw::NAME, k::process_draw::VARIANTS, n)?;
            launch!(self, var, rows;
                &self.b.cand.s, &self.b.cand_ids.s, &n, &self.b.temperature.s, &self.b.top_p.s, &self.b.top_k.s,
                &self.b.min_p.s, &self.b.filter_order.s, &self.b.seed.s, &self.b.seq_draw.s, &mut self.b.logprobs.s, &mut self.b.fresh.s);
            mark(self, "process_draw")?;
        } else {
            let var = pick(k::process::NAME, k::process::VARIANTS, n)?;
            launch!(self, var, rows;
                &self.b.cand.s, &n, &self.b.temperature.s, &self.b.top_p.s, &self.b.top_k.s, &self.b.min_p.s, &self.b.filter_order.s,
                &mut self.b.logprobs.s);
            mark(self, "process")?;
            // 4. draw
            let var = pick(k::draw::NAME, k::draw::VARIANTS, n)?;
            launch!(self, var, rows; &self.b.logprobs.s, &self.b.cand_ids.s, &n, &self.b.seed.s, &self.b.seq_draw.s, &mut self.b.fresh.s);
            mark(self, "draw")?;
        }
        // 5-6. remap_draft, verify
        if p.any_verify {
            let wd = p.draft_width;
            let var = pick(k::remap_draft::NAME, k::remap_draft::VARIANTS, n.max(wd))?;
            launch!(self, var, rows;
                &self.b.cand_ids.s, &n, &v, &self.b.draft_ids.s, &self.b.draft_lps.s, &wd, &self.b.drafts.s,
                &mut self.b.col_of.s, &mut self.b.q_lps.s, &mut self.b.draft_col.s, &mut self.b.draft_q.s);
            mark(self, "remap_draft")?;
            let var = pick(k::verify::NAME, k::verify::VARIANTS, n)?;
            launch!(self, var, rows;
                &self.b.logprobs.s, &self.b.cand_ids.s, &self.b.q_lps.s, &n, &self.b.draft_col.s, &self.b.draft_q.s,
                &self.b.seed.s, &self.b.seq_accept.s, &self.b.seq_residual.s, &mut self.b.accept.s, &mut self.b.residual.s);
            mark(self, "verify")?;
        }
        // 7. finalize (one program per group)
        if g > 0 {
            let var = pick(k::finalize::NAME, k::finalize::VARIANTS, 1)?;
            launch!(self, var, g as u32;
                &self.b.group_first.s, &self.b.group_rows.s, &self.b.group_kind.s, &self.b.group_status_in.s, &self.b.row_status.s,
                &self.b.golden.s, &self.b.drafts.s, &self.b.accept.s, &self.b.residual.s, &self.b.fresh.s,
                &mut self.b.tokens.s, &mut self.b.lookup.s, &mut self.b.accepted.s, &mut self.b.group_status.s);
            mark(self, "finalize")?;
        }
        // 7b. tree_walk (one program per group; only when the step has a tree)
        if p.any_tree {
            let wd = p.draft_width;
            let var = pick(k::tree_walk::NAME, k::tree_walk::VARIANTS, n.max(wd))?;
            launch!(self, var, g as u32;
                &self.b.group_first.s, &self.b.group_rows.s, &self.b.group_kind.s, &self.b.tree_mode.s, &self.b.group_status.s,
                &self.b.tree_parent.s, &self.b.tree_token.s, &self.b.golden.s, &self.b.fresh.s,
                &self.b.logprobs.s, &self.b.cand_ids.s, &n, &v, &self.b.draft_ids.s, &self.b.draft_lps.s, &wd, &mut self.b.col_of.s,
                &self.b.seed.s, &self.b.seq_accept.s, &self.b.seq_residual.s,
                &mut self.b.tokens.s, &mut self.b.lookup.s, &mut self.b.accepted.s, &mut self.b.path.s);
            mark(self, "tree_walk")?;
        }
        // 8-9. token_info + top_logprobs, fused
        if n <= FUSED_MAX {
            let var = pick(k::token_info_top::NAME, k::token_info_top::VARIANTS, n)?;
            launch!(self, var, rows;
                &self.b.cand.s, &self.b.cand_ids.s, &self.b.logprobs.s, &n, &self.b.lookup.s, &kk,
                &mut self.b.token_lp.s, &mut self.b.sum_smaller.s, &mut self.b.top_ids.s, &mut self.b.top_lps.s);
            mark(self, "token_info_top")?;
        } else {
            // 8. token_info
            let var = pick(k::token_info::NAME, k::token_info::VARIANTS, n)?;
            launch!(self, var, rows;
                &self.b.cand.s, &self.b.cand_ids.s, &self.b.logprobs.s, &n, &self.b.lookup.s, &mut self.b.token_lp.s, &mut self.b.sum_smaller.s);
            mark(self, "token_info")?;
            // 9. top_logprobs
            if kk > 0 {
                let var = pick(k::top_logprobs::NAME, k::top_logprobs::VARIANTS, n)?;
                launch!(self, var, rows; &self.b.cand_ids.s, &self.b.logprobs.s, &n, &kk, &mut self.b.top_ids.s, &mut self.b.top_lps.s);
                mark(self, "top_logprobs")?;
            }
        }
        // 10. raw_logprobs (section 10.3; only when a row asks for them)
        if p.any_raw {
            let tiles = raw_tiles(v);
            let var = pick(k::raw_logprobs::NAME, k::raw_logprobs::VARIANTS, kk.max(1))?;
            launch!(self, var, rows;
                &self.b.logits.s, &v, &self.b.raw.s, &self.b.raw_max.s, &self.b.raw_sum.s, &tiles, &self.b.lookup.s, &kk, &self.b.top_ids.s,
                &mut self.b.token_lp.s, &mut self.b.top_lps.s);
            mark(self, "raw_logprobs")?;
        }
        Ok(())
    }

    /// Reads the step's outputs back (the only host synchronisation).
    fn collect(&mut self, p: &StepPlan) -> Result<StepResult, BackendError> {
        let (r, kk) = (p.rows as usize, p.k);
        let n = self.width(p).0;
        let g = p.groups();
        let st = self.stream.clone();
        // Outputs (the only host synchronisation of the step).
        let b = &self.b;
        let row_status = b.row_status.download(&st, r)?;
        let tokens = if g > 0 { b.tokens.download(&st, r)? } else { vec![-1; r] };
        let token_lp = b.token_lp.download(&st, r)?;
        let sum_smaller = b.sum_smaller.download(&st, r)?;
        let top_ids = b.top_ids.download(&st, r * kk as usize)?;
        let top_lps = b.top_lps.download(&st, r * kk as usize)?;
        let accepted = b.accepted.download(&st, g)?;
        let group_status = b.group_status.download(&st, g)?;
        let path = if p.any_tree { b.path.download(&st, r)? } else { Vec::new() };
        let nn = n as usize;
        let mut processed_ids = Vec::with_capacity(p.processed_rows.len() * nn);
        let mut processed_lps = Vec::with_capacity(p.processed_rows.len() * nn);
        for row in p.processed_rows_checked("cuda")? {
            let mut ids = vec![0i32; nn];
            let mut lps = vec![0f32; nn];
            st.memcpy_dtoh(&b.cand_ids.s.slice(row * nn..(row + 1) * nn), &mut ids).map_err(dev)?;
            st.memcpy_dtoh(&b.logprobs.s.slice(row * nn..(row + 1) * nn), &mut lps).map_err(dev)?;
            processed_ids.extend_from_slice(&ids);
            processed_lps.extend_from_slice(&lps);
        }
        st.synchronize().map_err(dev)?;
        Ok(StepResult { row_status, tokens, token_lp, sum_smaller, top_ids, top_lps, accepted, group_status, processed_ids, processed_lps, path })
    }
}
