//! The CUDA device as the pipeline's [`Device`]: one stream, one buffer
//! per [`Buf`], uploads, launches and downloads.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{
    CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use sampler_kernels::spec::{
    cluster_slice, gpu_cluster_bytes, gpu_stage_bytes, LaunchArg, ParamKind, Prim, Variant, GPU_SMEM_BASE,
};

use super::arena::*;
use super::context::*;
use super::tuning::*;
use super::*;
use crate::error::BackendError;
use crate::runtime::logits::Dtype;
use crate::runtime::pipeline::{self, Buf, Caps, Device, HostSlice, HostSliceMut, Launch};
use crate::runtime::plan::{Logits, StepPlan};

/// The first CUDA device as a [`Device`]: one stream, one buffer per
/// [`Buf`], kept across steps (no allocation once the largest step has run).
pub struct CudaDevice {
    pub(super) stream: Arc<CudaStream>,
    /// Side stream for host-to-device copies: the step's metadata (and
    /// grammar masks uploaded on their own); the sampling stream waits on
    /// its event. The metadata copy thus runs while the engine's stream is
    /// still producing the logits, off the step's critical path.
    pub(super) copy_stream: Arc<CudaStream>,
    pub(super) module: Arc<CudaModule>,
    /// Each loaded entry with its block size (the registry's, or a
    /// `SAMPLER_PTX_FILE`'s `.maxntid`).
    pub(super) funcs: HashMap<&'static str, (CudaFunction, u32)>,
    pub(super) threads: &'static HashMap<String, u32>,
    pub(super) bufs: Vec<DStore>,
    pub(super) tuning: Tuning,
    pub(super) chunks_override: Option<u32>,
    /// [`Caps::counts_in_topn`]: on by default (bitwise and faster at every
    /// shape on the H200, issue 22); `SAMPLER_COUNTS_IN_TOPN=0` at backend
    /// creation, or [`CudaBackend::set_counts_in_topn`], switches it off.
    pub(super) counts_in_topn: bool,
    /// [`Caps::stream_select`] forced on or off (`SAMPLER_STREAM_SELECT=1` /
    /// `0` at backend creation, or [`CudaBackend::set_stream_select`]);
    /// `None`: by the batch, [`stream_select_auto`], or on wherever the
    /// stream's chunk count is above one.
    pub(super) stream_select: Option<bool>,
    /// [`Caps::stream_chunks`] forced (`SAMPLER_STREAM_CHUNKS=C` at backend
    /// creation, or [`CudaBackend::set_stream_chunks`]); `None`: by the batch,
    /// [`stream_chunks_auto`] (8 blocks at R <= 16 and N >= 1024, R <= 32 at
    /// N in 1024..2048 (measured at 1024), 4 blocks to R = 40 there, when only
    /// the kept prefix is ordered; else one). More than one block a row also
    /// turns the streaming top-N on when [`Self::stream_select`] is `None`.
    pub(super) stream_chunks: Option<u32>,
    /// [`Caps::prefix_order`] forced on or off (`SAMPLER_PREFIX_ORDER=1` / `0`
    /// at backend creation, or [`CudaBackend::set_prefix_order`]); `None`: by
    /// the candidate width, [`prefix_order_auto`].
    pub(super) prefix_order: Option<bool>,
    /// [`Caps::kept_head`] / [`Caps::fold_finalize`] / [`Caps::fold_tail`]
    /// forced off (or on) by `SAMPLER_KEPT_HEAD=0` / `SAMPLER_FOLD_FINALIZE=0`
    /// / `SAMPLER_FOLD_TAIL=0` at backend creation; `None`: on. For measuring
    /// them; the same bits either way.
    pub(super) kept_head: Option<bool>,
    pub(super) fold_finalize: Option<bool>,
    pub(super) fold_tail: Option<bool>,
    /// [`Caps::head_tile`] from `SAMPLER_HEAD_TILE` (64 .. 16384) at backend
    /// creation; `None`: 256 (run 31: 1.4-15 us faster than 1024 at N = 4096,
    /// R = 1-384). For measuring it; the same bits either way.
    pub(super) head_tile: Option<u32>,
    /// [`Caps::cluster`] forced (`SAMPLER_CLUSTER=C` at backend creation, C
    /// in 2..=16; 0 or 1 off); `None`: by the batch, [`cluster_auto`].
    pub(super) cluster: Option<u32>,
    /// The largest cluster size this device schedules the cluster top-N at
    /// (2..=16, or 0: [`max_cluster`]); a larger forced size is lowered to it.
    pub(super) cluster_max: u32,
    /// Clusters of 2..=16 CTAs of the cluster top-N the device runs at once
    /// ([`active_clusters`], at backend creation), for [`cluster_auto`].
    pub(super) active_clusters: ActiveClusters,
    /// [`Caps::cluster_tail`] forced on (or off) by `SAMPLER_CLUSTER_TAIL=1`
    /// at backend creation; `None`: on to [`CLUSTER_TAIL_MAX_ROWS`] rows.
    pub(super) cluster_tail: Option<bool>,
    /// [`Caps::pdl`] forced on (every step) or off (`SAMPLER_PDL=1` / `0` at
    /// backend creation, or [`CudaBackend::set_pdl`]); `None`: by the step,
    /// [`pdl_auto`].
    pub(super) pdl: Option<bool>,
    /// Whether the driver captures programmatic dependent launches into
    /// graphs (CUDA 12.3 and later, [`PDL_MIN_DRIVER`]): [`pdl_auto`] only
    /// there (a forced `SAMPLER_PDL=1` is tried anyway).
    pub(super) pdl_driver: bool,
    /// The logits the kernels read in place this step, as (device address,
    /// element type code): the caller's device buffer, or [`Self::half_logits`]
    /// (host bf16/f16 uploaded as they are). `None`: [`Buf::Logits`] (f32).
    pub(super) ext_logits: Option<(u64, u32)>,
    /// Host bf16 / f16 logits uploaded in their own element type (half the bytes of f32).
    pub(super) half_logits: Option<CudaSlice<u16>>,
    /// The step's inputs, filled buffers and outputs, packed in one device
    /// arena: inputs and fills first (uploaded from the pinned `staging` in
    /// one async copy a step), then the outputs (read back in one copy).
    /// `input_at`: each buffer's (byte offset, bytes) in it this step.
    pub(super) arena: Option<CudaSlice<u8>>,
    /// Pinned, write-combined host staging of the arena's input part, and
    /// its address (the copies are raw driver calls, so that cudarc adds no
    /// event record or stream wait of its own).
    pub(super) staging: Option<(PinnedHostSlice<u8>, *mut u8)>,
    /// Recorded after each staging copy (on `copy_stream`): the sampling
    /// stream waits on it before the step's kernels, and the host before
    /// writing the staging again (usually long done).
    pub(super) staging_copied: cudarc::driver::CudaEvent,
    /// Recorded on the sampling stream after a step's launches (or before
    /// the next metadata copy): the copy waits for the earlier steps' kernels
    /// to be done with the arena's inputs.
    pub(super) arena_free: cudarc::driver::CudaEvent,
    /// Whether `arena_free` was recorded right after the last step's
    /// launches ([`CudaDevice::mark_launched`]): the next metadata copy then
    /// waits for those kernels only, not for later work on our stream (an
    /// engine's forward pass enqueued on it). Otherwise it is recorded when
    /// the copy is issued.
    pub(super) arena_free_recorded: bool,
    /// Orders reading device logits written on another stream (one event, reused).
    pub(super) logits_ready: cudarc::driver::CudaEvent,
    pub(super) input_at: Vec<Option<(usize, usize)>>,
    /// Pinned host memory the downloads of non-arena buffers land in, and
    /// the host copies still to make from it at `finish` (staging offset,
    /// destination, bytes).
    pub(super) out_staging: Option<PinnedHostSlice<u8>>,
    pub(super) out_used: usize,
    pub(super) pending: Vec<(usize, *mut u8, usize)>,
    /// Pinned host memory the packed outputs land in (one copy at `finish`),
    /// and the downloads waiting for it (arena offset, destination, bytes).
    pub(super) out_region: Option<(PinnedHostSlice<u8>, *mut u8)>,
    pub(super) pending_arena: Vec<(usize, *mut u8, usize)>,
    /// One launch's argument slots (`arg_slots`; reused).
    pub(super) ptrs: Vec<u64>,
    /// Bumped whenever a device buffer moves (a captured graph is then stale).
    pub(super) generation: u64,
    /// This step is being captured into a graph of the caller's stream (e.g.
    /// `torch.cuda.graph`), found when the logits' stream is joined: nothing
    /// may wait or allocate, the metadata goes to `capture_pool` and is
    /// copied on our (capturing) stream, and no shared event is recorded.
    pub(super) capturing: bool,
    /// Pinned host memory (and its address) for captured steps' metadata:
    /// the graph's copy node reads it at every replay, so each capture keeps
    /// its own range, never written again. Reserved on the first step
    /// because nothing may allocate during a capture.
    pub(super) capture_pool: Option<(PinnedHostSlice<u8>, usize)>,
    pub(super) capture_used: usize,
    /// Buffers replaced after a capture: an outside graph still points at
    /// them (it cannot be checked at replay), so they live as long as we do.
    pub(super) retired: Vec<DStore>,
    pub(super) retired_arenas: Vec<CudaSlice<u8>>,
    pub(super) retired_halves: Vec<CudaSlice<u16>>,
    pub(super) graph_held: bool,
    /// The caller's device buffers the step's outputs are written to
    /// directly ([`CudaBackend::enqueue_into`]), by [`Buf`]; `None` = ours.
    pub(super) ext_out: Vec<Option<u64>>,
}

