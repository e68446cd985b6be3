//! Vocabulary-parallel sampling (issue 15): each rank of a tensor-parallel
//! group holds columns `[lo, hi)` of every logits row and the group samples
//! without ever gathering the `[R, V]` logits.
//!
//! One step on every rank ([`VocabParallelSampler::sample`]):
//! 1. **Local** (this rank's shard, the DSL kernels' CPU programs): the
//!    grammar mask (bits at global ids) and the bad-value check
//!    (`mask_check`), then the shard's top-`n` (`force_topn`; ties by lower
//!    id, and the shard is contiguous, so by lower *global* id).
//! 2. **Force top-k off** (N = V, the prefix path of `StepPlan::prefix_width`):
//!    a small all-gather of each row's local largest logit gives the row's
//!    `m` (SAMPLER.md 3.4); each rank then sums its fixed-point softmax
//!    weights (`row_mass` with that `m`). `row_mass` is an exact u64 sum, so
//!    the partial sums add to the single-device total bit for bit.
//! 3. **One all-gather** of the candidates (+ partial masses, statuses);
//!    optionally two rounds (`VocabParallelConfig::first_round`): a short
//!    first round, and the full one only when the merge could miss a token.
//! 4. **Finish** (every rank, or the driver only: [`FinishOn`]): merge the
//!    shards' candidates (`topn_merge`, shards concatenated by `lo` so that
//!    position order is id order), then the single-device kernel sequence
//!    (process / draw, remap + verify, finalize, token info, top logprobs).
//!
//! The result equals [`crate::Sampler::sample`] on the gathered `[R, V]`
//! logits bit for bit, for every row kind (tests/vocab_parallel.rs). Where
//! the kept set can exceed what was gathered, the step falls back exactly:
//! a prefix overflow first gathers a wider prefix (the masses are reused),
//! then the full masked rows; requests the prefix path cannot serve (top-p 1
//! and top-k off) gather their full masked rows and run the CPU backend's
//! full-row path while the rest of the batch takes the prefix path (a step
//! asking for processed distributions gathers every full row).
//!
//! Exchanged per step (force top-k on, N < V, one round): every rank
//! receives `R * sum_r min(N, W_r) * 8` bytes plus `R * 4` per rank
//! (statuses), against `R * V * 4` for gathering the logits.
//! [`ExchangeStats`] counts it.
//!
//! The local stage and the finish run the kernels' CPU programs; docs/ENGINE.md
//! says what a device-resident (CUDA) path still needs.

pub use crate::dist::raw_nccl::RawNcclCollective;

use sampler_kernels::rt::math::{order_bits, order_key};

use thiserror::Error;

use crate::dist::collective::{Collective, CollectiveError};
use crate::error::{BackendError, BatchError, ConfigError, RequestError};
use crate::layout::{build_plan_meta, RequestInfo};
use crate::request::{Request, StepOutput};
use crate::runtime::device::cpu::{CpuBackend, CpuDevice};
use crate::runtime::pipeline::{
    self, build_local, run_local, After, Buf, HostSlice, HostSliceMut, LocalStage, PrefixPolicy,
};
use crate::runtime::plan::{mass_chunks, Logits, StepPlan, StepResult};
use crate::sampler::{assemble, ProcessedRows, MAX_VOCAB};

/// How the vocabulary is split across the ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardLayout {
    /// `tp` equal contiguous shards of `ceil(V / tp)` columns: rank r holds
    /// ids `[r * S, (r + 1) * S)`; columns at ids >= V (the padded tail of
    /// the last shards, as a padded LM head produces) are never read or sampled.
    Equal {
        /// Ranks in the group.
        tp: usize,
    },
    /// Explicit `[lo, hi)` column ranges, one per rank (any rank order).
    /// Sorted by `lo` they must tile `[0, X)` with `X >= V`, without gap or
    /// overlap; ids >= V are padding as above.
    Ranges(Vec<(u32, u32)>),
}

/// One rank's columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// First global id.
    pub lo: u32,
    /// Columns in the rank's logits rows (padding included): the row stride.
    pub width: u32,
    /// Columns below V (`width` minus padding; may be 0).
    pub real: u32,
}

impl ShardLayout {
    /// The shards for vocabulary `vocab`, in rank order.
    ///
    /// Errors: [`ConfigError::Field`] `layout` for `tp == 0`, an empty range
    /// list, `hi < lo`, or ranges that do not tile `[0, X)` with `X >= V`.
    pub fn shards(&self, vocab: u32) -> Result<Vec<Shard>, ConfigError> {
        let bad = |msg: String| ConfigError::Field { field: "layout", msg };
        let ranges: Vec<(u32, u32)> = match self {
            ShardLayout::Equal { tp: 0 } => return Err(bad("tp = 0 ranks".into())),
            ShardLayout::Equal { tp } => {
                let s = vocab.div_ceil(*tp as u32).max(1);
                (0..*tp as u32).map(|r| (r * s, (r + 1) * s)).collect()
            }
            ShardLayout::Ranges(r) if r.is_empty() => return Err(bad("no ranges".into())),
            ShardLayout::Ranges(r) => r.clone(),
        };
        if let Some((i, &(lo, hi))) = ranges.iter().enumerate().find(|(_, &(lo, hi))| hi < lo) {
            return Err(bad(format!("range {i} = [{lo}, {hi}) has hi < lo")));
        }
        let mut sorted: Vec<(u32, u32)> = ranges.clone();
        sorted.sort();
        let mut at = 0u32;
        for &(lo, hi) in &sorted {
            if lo != at {
                return Err(bad(format!(
                    "ranges {ranges:?} leave a gap or overlap at id {at} (next range starts at {lo})"
                )));
            }
            at = hi;
        }
        if at < vocab {
            return Err(bad(format!("ranges {ranges:?} cover ids 0..{at}, fewer than V = {vocab}")));
        }
        Ok(ranges
            .iter()
            .map(|&(lo, hi)| Shard { lo, width: hi - lo, real: hi.min(vocab).saturating_sub(lo) })
            .collect())
    }
}

