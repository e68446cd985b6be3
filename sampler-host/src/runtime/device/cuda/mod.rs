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

mod arena;
mod context;
mod device;
mod graph;
mod tuning;
mod upload;

pub use context::{driver_present, PTX};
pub use device::{
    cluster_auto, cluster_fits, pdl_auto, prefix_order_auto, stream_chunks_auto, stream_select_auto, ActiveClusters,
    CudaDevice, CLUSTER_MIN_CTAS, CLUSTER_MIN_V, CLUSTER_NARROW_MAX_ROWS, CLUSTER_NARROW_N, PDL_MAX_CTAS, PDL_MAX_ROWS,
    PDL_MIN_DRIVER, PREFIX_ORDER_MIN_N, STREAM_CHUNKS_MAX_ROWS, STREAM_CHUNKS_MAX_ROWS_1024, STREAM_CHUNKS_MID_R,
    STREAM_CHUNKS_MID_ROWS_1024, STREAM_CHUNKS_MIN_N, STREAM_CHUNKS_SMALL_R, STREAM_CHUNKS_WIDE_N, STREAM_MIN_ROWS,
    STREAM_MIN_ROWS_NARROW, STREAM_MIN_ROWS_WIDE,
};
pub use graph::{DeviceOutputs, OutputPtrs, StepGraph};
pub use tuning::{
    chunks_valid, default_chunks, mask_chunks, Tuning, CHUNK_CANDIDATES, FUSED_MAX, MASK_CHUNK, TUNING_TABLES,
};

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use crate::error::{BackendError, ConfigError};
use crate::runtime::pipeline::{self, After, Buf, Device, PrefixPolicy, Program};
use crate::runtime::plan::{StepPlan, StepResult};
use arena::*;
use context::*;

