//! Device-resident steps: outputs left on the device ([`DeviceOutputs`],
//! or written to the caller's buffers: [`OutputPtrs`]), and steps
//! captured as CUDA graphs ([`StepGraph`]) and replayed.

use cudarc::driver::CudaSlice;

use super::device::*;
use super::*;
use crate::error::BackendError;
use crate::runtime::pipeline::{self, Buf, PrefixPolicy, Program};
use crate::runtime::plan::StepPlan;

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
    /// `[R]` i32 tree paths (section 11.9; written only when the step has a
    /// tree request): a tree request's rows get its accepted path's node
    /// indices, root first, then -1; every other row -1.
    pub path: Option<u64>,
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

    /// The program of a device-resident step: the prefix path only where it
    /// can never ask for a rerun ([`StepPlan::prefix_never_reruns`]).
    pub(super) fn device_program(&self, p: &StepPlan<'_>) -> Result<Program, BackendError> {
        let prefix = PrefixPolicy::device_resident(self.full_row).width(p);
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