/// Where a vocabulary-parallel step finishes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FinishOn {
    /// Every rank merges and finishes: every rank returns the full output
    /// (no broadcast of the result is needed afterwards).
    #[default]
    AllRanks,
    /// Only rank 0 finishes; the others return an empty [`StepOutput`]
    /// (as a context-parallel follower, SAMPLER.md 9). A prefix-path step
    /// costs one more collective: rank 0 broadcasts whether to fall back.
    Driver,
}

/// What `Request::masks` holds on each rank.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MaskLayout {
    /// The whole-vocabulary mask, `ceil(V / 32)` words per row (validated as
    /// by [`crate::Sampler`]); each rank reads the bits of its columns.
    #[default]
    Global,
    /// This rank's mask only: `ceil(width / 32)` words per row, bit `j` of
    /// the shard = global id `lo + j` ([`shard_mask`] cuts one from a global
    /// mask). A wrong count or length on any rank fails the request on all
    /// ranks ([`RequestError::BadMask`], `detail` names the rank).
    Shard,
}

/// Configuration of a [`VocabParallelSampler`] (the same on every rank).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VocabParallelConfig {
    /// Vocabulary size V (1..=524288), the unpadded one.
    pub vocab_size: u32,
    /// Force top-k width N; 0 (or >= V) = off (SAMPLER.md 3.3).
    pub force_topk: u32,
    /// Draft tokens per step.
    pub nextn: u32,
    /// How the columns are split; its rank count must equal the collective's.
    pub layout: ShardLayout,
    /// Where the step finishes.
    pub finish: FinishOn,
    /// What the requests' masks hold.
    pub masks: MaskLayout,
    /// Two-round candidate exchange: 0 = off (each rank sends its top
    /// `min(N, width)` at once, one all-gather); `c > 0`: each rank first
    /// sends only its top `ceil(c * N / TP)`, and a second all-gather of the
    /// full `min(N, width)` follows only when, in some valid row, a truncated
    /// shard's last sent candidate ranks above the gathered N-th (so an unsent
    /// one could belong to the top N). Exact either way; it pays when TP is
    /// large and the top N spreads over the shards (TP = 8, c = 2: a quarter
    /// of the bytes), and costs a round trip when it clusters.
    pub first_round: u32,
}

/// A vocabulary-parallel step failed as a whole (a bad request never does this).
#[derive(Debug, Error, PartialEq)]
pub enum TpError {
    /// The batch's shape (logits length), or a backend failure.
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// A collective failed (peer gone, order mismatch, NCCL error).
    #[error("vocab-parallel collective failed: {0}")]
    Collective(#[from] CollectiveError),
}

/// What the last step exchanged (this rank's view).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExchangeStats {
    /// Collectives performed (all-gathers and broadcasts).
    pub collectives: u32,
    /// Bytes this rank received from all-gathers, its own contribution
    /// included (what an `[R, V]` logits all-gather would make `R * V * 4`).
    pub gathered_bytes: u64,
    /// The prefix width gathered last (0: force top-k on or the full rows).
    pub prefix_width: u32,
    /// Whether the step fell back to gathering the full masked rows.
    pub full_rows: bool,
}

/// A rank's vocabulary-parallel sampler over any [`Collective`]
/// (`LocalCollective` threads in tests, `NcclCollective` on GPUs).
pub struct VocabParallelSampler<C: Collective> {
    cfg: VocabParallelConfig,
    n: u32,
    shards: Vec<Shard>,
    coll: C,
    stats: ExchangeStats,
}

impl<C: Collective> std::fmt::Debug for VocabParallelSampler<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VocabParallelSampler")
            .field("cfg", &self.cfg)
            .field("rank", &self.coll.rank())
            .field("shards", &self.shards)
            .finish()
    }
}

/// A step's gathered data after the exchange, for the finish.
struct Gathered {
    row_status: Vec<i32>,
    /// `[R, M]` candidates of all shards, concatenated by `lo`.
    cand: Vec<f32>,
    cand_ids: Vec<i32>,
    m: u32,
    /// `[R]` total fixed-point mass (prefix path).
    mass: Option<Vec<u64>>,
}

/// How a step continues after a prefix-path finish (broadcast in [`FinishOn::Driver`]).
const NEXT_DONE: i32 = 0;
const NEXT_FULL: i32 = -1;

/// Rank `shard`'s mask cut from a global mask row (`ceil(V / 32)` words):
/// `ceil(width / 32)` words, bit `j` = global id `lo + j` (0 past the global mask).
pub fn shard_mask(global: &[u32], shard: Shard) -> Vec<u32> {
    bit_slice(global, shard.lo, shard.width)
}

/// Bits `lo .. lo + len` of `words` as `ceil(len / 32)` words (0 past the end).
fn bit_slice(words: &[u32], lo: u32, len: u32) -> Vec<u32> {
    let (w0, s) = ((lo / 32) as usize, lo % 32);
    let at = |i: usize| words.get(i).copied().unwrap_or(0);
    let mut out: Vec<u32> = (0..len.div_ceil(32) as usize)
        .map(|i| if s == 0 { at(w0 + i) } else { (at(w0 + i) >> s) | (at(w0 + i + 1) << (32 - s)) })
        .collect();
    if let (Some(last), true) = (out.last_mut(), len % 32 != 0) {
        *last &= (1u32 << (len % 32)) - 1;
    }
    out
}

fn u64_to_i32s(x: u64) -> [i32; 2] {
    [x as u32 as i32, (x >> 32) as u32 as i32]
}
fn i32s_to_u64(lo: i32, hi: i32) -> u64 {
    (lo as u32 as u64) | ((hi as u32 as u64) << 32)
}

