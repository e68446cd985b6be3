//! The CUDA backend: the kernels' PTX entry points (committed PTX, built
//! from the same DSL source by rustc's nvptx64 target: `examples/regenerate.rs`),
//! launched through `cudarc` (driver API, loaded at run time: no CUDA at
//! build time), in the kernel sequence of [`crate::runtime::plan`].
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

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PinnedHostSlice,
    PushKernelArg, ValidAsZeroBits,
};
use sampler_kernels::codes::MAX_N_NVIDIA;
use sampler_kernels::spec::{gpu_stage_bytes, LaunchArg, ParamKind, Prim, Variant, GPU_SMEM_BASE};

use crate::error::{BackendError, ConfigError};
use crate::interop::Dtype;
use crate::runtime::pipeline::{self, Buf, Caps, Device, HostSlice, HostSliceMut, Launch, Program};
use crate::runtime::plan::{Backend, Logits, StepPlan, StepResult};

/// Committed tuning tables, `(file name, JSON)`: the one whose `"device"`
/// equals the device's name is used (`examples/autotune.rs` writes them;
/// `SAMPLER_CUDA_TUNING=path` overrides). Unknown devices: [`default_chunks`].
pub const TUNING_TABLES: &[(&str, &str)] = &[("nvidia-h200.json", include_str!("../../../../tuning/nvidia-h200.json"))];

/// Logits per block of the multi-block mask/bad-value check (a multiple of
/// its tile, 4096, so mask words stay aligned).
pub const MASK_CHUNK: u32 = 16384;

/// Widest N of the fused kernels (`process_draw`, `process_prefix_draw`,
/// `token_info_top`: register tiles only); wider steps run them unfused.
pub const FUSED_MAX: u32 = MAX_N_NVIDIA;

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
    if n > MAX_N_NVIDIA || n == 0 {
        return false;
    }
    let len = v.div_ceil(chunks);
    let last = v as i64 - (chunks as i64 - 1) * len as i64;
    last >= n as i64
}

/// The chunk count without a tuning entry: the most chunks whose candidates
/// (chunks x N) still fit one 16384-key tile of the merge.
pub fn default_chunks(v: u32, n: u32) -> u32 {
    CHUNK_CANDIDATES
        .iter()
        .copied()
        .filter(|&c| c * n.max(1) <= MAX_N_NVIDIA && chunks_valid(v, n, c))
        .max()
        .unwrap_or(1)
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
pub const PTX: &str = include_str!("../../../../ptx/sampler_kernels.ptx");

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
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_src(PTX))
                .map_err(|e| format!("loading the embedded PTX failed: {e:?}"))?;
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

/// One device buffer of a step, grown (never shrunk) to the sizes steps need.
enum DStore {
    F32(CudaSlice<f32>),
    I32(CudaSlice<i32>),
    U32(CudaSlice<u32>),
    U64(CudaSlice<u64>),
}

/// Grows `s` to hold `len` (by half again at least); true when it moved.
fn grow<T: DeviceRepr + ValidAsZeroBits>(
    s: &mut CudaSlice<T>,
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<Option<CudaSlice<T>>, BackendError> {
    if s.len() < len.max(1) {
        let want = len.max(1).max(s.len() + s.len() / 2);
        return Ok(Some(std::mem::replace(s, stream.alloc_zeros::<T>(want).map_err(dev)?)));
    }
    Ok(None)
}

/// Pinned bytes reserved (on the first step) for the metadata of steps
/// captured into a caller's CUDA graph: see `CudaDevice::capture_pool`.
const CAPTURE_POOL_BYTES: usize = 4 << 20;

/// Writes a step's uploaded inputs (data, and fills of classes 0-1 of
/// `upload_inputs`) into the host staging `host` at their arena offsets.
fn pack_inputs(
    list: &[(Buf, pipeline::Upload<'_>)],
    class: &dyn Fn(Buf, &pipeline::Upload<'_>) -> i32,
    input_at: &[Option<(usize, usize)>],
    host: &mut [u8],
) {
    use pipeline::Upload;
    for (b, u) in list {
        let Some((off, bytes)) = input_at[*b as usize] else { continue };
        match u {
            Upload::Data(h) => host[off..off + bytes].copy_from_slice(host_bytes(h)),
            Upload::Fill(..) if class(*b, u) >= 2 => {}
            Upload::Fill(x, _) => {
                let bits = x.scalar_bits().unwrap_or(0).to_le_bytes();
                let w = prim_bytes(b.prim());
                host[off..off + bytes].chunks_exact_mut(w).for_each(|c| c.copy_from_slice(&bits[..w]));
            }
            Upload::Output(_) => {}
        }
    }
}

/// Bytes of `h` as a byte slice.
fn host_bytes<'a>(h: &HostSlice<'a>) -> &'a [u8] {
    // SAFETY: plain-old-data element types, viewed as bytes for a copy.
    unsafe {
        match *h {
            HostSlice::F32(s) => std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)),
            HostSlice::I32(s) => std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)),
            HostSlice::U32(s) => std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)),
            HostSlice::U64(s) => std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)),
        }
    }
}

fn prim_bytes(p: Prim) -> usize {
    match p {
        Prim::Bool => 1,
        Prim::I64 | Prim::U64 | Prim::F64 => 8,
        _ => 4,
    }
}

/// Byte alignment of each buffer in the input arena.
const ARENA_ALIGN: usize = 256;

fn dev(e: impl std::fmt::Debug) -> BackendError {
    BackendError::Device { backend: "cuda", msg: format!("{e:?}") }
}

