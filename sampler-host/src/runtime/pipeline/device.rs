//! What the pipeline asks of a device ([`Device`]) and what shapes the
//! launch list ([`Caps`]).

use sampler_kernels::spec::LaunchArg;

use super::{Buf, HostSlice, HostSliceMut, Launch, Upload};
use crate::error::BackendError;
use crate::runtime::plan::StepPlan;

/// What a device can do, which shapes the launch list (never the results).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Logits per block of the mask check as `mask_check_chunk` +
    /// `status_merge` (one block per row when it covers V: the CPU's faster
    /// fused count; `topn_merge` merges the counts instead when the top-N
    /// is chunked); `None` = `mask_check`, one program per row.
    pub mask_chunk: Option<u32>,
    /// Blocks per row of the top-N selection for this (V, N): above 1,
    /// `topn_chunk` + `topn_merge` replace `force_topn`.
    pub topn_chunks: u32,
    /// Widest N the fused kernels (`process_draw`, `token_info_top`) run
    /// at; 0 = always the unfused ones.
    pub fused_max: u32,
    /// On a step with no grammar mask and no raw-logprobs row (the mask
    /// check would only count each row's bad and finite logits, SAMPLER.md
    /// 3.2), the top-N kernels count them from their own read of the logits
    /// instead: `force_topn_counted` writes the row status, or
    /// `topn_chunk_counted` the chunk counts `topn_merge` merges. No mask
    /// check runs: the step reads the logits once, one or two launches fewer.
    pub counts_in_topn: bool,
    /// On such a step (no grammar mask, no raw-logprobs row) with N at most
    /// [`STREAM_MAX_N`], the top-N is `force_topn_stream`: one block per
    /// row reading it once with a sampled threshold and a small survivor
    /// buffer (no staging of the row, no `topn_merge`, no mask check; it
    /// writes the status, and why a row fell back to the exact re-read in
    /// [`Buf::SelFallback`]). Wins over `topn_chunks` and `counts_in_topn`.
    pub stream_select: bool,
    /// Blocks per row of the streaming top-N (above 1, with
    /// [`Caps::stream_select`]): `topn_chunk_stream` streams chunk `c` of the
    /// row against the threshold of the row's sample and keeps its
    /// candidates, `topn_merge_stream` selects and sorts the row's N from
    /// them (a row spread over several SMs at small R); 0 or 1 = one block.
    pub stream_chunks: u32,
    /// The streaming top-N orders only each row's kept prefix (top-k, top
    /// logprobs; [`super::sorted_prefix`]) where no later kernel or output
    /// reads past it, the rest of the row's N in no fixed order; off, every
    /// step sorts all N.
    pub prefix_order: bool,
    /// Where every row's kept set and the top logprobs lie within its first
    /// [`super::sorted_prefix`] candidates (below N), the fused kernels read
    /// only those: `process_draw_head` (the rest of the row counts in the
    /// softmax total only) and `token_info_top` over the head.
    pub kept_head: bool,
    /// On a step whose groups are all one fresh or no-draw row (decode
    /// batches, prompt logprobs), `finalize_info_top` does `finalize`'s work
    /// with the token info (one node fewer); needs the fused kernels.
    pub fold_finalize: bool,
    /// With [`Caps::fold_finalize`], the draw kernel finalizes and does the
    /// token info too (`process_draw_finish` over a kept head below N,
    /// `prefix_draw_finish` on the prefix path): one tail node instead of two.
    pub fold_tail: bool,
    /// The smallest tile the kept-head draw runs at ([`super::head_tile`]):
    /// wider, fewer passes over the rest; narrower, cheaper collectives over
    /// the head (CUDA: 256, run 31; elsewhere 1024, not measured).
    pub head_tile: u32,
    /// CTAs of a thread-block cluster a row's top-N runs on (2..=16): on
    /// such a step (as [`Caps::stream_select`]'s, N at most
    /// [`STREAM_MAX_N`]) `topn_cluster` selects each row with that many CTAs
    /// together in one kernel (the row in their shared memory, histograms
    /// merged through distributed shared memory), and wins over
    /// `stream_select` and `stream_chunks`; 0 or 1 = off. Only CUDA sets it.
    pub cluster: u32,
    /// With [`Caps::cluster`], where the tail is `process_draw_finish` over
    /// the cluster's sorted head (one-row groups, a kept head below N, the
    /// full-row path), one kernel does both (`topn_cluster_draw_finish`: the
    /// cluster's leader draws and finishes the row it selected): the whole
    /// step is one node.
    pub cluster_tail: bool,
    /// Programmatic dependent launch of the step's kernels (NVIDIA sm_90:
    /// each kernel's CTAs may start while the previous kernel runs, and wait
    /// at their entry for it to finish, so launch gaps overlap work; the
    /// same bits either way), for a step whose widest launch outside a
    /// cluster has at most [`Caps::pdl_max_ctas`] CTAs (early CTAs beside a
    /// wide launch slow it). Only CUDA sets it.
    pub pdl: bool,
    /// See [`Caps::pdl`] (`u32::MAX`: every step).
    pub pdl_max_ctas: u32,
}