impl<C: Collective> VocabParallelSampler<C> {
    /// This rank's sampler. Errors: V out of range, a bad layout, or a
    /// layout whose rank count differs from `coll.world_size()`.
    pub fn new(cfg: VocabParallelConfig, coll: C) -> Result<Self, ConfigError> {
        if cfg.vocab_size == 0 || cfg.vocab_size > MAX_VOCAB {
            return Err(ConfigError::VocabSize(cfg.vocab_size as u64));
        }
        let shards = cfg.layout.shards(cfg.vocab_size)?;
        if shards.len() != coll.world_size() {
            return Err(ConfigError::Field {
                field: "layout",
                msg: format!("{} shards for a group of {} ranks", shards.len(), coll.world_size()),
            });
        }
        let n = if cfg.force_topk == 0 || cfg.force_topk >= cfg.vocab_size { cfg.vocab_size } else { cfg.force_topk };
        Ok(VocabParallelSampler { cfg, n, shards, coll, stats: ExchangeStats::default() })
    }

    /// This rank's columns.
    pub fn shard(&self) -> Shard {
        self.shards[self.coll.rank()]
    }
    /// Every rank's columns, in rank order.
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }
    /// Candidate width N (V when force top-k is off).
    pub fn n(&self) -> u32 {
        self.n
    }
    /// The collective.
    pub fn collective(&mut self) -> &mut C {
        &mut self.coll
    }
    /// Gives the collective back (to reuse the communicator elsewhere).
    pub fn into_collective(self) -> C {
        self.coll
    }
    /// What the last step exchanged.
    pub fn last_stats(&self) -> &ExchangeStats {
        &self.stats
    }

    /// Samples one step from this rank's shard.
    ///
    /// `shard_logits`: `[R, width]` f32 (this rank's columns of every row,
    /// padding columns included and ignored), R the sum of the requests' rows.
    /// `requests`: the same on every rank (masks per [`MaskLayout`]).
    /// Every rank must call it for every step (it runs collectives).
    /// Returns the output of [`crate::Sampler::sample`] on the gathered logits
    /// (an empty one on non-driver ranks with [`FinishOn::Driver`]).
    /// Errors: the batch's shape, or a collective failure; a bad request only
    /// gets its error status.
    pub fn sample(&mut self, shard_logits: &[f32], requests: &[Request]) -> Result<StepOutput, TpError> {
        Ok(self.step(shard_logits, requests, &[])?.0)
    }

    /// [`Self::sample`], also returning the processed distributions of `rows`
    /// (as [`crate::Sampler::sample_with_processed`]; empty on non-finishing ranks).
    pub fn sample_with_processed(
        &mut self,
        shard_logits: &[f32],
        requests: &[Request],
        rows: &[usize],
    ) -> Result<(StepOutput, ProcessedRows), TpError> {
        self.step(shard_logits, requests, rows)
    }

    fn finishes(&self) -> bool {
        self.cfg.finish == FinishOn::AllRanks || self.coll.rank() == 0
    }

    fn gather(&mut self, send: &[i32], counts: &[usize]) -> Result<Vec<i32>, TpError> {
        let out = self.coll.all_gather_i32(send, counts)?;
        self.stats.collectives += 1;
        self.stats.gathered_bytes += out.len() as u64 * 4;
        Ok(out)
    }

    /// The batch's metadata (shard masks left out of validation, see [`MaskLayout::Shard`]).
    fn meta(&self, requests: &[Request]) -> Result<(StepPlan<'static>, Vec<RequestInfo>), BatchError> {
        let (v, n, nextn) = (self.cfg.vocab_size, self.n, self.cfg.nextn);
        match self.cfg.masks {
            MaskLayout::Global => build_plan_meta(v, n, nextn, requests),
            MaskLayout::Shard => {
                let stripped: Vec<Request> = requests.iter().map(|r| Request { masks: None, ..r.clone() }).collect();
                build_plan_meta(v, n, nextn, &stripped)
            }
        }
    }

    /// One step. Without force top-k, when only some requests keep every
    /// token (top-p 1, top-k off), those requests gather their full rows and
    /// the others take the prefix path: two sub-steps whose outputs are
    /// spliced back in request order. Each request's outputs depend only on
    /// its own rows and the batch's top-logprobs width k (SAMPLER.md 9),
    /// which both sub-steps use.
    fn step(
        &mut self,
        shard_logits: &[f32],
        requests: &[Request],
        proc_rows: &[usize],
    ) -> Result<(StepOutput, ProcessedRows), TpError> {
        self.stats = ExchangeStats::default();
        let me = self.shard();
        let rows: usize = requests.iter().fold(0usize, |a, r| a.saturating_add(r.rows()));
        if rows.checked_mul(me.width as usize) != Some(shard_logits.len())
            || self.n < self.cfg.vocab_size
            || !proc_rows.is_empty()
        {
            return self.sub_step(shard_logits, requests, proc_rows, 0);
        }
        let (plan, _) = self.meta(requests)?;
        if PrefixPolicy::Widening.width(&plan).is_some() {
            return self.sub_step(shard_logits, requests, proc_rows, 0);
        }
        // Requests that keep every token (valid, some row with top-p 1 and top-k off).
        let full: Vec<bool> = (0..plan.groups())
            .map(|g| {
                let (f, m) = (plan.group_first[g] as usize, plan.group_rows[g] as usize);
                plan.group_status[g] == 0 && (f..f + m).any(|r| plan.top_k[r] < 0 && plan.top_p[r] >= 1.0)
            })
            .collect();
        if full.iter().all(|&x| x) || !full.iter().any(|&x| x) {
            return self.sub_step(shard_logits, requests, proc_rows, 0);
        }
        let width = me.width as usize;
        let mut parts: Vec<(Vec<Request>, Vec<f32>, Vec<usize>)> = vec![Default::default(), Default::default()];
        for (g, req) in requests.iter().enumerate() {
            let part = &mut parts[usize::from(full[g])];
            let f = plan.group_first[g] as usize;
            part.0.push(req.clone());
            part.1.extend_from_slice(&shard_logits[f * width..(f + req.rows()) * width]);
            part.2.push(g);
        }
        let mut outs = Vec::new();
        let mut stats = ExchangeStats::default();
        for (reqs, logits, _) in &parts {
            let out = self.sub_step(logits, reqs, &[], plan.k)?.0;
            let st = std::mem::take(&mut self.stats);
            stats.collectives += st.collectives;
            stats.gathered_bytes += st.gathered_bytes;
            stats.prefix_width = stats.prefix_width.max(st.prefix_width);
            stats.full_rows |= st.full_rows;
            outs.push(out);
        }
        self.stats = stats;
        if outs[0].requests.is_empty() && outs[1].requests.is_empty() {
            return Ok((outs.swap_remove(0), ProcessedRows { n: self.n as usize, ..Default::default() }));
        }
        // Splice the two outputs back in request order.
        let mut slots: Vec<Option<(Vec<crate::request::RowOutput>, crate::request::RequestOutput)>> =
            vec![None; requests.len()];
        for ((reqs, _, ids), out) in parts.iter().zip(outs) {
            let mut rows_it = out.rows.into_iter();
            for ((req, &g), ro) in reqs.iter().zip(ids).zip(out.requests) {
                slots[g] = Some((rows_it.by_ref().take(req.rows()).collect(), ro));
            }
        }
        let mut out = StepOutput {
            rows: Vec::with_capacity(rows),
            requests: Vec::with_capacity(requests.len()),
            top_logprobs_width: plan.k as usize,
        };
        for (r, ro) in slots.into_iter().flatten() {
            out.rows.extend(r);
            out.requests.push(ro);
        }
        Ok((out, ProcessedRows { n: self.n as usize, ..Default::default() }))
    }

    /// One step of `requests` (all, or a part of the batch: then `k_min` is
    /// the batch's top-logprobs width).
    fn sub_step(
        &mut self,
        shard_logits: &[f32],
        requests: &[Request],
        proc_rows: &[usize],
        k_min: u32,
    ) -> Result<(StepOutput, ProcessedRows), TpError> {
        self.stats = ExchangeStats::default();
        let (v, n) = (self.cfg.vocab_size, self.n);
        let me = self.shard();
        let rows: usize = requests.iter().fold(0usize, |a, r| a.saturating_add(r.rows()));
        let expected = rows.checked_mul(me.width as usize);
        if expected != Some(shard_logits.len()) {
            let e = BatchError::LogitsShape {
                got: shard_logits.len(),
                rows,
                vocab: me.width as usize,
                expected: expected.unwrap_or(usize::MAX),
            };
            return Err(e.into());
        }
        // Metadata, identical on every rank. Shard masks are checked below
        // (per rank), so validation sees the requests without them.
        let (mut plan, mut infos) = self.meta(requests)?;
        plan.k = plan.k.max(k_min);
        if let Some(&bad) = proc_rows.iter().find(|&&r| r >= rows) {
            return Err(BatchError::Field {
                field: "rows",
                msg: format!("processed row {bad} is not below R = {rows}"),
            }
            .into());
        }
        plan.processed_rows = proc_rows.iter().map(|&r| r as u32).collect();
        let (local_masks, has_mask, mask_err) = self.local_masks(&plan, &infos, requests);
        let real = me.real as usize;
        // This rank's real columns, masked and checked.
        let mut cols = vec![0f32; rows * real];
        for (dst, src) in cols.chunks_mut(real.max(1)).zip(shard_logits.chunks(me.width.max(1) as usize)) {
            dst.copy_from_slice(&src[..real]);
        }
        let mut lg = vec![0f32; rows * real];
        let mut status = vec![2i32; rows];
        if real > 0 {
            // Raw logprobs (section 10.3) take the full-row path below: no shard partials here.
            let view = StepPlan {
                rows: rows as u32,
                vocab: me.real,
                logits: Logits::F32(&cols),
                masks: local_masks,
                has_mask,
                ..Default::default()
            };
            let prog = build_local(&view, LocalStage::Mask)?;
            let mut out = [(Buf::Masked, HostSliceMut::F32(&mut lg)), (Buf::RowStatus, HostSliceMut::I32(&mut status))];
            run_local(&mut CpuDevice::default(), &view, &prog, &[], &mut out)?;
        }
        drop(cols);
        // Section 5 / 9: a prefix-path step, a force top-k step, or the full rows.
        let prefix = PrefixPolicy::Widening.width(&plan);
        // Raw logprobs need the full-row normaliser over the global tiles, and
        // a tree walk runs after `finalize` on the full-row path: gather the rows.
        let result = if plan.any_raw || plan.any_tree {
            self.full_rows(&mut plan, &mut infos, &lg, &mask_err)?
        } else if n < v {
            let (g, errs) = self.exchange_candidates(&plan, &lg, &status, &mask_err, n, None)?;
            self.finishes().then(|| finish(&self.shards, &mut plan, &mut infos, g, errs, n)).transpose()?
        } else if let Some(w) = prefix {
            self.prefix_step(&mut plan, &mut infos, &lg, &status, &mask_err, w)?
        } else {
            self.full_rows(&mut plan, &mut infos, &lg, &mask_err)?
        };
        let Some(res) = result else {
            let empty = StepOutput { rows: Vec::new(), requests: Vec::new(), top_logprobs_width: 0 };
            return Ok((empty, ProcessedRows::default()));
        };
        let out = assemble(requests, &infos, &res, plan.k as usize);
        // Processed rows never take the prefix path: they are N wide.
        let proc_out = ProcessedRows {
            n: n as usize,
            rows: proc_rows.to_vec(),
            ids: res.processed_ids,
            logprobs: res.processed_lps,
        };
        Ok((out, proc_out))
    }

    /// This rank's `[R, ceil(real/32)]` mask words and `[R]` has-mask flags,
    /// and (shard masks) per request a local mask error `[G * 3]`:
    /// `(1, masks given, first bad mask index + 1 or 0)`, zeros when fine.
    fn local_masks(
        &self,
        plan: &StepPlan,
        infos: &[RequestInfo],
        requests: &[Request],
    ) -> (Vec<u32>, Vec<u32>, Vec<i32>) {
        let me = self.shard();
        let words = me.real.div_ceil(32) as usize;
        let rows = plan.rows as usize;
        match self.cfg.masks {
            MaskLayout::Global => {
                if plan.masks.is_empty() || words == 0 {
                    return (Vec::new(), vec![0; rows], Vec::new());
                }
                let gw = plan.mask_words() as usize;
                let mut out = Vec::with_capacity(rows * words);
                for r in 0..rows {
                    out.extend(bit_slice(&plan.masks[r * gw..(r + 1) * gw], me.lo, me.real));
                }
                (out, plan.has_mask.clone(), Vec::new())
            }
            MaskLayout::Shard => {
                let need = me.width.div_ceil(32) as usize;
                let mut out = vec![0u32; rows * words];
                let mut has = vec![0u32; rows];
                let mut err = vec![0i32; infos.len() * 3];
                for (g, (req, info)) in requests.iter().zip(infos).enumerate() {
                    let Some(ms) = &req.masks else { continue };
                    let bad = ms.iter().position(|m| m.len() != need);
                    if ms.len() != info.rows || bad.is_some() {
                        err[g * 3..g * 3 + 3].copy_from_slice(&[1, ms.len() as i32, bad.map_or(0, |b| b as i32 + 1)]);
                        continue;
                    }
                    if info.params.is_err() {
                        continue;
                    }
                    for (j, m) in ms.iter().enumerate() {
                        let r = info.first_row + j;
                        has[r] = 1;
                        out[r * words..(r + 1) * words].copy_from_slice(&m[..words]);
                    }
                }
                (out, has, err)
            }
        }
    }

    /// The all-gather of statuses, shard-mask errors, the top-`sel` candidates
    /// of every shard and (prefix path) the partial masses; returns the
    /// gathered candidates and the gathered shard-mask errors (`[world, G * 3]`).
    fn exchange_candidates(
        &mut self,
        plan: &StepPlan,
        lg: &[f32],
        status: &[i32],
        mask_err: &[i32],
        sel: u32,
        mass: Option<&[u64]>,
    ) -> Result<(Gathered, Vec<i32>), TpError> {
        let tp = self.shards.len() as u64;
        let c = self.cfg.first_round as u64;
        let full = |s: &Shard| sel.min(s.real);
        if c > 0 && tp > 1 {
            let share = (c * sel as u64).div_ceil(tp).min(u32::MAX as u64) as u32;
            let first = |s: &Shard| sel.min(s.real).min(share);
            if self.shards.iter().any(|s| first(s) < full(s)) {
                let (g, errs) = self.exchange_once(plan, lg, status, mask_err, &first, mass)?;
                if first_round_exact(plan, &g, &self.shards, &first, &full, sel) {
                    return Ok((g, errs));
                }
            }
        }
        self.exchange_once(plan, lg, status, mask_err, &full, mass)
    }

    /// One all-gather of statuses, shard-mask errors, each rank's top
    /// `take(shard)` candidates and the partial masses.
    fn exchange_once(
        &mut self,
        plan: &StepPlan,
        lg: &[f32],
        status: &[i32],
        mask_err: &[i32],
        take: &dyn Fn(&Shard) -> u32,
        mass: Option<&[u64]>,
    ) -> Result<(Gathered, Vec<i32>), TpError> {
        let rows = plan.rows as usize;
        let me = self.shard();
        let nr = take(&me) as usize;
        let (cand, ids) = local_topn(lg, rows, me, nr as u32)?;
        let mut send = Vec::with_capacity(rows * (1 + 2 * nr + 2) + mask_err.len());
        send.extend_from_slice(status);
        send.extend_from_slice(mask_err);
        send.extend(cand.iter().map(|x| x.to_bits() as i32));
        send.extend_from_slice(&ids);
        if let Some(ms) = mass {
            send.extend(ms.iter().flat_map(|&x| u64_to_i32s(x)));
        }
        let per =
            |s: &Shard| rows + mask_err.len() + 2 * rows * take(s) as usize + if mass.is_some() { 2 * rows } else { 0 };
        let counts: Vec<usize> = self.shards.iter().map(per).collect();
        let all = self.gather(&send, &counts)?;
        // Unpack, concatenating the shards' candidates by lo.
        let offs: Vec<usize> = counts.iter().scan(0, |a, &c| Some(std::mem::replace(a, *a + c))).collect();
        let mut order: Vec<usize> = (0..self.shards.len()).collect();
        order.sort_by_key(|&r| self.shards[r].lo);
        let m: usize = self.shards.iter().map(|s| take(s) as usize).sum();
        let mut row_status = vec![2i32; rows];
        let mut total = mass.map(|_| vec![0u64; rows]);
        let mut all_err = Vec::new();
        for (r, s) in self.shards.iter().enumerate() {
            let base = offs[r];
            for (i, st) in row_status.iter_mut().enumerate() {
                *st = merge_status(*st, all[base + i]);
            }
            all_err.extend_from_slice(&all[base + rows..base + rows + mask_err.len()]);
            if let Some(t) = total.as_mut() {
                let mb = base + rows + mask_err.len() + 2 * rows * take(s) as usize;
                for (i, t) in t.iter_mut().enumerate() {
                    *t += i32s_to_u64(all[mb + 2 * i], all[mb + 2 * i + 1]);
                }
            }
        }
        let mut gc = vec![0f32; rows * m];
        let mut gi = vec![0i32; rows * m];
        let mut col = 0usize;
        for &r in &order {
            let nr = take(&self.shards[r]) as usize;
            let cb = offs[r] + rows + mask_err.len();
            let ib = cb + rows * nr;
            for i in 0..rows {
                for j in 0..nr {
                    gc[i * m + col + j] = f32::from_bits(all[cb + i * nr + j] as u32);
                    gi[i * m + col + j] = all[ib + i * nr + j];
                }
            }
            col += nr;
        }
        // Shard-mask errors travel with the candidates; the caller applies them.
        let g = Gathered { row_status, cand: gc, cand_ids: gi, m: m as u32, mass: total };
        Ok((g, if mask_err.is_empty() { Vec::new() } else { all_err }))
    }

    /// Force top-k off, prefix path of width `w`: the row maxima, the partial
    /// masses, the candidates; wider prefixes or the full rows on overflow.
    fn prefix_step(
        &mut self,
        plan: &mut StepPlan,
        infos: &mut [RequestInfo],
        lg: &[f32],
        status: &[i32],
        mask_err: &[i32],
        w: u32,
    ) -> Result<Option<StepResult>, TpError> {
        let rows = plan.rows as usize;
        let me = self.shard();
        // The row's m (3.4): the largest of the shards' largest logits.
        let (top1, _) = local_topn(lg, rows, me, me.real.min(1))?;
        let local_m: Vec<i32> =
            (0..rows).map(|i| if me.real > 0 { top1[i] } else { f32::NEG_INFINITY }.to_bits() as i32).collect();
        let all = self.gather(&local_m, &vec![rows; self.shards.len()])?;
        let m: Vec<f32> = (0..rows)
            .map(|i| {
                (0..self.shards.len())
                    .map(|r| f32::from_bits(all[r * rows + i] as u32))
                    .max_by_key(|&x| order_bits(x))
                    .unwrap_or(f32::NEG_INFINITY)
            })
            .collect();
        // This shard's exact fixed-point mass with that m.
        let mut mass = vec![0u64; rows];
        if me.real > 0 {
            let chunks = mass_chunks(me.real);
            let mut part = vec![0u64; rows * chunks as usize];
            let view = StepPlan {
                rows: rows as u32,
                vocab: me.real,
                logits: Logits::F32(lg),
                temperature: plan.temperature.clone(),
                ..Default::default()
            };
            let prog = build_local(&view, LocalStage::Mass)?;
            let mut out = [(Buf::Mass, HostSliceMut::U64(&mut part))];
            run_local(&mut CpuDevice::default(), &view, &prog, &[(Buf::Cand, HostSlice::F32(&m))], &mut out)?;
            for (i, x) in mass.iter_mut().enumerate() {
                *x = part[i * chunks as usize..(i + 1) * chunks as usize].iter().sum();
            }
        }
        let mut w = w;
        let mut total: Option<Vec<u64>> = None;
        loop {
            self.stats.prefix_width = w;
            // The first round carries the partial masses and shard-mask
            // errors; wider rounds reuse the summed masses.
            let first = total.is_none();
            let (errs_in, mass_in) = if first { (mask_err, Some(&mass[..])) } else { (&[][..], None) };
            let (mut g, errs) = self.exchange_candidates(plan, lg, status, errs_in, w, mass_in)?;
            if first {
                apply_mask_errors(&self.shards, plan, infos, &errs);
                total = g.mass.take();
            }
            g.mass = total.clone();
            let mut next = NEXT_DONE;
            let mut res = None;
            if self.finishes() {
                let (r, overflow) = finish_prefix(plan, g, w)?;
                match PrefixPolicy::Widening.after(plan, w, &r.group_status, &overflow) {
                    After::Done => res = Some(r),
                    After::Widen(wider) => next = wider as i32,
                    After::FullRow => next = NEXT_FULL,
                }
            }
            if self.cfg.finish == FinishOn::Driver {
                let mut b = vec![next];
                self.coll.broadcast_i32(&mut b, 0)?;
                self.stats.collectives += 1;
                next = b.first().copied().unwrap_or(NEXT_FULL);
            }
            match next {
                NEXT_DONE => return Ok(res),
                NEXT_FULL => return self.full_rows(plan, infos, lg, &[]),
                wider => w = wider as u32,
            }
        }
    }

    /// The exact fallback: gather every shard's masked real columns into
    /// `[R, V]` and run the CPU backend's full-row path (masks already applied).
    fn full_rows(
        &mut self,
        plan: &mut StepPlan,
        infos: &mut [RequestInfo],
        lg: &[f32],
        mask_err: &[i32],
    ) -> Result<Option<StepResult>, TpError> {
        self.stats.full_rows = true;
        self.stats.prefix_width = 0;
        let rows = plan.rows as usize;
        let mut send = Vec::with_capacity(lg.len() + mask_err.len());
        send.extend_from_slice(mask_err);
        send.extend(lg.iter().map(|x| x.to_bits() as i32));
        let counts: Vec<usize> = self.shards.iter().map(|s| mask_err.len() + rows * s.real as usize).collect();
        let all = self.gather(&send, &counts)?;
        if !mask_err.is_empty() {
            let errs: Vec<i32> = counts
                .iter()
                .scan(0usize, |a, &c| Some(std::mem::replace(a, *a + c)))
                .flat_map(|o| all[o..o + mask_err.len()].to_vec())
                .collect();
            apply_mask_errors(&self.shards, plan, infos, &errs);
        }
        if !self.finishes() {
            return Ok(None);
        }
        let v = plan.vocab as usize;
        let mut logits = vec![0f32; rows * v];
        let mut off = 0usize;
        for (r, s) in self.shards.iter().enumerate() {
            let (lo, real) = (s.lo as usize, s.real as usize);
            let body = &all[off + mask_err.len()..off + counts[r]];
            for i in 0..rows {
                for j in 0..real {
                    logits[i * v + lo + j] = f32::from_bits(body[i * real + j] as u32);
                }
            }
            off += counts[r];
        }
        logits.shrink_to_fit();
        let full =
            StepPlan { logits: Logits::F32(&logits), has_mask: vec![0; rows], masks: Vec::new(), ..plan.clone() };
        Ok(Some(CpuBackend::full_row().run(&full)?))
    }
}