/// `SAMPLER_COUNTS_IN_TOPN` (read once per backend, at its creation): `0`
/// switches [`Caps::counts_in_topn`] off for CUDA (the mask check's second
/// read of the logits comes back); unset, empty or anything else leaves it on.
fn counts_in_topn_env() -> bool {
    std::env::var("SAMPLER_COUNTS_IN_TOPN").map_or(true, |x| x.trim() != "0")
}

/// `SAMPLER_STREAM_SELECT` (read once per backend, at its creation): `1`
/// forces [`Caps::stream_select`] on for CUDA, `0` off; unset or anything
/// else leaves the choice to [`stream_select_auto`].
fn stream_select_env() -> Option<bool> {
    flag_env("SAMPLER_STREAM_SELECT")
}

/// A forcing variable: `1` on, `0` off, unset or anything else `None`.
fn flag_env(name: &str) -> Option<bool> {
    match std::env::var(name).map(|x| x.trim().to_string()).as_deref() {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    }
}

/// Dynamic shared memory one CTA may have on sm_90.
const SMEM_MAX: u32 = 227 * 1024;

/// The launch attribute of a 1-D cluster of `cl` CTAs.
fn cluster_attr(cl: u32) -> cudarc::driver::sys::CUlaunchAttribute {
    use cudarc::driver::sys;
    // SAFETY: a plain C union of the driver's, written through its cluster member.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim = sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x: cl, y: 1, z: 1 };
    attr
}