/// The first CUDA device as a [`Device`]: one stream, one buffer per
/// [`Buf`], kept across steps (no allocation once the largest step has run).
pub struct CudaDevice {
    stream: Arc<CudaStream>,
    /// Side stream for host-to-device copies: the step's metadata (and
    /// grammar masks uploaded on their own); the sampling stream waits on
    /// its event. The metadata copy thus runs while the engine's stream is
    /// still producing the logits, off the step's critical path.
    copy_stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
    funcs: HashMap<&'static str, CudaFunction>,
    bufs: Vec<DStore>,
    tuning: Tuning,
    chunks_override: Option<u32>,
    /// [`Caps::counts_in_topn`]: off by default until a GPU round confirms
    /// it pays (GPU_NOTES "pending GPU": counts from the staging histogram);
    /// `SAMPLER_COUNTS_IN_TOPN=1` at backend creation, or
    /// [`CudaBackend::set_counts_in_topn`], switches it on.
    counts_in_topn: bool,
    /// The logits the kernels read in place this step, as (device address,
    /// element type code): the caller's device buffer, or [`Self::half_logits`]
    /// (host bf16/f16 uploaded as they are). `None`: [`Buf::Logits`] (f32).
    ext_logits: Option<(u64, u32)>,
    /// Host bf16 / f16 logits uploaded in their own element type (half the bytes of f32).
    half_logits: Option<CudaSlice<u16>>,
    /// The step's inputs, filled buffers and outputs, packed in one device
    /// arena: inputs and fills first (uploaded from the pinned `staging` in
    /// one async copy a step), then the outputs (read back in one copy).
    /// `input_at`: each buffer's (byte offset, bytes) in it this step.
    arena: Option<CudaSlice<u8>>,
    /// Pinned, write-combined host staging of the arena's input part, and
    /// its address (the copies are raw driver calls, so that cudarc adds no
    /// event record or stream wait of its own).
    staging: Option<(PinnedHostSlice<u8>, *mut u8)>,
    /// Recorded after each staging copy (on `copy_stream`): the sampling
    /// stream waits on it before the step's kernels, and the host before
    /// writing the staging again (usually long done).
    staging_copied: cudarc::driver::CudaEvent,
    /// Recorded on the sampling stream after a step's launches (or before
    /// the next metadata copy): the copy waits for the earlier steps' kernels
    /// to be done with the arena's inputs.
    arena_free: cudarc::driver::CudaEvent,
    /// Whether `arena_free` was recorded right after the last step's
    /// launches ([`CudaDevice::mark_launched`]): the next metadata copy then
    /// waits for those kernels only, not for later work on our stream (an
    /// engine's forward pass enqueued on it). Otherwise it is recorded when
    /// the copy is issued.
    arena_free_recorded: bool,
    /// Orders reading device logits written on another stream (one event, reused).
    logits_ready: cudarc::driver::CudaEvent,
    input_at: Vec<Option<(usize, usize)>>,
    /// Pinned host memory the downloads of non-arena buffers land in, and
    /// the host copies still to make from it at `finish` (staging offset,
    /// destination, bytes).
    out_staging: Option<PinnedHostSlice<u8>>,
    out_used: usize,
    pending: Vec<(usize, *mut u8, usize)>,
    /// Pinned host memory the packed outputs land in (one copy at `finish`),
    /// and the downloads waiting for it (arena offset, destination, bytes).
    out_region: Option<(PinnedHostSlice<u8>, *mut u8)>,
    pending_arena: Vec<(usize, *mut u8, usize)>,
    /// Device addresses of one launch's buffer arguments (reused).
    ptrs: Vec<u64>,
    /// Bumped whenever a device buffer moves (a captured graph is then stale).
    generation: u64,
    /// This step is being captured into a graph of the caller's stream (e.g.
    /// `torch.cuda.graph`), found when the logits' stream is joined: nothing
    /// may wait or allocate, the metadata goes to `capture_pool` and is
    /// copied on our (capturing) stream, and no shared event is recorded.
    capturing: bool,
    /// Pinned host memory (and its address) for captured steps' metadata:
    /// the graph's copy node reads it at every replay, so each capture keeps
    /// its own range, never written again. Reserved on the first step
    /// because nothing may allocate during a capture.
    capture_pool: Option<(PinnedHostSlice<u8>, usize)>,
    capture_used: usize,
    /// Buffers replaced after a capture: an outside graph still points at
    /// them (it cannot be checked at replay), so they live as long as we do.
    retired: Vec<DStore>,
    retired_arenas: Vec<CudaSlice<u8>>,
    retired_halves: Vec<CudaSlice<u16>>,
    graph_held: bool,
    /// The caller's device buffers the step's outputs are written to
    /// directly ([`CudaBackend::enqueue_into`]), by [`Buf`]; `None` = ours.
    ext_out: Vec<Option<u64>>,
}

/// `SAMPLER_COUNTS_IN_TOPN` (read once per backend, at its creation): `1`
/// switches [`Caps::counts_in_topn`] on for CUDA; unset, empty or `0`
/// leaves it off.
fn counts_in_topn_env() -> bool {
    std::env::var("SAMPLER_COUNTS_IN_TOPN").is_ok_and(|x| !matches!(x.trim(), "" | "0"))
}

impl CudaDevice {
    fn new(sh: &Shared) -> Result<CudaDevice, BackendError> {
        let stream = sh.ctx.new_stream().map_err(dev)?;
        let copy_stream = sh.ctx.new_stream().map_err(dev)?;
        let mut bufs = Vec::new();
        for b in Buf::ALL {
            bufs.push(match b.prim() {
                Prim::F32 => DStore::F32(stream.alloc_zeros(1).map_err(dev)?),
                Prim::I32 => DStore::I32(stream.alloc_zeros(1).map_err(dev)?),
                Prim::U64 => DStore::U64(stream.alloc_zeros(1).map_err(dev)?),
                _ => DStore::U32(stream.alloc_zeros(1).map_err(dev)?),
            });
        }
        Ok(CudaDevice {
            stream,
            copy_stream,
            arena_free: sh.ctx.new_event(None).map_err(dev)?,
            arena_free_recorded: false,
            module: sh.module.clone(),
            funcs: HashMap::new(),
            bufs,
            tuning: Tuning::for_device(&sh.device),
            chunks_override: None,
            counts_in_topn: counts_in_topn_env(),
            ext_logits: None,
            half_logits: None,
            arena: None,
            staging: None,
            staging_copied: sh.ctx.new_event(None).map_err(dev)?,
            logits_ready: sh.ctx.new_event(None).map_err(dev)?,
            input_at: vec![None; Buf::ALL.len()],
            out_staging: None,
            out_used: 0,
            pending: Vec::new(),
            out_region: None,
            pending_arena: Vec::new(),
            ptrs: Vec::new(),
            generation: 0,
            capturing: false,
            capture_pool: None,
            capture_used: 0,
            retired: Vec::new(),
            retired_arenas: Vec::new(),
            retired_halves: Vec::new(),
            graph_held: false,
            ext_out: vec![None; Buf::ALL.len()],
        })
    }

    fn func(&mut self, v: &'static Variant) -> Result<CudaFunction, BackendError> {
        if let Some(f) = self.funcs.get(v.entry) {
            return Ok(f.clone());
        }
        let f = self.module.load_function(v.entry).map_err(dev)?;
        // Selection kernels may get top_n's staging area on top of v.shared.
        let most = if v.shared > GPU_SMEM_BASE { 227 * 1024 } else { v.shared };
        if most > 48 * 1024 {
            f.set_attribute(CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, most as i32)
                .map_err(dev)?;
        }
        self.funcs.insert(v.entry, f.clone());
        Ok(f)
    }

    /// Blocks per row of the top-N selection for (V, N) (by V and N only).
    pub fn chunks_for(&self, v: u32, n: u32) -> u32 {
        match self.chunks_override {
            Some(c) if chunks_valid(v, n, c) => c,
            _ => self.tuning.chunks(v, n),
        }
    }