/// Whether a first round (each shard's top `first(s)` of `full(s)`) already
/// holds every valid row's global top `sel`: for each truncated shard, its
/// last sent key must not rank above the `sel`-th key of the gathered union
/// (its unsent keys rank below that one, hence below the union's `sel`-th).
/// Keys are `(logit, id)` in the order of SAMPLER.md 3.6, all distinct.
fn first_round_exact(
    plan: &StepPlan,
    g: &Gathered,
    shards: &[Shard],
    first: &dyn Fn(&Shard) -> u32,
    full: &dyn Fn(&Shard) -> u32,
    sel: u32,
) -> bool {
    let (rows, m, sel) = (plan.rows as usize, g.m as usize, sel as usize);
    if m < sel {
        return false;
    }
    let mut failed = vec![false; rows];
    for gi in 0..plan.groups() {
        if plan.group_status[gi] != 0 {
            let (f, n) = (plan.group_first[gi] as usize, plan.group_rows[gi] as usize);
            failed[f..f + n].iter_mut().for_each(|x| *x = true);
        }
    }
    // Column ranges of the truncated shards in the gathered rows (shards by lo).
    let mut order: Vec<&Shard> = shards.iter().collect();
    order.sort_by_key(|s| s.lo);
    let mut cut = Vec::new();
    let mut col = 0usize;
    for s in order {
        let k = first(s) as usize;
        if k < full(s) as usize {
            cut.push(col + k - 1);
        }
        col += k;
    }
    let key = |i: usize, c: usize| order_key(g.cand[i * m + c], g.cand_ids[i * m + c] as u32);
    (0..rows).all(|i| {
        if failed[i] || g.row_status[i] != 0 {
            return true;
        }
        let mut keys: Vec<u64> = (0..m).map(|c| key(i, c)).collect();
        keys.select_nth_unstable_by(sel - 1, |a, b| b.cmp(a));
        let kth = keys[sel - 1];
        cut.iter().all(|&c| key(i, c) <= kth)
    })
}