/// The launch attribute of programmatic dependent launch: the kernel may
/// start while the stream's previous kernel runs (from that kernel's
/// `griddepcontrol.launch_dependents`); every kernel's entry waits for its
/// predecessors before touching memory (`rt::gpu::grid_dependency_entry`).
fn pdl_attr() -> cudarc::driver::sys::CUlaunchAttribute {
    use cudarc::driver::sys;
    // SAFETY: a plain C union of the driver's, written through its serialization member.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    attr
}

/// A 1-D launch of `ctas` CTAs of `threads` with `smem` bytes of dynamic
/// shared memory on `stream`, with the launch attributes `attrs` (a cluster
/// dimension, [`cluster_attr`]; [`pdl_attr`]); for `cuLaunchKernelEx` and
/// `cuOccupancyMaxActiveClusters`.
fn launch_config(
    ctas: u32,
    threads: u32,
    smem: u32,
    stream: &CudaStream,
    attrs: &mut [cudarc::driver::sys::CUlaunchAttribute],
) -> cudarc::driver::sys::CUlaunchConfig {
    cudarc::driver::sys::CUlaunchConfig {
        gridDimX: ctas,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: threads,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: smem,
        hStream: stream.cu_stream(),
        attrs: attrs.as_mut_ptr(),
        numAttrs: attrs.len() as u32,
    }
}

/// The largest cluster size (2..=16, or 0: none) the cluster top-N can run
/// at on this device, from [`active_clusters`] (its widest CTAs with the
/// most shared memory a CTA may have: one CTA an SM, so a cluster of C needs
/// C SMs of one GPC; every launch it makes needs no more). Above 8 is
/// non-portable (not every sm_90 part, MIG or MPS partition has it).
fn max_cluster(active: &ActiveClusters) -> u32 {
    (2..=16u32).rev().find(|&c| active[c as usize] > 0).unwrap_or(0)
}

/// Clusters of the cluster top-N the device runs at once, by cluster size:
/// entry `c` for clusters of `c` CTAs (2..=16; 0 and 1 unused).
pub type ActiveClusters = [u32; 17];

/// How many clusters of 2..=16 CTAs of the cluster top-N's widest variant
/// (one CTA an SM) the device runs at once (`cuOccupancyMaxActiveClusters`;
/// 0 where it has none of that size; above 8 only where non-portable sizes
/// are allowed).
pub(super) fn active_clusters(module: &Arc<CudaModule>, stream: &CudaStream) -> ActiveClusters {
    use cudarc::driver::sys;
    let mut out = [0u32; 17];
    let Some(v) = sampler_kernels::kernels::topn_cluster::VARIANTS.iter().max_by_key(|v| v.threads) else {
        return out;
    };
    let Ok(f) = module.load_function(v.entry) else { return out };
    let max_smem = CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    if f.set_attribute(max_smem, SMEM_MAX as i32).is_err() {
        return out;
    }
    let non_portable = CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED;
    let wide = f.set_attribute(non_portable, 1).is_ok();
    for cl in 2u32..=16 {
        if cl > 8 && !wide {
            continue;
        }
        let mut attr = [cluster_attr(cl)];
        let cfg = launch_config(cl, v.threads, SMEM_MAX, stream, &mut attr);
        let mut clusters: std::ffi::c_int = 0;
        // SAFETY: a query on a loaded function with a well-formed launch configuration.
        let ok = unsafe { sys::cuOccupancyMaxActiveClusters(&mut clusters, f.cu_function(), &cfg) }.result().is_ok();
        if ok {
            out[cl as usize] = clusters.max(0) as u32;
        }
    }
    out
}

/// Whether `topn_cluster` holds a row of `v` logits at candidate width `n`
/// over `ctas` CTAs (2..=16, each CTA's slice in its shared memory).
pub fn cluster_fits(v: u32, n: u32, ctas: u32) -> bool {
    let Some(var) = Variant::pick(sampler_kernels::kernels::topn_cluster::VARIANTS, n) else { return false };
    (2..=16).contains(&ctas) && gpu_cluster_bytes(var.tile, cluster_slice(v, ctas)) <= SMEM_MAX
}