    /// Records that the step's launches are all enqueued: the next step's
    /// metadata copy waits for them only (see `arena_free_recorded`).
    pub fn mark_launched(&mut self) -> Result<(), BackendError> {
        if self.capturing {
            // Not inside a capture (the event is shared with eager steps): the next
            // eager step records it itself before its copy waits on it.
            self.arena_free_recorded = false;
            return Ok(());
        }
        self.arena_free.record(&self.stream).map_err(dev)?;
        self.arena_free_recorded = true;
        Ok(())
    }

    /// Sets the filled outputs (class 2 of `upload_inputs`) by device memsets on our stream.
    fn fill_outputs(
        &self,
        list: &[(Buf, pipeline::Upload<'_>)],
        class: &dyn Fn(Buf, &pipeline::Upload<'_>) -> i32,
    ) -> Result<(), BackendError> {
        let base = self.arena.as_ref().expect("sized by upload_inputs").device_ptr(&self.stream).0;
        for (b, u) in list {
            if let (pipeline::Upload::Fill(x, len), Some((off, _))) = (u, self.input_at[*b as usize]) {
                if class(*b, u) == 2 && *len > 0 {
                    let bits = x.scalar_bits().unwrap_or(0) as u32;
                    // SAFETY: `len` 4-byte elements at `off` lie in the arena (laid out above).
                    unsafe {
                        cudarc::driver::sys::cuMemsetD32Async(base + off as u64, bits, *len, self.stream.cu_stream())
                    }
                    .result()
                    .map_err(dev)?;
                }
            }
        }
        Ok(())
    }

    /// `upload_inputs` for a step being captured into the caller's graph: the
    /// metadata goes to a range of the capture pool of its own (the graph's
    /// copy node reads it at every replay) and is copied on our capturing
    /// stream, without waiting, allocating or recording a shared event.
    /// Errors: no pool yet (no step ran before the capture), a full pool, or
    /// an arena too small for the step.
    fn upload_captured(
        &mut self,
        list: &[(Buf, pipeline::Upload<'_>)],
        class: &dyn Fn(Buf, &pipeline::Upload<'_>) -> i32,
        total: usize,
        up: usize,
    ) -> Result<(), BackendError> {
        let Some((_, pool)) = self.capture_pool.as_ref() else {
            return Err(dev("a step captured into a CUDA graph needs one step run before the capture (it reserves the capture pool)"));
        };
        let Some(arena) = self.arena.as_ref().filter(|a| a.len() >= total) else {
            return Err(dev("a step captured into a CUDA graph must not allocate (the arena): run a step of this shape once before capturing"));
        };
        let start = self.capture_used.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        if start + up > CAPTURE_POOL_BYTES {
            return Err(dev(format!("the capture pool ({CAPTURE_POOL_BYTES} pinned bytes) is full after {start} bytes of captured steps' metadata")));
        }
        if up > 0 {
            // SAFETY: [start, start + up) lies inside the pool (checked), which lives as long as
            // `self`; no other capture uses this range and no copy reads it yet.
            let host = unsafe { std::slice::from_raw_parts_mut((*pool as *mut u8).add(start), up) };
            pack_inputs(list, class, &self.input_at, host);
            let dst = arena.device_ptr(&self.stream).0;
            // SAFETY: `up` bytes fit the arena (checked); ordered on our (capturing) stream.
            unsafe { cudarc::driver::result::memcpy_htod_async(dst, &*host, self.stream.cu_stream()) }.map_err(dev)?;
            self.capture_used = start + up;
        }
        self.fill_outputs(list, class)
    }

    fn stream_for(&self, buf: Buf) -> Arc<CudaStream> {
        // Grammar masks go up on a side stream (SAMPLER.md section 9, the seed's mask copy).
        if matches!(buf, Buf::Masks | Buf::HasMask) {
            self.copy_stream.clone()
        } else {
            self.stream.clone()
        }
    }
}

impl Device for CudaDevice {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn caps(&self, v: u32, n: u32) -> Caps {
        Caps {
            mask_chunk: (mask_chunks(v) > 1).then_some(MASK_CHUNK),
            topn_chunks: self.chunks_for(v, n),
            fused_max: FUSED_MAX,
            counts_in_topn: self.counts_in_topn,
        }
    }

    fn alloc(&mut self, buf: Buf, len: usize) -> Result<(), BackendError> {
        let st = self.stream.clone();
        self.input_at[buf as usize] = None;
        let fits = match &self.bufs[buf as usize] {
            DStore::F32(s) => s.len() >= len.max(1),
            DStore::I32(s) => s.len() >= len.max(1),
            DStore::U32(s) => s.len() >= len.max(1),
            DStore::U64(s) => s.len() >= len.max(1),
        };
        if !fits && self.capturing {
            return Err(dev(format!("a step captured into a CUDA graph must not allocate ({buf:?} needs {len}): run a step of this shape once before capturing")));
        }
        let old = match &mut self.bufs[buf as usize] {
            DStore::F32(s) => grow(s, &st, len)?.map(DStore::F32),
            DStore::I32(s) => grow(s, &st, len)?.map(DStore::I32),
            DStore::U32(s) => grow(s, &st, len)?.map(DStore::U32),
            DStore::U64(s) => grow(s, &st, len)?.map(DStore::U64),
        };
        if let Some(old) = old {
            self.generation += 1;
            if self.graph_held {
                self.retired.push(old);
            }
        }
        Ok(())
    }

    fn upload_inputs(&mut self, list: &[(Buf, pipeline::Upload<'_>)]) -> Result<(), BackendError> {
        use pipeline::{Upload, OUTPUTS};
        // Arena layout, each buffer ARENA_ALIGN-aligned: host data, then
        // fills (uploaded: only this step's kernels touch them), then the
        // outputs, a filled output (the tree path) first, set by a device
        // memset instead (an engine may still be reading the last step's
        // outputs when the next copy lands): the upload is one prefix and the
        // read-back one range.
        let class = |b: Buf, u: &Upload<'_>| match u {
            Upload::Data(_) => 0,
            Upload::Fill(..) if !OUTPUTS.contains(&b) || prim_bytes(b.prim()) != 4 => 1,
            Upload::Fill(..) => 2,
            Upload::Output(_) => 3,
        };
        let mut order: Vec<usize> = (0..list.len()).collect();
        order.sort_by_key(|&i| class(list[i].0, &list[i].1));
        self.input_at.iter_mut().for_each(|a| *a = None);
        let (mut total, mut up) = (0usize, 0usize);
        for &i in &order {
            let (b, u) = &list[i];
            let len = match u {
                Upload::Data(h) => h.len(),
                Upload::Fill(_, len) | Upload::Output(len) => *len,
            };
            let bytes = len * prim_bytes(b.prim());
            self.input_at[*b as usize] = Some((total, bytes));
            if class(*b, u) < 2 {
                up = total + bytes;
            }
            total += bytes.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        }
        let total = total.max(ARENA_ALIGN);
        if self.capturing {
            return self.upload_captured(list, &class, total, up);
        }
        if self.capture_pool.is_none() {
            // SAFETY: plain bytes, written by the host before any copy reads them.
            let mut pool = unsafe { self.stream.context().alloc_pinned::<u8>(CAPTURE_POOL_BYTES) }.map_err(dev)?;
            let ptr = pool.as_mut_ptr().map_err(dev)? as usize;
            self.capture_pool = Some((pool, ptr));
        }
        if self.arena.as_ref().is_none_or(|a| a.len() < total) {
            let want = total.max(self.arena.as_ref().map_or(0, |a| a.len() * 3 / 2));
            let old = self.arena.replace(self.stream.alloc_zeros::<u8>(want).map_err(dev)?);
            if let (Some(old), true) = (old, self.graph_held) {
                self.retired_arenas.push(old);
            }
            self.generation += 1;
            // The copy must also wait for the new arena's allocation on our stream.
            self.arena_free_recorded = false;
        }
        // The previous step's metadata copy must be done before the staging is written again.
        self.staging_copied.synchronize().map_err(dev)?;
        if self.staging.as_ref().is_none_or(|s| s.0.len() < up.max(1)) {
            let want = up.max(ARENA_ALIGN).max(self.staging.as_ref().map_or(0, |s| s.0.len() * 3 / 2));
            // SAFETY: plain bytes; every byte a kernel reads is written below first.
            let mut st = unsafe { self.stream.context().alloc_pinned::<u8>(want) }.map_err(dev)?;
            let ptr = st.as_mut_ptr().map_err(dev)?;
            self.staging = Some((st, ptr));
        }
        let (st, ptr) = self.staging.as_ref().expect("sized above");
        // SAFETY: `ptr` is the pinned allocation `st` (alive, st.len() bytes, no copy reading it now).
        let host = unsafe { std::slice::from_raw_parts_mut(*ptr, st.len()) };
        pack_inputs(list, &class, &self.input_at, host);
        // After a capture, a graph replayed on the caller's stream may still be using the
        // arena: record `arena_free` now, after our stream joined the caller's (bind_logits).
        let recorded = std::mem::take(&mut self.arena_free_recorded) && !self.graph_held;
        if up > 0 {
            let dst = self.arena.as_ref().expect("sized above").device_ptr(&self.stream).0;
            // One async copy of the whole step's metadata (and fills), from pinned
            // memory, on the copy stream: after the earlier steps' kernels are done
            // with the arena's inputs (`arena_free`, recorded right after their
            // launches when they were enqueued by `CudaBackend`), before this
            // step's kernels, and not after whatever else our stream or the
            // engine's runs in between (the forward producing the logits).
            if !recorded {
                self.arena_free.record(&self.stream).map_err(dev)?;
            }
            self.copy_stream.wait(&self.arena_free).map_err(dev)?;
            // SAFETY: `up` bytes fit both the staging and the arena (sized above).
            unsafe { cudarc::driver::result::memcpy_htod_async(dst, &host[..up], self.copy_stream.cu_stream()) }
                .map_err(dev)?;
            self.staging_copied.record(&self.copy_stream).map_err(dev)?;
            self.stream.wait(&self.staging_copied).map_err(dev)?;
        }
        self.fill_outputs(list, &class)
    }

    fn upload(&mut self, buf: Buf, data: HostSlice<'_>) -> Result<(), BackendError> {
        self.alloc(buf, data.len())?;
        self.input_at[buf as usize] = None;
        if data.is_empty() {
            return Ok(());
        }
        let st = self.stream_for(buf);
        let side = !Arc::ptr_eq(&st, &self.stream);
        if side {
            // Event tracking is off in this context: these events are the only ordering.
            st.wait(&self.stream.record_event(None).map_err(dev)?).map_err(dev)?;
        }
        match (&mut self.bufs[buf as usize], data) {
            (DStore::F32(s), HostSlice::F32(d)) => st.memcpy_htod(d, s).map_err(dev)?,
            (DStore::I32(s), HostSlice::I32(d)) => st.memcpy_htod(d, s).map_err(dev)?,
            (DStore::U32(s), HostSlice::U32(d)) => st.memcpy_htod(d, s).map_err(dev)?,
            (DStore::U64(s), HostSlice::U64(d)) => st.memcpy_htod(d, s).map_err(dev)?,
            _ => return Err(dev(format!("upload to {buf:?}: element type mismatch"))),
        }
        if side {
            self.stream.wait(&st.record_event(None).map_err(dev)?).map_err(dev)?;
        }
        Ok(())
    }

    fn fill(&mut self, buf: Buf, len: usize, value: LaunchArg<()>) -> Result<(), BackendError> {
        match value {
            LaunchArg::F32(x) => self.upload(buf, HostSlice::F32(&vec![x; len])),
            LaunchArg::I32(x) => self.upload(buf, HostSlice::I32(&vec![x; len])),
            LaunchArg::U32(x) => self.upload(buf, HostSlice::U32(&vec![x; len])),
            LaunchArg::U64(x) => self.upload(buf, HostSlice::U64(&vec![x; len])),
            other => Err(dev(format!("fill of {buf:?} with {other:?}"))),
        }
    }

    fn bind_logits(&mut self, plan: &StepPlan<'_>) -> Result<(), BackendError> {
        use half::slice::HalfFloatSliceExt;
        self.ext_logits = None;
        self.capturing = false;
        // No kernel writes Buf::Logits (a grammar mask goes to Buf::Masked,
        // written by the mask check): the kernels read the logits where they
        // are, in their own element type, widened to f32 at load.
        let bits: &[u16] = match &plan.logits {
            Logits::Cuda(c) => {
                // The engine's stream wrote them: ours waits for it (no host
                // sync; nothing to order when they were written on ours).
                if c.stream().cu_stream() != self.stream.cu_stream() {
                    self.logits_ready.record(c.stream()).map_err(dev)?;
                    self.stream.wait(&self.logits_ready).map_err(dev)?;
                    // When that stream is capturing a graph, the wait made ours join the capture.
                    // SAFETY: our own live stream.
                    let status = unsafe { cudarc::driver::result::stream::is_capturing(self.stream.cu_stream()) }
                        .map_err(dev)?;
                    self.capturing =
                        status != cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
                    self.graph_held |= self.capturing;
                }
                self.ext_logits = Some((c.ptr(), c.dtype().code()));
                return Ok(());
            }
            Logits::Bf16(s) => s.reinterpret_cast(),
            Logits::F16(s) => s.reinterpret_cast(),
            Logits::F32(s) => return self.upload(Buf::Logits, HostSlice::F32(s)),
            Logits::Owned(v) => return self.upload(Buf::Logits, HostSlice::F32(v)),
        };
        let code = if matches!(plan.logits, Logits::Bf16(_)) { Dtype::Bf16.code() } else { Dtype::F16.code() };
        let st = self.stream.clone();
        let fits = self.half_logits.as_ref().is_some_and(|b| b.len() >= bits.len().max(1));
        if !fits && self.capturing {
            return Err(dev(format!("a step captured into a CUDA graph must not allocate (host half logits need {}): run a step of this shape once before capturing", bits.len())));
        }
        let buf = match &mut self.half_logits {
            Some(b) => b,
            none => none.insert(st.alloc_zeros::<u16>(bits.len().max(1)).map_err(dev)?),
        };
        if let Some(old) = grow(buf, &st, bits.len())? {
            self.generation += 1;
            if self.graph_held {
                // An outside graph may still point at it (as `retired`).
                self.retired_halves.push(old);
            }
        }
        if !bits.is_empty() {
            st.memcpy_htod(bits, buf).map_err(dev)?;
        }
        self.ext_logits = Some((buf.device_ptr(&st).0, code));
        Ok(())
    }

    fn launch(&mut self, l: &Launch) -> Result<(), BackendError> {
        let v = l.variant;
        let f = self.func(v)?;
        let smem = v.shared + gpu_stage_bytes(v.shared, l.stage);
        let cfg = LaunchConfig { grid_dim: (l.grid, 1, 1), block_dim: (v.threads, 1, 1), shared_mem_bytes: smem };
        // Scalars (and the caller's logits pointer) must outlive the builder.
        let (ext, ext_dtype) = self.ext_logits.unwrap_or((0, 0));
        // A `Logits` parameter's element type code: the bound logits' own, or
        // f32 for our buffers (Buf::Masked, or host f32 logits in Buf::Logits).
        let f32_code = sampler_kernels::codes::LOGITS_F32;
        let args = &l.args;
        let base = match &self.arena {
            Some(a) => a.device_ptr(&self.stream).0,
            None => 0,
        };
        let mut ptrs = std::mem::take(&mut self.ptrs);
        ptrs.clear();
        ptrs.extend(args.iter().map(|a| {
            match a {
                // The caller's output buffer this step, else the arena's range.
                LaunchArg::Buf(b) => self.ext_out[*b as usize]
                    .unwrap_or_else(|| self.input_at[*b as usize].map_or(0, |(off, _)| base + off as u64)),
                _ => 0,
            }
        }));
        let mut lb = self.stream.launch_builder(&f);
        for ((a, ptr), prm) in args.iter().zip(&ptrs).zip(l.spec.params) {
            match a {
                LaunchArg::Buf(Buf::Logits) if self.ext_logits.is_some() => {
                    lb.arg(&ext);
                }
                // A buffer packed in the input arena this step.
                LaunchArg::Buf(_) if *ptr != 0 => {
                    lb.arg(ptr);
                }
                LaunchArg::Buf(b) => match &self.bufs[*b as usize] {
                    DStore::F32(s) => {
                        lb.arg(s);
                    }
                    DStore::I32(s) => {
                        lb.arg(s);
                    }
                    DStore::U32(s) => {
                        lb.arg(s);
                    }
                    DStore::U64(s) => {
                        lb.arg(s);
                    }
                },
                LaunchArg::Bool(x) => {
                    lb.arg(x);
                }
                LaunchArg::I32(x) => {
                    lb.arg(x);
                }
                LaunchArg::U32(x) => {
                    lb.arg(x);
                }
                LaunchArg::I64(x) => {
                    lb.arg(x);
                }
                LaunchArg::U64(x) => {
                    lb.arg(x);
                }
                LaunchArg::F32(x) => {
                    lb.arg(x);
                }
                LaunchArg::F64(x) => {
                    lb.arg(x);
                }
            }
            // A `Logits` parameter takes its pointer, then its element type code.
            if prm.kind == ParamKind::Logits {
                lb.arg(if matches!(a, LaunchArg::Buf(Buf::Logits)) && self.ext_logits.is_some() {
                    &ext_dtype
                } else {
                    &f32_code
                });
            }
        }
        // SAFETY: the arguments come from the kernel's generated `Args` (its
        // signature, in order); the pipeline sized every buffer for the step.
        let r = unsafe { lb.launch(cfg) }.map_err(dev);
        self.ptrs = ptrs;
        r.map(|_| ())
    }

    fn download(&mut self, buf: Buf, offset: usize, out: HostSliceMut<'_>) -> Result<(), BackendError> {
        let w = prim_bytes(buf.prim());
        let (dst, n) = match out {
            HostSliceMut::F32(o) if buf.prim() == Prim::F32 => (o.as_mut_ptr() as *mut u8, o.len()),
            HostSliceMut::I32(o) if buf.prim() == Prim::I32 => (o.as_mut_ptr() as *mut u8, o.len()),
            HostSliceMut::U32(o) if buf.prim() == Prim::U32 => (o.as_mut_ptr() as *mut u8, o.len()),
            HostSliceMut::U64(o) if buf.prim() == Prim::U64 => (o.as_mut_ptr() as *mut u8, o.len()),
            _ => return Err(dev(format!("download of {buf:?}: element type mismatch"))),
        };
        let bytes = n * w;
        if bytes == 0 {
            return Ok(());
        }
        // A buffer in the arena: copied at `finish`, with the step's other
        // outputs, in one copy of their packed range.
        if let Some((off, have)) = self.input_at[buf as usize] {
            if (offset + n) * w > have {
                return Err(dev(format!("download of {buf:?} past its end")));
            }
            self.pending_arena.push((off + offset * w, dst, bytes));
            return Ok(());
        }
        // Else the buffer's own allocation.
        let (src, have) = match &self.bufs[buf as usize] {
            DStore::F32(s) => (s.device_ptr(&self.stream).0, s.len() * 4),
            DStore::I32(s) => (s.device_ptr(&self.stream).0, s.len() * 4),
            DStore::U32(s) => (s.device_ptr(&self.stream).0, s.len() * 4),
            DStore::U64(s) => (s.device_ptr(&self.stream).0, s.len() * 8),
        };
        if (offset + n) * w > have {
            return Err(dev(format!("download of {buf:?} past its end")));
        }
        let need = self.out_used.div_ceil(16) * 16 + bytes;
        if self.out_staging.as_ref().is_none_or(|s| s.len() < need) {
            // Growing drops what earlier downloads of this step put there: copy them out first.
            self.finish()?;
            let want = need.max(self.out_staging.as_ref().map_or(0, |s| s.len() * 3 / 2)).max(1 << 16);
            // SAFETY: plain bytes, written by the device before the host reads them; default
            // flags (not write-combined): the host reads this memory.
            self.out_staging =
                Some(unsafe { self.stream.context().alloc_pinned_with_flags::<u8>(want, 0) }.map_err(dev)?);
        }
        let at = self.out_used.div_ceil(16) * 16;
        let host = self.out_staging.as_mut().expect("sized above").as_mut_ptr().map_err(dev)?;
        // SAFETY: `at + bytes` is inside the pinned buffer; the device range was checked above.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(
                std::slice::from_raw_parts_mut(host.add(at), bytes),
                src + (offset * w) as u64,
                self.stream.cu_stream(),
            )
        }
        .map_err(dev)?;
        self.pending.push((at, dst, bytes));
        self.out_used = at + bytes;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), BackendError> {
        let lo = self.pending_arena.iter().map(|p| p.0).min().unwrap_or(0);
        let hi = self.pending_arena.iter().map(|p| p.0 + p.2).max().unwrap_or(0);
        if hi > lo {
            if self.out_region.as_ref().is_none_or(|r| r.0.len() < hi - lo) {
                let want = (hi - lo).max(self.out_region.as_ref().map_or(0, |r| r.0.len() * 3 / 2)).max(1 << 16);
                // SAFETY: plain bytes, written by the device before the host reads them; default
                // flags (not write-combined): the host reads this memory.
                let mut r = unsafe { self.stream.context().alloc_pinned_with_flags::<u8>(want, 0) }.map_err(dev)?;
                let ptr = r.as_mut_ptr().map_err(dev)?;
                self.out_region = Some((r, ptr));
            }
            let (r, ptr) = self.out_region.as_ref().expect("sized above");
            let src =
                self.arena.as_ref().expect("arena buffers were downloaded").device_ptr(&self.stream).0 + lo as u64;
            // SAFETY: `hi - lo` bytes fit the pinned region and lie in the arena (checked at `download`).
            unsafe {
                cudarc::driver::result::memcpy_dtoh_async(
                    std::slice::from_raw_parts_mut(*ptr, (hi - lo).min(r.len())),
                    src,
                    self.stream.cu_stream(),
                )
            }
            .map_err(dev)?;
        }
        self.stream.synchronize().map_err(dev)?;
        if let Some((_, host)) = &self.out_region {
            for (at, dst, bytes) in self.pending_arena.drain(..) {
                // SAFETY: `dst` is the caller's `out` of `download`, alive and unmoved
                // until `finish` (the Device contract); the copy has completed.
                unsafe { std::ptr::copy_nonoverlapping(host.add(at - lo), dst, bytes) };
            }
        }
        if let Some(st) = &self.out_staging {
            let host = st.as_ptr().map_err(dev)?;
            for (at, dst, bytes) in self.pending.drain(..) {
                // SAFETY: `dst` is the caller's `out` of `download`, alive and unmoved
                // until `finish` (the Device contract); the copy has completed.
                unsafe { std::ptr::copy_nonoverlapping(host.add(at), dst, bytes) };
            }
        }
        self.out_used = 0;
        Ok(())
    }
}

/// Runs every kernel on the first CUDA device, through [`crate::runtime::pipeline`].
pub struct CudaBackend {
    d: CudaDevice,
    device: String,
    timing: bool,
    last_kernel_ms: Option<f32>,
    full_row: bool,
    /// The program of the last [`Self::prepare_step`].
    prog: Option<Program>,
}

// SAFETY: the backend is used by one thread at a time (`&mut self`); cudarc's
// handles are Send, and the context is bound to the calling thread per call.
unsafe impl Send for CudaBackend {}
unsafe impl Send for CudaDevice {}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend").field("device", &self.device).finish()
    }
}

impl CudaBackend {
    /// The CUDA backend on device 0, or [`ConfigError::BackendUnavailable`]
    /// when there is no driver, no device, or the PTX does not load.
    pub fn new() -> Result<CudaBackend, ConfigError> {
        let sh = shared()?;
        let d = CudaDevice::new(sh).map_err(|e| ConfigError::BackendUnavailable("cuda", e.to_string()))?;
        Ok(CudaBackend {
            d,
            device: sh.device.clone(),
            timing: false,
            last_kernel_ms: None,
            full_row: false,
            prog: None,
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        &self.device
    }

    /// The stream every launch goes to (for timing with events).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.d.stream
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
        &self.d.tuning
    }

    /// Forces the chunk count of the multi-block top-N (autotune; `None` = table).
    pub fn set_chunks_override(&mut self, c: Option<u32>) {
        self.d.chunks_override = c;
    }

    /// Takes each row's bad / finite counts from the top-N kernels' own
    /// read of the logits on steps without masks or raw rows
    /// ([`Caps::counts_in_topn`]; no mask check launch). Off by default
    /// (not yet timed on a GPU); `SAMPLER_COUNTS_IN_TOPN=1` when the backend
    /// is created sets it too. Results are the same bits either way.
    pub fn set_counts_in_topn(&mut self, on: bool) {
        self.d.counts_in_topn = on;
    }

    /// Whether [`Self::set_counts_in_topn`] (or the environment) switched
    /// the counted top-N on.
    pub fn counts_in_topn(&self) -> bool {
        self.d.counts_in_topn
    }

    /// Always takes the full-row path without force top-k (no prefix path,
    /// [`StepPlan::prefix_width`]); for comparisons.
    pub fn set_full_row(&mut self, on: bool) {
        self.full_row = on;
    }

    /// The candidate width the kernels run on for `p`, and whether it is the
    /// prefix path ([`StepPlan::prefix_width`]) rather than N.
    pub fn width(&self, p: &StepPlan<'_>) -> (u32, bool) {
        match pipeline::choose(p, self.full_row) {
            Some(w) => (w, true),
            None => (p.n, false),
        }
    }

    /// Blocks per row of the top-N selection for (V, N) (by V and N only).
    pub fn chunks_for(&self, v: u32, n: u32) -> u32 {
        self.d.chunks_for(v, n)
    }

    /// The device as a [`Device`] (the pipeline's view).
    pub fn device(&mut self) -> &mut CudaDevice {
        &mut self.d
    }

    /// Device-resident use (benchmarks): builds the step's program, uploads
    /// every input of `p` and sizes the buffers; afterwards
    /// [`Self::launch_step`] runs the kernels on the device copy only.
    pub fn prepare_step(&mut self, p: &StepPlan<'_>) -> Result<(), BackendError> {
        let prog = pipeline::build_for(&self.d, p, pipeline::choose(p, self.full_row))?;
        pipeline::prepare(&mut self.d, p, &prog)?;
        self.prog = Some(prog);
        Ok(())
    }

    fn program(&self) -> Result<Program, BackendError> {
        self.prog.clone().ok_or_else(|| dev("launch before prepare_step"))
    }

    /// Launches the step's kernels (inputs from [`Self::prepare_step`]); no host sync.
    pub fn launch_step(&mut self, _p: &StepPlan<'_>) -> Result<(), BackendError> {
        let prog = self.program()?;
        pipeline::launch_all(&mut self.d, &prog)
    }

    /// Launches the step with an event after each kernel, waits, and returns
    /// each kernel's device time in ms, in launch order.
    pub fn launch_step_timed(&mut self, _p: &StepPlan<'_>) -> Result<Vec<(&'static str, f32)>, BackendError> {
        let prog = self.program()?;
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let e0 = self.d.stream.record_event(flags).map_err(dev)?;
        let mut evs = Vec::new();
        for l in &prog.launches {
            self.d.launch(l)?;
            evs.push((l.spec.name, self.d.stream.record_event(flags).map_err(dev)?));
        }
        self.d.stream.synchronize().map_err(dev)?;
        let mut out = Vec::new();
        let mut prev = &e0;
        for (name, e) in &evs {
            out.push((*name, prev.elapsed_ms(e).map_err(dev)?));
            prev = e;
        }
        Ok(out)
    }

    /// Captures the step's kernels (fixed shapes, inputs already prepared) as a CUDA graph.
    pub fn capture_step(&mut self, p: &StepPlan<'_>) -> Result<cudarc::driver::CudaGraph, BackendError> {
        // One eager launch first: functions are loaded and attributes set outside the capture.
        self.launch_step(p)?;
        self.d.stream.synchronize().map_err(dev)?;
        self.d
            .stream
            .begin_capture(cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(dev)?;
        let r = self.launch_step(p);
        let g = self.d.stream.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0)).map_err(dev)?;
        r?;
        let g = g.ok_or_else(|| BackendError::Device { backend: "cuda", msg: "empty graph".into() })?;
        g.upload().map_err(dev)?;
        Ok(g)
    }

    /// Reads the outputs of the last launched step back. On the prefix path
    /// ([`StepPlan::prefix_width`]) a step whose kept sets do not all fit is
    /// run again here, eagerly, on the full-row path (a captured graph holds
    /// the prefix path only), so the results are always the full-row path's.
    pub fn collect_step(&mut self, p: &StepPlan<'_>) -> Result<StepResult, BackendError> {
        let prog = self.program()?;
        let (res, overflow) = pipeline::collect(&mut self.d, p, &prog)?;
        if prog.prefix && p.prefix_overflowed(&res.group_status, &overflow) {
            return Ok(pipeline::run_program(&mut self.d, p, None)?.0);
        }
        Ok(res)
    }

    /// Enqueues step `p` with its outputs written straight into `out` (the
    /// caller's buffers, sized for `p`: see [`OutputPtrs`]) rather than
    /// into our arena: no copy. [`Self::outputs`] and a later collect do not
    /// see this step's outputs.
    pub fn enqueue_into(&mut self, p: &StepPlan<'_>, out: &OutputPtrs) -> Result<(), BackendError> {
        for (b, x) in [
            (Buf::Tokens, out.tokens),
            (Buf::TokenLp, out.logprobs),
            (Buf::TopIds, out.top_ids),
            (Buf::TopLps, out.top_logprobs),
            (Buf::SumSmaller, out.sum_smaller_probs),
            (Buf::Accepted, out.accepted),
            (Buf::GroupStatus, out.status),
        ] {
            self.d.ext_out[b as usize] = x.filter(|&a| a != 0);
        }
        let r = self.enqueue(p);
        self.d.ext_out.iter_mut().for_each(|x| *x = None);
        r.map(|_| ())
    }

    /// The device buffer holding the logits (`[R, V]` f32 after [`Self::prepare_step`]
    /// of a plan with host f32 logits).
    pub fn logits_buffer(&mut self) -> &mut CudaSlice<f32> {
        match &mut self.d.bufs[Buf::Logits as usize] {
            DStore::F32(s) => s,
            _ => unreachable!("Logits is f32"),
        }
    }
}

/// Device addresses (in the sampler's context) the kernels of one step
/// write its outputs to, instead of the sampler's own arena
/// ([`crate::Sampler::sample_async_into`]); `None` = the sampler's own. Sizes:
/// `tokens`, `logprobs`, `sum_smaller_probs` `[R]`, `top_ids`,
/// `top_logprobs` `[R, k]`, `accepted`, `status` `[G]` (4-byte elements:
/// i32, f32, u32 for `accepted`), with the (R, k, G) the callback is given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutputPtrs {
    /// `[R]` i32 token per row.
    pub tokens: Option<u64>,
    /// `[R]` f32 logprob of the row's token (or prompt target).
    pub logprobs: Option<u64>,
    /// `[R, k]` i32 top-logprob ids.
    pub top_ids: Option<u64>,
    /// `[R, k]` f32 top logprobs.
    pub top_logprobs: Option<u64>,
    /// `[R]` f32 `sum_smaller_probs`.
    pub sum_smaller_probs: Option<u64>,
    /// `[G]` u32 drafts accepted per request.
    pub accepted: Option<u64>,
    /// `[G]` i32 request status (0 ok, -1 failed on the host, 1 bad logit value, 2 all masked).
    pub status: Option<u64>,
}

/// The outputs of the last enqueued step, still on the device (stream
/// ordered: valid for kernels the engine enqueues on the sampler's stream,
/// or after waiting). Rows of failed requests hold -1 tokens.
///
/// They live in the sampler's step arena, packed (one copy reads them all
/// back), until the next step: work on another stream that reads them must
/// be ordered before the sampler's next call (make
/// [`crate::Sampler::cuda_stream`] wait for an event recorded after it).
#[derive(Debug)]
pub struct DeviceOutputs<'a> {
    /// `[R]` i32 output token per row (-1 none).
    pub tokens: cudarc::driver::CudaView<'a, i32>,
    /// `[R]` f32 processed logprob of the row's token (or prompt target).
    pub logprobs: cudarc::driver::CudaView<'a, f32>,
    /// `[R, k]` i32 top-logprob ids (k = the batch's top-logprobs width).
    pub top_ids: cudarc::driver::CudaView<'a, i32>,
    /// `[R, k]` f32 top logprobs.
    pub top_logprobs: cudarc::driver::CudaView<'a, f32>,
    /// `[R]` f32 `sum_smaller_probs` of the row's token.
    pub sum_smaller_probs: cudarc::driver::CudaView<'a, f32>,
    /// `[G]` u32 drafts accepted per request (G = requests).
    pub accepted: cudarc::driver::CudaView<'a, u32>,
    /// `[G]` i32 request status on the device (0 ok).
    pub status: cudarc::driver::CudaView<'a, i32>,
    /// `[R]` i32 tree paths (section 11.9; `None` unless the step has a
    /// tree request): a tree request's rows hold its accepted path's node
    /// indices, root first (`accepted + 1` of them), the rest -1.
    pub path: Option<cudarc::driver::CudaView<'a, i32>>,
}

/// A step captured as a CUDA graph ([`crate::Sampler::capture`]): replays any
/// step of the same shape (rows, requests, kinds, widths, logits buffer).
pub struct StepGraph {
    graph: cudarc::driver::CudaGraph,
    prog: Program,
    generation: u64,
    ext_logits: Option<(u64, u32)>,
}

impl std::fmt::Debug for StepGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepGraph").field("kernels", &self.prog.kernel_names()).finish_non_exhaustive()
    }
}