/// Global row status from two ranks' statuses (`mask_check`'s codes):
/// a bad value anywhere wins; all -inf only when every shard is.
fn merge_status(a: i32, b: i32) -> i32 {
    if a == 1 || b == 1 {
        1
    } else if a == 2 && b == 2 {
        2
    } else {
        0
    }
}

/// The top-`nr` of each row of this shard's masked `[R, real]` logits, as
/// logits and *global* ids, in the order of SAMPLER.md 3.6.
fn local_topn(lg: &[f32], rows: usize, me: Shard, nr: u32) -> Result<(Vec<f32>, Vec<i32>), BackendError> {
    let mut cand = vec![0f32; rows * nr as usize];
    let mut ids = vec![0i32; rows * nr as usize];
    if nr > 0 {
        let view = StepPlan { rows: rows as u32, vocab: me.real, logits: Logits::F32(lg), ..Default::default() };
        let prog = build_local(&view, LocalStage::TopN(nr))?;
        let mut out = [(Buf::Cand, HostSliceMut::F32(&mut cand)), (Buf::CandIds, HostSliceMut::I32(&mut ids))];
        run_local(&mut CpuDevice::default(), &view, &prog, &[], &mut out)?;
        ids.iter_mut().for_each(|x| *x += me.lo as i32);
    }
    Ok((cand, ids))
}