fn dev(e: impl std::fmt::Debug) -> BackendError {
    BackendError::Device { backend: "cuda", msg: format!("{e:?}") }
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
    /// ([`Caps::counts_in_topn`]; no mask check launch). On by default
    /// (measured faster at every shape on the H200); `SAMPLER_COUNTS_IN_TOPN=0`
    /// when the backend is created switches it off. Results are the same bits
    /// either way.
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

    /// Selects each row's top-N with `force_topn_stream` on steps without
    /// masks or raw rows and N <= [`pipeline::STREAM_MAX_N`]
    /// ([`Caps::stream_select`]: one read of the row, one block per row) on
    /// every step (`Some(true)`), on none (`Some(false)`), or by the batch
    /// (`None`, the default: [`stream_select_auto`]: from 32 rows at
    /// N <= 256, 16 at N <= 1024, every R above; and wherever
    /// [`Self::set_stream_chunks`] gives more than one block a row). `SAMPLER_STREAM_SELECT=1` / `0` when the
    /// backend is created forces it too. Results are the same bits either way.
    pub fn set_stream_select(&mut self, on: Option<bool>) {
        self.d.stream_select = on;
    }

    /// Spreads each row of the streaming top-N over `c` blocks
    /// ([`Caps::stream_chunks`]: `topn_chunk_stream` + `topn_merge_stream`;
    /// 0 or 1 one block per row) on every step (`Some(c)`), or by the batch
    /// (`None`, the default: [`stream_chunks_auto`], 8 blocks at R <= 16 and
    /// N >= [`STREAM_CHUNKS_MIN_N`] (to R = 32 at N = 1024, then 4 to R = 40)
    /// with prefix order, else one; docs/bench/run28-pair, run35-speed,
    /// run36-sel); more than one also turns the streaming top-N on when
    /// [`Self::set_stream_select`] left it to the batch. `SAMPLER_STREAM_CHUNKS=c`
    /// when the backend is created sets it too. The same bits either way.
    pub fn set_stream_chunks(&mut self, c: Option<u32>) {
        self.d.stream_chunks = c;
    }

    /// CTAs of a thread-block cluster each row's top-N runs on
    /// ([`Caps::cluster`]: `topn_cluster`, the row in the cluster's shared
    /// memory, one kernel): forced (`Some(c)`, c in 2..=16 where the row
    /// fits, else the streaming top-N; `Some(0)` off) or by the batch
    /// (`None`, the default: [`cluster_auto`], the most CTAs, 16 down to 6,
    /// whose clusters all run at once, from V = 32768; on an H100 16 to R =
    /// 7), at most [`Self::cluster_max`]. `SAMPLER_CLUSTER=c`
    /// when the backend is created sets it too. The same bits either way.
    pub fn set_cluster(&mut self, c: Option<u32>) {
        self.d.cluster = c;
    }

    /// Whether the streaming top-N orders only each row's kept prefix where
    /// the step allows it ([`Caps::prefix_order`], `pipeline::sorted_prefix`):
    /// forced on or off (`Some`), or by the candidate width (`None`, the
    /// default: [`prefix_order_auto`], from N = 1024). `SAMPLER_PREFIX_ORDER=1` /
    /// `0` when the backend is created forces it too. The same bits either way.
    pub fn set_prefix_order(&mut self, on: Option<bool>) {
        self.d.prefix_order = on;
    }

    /// What [`Self::set_stream_select`] (or the environment) set: forced on,
    /// forced off, or `None` (by the batch).
    pub fn stream_select(&self) -> Option<bool> {
        self.d.stream_select
    }

    /// What [`Self::set_stream_chunks`] (or the environment) set: blocks a
    /// row forced (`Some`), or `None` (by the batch).
    pub fn stream_chunks(&self) -> Option<u32> {
        self.d.stream_chunks
    }

    /// The largest thread-block cluster this device runs the cluster top-N
    /// on (2..=16, or 0 where it has none: `cuOccupancyMaxActiveClusters` at
    /// backend creation); a larger [`Self::set_cluster`] size is lowered to
    /// it.
    pub fn cluster_max(&self) -> u32 {
        self.d.cluster_max
    }

    /// How many thread-block clusters of `c` CTAs of the cluster top-N (one
    /// CTA an SM) this device runs at once, at index `c` in 2..=16
    /// (`cuOccupancyMaxActiveClusters` at backend creation; 0 where it has
    /// none of that size).
    pub fn active_clusters(&self) -> ActiveClusters {
        self.d.active_clusters
    }

    /// Programmatic dependent launch ([`Caps::pdl`]: a kernel's CTAs start
    /// while the stream's previous kernel runs and wait at their entry for
    /// it) forced on or off (`Some`), or by the step (`None`, the default:
    /// [`pdl_auto`], every step to R = 4, above only steps whose widest
    /// launch outside a cluster has at most 64 CTAs; with drivers from CUDA
    /// 12.3, [`PDL_MIN_DRIVER`]). `SAMPLER_PDL=1` / `0` when the backend is
    /// created forces it too. The same bits either way.
    pub fn pdl(&self) -> Option<bool> {
        self.d.pdl
    }

    /// Forces programmatic dependent launch on or off (`Some`) or leaves it
    /// to the batch (`None`), for later steps (graphs captured before keep
    /// theirs).
    pub fn set_pdl(&mut self, on: Option<bool>) {
        self.d.pdl = on;
    }

    /// The candidate width the kernels run on for `p`, and whether it is the
    /// prefix path ([`StepPlan::prefix_width`]) rather than N.
    pub fn width(&self, p: &StepPlan<'_>) -> (u32, bool) {
        match PrefixPolicy::eager(self.full_row).width(p) {
            Some(w) => (w, true),
            None => (p.n, false),
        }
    }

    /// Blocks per row of the top-N selection for (V, N) (by V and N only).
    pub fn chunks_for(&self, v: u32, n: u32, rows: u32) -> u32 {
        self.d.chunks_for(v, n, rows)
    }

    /// The device as a [`Device`] (the pipeline's view).
    pub fn device(&mut self) -> &mut CudaDevice {
        &mut self.d
    }

    /// Device-resident use (benchmarks): builds the step's program, uploads
    /// every input of `p` and sizes the buffers; afterwards
    /// [`Self::launch_step`] runs the kernels on the device copy only.
    pub fn prepare_step(&mut self, p: &StepPlan<'_>) -> Result<(), BackendError> {
        let prog = pipeline::build_for(&self.d, p, PrefixPolicy::eager(self.full_row).width(p))?;
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

    /// Reads the outputs of the last launched step back. On the prefix path
    /// ([`StepPlan::prefix_width`]) a step whose kept sets do not all fit is
    /// run again here, eagerly, on the full-row path (a captured graph holds
    /// the prefix path only), so the results are always the full-row path's.
    pub fn collect_step(&mut self, p: &StepPlan<'_>) -> Result<StepResult, BackendError> {
        let prog = self.program()?;
        let (res, overflow) = pipeline::collect(&mut self.d, p, &prog)?;
        if prog.prefix
            && PrefixPolicy::eager(self.full_row).after(p, prog.width, &res.group_status, &overflow) != After::Done
        {
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
            (Buf::Path, out.path),
        ] {
            self.d.ext_out[b as usize] = x.filter(|&a| a != 0);
        }
        let r = self.enqueue(p);
        self.d.ext_out.iter_mut().for_each(|x| *x = None);
        r?;
        // A step without a tree walk (no tree request passed the host checks) writes no path:
        // the caller's buffer still gets its -1s.
        if let (Some(path), false) = (out.path.filter(|&a| a != 0), p.any_tree) {
            // SAFETY: the caller's `[R]` i32 buffer of `OutputPtrs`, on the sampler's stream.
            unsafe {
                cudarc::driver::sys::cuMemsetD32Async(path, u32::MAX, p.rows as usize, self.d.stream.cu_stream())
            }
            .result()
            .map_err(dev)?;
        }
        Ok(())
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

impl CudaBackend {
    /// Short name.
    pub fn name(&self) -> &'static str {
        "cuda"
    }

    /// Starts one step without waiting: `None` (the step is enqueued on the
    /// device; [`Self::collect`] reads it back).
    pub fn enqueue(&mut self, p: &StepPlan<'_>) -> Result<Option<StepResult>, BackendError> {
        let prog = self.device_program(p)?;
        if p.rows > 0 {
            pipeline::prepare(&mut self.d, p, &prog)?;
            pipeline::launch_all(&mut self.d, &prog)?;
            self.d.mark_launched()?;
        }
        self.prog = Some(prog);
        Ok(None)
    }

    /// Reads back the step [`Self::enqueue`] left on the device (waits for it).
    pub fn collect(&mut self, p: &StepPlan<'_>) -> Result<StepResult, BackendError> {
        self.collect_step(p)
    }

    /// Runs one step to the end (the prefix path with its full-row rerun).
    pub fn run(&mut self, p: &StepPlan<'_>) -> Result<StepResult, BackendError> {
        if !self.timing {
            return pipeline::run_step(&mut self.d, p, self.full_row);
        }
        // The first pass's kernels are timed (a full-row rerun is not).
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let stream = self.d.stream.clone();
        let mut events = None;
        let policy = PrefixPolicy::eager(self.full_row);
        let res = pipeline::run_step_with(&mut self.d, p, policy, &mut |d, prog| {
            let t0 = stream.record_event(flags).map_err(dev)?;
            pipeline::launch_all(d, prog)?;
            let t1 = stream.record_event(flags).map_err(dev)?;
            events.get_or_insert((t0, t1));
            Ok(())
        })?;
        self.last_kernel_ms = match events {
            Some((t0, t1)) => Some(t0.elapsed_ms(&t1).map_err(dev)?),
            None => Some(0.0),
        };
        Ok(res)
    }
}
