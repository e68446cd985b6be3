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

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PinnedHostSlice, PushKernelArg, ValidAsZeroBits};
use sampler_kernels::codes::MAX_N_NVIDIA;
use sampler_kernels::spec::{gpu_stage_bytes, LaunchArg, ParamKind, Prim, Variant, GPU_SMEM_BASE};

use crate::error::{BackendError, ConfigError};
use crate::interop::Dtype;
use crate::pipeline::{self, Buf, Caps, Device, HostSlice, HostSliceMut, Launch, Program};
use crate::plan::{Backend, Logits, StepPlan, StepResult};

/// Committed tuning tables, `(file name, JSON)`: the one whose `"device"`
/// equals the device's name is used (`examples/autotune.rs` writes them;
/// `SAMPLER_CUDA_TUNING=path` overrides). Unknown devices: [`default_chunks`].
pub const TUNING_TABLES: &[(&str, &str)] = &[("nvidia-h200.json", include_str!("../../tuning/nvidia-h200.json"))];

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
    CHUNK_CANDIDATES.iter().copied().filter(|&c| c * n.max(1) <= MAX_N_NVIDIA && chunks_valid(v, n, c)).max().unwrap_or(1)
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

/// One device buffer of a step, grown (never shrunk) to the sizes steps need.
enum DStore {
    F32(CudaSlice<f32>),
    I32(CudaSlice<i32>),
    U32(CudaSlice<u32>),
    U64(CudaSlice<u64>),
}

/// Grows `s` to hold `len` (by half again at least); true when it moved.
fn grow<T: DeviceRepr + ValidAsZeroBits>(s: &mut CudaSlice<T>, stream: &Arc<CudaStream>, len: usize) -> Result<bool, BackendError> {
    if s.len() < len.max(1) {
        let want = len.max(1).max(s.len() + s.len() / 2);
        *s = stream.alloc_zeros::<T>(want).map_err(dev)?;
        return Ok(true);
    }
    Ok(false)
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
    /// Side stream for grammar-mask uploads; the sampling stream waits on its event.
    mask_stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
    funcs: HashMap<&'static str, CudaFunction>,
    bufs: Vec<DStore>,
    tuning: Tuning,
    chunks_override: Option<u32>,
    /// The logits the kernels read in place this step, as (device address,
    /// element type code): the caller's device buffer, or [`Self::half_logits`]
    /// (host bf16/f16 uploaded as they are). `None`: [`Buf::Logits`] (f32).
    ext_logits: Option<(u64, u32)>,
    /// Host bf16 / f16 logits uploaded in their own element type (half the bytes of f32).
    half_logits: Option<CudaSlice<u16>>,
    /// Inputs and filled buffers of the step, packed: one device arena, its
    /// pinned host staging (one async copy a step), and each buffer's byte
    /// offset in it this step.
    arena: Option<CudaSlice<u8>>,
    staging: Option<PinnedHostSlice<u8>>,
    /// Recorded after the staging's last copy (event tracking is off in this
    /// context, so cudarc records none): the host waits on it, and only on
    /// it, before writing the staging again.
    staging_copied: Option<cudarc::driver::CudaEvent>,
    input_at: Vec<Option<usize>>,
    /// Pinned host memory the downloads land in, and the host copies still
    /// to make from it at `finish` (staging offset, destination, bytes).
    out_staging: Option<PinnedHostSlice<u8>>,
    out_used: usize,
    pending: Vec<(usize, *mut u8, usize)>,
    /// Bumped whenever a device buffer moves (a captured graph is then stale).
    generation: u64,
}