/// Merges the gathered candidates to the global top-`n` (`topn_merge`:
/// ties by position, which is id order since the shards are concatenated by lo).
fn merge(g: &Gathered, rows: usize, n: u32) -> Result<(Vec<f32>, Vec<i32>), BackendError> {
    let mut cand = vec![0f32; rows * n as usize];
    let mut ids = vec![0i32; rows * n as usize];
    let view = StepPlan { rows: rows as u32, ..Default::default() };
    let prog = build_local(&view, LocalStage::Merge { m: g.m, n })?;
    let extra = [(Buf::ChunkCand, HostSlice::F32(&g.cand)), (Buf::ChunkIds, HostSlice::I32(&g.cand_ids))];
    let mut out = [(Buf::Cand, HostSliceMut::F32(&mut cand)), (Buf::CandIds, HostSliceMut::I32(&mut ids))];
    run_local(&mut CpuDevice::default(), &view, &prog, &extra, &mut out)?;
    Ok((cand, ids))
}

/// Force top-k on: merge to N and finish. Applies the shard-mask errors first.
fn finish(
    shards: &[Shard],
    plan: &mut StepPlan,
    infos: &mut [RequestInfo],
    g: Gathered,
    errs: Vec<i32>,
    n: u32,
) -> Result<StepResult, BackendError> {
    apply_mask_errors(shards, plan, infos, &errs);
    let rows = plan.rows as usize;
    let (cand, ids) = merge(&g, rows, n)?;
    Ok(finish_steps(plan, &g.row_status, cand, ids, n, None)?.0)
}

