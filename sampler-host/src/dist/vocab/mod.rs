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
//! logits bit for bit, for every row kind (tests/engine/vocab_parallel.rs). Where
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

mod exchange;
mod shard;

pub use exchange::gather_logits;
pub use shard::{shard_mask, shard_of, Shard, ShardLayout};

use exchange::Gathered;

use thiserror::Error;

use crate::dist::collective::{Collective, CollectiveError};
use crate::error::{BackendError, BatchError, ConfigError, RequestError};
use crate::layout::{build_plan_meta, RequestInfo};
use crate::request::{Request, StepOutput};
use crate::runtime::device::cpu::CpuDevice;
use crate::runtime::pipeline::{self, build_local, run_local, Buf, HostSlice, HostSliceMut, LocalStage, PrefixPolicy};
use crate::runtime::plan::{Logits, StepPlan, StepResult};
use crate::sampler::{assemble, ProcessedRows, MAX_VOCAB};

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

/// A wrapper whose errors carry the backend name (a device failure in the
/// full-row fallback).
impl From<BackendError> for TpError {
    fn from(e: BackendError) -> Self {
        TpError::Batch(BatchError::Backend(e))
    }
}