impl CudaDevice {
    fn new(sh: &Shared) -> Result<CudaDevice, BackendError> {
        let stream = sh.ctx.new_stream().map_err(dev)?;
        let mask_stream = sh.ctx.new_stream().map_err(dev)?;
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
            mask_stream,
            module: sh.module.clone(),
            funcs: HashMap::new(),
            bufs,
            tuning: Tuning::for_device(&sh.device),
            chunks_override: None,
            ext_logits: None,
            half_logits: None,
            arena: None,
            staging: None,
            staging_copied: None,
            input_at: vec![None; Buf::ALL.len()],
            out_staging: None,
            out_used: 0,
            pending: Vec::new(),
            generation: 0,
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
            f.set_attribute(CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, most as i32).map_err(dev)?;
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

    fn stream_for(&self, buf: Buf) -> Arc<CudaStream> {
        // Grammar masks go up on a side stream (SAMPLER.md section 9, the seed's mask copy).
        if matches!(buf, Buf::Masks | Buf::HasMask) {
            self.mask_stream.clone()
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
        Caps { mask_chunk: (mask_chunks(v) > 1).then_some(MASK_CHUNK), topn_chunks: self.chunks_for(v, n), fused_max: FUSED_MAX }
    }

    fn alloc(&mut self, buf: Buf, len: usize) -> Result<(), BackendError> {
        let st = self.stream.clone();
        self.input_at[buf as usize] = None;
        let moved = match &mut self.bufs[buf as usize] {
            DStore::F32(s) => grow(s, &st, len),
            DStore::I32(s) => grow(s, &st, len),
            DStore::U32(s) => grow(s, &st, len),
            DStore::U64(s) => grow(s, &st, len),
        }?;
        self.generation += moved as u64;
        Ok(())
    }

    fn upload_inputs(&mut self, list: &[(Buf, pipeline::Upload<'_>)]) -> Result<(), BackendError> {
        use pipeline::Upload;
        // Lay the inputs out in one arena, each ARENA_ALIGN-aligned.
        let mut at = Vec::with_capacity(list.len());
        let mut total = 0usize;
        for (b, u) in list {
            let bytes = match u {
                Upload::Data(h) => h.len(),
                Upload::Fill(_, len) => *len,
            } * prim_bytes(b.prim());
            at.push(total);
            total += bytes.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        }
        let total = total.max(ARENA_ALIGN);
        if self.staging.as_ref().is_none_or(|s| s.len() < total) {
            let want = total.max(self.staging.as_ref().map_or(0, |s| s.len() * 3 / 2));
            // SAFETY: plain bytes; every byte a kernel reads is written below first.
            self.staging = Some(unsafe { self.stream.context().alloc_pinned::<u8>(want) }.map_err(dev)?);
            self.arena = Some(self.stream.alloc_zeros::<u8>(want).map_err(dev)?);
            self.generation += 1;
        }
        if let Some(e) = self.staging_copied.take() {
            // The previous step's metadata copy (the front of that step) must be done.
            e.synchronize().map_err(dev)?;
        }
        let staging = self.staging.as_mut().expect("sized above");
        let host = staging.as_mut_slice().map_err(dev)?;
        for ((b, u), &off) in list.iter().zip(&at) {
            match u {
                Upload::Data(h) => {
                    let src = host_bytes(h);
                    host[off..off + src.len()].copy_from_slice(src);
                }
                Upload::Fill(x, len) => {
                    let bits = x.scalar_bits().unwrap_or(0).to_le_bytes();
                    let w = prim_bytes(b.prim());
                    for i in 0..*len {
                        host[off + i * w..off + (i + 1) * w].copy_from_slice(&bits[..w]);
                    }
                }
            }
            self.input_at[*b as usize] = Some(off);
        }
        let arena = self.arena.as_mut().expect("sized above");
        // One async copy of the whole step's metadata, from pinned memory.
        self.stream.memcpy_htod(staging, arena).map_err(dev)?;
        self.staging_copied = Some(self.stream.record_event(None).map_err(dev)?);
        Ok(())
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
        // No kernel writes Buf::Logits (a grammar mask goes to Buf::Masked,
        // written by the mask check): the kernels read the logits where they
        // are, in their own element type, widened to f32 at load.
        let bits: &[u16] = match &plan.logits {
            Logits::Cuda(c) => {
                // The engine's stream wrote them: ours waits for it (no host sync).
                self.stream.wait(&c.stream().record_event(None).map_err(dev)?).map_err(dev)?;
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
        let buf = match &mut self.half_logits {
            Some(b) => b,
            none => none.insert(st.alloc_zeros::<u16>(bits.len().max(1)).map_err(dev)?),
        };
        self.generation += grow(buf, &st, bits.len())? as u64;
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
        let args = l.args.clone();
        // A `Logits` parameter takes its pointer, then its element type code:
        // the bound logits' own, or f32 for our buffers (Buf::Masked).
        let dtypes: Vec<Option<u32>> = args
            .iter()
            .zip(l.spec.params)
            .map(|(a, p)| {
                (p.kind == ParamKind::Logits).then_some(match a {
                    LaunchArg::Buf(Buf::Logits) if self.ext_logits.is_some() => ext_dtype,
                    _ => sampler_kernels::codes::LOGITS_F32,
                })
            })
            .collect();
        let base = match &self.arena {
            Some(a) => a.device_ptr(&self.stream).0,
            None => 0,
        };
        let ptrs: Vec<u64> = args.iter().map(|a| match a {
            LaunchArg::Buf(b) => self.input_at[*b as usize].map_or(0, |off| base + off as u64),
            _ => 0,
        }).collect();
        let mut lb = self.stream.launch_builder(&f);
        for ((a, ptr), dt) in args.iter().zip(&ptrs).zip(&dtypes) {
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
            if let Some(code) = dt {
                lb.arg(code);
            }
        }
        // SAFETY: the arguments come from the kernel's generated `Args` (its
        // signature, in order); the pipeline sized every buffer for the step.
        unsafe { lb.launch(cfg) }.map_err(dev)?;
        Ok(())
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
        // Source: the arena (inputs and filled outputs) or the buffer's own allocation.
        let (src, have) = match self.input_at[buf as usize] {
            Some(off) => (self.arena.as_ref().expect("arena").device_ptr(&self.stream).0 + off as u64, usize::MAX),
            None => match &self.bufs[buf as usize] {
                DStore::F32(s) => (s.device_ptr(&self.stream).0, s.len() * 4),
                DStore::I32(s) => (s.device_ptr(&self.stream).0, s.len() * 4),
                DStore::U32(s) => (s.device_ptr(&self.stream).0, s.len() * 4),
                DStore::U64(s) => (s.device_ptr(&self.stream).0, s.len() * 8),
            },
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
            self.out_staging = Some(unsafe { self.stream.context().alloc_pinned_with_flags::<u8>(want, 0) }.map_err(dev)?);
        }
        let at = self.out_used.div_ceil(16) * 16;
        let host = self.out_staging.as_mut().expect("sized above").as_mut_ptr().map_err(dev)?;
        // SAFETY: `at + bytes` is inside the pinned buffer; the device range was checked above.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(std::slice::from_raw_parts_mut(host.add(at), bytes), src + (offset * w) as u64, self.stream.cu_stream())
        }
        .map_err(dev)?;
        self.pending.push((at, dst, bytes));
        self.out_used = at + bytes;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), BackendError> {
        self.stream.synchronize().map_err(dev)?;
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

/// Runs every kernel on the first CUDA device, through [`crate::pipeline`].
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
        Ok(CudaBackend { d, device: sh.device.clone(), timing: false, last_kernel_ms: None, full_row: false, prog: None })
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
        self.d.stream.begin_capture(cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(dev)?;
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

    /// The device buffer holding the logits (`[R, V]` f32 after [`Self::prepare_step`]
    /// of a plan with host f32 logits).
    pub fn logits_buffer(&mut self) -> &mut CudaSlice<f32> {
        match &mut self.d.bufs[Buf::Logits as usize] {
            DStore::F32(s) => s,
            _ => unreachable!("Logits is f32"),
        }
    }
}

/// The outputs of the last enqueued step, still on the device (stream
/// ordered: valid for kernels the engine enqueues on the sampler's stream,
/// or after waiting). Rows of failed requests hold -1 tokens.
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
}

/// A step captured as a CUDA graph ([`CudaBackend::capture`]): replays any
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
        self.prog.as_ref()?;
        macro_rules! view {
            ($b:expr, $v:ident, $len:expr) => {
                match &self.d.bufs[$b as usize] {
                    DStore::$v(s) => s.slice(0..$len.min(s.len())),
                    _ => return None,
                }
            };
        }
        Some(DeviceOutputs {
            tokens: view!(Buf::Tokens, I32, r),
            logprobs: view!(Buf::TokenLp, F32, r),
            top_ids: view!(Buf::TopIds, I32, r * k),
            top_logprobs: view!(Buf::TopLps, F32, r * k),
            sum_smaller_probs: view!(Buf::SumSmaller, F32, r),
            accepted: view!(Buf::Accepted, U32, g),
            status: view!(Buf::GroupStatus, I32, g),
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
        self.d.stream.begin_capture(cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(dev)?;
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
            return Err(dev("this step's shape differs from the captured graph's (rows, requests, widths): capture one for it"));
        }
        pipeline::prepare(&mut self.d, p, &prog)?;
        if self.d.generation != graph.generation || self.d.ext_logits != graph.ext_logits {
            return Err(dev("device buffers or the logits buffer changed since the capture: capture again"));
        }
        graph.graph.launch().map_err(dev)?;
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