/// CTAs a row of the thread-block cluster top-N when nothing forces it
/// ([`Caps::cluster`]; `SAMPLER_CLUSTER=C` forces it), on a device that runs
/// `active[c]` clusters of `c` CTAs of it at once
/// ([`CudaBackend::active_clusters`]; an H100: 7 of 16, 15 of 8, 30 of 4,
/// run 50): the most CTAs, at least [`CLUSTER_MIN_CTAS`] (from N =
/// [`CLUSTER_NARROW_N`]; below it 4, to [`CLUSTER_NARROW_MAX_ROWS`] rows),
/// whose clusters all run in one wave (`rows <= active[c]`) and hold the
/// row ([`cluster_fits`]), else 0 (the streaming top-N); from V =
/// [`CLUSTER_MIN_V`] (below it the CPU-side costs of more CTAs than logits
/// to read stop paying).
///
/// Measured (H100, graph us, V = 129280, the same bits either way). Run 49
/// (eighteenth session): a second wave of clusters is what loses: 16 CTAs
/// at R = 5 / 6 / 7 N = 1024 31.8 / 32.7 / 33.2 against 8 CTAs' 36.0 / 36.8 /
/// 37.6 (N = 4096 41.5-41.9 against 46.1-46.5; off 33.5-37.9 against
/// 41.3-47.1), but 45.4 at R = 8 (8 CTAs: 37.7); 8 CTAs at R = 9 .. 15 N =
/// 1024 37.1-39.0 against the chunked stream's 43.9-46.5, N = 4096 47.0-48.0
/// against 58.5-59.2, but 57.5 / 68.2 at R = 16 (chunked 46.5 / 60.2); 4 CTAs
/// at R = 16 no better than the chunked stream (47.6 / 60.0); with force
/// top-k off (the prefix path) at R = 16 4 CTAs 66.5 against 8 CTAs' 72.3
/// (and 87.8 on the staged chunks in run 46), at R = 32 101.4 against the
/// streaming top-N's 62.1. Runs 45-46: 16 CTAs against the streaming top-N
/// at R = 1 N = 1024 42.4 -> 30.0.
pub fn cluster_auto(v: u32, n: u32, rows: u32, active: &ActiveClusters) -> u32 {
    if v < CLUSTER_MIN_V {
        return 0;
    }
    let least = if n < CLUSTER_NARROW_N {
        if rows > CLUSTER_NARROW_MAX_ROWS {
            return 0;
        }
        4
    } else {
        CLUSTER_MIN_CTAS
    };
    (least..=16).rev().find(|&c| rows <= active[c as usize] && cluster_fits(v, n, c)).unwrap_or(0)
}

/// See [`cluster_auto`].
pub const CLUSTER_MIN_V: u32 = 32768;
/// See [`cluster_auto`]: below this N (force top-k off's prefix path, where
/// the streaming top-N over several blocks does not run) clusters of 4 CTAs
/// and up serve, to [`CLUSTER_NARROW_MAX_ROWS`] rows.
pub const CLUSTER_NARROW_N: u32 = 1024;
/// See [`cluster_auto`].
pub const CLUSTER_NARROW_MAX_ROWS: u32 = 16;
/// See [`cluster_auto`]: the fewest CTAs a row from N = [`CLUSTER_NARROW_N`]
/// (4 were no faster than the chunked stream at R = 16, run 49).
pub const CLUSTER_MIN_CTAS: u32 = 6;

/// Most rows a step fuses its cluster top-N and tail into one node
/// ([`Caps::cluster_tail`]) when nothing forces it: run 57 (H100, one
/// cluster barrier a pass, one-barrier block collectives) measured the
/// fused node 0.3-1.0 us faster than two at R = 1-16, N = 1024 (26.6 / 29.8
/// / 34.5 / 41.0 against 26.9 / 30.6 / 35.4 / 41.5 us); from R = 20 rows
/// select by the stream, where it does not apply.
pub const CLUSTER_TAIL_MAX_ROWS: u32 = 16;

/// [`Caps::pdl_max_ctas`] for a step of `rows` rows when nothing forces
/// programmatic dependent launch: every step to [`PDL_MAX_ROWS`] rows,
/// above only steps whose widest launch outside a cluster has at most
/// [`PDL_MAX_CTAS`] CTAs. Run 49 (H100, graph us, every kernel's entry
/// waiting on its predecessors either way): faster at R = 1 and 4 at N =
/// 1024, 4096 and off (R = 1: 27.6 -> 27.4, 37.6 -> 36.9, 33.0 -> 31.6; R =
/// 4: 31.7 -> 31.1, 41.4 -> 40.8, 33.4 -> 32.6), on the cluster path at R =
/// 8-16 (-0.4 to -1.0) and where the widest launch is small (R = 16 N = 4096,
/// 64 chunk CTAs: -1.0 to -1.8; R = 32 / 64 N = 4096, 32 / 64 stream CTAs: -1.5
/// / -2.7); slower with wide launches beside it: the chunked select at N =
/// 1024 (256-1024 chunk CTAs, +5 to +16%), force top-k off from R = 8
/// (`row_mass_bounded`, 128 CTAs a row, +2 to +6%), R = 128 N = 4096 (128
/// stream CTAs, +10%), R = 384 (+2%).
pub fn pdl_auto(rows: u32) -> u32 {
    if rows <= PDL_MAX_ROWS {
        u32::MAX
    } else {
        PDL_MAX_CTAS
    }
}