/// Widest N `force_topn_stream` runs at (its largest tile variant).
pub const STREAM_MAX_N: u32 = 4096;

/// Survivor buffer keys of `force_topn_stream` at width `n`: 4n, at least
/// 2048 (the sampled threshold keeps about (mu + 4 sqrt(mu) + 5) V / 4096
/// keys, mu = 4096 n / V: 760 at n = 256, V = 129280), at most 9472 (2.3n
/// at n = 4096, where about 1.4n survive: two blocks per SM fit in shared
/// memory).
pub fn stream_buffer_keys(n: u32) -> u32 {
    (4 * n).clamp(2048, 9472)
}

/// A device that runs [`Program`]s: allocates, uploads, launches, downloads.
pub trait Device {
    /// Short name (`"cpu"`, `"cuda"`, ...).
    fn name(&self) -> &'static str;
    /// Capabilities for vocabulary `v`, candidate width `n` and a batch of
    /// `rows` rows. R may change the configuration (CUDA's chunk count,
    /// SAMPLER.md section 9, decided), never the results: every choice of
    /// caps gives the same bits.
    fn caps(&self, v: u32, n: u32, rows: u32) -> Caps;
    /// Makes `buf` hold at least `len` elements (contents undefined after growing).
    fn alloc(&mut self, buf: Buf, len: usize) -> Result<(), BackendError>;
    /// Copies `data` to the start of `buf` (allocated first).
    fn upload(&mut self, buf: Buf, data: HostSlice<'_>) -> Result<(), BackendError>;
    /// Sets the first `len` elements of `buf` to `value`.
    fn fill(&mut self, buf: Buf, len: usize, value: LaunchArg<()>) -> Result<(), BackendError>;
    /// Initialises the step's inputs and filled buffers, in one go (a device
    /// may pack them into one copy). The default uploads and fills each.
    fn upload_inputs(&mut self, list: &[(Buf, Upload<'_>)]) -> Result<(), BackendError> {
        for (b, u) in list {
            match *u {
                Upload::Data(h) => self.upload(*b, h)?,
                Upload::Fill(x, len) => {
                    self.alloc(*b, len)?;
                    self.fill(*b, len, x)?;
                }
                Upload::Output(len) => self.alloc(*b, len)?,
            }
        }
        Ok(())
    }
    /// Makes the step's `[R, V]` logits the contents of [`Buf::Logits`]
    /// (read only by the kernels). A device may bind them in their own
    /// element type (the caller's buffer, no copy): every kernel reads them
    /// through a `Logits` parameter, which widens bf16 and f16 to f32 at
    /// load. The default uploads `plan.logits` widened to f32 on the host.
    fn bind_logits(&mut self, plan: &StepPlan) -> Result<(), BackendError> {
        let l = plan.logits.to_f32_cow();
        self.upload(Buf::Logits, HostSlice::F32(&l))
    }
    /// Enqueues one launch.
    fn launch(&mut self, l: &Launch) -> Result<(), BackendError>;
    /// Copies elements `offset..offset + out.len()` of `buf` into `out`,
    /// after the launches before it. `out` holds the data once
    /// [`Device::finish`] returns (a device may copy asynchronously); it
    /// must not move or be dropped before then.
    fn download(&mut self, buf: Buf, offset: usize, out: HostSliceMut<'_>) -> Result<(), BackendError>;
    /// Waits until every download enqueued so far has landed in host memory.
    fn finish(&mut self) -> Result<(), BackendError> {
        Ok(())
    }
}