/// Applies the gathered shard-mask errors (`[world, G * 3]`, empty = none):
/// a request with a bad mask on any rank fails on every rank (the lowest
/// such rank is named; `words` is that rank's expected mask length).
fn apply_mask_errors(shards: &[Shard], plan: &mut StepPlan, infos: &mut [RequestInfo], all: &[i32]) {
    let g = infos.len();
    if all.is_empty() || g == 0 {
        return;
    }
    for (gi, info) in infos.iter_mut().enumerate() {
        let Some(r) = (0..shards.len()).find(|&r| all[r * g * 3 + gi * 3] != 0) else { continue };
        let e = &all[r * g * 3 + gi * 3..r * g * 3 + gi * 3 + 3];
        if info.params.is_ok() {
            let detail = if e[2] > 0 {
                format!("; rank {r}: mask {} has the wrong length", e[2] - 1)
            } else {
                format!("; rank {r}")
            };
            let words = shards[r].width.div_ceil(32) as usize;
            info.params = Err(RequestError::BadMask { need: info.rows, words, got_masks: e[1] as usize, detail });
            plan.group_status[gi] = -1;
        }
    }
}

/// Prefix path: merge to `w` and finish with the summed masses; also returns
/// `process_prefix_draw`'s overflow flags.
fn finish_prefix(plan: &StepPlan, g: Gathered, w: u32) -> Result<(StepResult, Vec<u32>), BackendError> {
    let rows = plan.rows as usize;
    let (cand, ids) = merge(&g, rows, w)?;
    finish_steps(plan, &g.row_status, cand, ids, w, g.mass)
}