/// See [`pdl_auto`].
pub const PDL_MAX_ROWS: u32 = 4;
/// See [`pdl_auto`].
pub const PDL_MAX_CTAS: u32 = 64;
/// The oldest driver (`cuDriverGetVersion`: 1000 * major + 10 * minor) that
/// captures programmatic dependent launches into CUDA graphs (12.3).
pub const PDL_MIN_DRIVER: i32 = 12030;

/// The driver's CUDA version (`cuDriverGetVersion`), 0 if it cannot say.
fn driver_version() -> i32 {
    let mut v: std::ffi::c_int = 0;
    // SAFETY: writes one int.
    match unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) }.result() {
        Ok(()) => v,
        Err(_) => 0,
    }
}

/// From this candidate width up, the top-N orders only the kept prefix when
/// nothing forces it. Measured on the H200: 11-37 us faster at N = 4096
/// (docs/bench/run26-prefix); at N = 1024 within +-1.5 us in run 26, and
/// 3.6-17 us faster since the draw works on the kept head alone (run 33,
/// docs/bench/run33-prefix1024: R = 1 51.5 -> 47.9, R = 384 149.8 -> 132.6).
pub const PREFIX_ORDER_MIN_N: u32 = 1024;

/// From this candidate width up, the streaming top-N of small batches is
/// spread over several blocks a row ([`stream_chunks_auto`]; run 28 at
/// N = 4096; run 35 at N = 1024: R = 1 43.0 us over 8 blocks against 48.3
/// on the chunked staged path and 54.6 in one block, R = 16 45.4 against
/// 52.8 in one block, docs/bench/run35-speed).
pub const STREAM_CHUNKS_MIN_N: u32 = 1024;

/// Whether the streaming top-N at candidate width `n` orders only the kept
/// prefix when nothing forces it ([`Caps::prefix_order`]; the same bits
/// either way, `tests/devices/cuda_counts.rs`).
pub fn prefix_order_auto(n: u32) -> bool {
    n >= PREFIX_ORDER_MIN_N
}

/// Blocks a row of the streaming top-N when nothing forces it and only the
/// kept prefix is ordered: [`STREAM_CHUNKS_SMALL_R`] for batches of at most
/// [`STREAM_CHUNKS_MAX_ROWS`] rows at N >= [`STREAM_CHUNKS_MIN_N`] (at N
/// below [`STREAM_CHUNKS_WIDE_N`]: up to [`STREAM_CHUNKS_MAX_ROWS_1024`] rows,
/// then [`STREAM_CHUNKS_MID_R`] up to [`STREAM_CHUNKS_MID_ROWS_1024`]), else
/// one (0). Measured on the H200, graph us, the same bits: N = 4096
/// (docs/bench/run28-pair) R = 1 68.2 over 8 blocks against 75.3 in one, R = 16
/// 72.9 against 74.0, R = 32 no gain (run 36: 64.9 over 4 against 65.0); N =
/// 1024 (run 36, docs/bench/run36-sel) R = 24 45.7 over 8 / 46.2 over 4 against
/// 53.5 in one, R = 32 47.4 / 47.7 against 54.4, R = 128 66.9 in one (83.7
/// over 4); from R = 41 one since run 53 ([`STREAM_CHUNKS_MID_ROWS_1024`]).
pub fn stream_chunks_auto(n: u32, rows: u32) -> u32 {
    if n < STREAM_CHUNKS_MIN_N {
        0
    } else if n >= STREAM_CHUNKS_WIDE_N {
        if rows <= STREAM_CHUNKS_MAX_ROWS {
            STREAM_CHUNKS_SMALL_R
        } else {
            0
        }
    } else if rows <= STREAM_CHUNKS_MAX_ROWS_1024 {
        STREAM_CHUNKS_SMALL_R
    } else if rows <= STREAM_CHUNKS_MID_ROWS_1024 {
        STREAM_CHUNKS_MID_R
    } else {
        0
    }
}

/// See [`stream_chunks_auto`].
pub const STREAM_CHUNKS_SMALL_R: u32 = 8;
/// See [`stream_chunks_auto`].
pub const STREAM_CHUNKS_MAX_ROWS: u32 = 16;
/// See [`stream_chunks_auto`]: from this N up, the wide rule (N = 4096's).
pub const STREAM_CHUNKS_WIDE_N: u32 = 2048;
/// See [`stream_chunks_auto`].
pub const STREAM_CHUNKS_MAX_ROWS_1024: u32 = 32;
/// See [`stream_chunks_auto`].
pub const STREAM_CHUNKS_MID_R: u32 = 4;
/// See [`stream_chunks_auto`]: 64 before run 52 (H100; the stream pass
/// with eight 16-byte loads a thread for f32): at N = 1024 one block a row
/// takes 47.5 / 49.1 us at R = 48 / 64 against 49.8 / 53.9 over 4, R = 40
/// 52.4 against 48.6. bf16 / f16 logits keep the four-load pass and lose
/// 0.7 us at R = 64 by it (run 54: 53.7 in one against run 53's 53.0 over
/// 4): the choice does not see the element type.
pub const STREAM_CHUNKS_MID_ROWS_1024: u32 = 40;