impl CudaBackend {
    /// The program of a device-resident step: the prefix path only where it
    /// can never ask for a rerun ([`StepPlan::prefix_never_reruns`]).
    fn device_program(&self, p: &StepPlan<'_>) -> Result<Program, BackendError> {
        let prefix = pipeline::choose(p, self.full_row).filter(|_| p.prefix_never_reruns());
        pipeline::build_for(&self.d, p, prefix)
    }

    /// The outputs of the last enqueued step on the device (`None` before any).
    pub fn outputs(&self, p: &StepPlan<'_>) -> Option<DeviceOutputs<'_>> {
        let (r, k, g) = (p.rows as usize, p.k as usize, p.groups());
        let prog = self.prog.as_ref()?;
        let arena = self.d.arena.as_ref()?;
        fn view<'a, T>(
            d: &'a CudaDevice,
            arena: &'a CudaSlice<u8>,
            b: Buf,
            len: usize,
        ) -> Option<cudarc::driver::CudaView<'a, T>> {
            let (off, bytes) = d.input_at[b as usize]?;
            // SAFETY: the buffer holds `bytes / size_of::<T>()` elements of T (its Buf::prim()).
            unsafe { arena.slice(off..off + bytes).transmute::<T>(len.min(bytes / std::mem::size_of::<T>())) }
        }
        let tree = prog.launches.iter().any(|l| l.spec.name == sampler_kernels::kernels::tree_walk::NAME);
        Some(DeviceOutputs {
            tokens: view(&self.d, arena, Buf::Tokens, r)?,
            logprobs: view(&self.d, arena, Buf::TokenLp, r)?,
            top_ids: view(&self.d, arena, Buf::TopIds, r * k)?,
            top_logprobs: view(&self.d, arena, Buf::TopLps, r * k)?,
            sum_smaller_probs: view(&self.d, arena, Buf::SumSmaller, r)?,
            accepted: view(&self.d, arena, Buf::Accepted, g)?,
            status: view(&self.d, arena, Buf::GroupStatus, g)?,
            path: if tree { Some(view(&self.d, arena, Buf::Path, r)?) } else { None },
        })
    }

    /// Captures the kernels of a step of `p`'s shape as a CUDA graph, after
    /// one eager run (kernels loaded, buffers sized: replays allocate nothing).
    /// [`Self::replay`] then runs any step of the same shape.
    pub fn capture(&mut self, p: &StepPlan<'_>) -> Result<StepGraph, BackendError> {
        self.enqueue(p)?;
        self.d.stream.synchronize().map_err(dev)?;
        let prog = self.device_program(p)?;
        pipeline::prepare(&mut self.d, p, &prog)?;
        let generation = self.d.generation;
        self.d
            .stream
            .begin_capture(cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(dev)?;
        let r = pipeline::launch_all(&mut self.d, &prog);
        let g = self.d.stream.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0)).map_err(dev)?;
        r?;
        let graph = g.ok_or_else(|| dev("empty graph"))?;
        graph.upload().map_err(dev)?;
        Ok(StepGraph { graph, prog, generation, ext_logits: self.d.ext_logits })
    }

    /// Replays `graph` for step `p` (same shape as captured): uploads `p`'s
    /// metadata (one async copy) and launches the graph; no host wait.
    /// Errors: a step of another shape, other device logits, or buffers
    /// that moved since the capture (capture again).
    pub fn replay(&mut self, graph: &StepGraph, p: &StepPlan<'_>) -> Result<(), BackendError> {
        let prog = self.device_program(p)?;
        if !prog.same_launches(&graph.prog) {
            return Err(dev(
                "this step's shape differs from the captured graph's (rows, requests, widths): capture one for it",
            ));
        }
        pipeline::prepare(&mut self.d, p, &prog)?;
        if self.d.generation != graph.generation || self.d.ext_logits != graph.ext_logits {
            return Err(dev("device buffers or the logits buffer changed since the capture: capture again"));
        }
        graph.graph.launch().map_err(dev)?;
        self.d.mark_launched()?;
        self.prog = Some(prog);
        Ok(())
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn enqueue(&mut self, p: &StepPlan<'_>) -> Result<Option<StepResult>, BackendError> {
        let prog = self.device_program(p)?;
        if p.rows > 0 {
            pipeline::prepare(&mut self.d, p, &prog)?;
            pipeline::launch_all(&mut self.d, &prog)?;
            self.d.mark_launched()?;
        }
        self.prog = Some(prog);
        Ok(None)
    }

    fn collect(&mut self, p: &StepPlan<'_>) -> Result<StepResult, BackendError> {
        self.collect_step(p)
    }

    fn as_cuda(&mut self) -> Option<&mut CudaBackend> {
        Some(self)
    }

    fn run(&mut self, p: &StepPlan<'_>) -> Result<StepResult, BackendError> {
        if !self.timing {
            return pipeline::run_step(&mut self.d, p, self.full_row);
        }
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let prefix = pipeline::choose(p, self.full_row);
        let prog = pipeline::build_for(&self.d, p, prefix)?;
        if p.rows > 0 {
            pipeline::prepare(&mut self.d, p, &prog)?;
        }
        let t0 = self.d.stream.record_event(flags).map_err(dev)?;
        if p.rows > 0 {
            pipeline::launch_all(&mut self.d, &prog)?;
        }
        let t1 = self.d.stream.record_event(flags).map_err(dev)?;
        let (res, overflow) = pipeline::collect(&mut self.d, p, &prog)?;
        self.last_kernel_ms = Some(t0.elapsed_ms(&t1).map_err(dev)?);
        if prog.prefix && p.prefix_overflowed(&res.group_status, &overflow) {
            return Ok(pipeline::run_program(&mut self.d, p, None)?.0);
        }
        Ok(res)
    }
}