/// Steps 3-9 on merged candidates `[R, n]`: the pipeline's entry from
/// candidates ([`pipeline::run_from_candidates`]) on the CPU device, so the
/// kernel sequence (process + draw or `process_prefix_draw` with the row
/// totals `mass`, remap + verify, finalize, token info, top logprobs) is the
/// one every backend runs. Tree and raw-logprob steps take the full rows.
fn finish_steps(
    p: &StepPlan,
    row_status: &[i32],
    cand: Vec<f32>,
    cand_ids: Vec<i32>,
    n: u32,
    mass: Option<Vec<u64>>,
) -> Result<(StepResult, Vec<u32>), BackendError> {
    pipeline::run_from_candidates(&mut CpuDevice::default(), p, row_status, &cand, &cand_ids, n, mass.as_deref())
}

/// Gather-then-sample's exchange: every rank's real columns into `[R, V]`
/// (what an engine does today before sampling). For comparisons and benchmarks.
///
/// Errors: a collective failure, or `shard_logits` not `[rows, width]`.
pub fn gather_logits<C: Collective>(
    coll: &mut C,
    shards: &[Shard],
    vocab: u32,
    rows: usize,
    shard_logits: &[f32],
) -> Result<Vec<f32>, TpError> {
    let me = shards[coll.rank()];
    if shard_logits.len() != rows * me.width as usize {
        let e = BatchError::LogitsShape {
            got: shard_logits.len(),
            rows,
            vocab: me.width as usize,
            expected: rows * me.width as usize,
        };
        return Err(e.into());
    }
    let mut send = Vec::with_capacity(rows * me.real as usize);
    for i in 0..rows {
        let row = &shard_logits[i * me.width as usize..][..me.real as usize];
        send.extend(row.iter().map(|x| x.to_bits() as i32));
    }
    let counts: Vec<usize> = shards.iter().map(|s| rows * s.real as usize).collect();
    let all = coll.all_gather_i32(&send, &counts)?;
    let v = vocab as usize;
    let mut out = vec![0f32; rows * v];
    let mut off = 0;
    for s in shards {
        for i in 0..rows {
            for j in 0..s.real as usize {
                out[i * v + s.lo as usize + j] = f32::from_bits(all[off + i * s.real as usize + j] as u32);
            }
        }
        off += rows * s.real as usize;
    }
    Ok(out)
}

/// Rank `rank`'s `[R, width]` shard of global `[R, V]` logits, padding columns
/// filled with `pad` (tests put NaN there: it must never be read).
pub fn shard_of(logits: &[f32], vocab: u32, shard: Shard, pad: f32) -> Vec<f32> {
    let v = vocab as usize;
    let rows = logits.len().checked_div(v).unwrap_or(0);
    let mut out = Vec::with_capacity(rows * shard.width as usize);
    for i in 0..rows {
        if shard.real > 0 {
            out.extend_from_slice(&logits[i * v + shard.lo as usize..][..shard.real as usize]);
        }
        out.extend(std::iter::repeat_n(pad, (shard.width - shard.real) as usize));
    }
    out
}

/// A wrapper whose errors carry the backend name (a device failure in the
/// full-row fallback).
impl From<BackendError> for TpError {
    fn from(e: BackendError) -> Self {
        TpError::Batch(BatchError::Backend(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        let s = ShardLayout::Equal { tp: 3 }.shards(10).unwrap();
        assert_eq!(
            s,
            vec![
                Shard { lo: 0, width: 4, real: 4 },
                Shard { lo: 4, width: 4, real: 4 },
                Shard { lo: 8, width: 4, real: 2 }
            ]
        );
        // More ranks than ids: the tail shards are all padding.
        let s = ShardLayout::Equal { tp: 8 }.shards(5).unwrap();
        assert_eq!(s[5], Shard { lo: 5, width: 1, real: 0 });
        let s = ShardLayout::Ranges(vec![(6, 12), (0, 6)]).shards(10).unwrap();
        assert_eq!(s[0], Shard { lo: 6, width: 6, real: 4 });
        for bad in [vec![(0, 4), (5, 10)], vec![(0, 6), (4, 10)], vec![(0, 9)], vec![(3, 1)], vec![]] {
            assert!(matches!(ShardLayout::Ranges(bad).shards(10), Err(ConfigError::Field { field: "layout", .. })));
        }
        assert!(ShardLayout::Equal { tp: 0 }.shards(10).is_err());
    }

    #[test]
    fn bit_slices() {
        let g = [0b1011_0000u32 | 1 << 31, 0b101];
        // Bits 4.. of word 0, then word 1.
        assert_eq!(bit_slice(&g, 4, 8), vec![0b1011]);
        assert_eq!(bit_slice(&g, 31, 4), vec![0b1011]);
        assert_eq!(bit_slice(&g, 32, 40), vec![0b101, 0]);
        assert_eq!(
            i32s_to_u64(u64_to_i32s(0xDEAD_BEEF_0123_4567)[0], u64_to_i32s(0xDEAD_BEEF_0123_4567)[1]),
            0xDEAD_BEEF_0123_4567
        );
    }
}