/// Rows from which the streaming top-N (one block per row, one read) beats
/// the chunked one (several blocks per row, then a merge), by candidate
/// width, on the H200 (run 20, V = 129280, the stream pass with one branch
/// per 16 logits and the 4096-wide variant on 1024 threads):
/// - `n <= 256` (the prefix path with force top-k off): from 17 rows (run
///   20: R = 16 66.0 against 52.6 us chunked, R = 64 85.2 against 100.9;
///   run 49, H100, after the staged chunks and the stream changed: R = 20 /
///   24 / 28 61.8 / 61.5 / 61.2 against 101.8 / 112.6 / 124.2 chunked, R = 16
///   58.6, where the cluster top-N takes 54.0);
/// - `n <= 1024`: from 16 rows (R = 1: 61.4 against 53.8; R = 16: 60.1
///   against 62.6; R = 64: 65.7 against 88.9);
/// - `n <= 4096`: at every R (R = 1: 88.7 against 98.7; R = 64: 93.2 against 137.0).
pub const STREAM_MIN_ROWS_NARROW: u32 = 17;
/// See [`STREAM_MIN_ROWS_NARROW`]: the same for N in 257..=1024.
pub const STREAM_MIN_ROWS: u32 = 16;
/// See [`STREAM_MIN_ROWS_NARROW`]: the same for N in 1025..=4096.
pub const STREAM_MIN_ROWS_WIDE: u32 = 1;

/// Whether a batch of `rows` rows at candidate width `n` takes the streaming
/// top-N when nothing forces it (SAMPLER.md section 9, decided: the choice
/// may depend on R; both give the same bits, `tests/devices/cuda_counts.rs`).
pub fn stream_select_auto(n: u32, rows: u32) -> bool {
    rows >= match n {
        0..=256 => STREAM_MIN_ROWS_NARROW,
        257..=1024 => STREAM_MIN_ROWS,
        _ => STREAM_MIN_ROWS_WIDE,
    }
}

impl CudaDevice {
    /// The entry point's arguments of `l` as 8-byte little-endian slots, in
    /// entry-parameter order (the driver reads each parameter's own size
    /// from its slot): a buffer's device address (the caller's logits, a
    /// range of the step's arena, or the buffer's own allocation), a
    /// scalar's bits, and after a `Logits` parameter its element type code.
    fn arg_slots(&self, l: &Launch, out: &mut Vec<u64>) {
        out.clear();
        let (ext, ext_dtype) = self.ext_logits.unwrap_or((0, 0));
        // A `Logits` parameter's element type code: the bound logits' own, or
        // f32 for our buffers (Buf::Masked, or host f32 logits in Buf::Logits).
        let f32_code = sampler_kernels::codes::LOGITS_F32;
        let base = match &self.arena {
            Some(a) => a.device_ptr(&self.stream).0,
            None => 0,
        };
        for (a, prm) in l.args.iter().zip(l.spec.params) {
            let caller = matches!(a, LaunchArg::Buf(Buf::Logits)) && self.ext_logits.is_some();
            out.push(match a {
                LaunchArg::Buf(_) if caller => ext,
                // The caller's output buffer this step, else the arena's range,
                // else the buffer's own allocation.
                LaunchArg::Buf(b) => {
                    let p = self.ext_out[*b as usize]
                        .unwrap_or_else(|| self.input_at[*b as usize].map_or(0, |(off, _)| base + off as u64));
                    if p != 0 {
                        p
                    } else {
                        match &self.bufs[*b as usize] {
                            DStore::F32(s) => s.device_ptr(&self.stream).0,
                            DStore::I32(s) => s.device_ptr(&self.stream).0,
                            DStore::U32(s) => s.device_ptr(&self.stream).0,
                            DStore::U64(s) => s.device_ptr(&self.stream).0,
                        }
                    }
                }
                x => x.scalar_bits().unwrap_or(0),
            });
            if prm.kind == ParamKind::Logits {
                out.push(if caller { ext_dtype as u64 } else { f32_code as u64 });
            }
        }
    }

    /// Launches `l` with `cuLaunchKernelEx` (captured into graphs like any
    /// launch): a `#[kernel(cluster = ..)]` kernel as `l.grid` programs of
    /// `l.cluster` CTAs each in thread-block clusters, the shared memory of
    /// `spec::gpu_cluster_bytes` for `l.stage` logits a CTA; with
    /// `l.pdl`, programmatic dependent launch ([`pdl_attr`]).
    fn launch_ex(&self, l: &Launch, f: &CudaFunction, threads: u32, slots: &mut [u64]) -> Result<(), BackendError> {
        use cudarc::driver::sys;
        let v = l.variant;
        let (ctas, smem, cl) = if v.cluster > 0 {
            let cl = l.cluster.max(1);
            if cl > v.cluster {
                return Err(dev(format!("{}: a cluster of {cl} CTAs, above the kernel's {}", v.entry, v.cluster)));
            }
            (l.grid * cl, gpu_cluster_bytes(v.tile, l.stage), Some(cl))
        } else {
            (l.grid, v.shared + gpu_stage_bytes(v.shared, l.stage), None)
        };
        let mut params: Vec<*mut std::ffi::c_void> = slots.iter_mut().map(|x| x as *mut u64 as *mut _).collect();
        let mut attrs = [pdl_attr(), pdl_attr()];
        let mut na = 0;
        if let Some(cl) = cl {
            attrs[na] = cluster_attr(cl);
            na += 1;
        }
        if l.pdl {
            attrs[na] = pdl_attr();
            na += 1;
        }
        let cfg = launch_config(ctas, threads, smem, &self.stream, &mut attrs[..na]);
        self.stream.context().bind_to_thread().map_err(dev)?;
        // SAFETY: `params` points at one slot per entry parameter, in order
        // (`arg_slots`), alive for the call; the pipeline sized every buffer.
        unsafe { sys::cuLaunchKernelEx(&cfg, f.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
            .map_err(dev)
    }

    pub(super) fn new(sh: &'static Shared) -> Result<CudaDevice, BackendError> {
        let stream = sh.ctx.new_stream().map_err(dev)?;
        let active_clusters = active_clusters(&sh.module, &stream);
        let cluster_max = max_cluster(&active_clusters);
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
            threads: &sh.threads,
            bufs,
            tuning: Tuning::for_device(&sh.device),
            chunks_override: None,
            counts_in_topn: counts_in_topn_env(),
            stream_select: stream_select_env(),
            stream_chunks: std::env::var("SAMPLER_STREAM_CHUNKS").ok().and_then(|x| x.trim().parse().ok()),
            prefix_order: flag_env("SAMPLER_PREFIX_ORDER"),
            kept_head: flag_env("SAMPLER_KEPT_HEAD"),
            fold_finalize: flag_env("SAMPLER_FOLD_FINALIZE"),
            fold_tail: flag_env("SAMPLER_FOLD_TAIL"),
            head_tile: std::env::var("SAMPLER_HEAD_TILE")
                .ok()
                .and_then(|x| x.trim().parse().ok())
                .filter(|t: &u32| (64..=16384).contains(t)),
            cluster: std::env::var("SAMPLER_CLUSTER").ok().and_then(|x| x.trim().parse().ok()),
            cluster_max,
            active_clusters,
            cluster_tail: flag_env("SAMPLER_CLUSTER_TAIL"),
            pdl: flag_env("SAMPLER_PDL"),
            pdl_driver: driver_version() >= PDL_MIN_DRIVER,
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

    /// The loaded entry of `v` and its block size.
    pub(super) fn func(&mut self, v: &'static Variant) -> Result<(CudaFunction, u32), BackendError> {
        if let Some(f) = self.funcs.get(v.entry) {
            return Ok(f.clone());
        }
        let f = self.module.load_function(v.entry).map_err(dev)?;
        // Clusters of 16 CTAs are above the portable 8.
        if v.cluster > 8 {
            f.set_attribute(CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
                .map_err(dev)?;
        }
        // Selection kernels may get top_n's staging area on top of v.shared.
        let most = if v.shared > GPU_SMEM_BASE { 227 * 1024 } else { v.shared };
        if most > 48 * 1024 {
            f.set_attribute(CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, most as i32)
                .map_err(dev)?;
        }
        let threads = self.threads.get(v.entry).copied().unwrap_or(v.threads);
        self.funcs.insert(v.entry, (f.clone(), threads));
        Ok((f, threads))
    }

    /// Blocks per row of the top-N selection for (V, N) (by V and N only).
    pub fn chunks_for(&self, v: u32, n: u32, rows: u32) -> u32 {
        match self.chunks_override {
            Some(c) if chunks_valid(v, n, c) => c,
            _ => self.tuning.chunks_for_rows(v, n, rows),
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

    fn caps(&self, v: u32, n: u32, rows: u32) -> Caps {
        let prefix = self.prefix_order.unwrap_or_else(|| prefix_order_auto(n));
        let stream_chunks = self.stream_chunks.unwrap_or(if prefix { stream_chunks_auto(n, rows) } else { 0 });
        let cluster =
            self.cluster.unwrap_or_else(|| cluster_auto(v, n, rows, &self.active_clusters)).min(self.cluster_max);
        let cluster = if cluster > 1 && cluster_fits(v, n, cluster) { cluster } else { 0 };
        Caps {
            mask_chunk: (mask_chunks(v) > 1).then_some(MASK_CHUNK),
            topn_chunks: self.chunks_for(v, n, rows),
            fused_max: FUSED_MAX,
            counts_in_topn: self.counts_in_topn,
            // Several blocks a row beat the staged path where one block does not (N = 1024, R < 16).
            stream_select: self
                .stream_select
                .unwrap_or_else(|| stream_select_auto(n, rows) || stream_chunks > 1 || cluster > 1),
            stream_chunks,
            prefix_order: prefix,
            kept_head: self.kept_head.unwrap_or(true),
            fold_finalize: self.fold_finalize.unwrap_or(true),
            fold_tail: self.fold_tail.unwrap_or(true),
            head_tile: self.head_tile.unwrap_or(256),
            cluster,
            cluster_tail: self.cluster_tail.unwrap_or(rows <= CLUSTER_TAIL_MAX_ROWS),
            pdl: self.pdl.unwrap_or(self.pdl_driver),
            pdl_max_ctas: if self.pdl == Some(true) { u32::MAX } else { pdl_auto(rows) },
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
        let (f, threads) = self.func(v)?;
        let mut slots = std::mem::take(&mut self.ptrs);
        self.arg_slots(l, &mut slots);
        let r = if v.cluster > 0 || l.pdl {
            self.launch_ex(l, &f, threads, &mut slots)
        } else {
            let smem = v.shared + gpu_stage_bytes(v.shared, l.stage);
            let cfg = LaunchConfig { grid_dim: (l.grid, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: smem };
            let mut lb = self.stream.launch_builder(&f);
            for x in &slots {
                lb.arg(x);
            }
            // SAFETY: the arguments come from the kernel's generated `Args` (its
            // signature, in order); the pipeline sized every buffer for the step.
            unsafe { lb.launch(cfg) }.map(|_| ()).map_err(dev)
        };
        self.ptrs = slots;
        r
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The measured defaults (runs 28, 33 and 35): prefix order from N = 1024,
    /// several blocks a row from N = 1024 at small R.
    #[test]
    fn auto_policies_follow_the_measured_thresholds() {
        assert!(!prefix_order_auto(512) && prefix_order_auto(1024) && prefix_order_auto(4096));
        // An H100-like count (run 50: 7 of 16, 15 of 8, 30 of 4; the rest made up).
        let mut h = [0u32; 17];
        for (c, a) in [(2, 60), (4, 30), (5, 24), (6, 20), (7, 16), (8, 15), (9, 8), (12, 7), (16, 7)] {
            h[c] = a;
        }
        assert_eq!(cluster_auto(129_280, 1024, 1, &h), 16);
        assert_eq!(cluster_auto(129_280, 4096, 7, &h), 16);
        assert_eq!(cluster_auto(129_280, 1024, 8, &h), 9);
        assert_eq!(cluster_auto(129_280, 4096, 15, &h), 8);
        assert_eq!(cluster_auto(129_280, 1024, 16, &h), 7);
        assert_eq!(cluster_auto(129_280, 1024, 20, &h), 6);
        assert_eq!(cluster_auto(129_280, 1024, 21, &h), 0);
        assert_eq!(cluster_auto(129_280, 64, 16, &h), 7);
        assert_eq!(cluster_auto(129_280, 64, 17, &h), 0);
        assert_eq!(cluster_auto(4096, 1024, 1, &h), 0);
        // A partition with fewer SMs: smaller clusters sooner; none without them.
        let mut small = [0u32; 17];
        small[4] = 7;
        small[6] = 4;
        small[8] = 3;
        assert_eq!(cluster_auto(129_280, 1024, 1, &small), 8);
        assert_eq!(cluster_auto(129_280, 1024, 4, &small), 6);
        assert_eq!(cluster_auto(129_280, 1024, 5, &small), 0);
        assert_eq!(cluster_auto(129_280, 64, 5, &small), 4);
        assert_eq!(cluster_auto(129_280, 64, 1, &[0; 17]), 0);
        assert_eq!((max_cluster(&h), max_cluster(&small), max_cluster(&[0; 17])), (16, 8, 0));
        let mut mig = [0u32; 17];
        mig[2..=6].copy_from_slice(&[9, 5, 3, 2, 1]);
        assert_eq!((max_cluster(&mig), cluster_auto(129_280, 1024, 1, &mig)), (6, 6));
        assert_eq!((pdl_auto(1), pdl_auto(PDL_MAX_ROWS)), (u32::MAX, u32::MAX));
        assert_eq!((pdl_auto(PDL_MAX_ROWS + 1), pdl_auto(384)), (PDL_MAX_CTAS, PDL_MAX_CTAS));
        // Every auto size holds its row (the choice skips sizes that do not: a row
        // of V = 152064 never fits 4 CTAs, one of 262144 not 8 at N = 4096).
        assert!(!cluster_fits(262_144, 4096, 8) && cluster_fits(262_144, 4096, 16));
        assert!(!cluster_fits(152_064, 64, 4) && cluster_fits(129_280, 64, 4));
        assert!(!cluster_fits(129_280, 1024, 1) && !cluster_fits(129_280, 1024, 17));
        for v in [129_280u32, 152_064, 262_144] {
            for n in [1u32, 64, 256, 1024, 4096] {
                for rows in [1u32, 4, 7, 8, 15, 16, 20] {
                    let c = cluster_auto(v, n, rows, &h);
                    assert!(c == 0 || cluster_fits(v, n, c), "V {v} N {n} R {rows}");
                }
            }
        }
        assert_eq!(stream_chunks_auto(512, 1), 0);
        assert_eq!(stream_chunks_auto(1024, 1), STREAM_CHUNKS_SMALL_R);
        assert_eq!(stream_chunks_auto(1024, 32), STREAM_CHUNKS_SMALL_R);
        assert_eq!(stream_chunks_auto(1024, 40), STREAM_CHUNKS_MID_R);
        assert_eq!(stream_chunks_auto(1024, 41), 0);
        assert_eq!(stream_chunks_auto(1024, 64), 0);
        assert_eq!(stream_chunks_auto(4096, 32), 0);
        assert_eq!(stream_chunks_auto(4096, 1), STREAM_CHUNKS_SMALL_R);
        assert_eq!(stream_chunks_auto(4096, STREAM_CHUNKS_MAX_ROWS + 1), 0);
    }
}
