//! A vocabulary-parallel shard's local stages as launch lists
//! ([`build_local`]): the mask check of its columns, its top-n, its part of
//! the row masses, and the merge of the gathered candidates. Between them
//! the ranks exchange (`crate::dist::vocab`), so each stage is a program
//! of its own, run by [`run_local`].

use sampler_kernels::kernels as k;
use sampler_kernels::spec::LaunchArg;

use super::build::launch;
use super::{launch_all, prepare_with, Buf, BufSpec, Device, HostSlice, HostSliceMut, Init, Program};
use crate::error::BackendError;
use crate::runtime::plan::{mass_chunks, StepPlan, MASS_CHUNK};

/// One local stage of a shard; `p` of [`build_local`] is the shard's view:
/// `rows` R, `vocab` its real columns, its logits, masks and temperatures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalStage {
    /// `mask_check` (3.1-3.2): the `[R, vocab]` logits with the grammar
    /// masks applied into [`Buf::Masked`] (f32), the row statuses into
    /// [`Buf::RowStatus`] `[R]`.
    Mask,
    /// `force_topn` (3.3, 3.6): each row's top `n` of the logits into
    /// [`Buf::Cand`] / [`Buf::CandIds`] `[R, n]` (ids local to the shard).
    TopN(u32),
    /// `row_mass` (3.4) with each row's maximum given in [`Buf::Cand`]
    /// `[R, 1]`: the fixed-point masses `[R, mass_chunks(vocab)]` in [`Buf::Mass`].
    Mass,
    /// `topn_merge`: the top `n` of `m` gathered candidates per row
    /// ([`Buf::ChunkCand`] / [`Buf::ChunkIds`] `[R, m]`, ties by position)
    /// into [`Buf::Cand`] / [`Buf::CandIds`] `[R, n]`. Statuses are not merged.
    Merge {
        /// Gathered candidates per row.
        m: u32,
        /// Candidates kept per row.
        n: u32,
    },
}

/// The launch list of one local stage of the shard view `p`.
///
/// Errors: a kernel without a tile variant for the stage's width.
pub fn build_local(p: &StepPlan, stage: LocalStage) -> Result<Program, BackendError> {
    use Buf::*;
    let (r, v, rows) = (p.rows as usize, p.vocab, p.rows);
    let mut bufs = Vec::new();
    let mut add = |buf: Buf, len: usize, init: Init| bufs.push(BufSpec { buf, len, init });
    let mut ls = Vec::new();
    let width = match stage {
        LocalStage::Mask => {
            add(Logits, r * v as usize, Init::Input);
            add(Masks, p.masks.len(), Init::Input);
            add(HasMask, r, Init::Input);
            // No raw-logprob partial sums here (raw rows gather the full rows).
            add(Raw, r, Init::Fill(LaunchArg::U32(0)));
            add(RawMax, 0, Init::Scratch);
            add(RawSum, 0, Init::Scratch);
            add(Masked, r * v as usize, Init::Scratch);
            add(RowStatus, r, Init::Scratch);
            let a = k::mask_check::Args {
                logits: Logits,
                v,
                masks: Masks,
                has_mask: HasMask,
                copy: 1,
                masked: Masked,
                raw: Raw,
                raw_max: RawMax,
                raw_sum: RawSum,
                status: RowStatus,
            };
            launch(&mut ls, k::mask_check::NAME, 1, rows, 0, a.list())?;
            v
        }
        LocalStage::TopN(n) => {
            add(Logits, r * v as usize, Init::Input);
            add(Cand, r * n as usize, Init::Scratch);
            add(CandIds, r * n as usize, Init::Scratch);
            let a = k::force_topn::Args { logits: Logits, v, n, cand: Cand, cand_ids: CandIds };
            launch(&mut ls, k::force_topn::NAME, n, rows, v, a.list())?;
            n
        }
        LocalStage::Mass => {
            let mc = mass_chunks(v);
            add(Logits, r * v as usize, Init::Input);
            add(Cand, r, Init::Input);
            add(Temperature, r, Init::Input);
            add(Mass, r * mc as usize, Init::Scratch);
            let a = k::row_mass::Args {
                logits: Logits,
                v,
                chunk_len: MASS_CHUNK,
                chunks: mc,
                cand: Cand,
                n: 1,
                temperature: Temperature,
                mass: Mass,
            };
            launch(&mut ls, k::row_mass::NAME, 1, rows * mc, 0, a.list())?;
            1
        }
        LocalStage::Merge { m, n } => {
            add(ChunkCand, r * m as usize, Init::Input);
            add(ChunkIds, r * m as usize, Init::Input);
            add(Cand, r * n as usize, Init::Scratch);
            add(CandIds, r * n as usize, Init::Scratch);
            // mchunks = 0: the counts are not read and no status is written.
            add(ChunkBad, 1, Init::Fill(LaunchArg::U32(0)));
            add(ChunkFinite, 1, Init::Fill(LaunchArg::U32(0)));
            add(RowStatus, r, Init::Scratch);
            let a = k::topn_merge::Args {
                cand_in: ChunkCand,
                ids_in: ChunkIds,
                m,
                n,
                cand: Cand,
                cand_ids: CandIds,
                bad: ChunkBad,
                finite: ChunkFinite,
                mchunks: 0,
                status: RowStatus,
            };
            launch(&mut ls, k::topn_merge::NAME, n, rows, m, a.list())?;
            n
        }
    };
    Ok(Program { width, prefix: false, bufs, launches: ls })
}

/// Runs a local stage's program on `dev`: the inputs from the shard view
/// `p` (its logits bound, its host arrays) and `extra` (inputs the plan
/// does not hold), then each `(buffer, host array)` of `out` read back.
///
/// Errors: a device failure, or an output longer than its buffer.
pub fn run_local(
    dev: &mut dyn Device,
    p: &StepPlan,
    prog: &Program,
    extra: &[(Buf, HostSlice<'_>)],
    out: &mut [(Buf, HostSliceMut<'_>)],
) -> Result<(), BackendError> {
    if p.rows == 0 {
        return Ok(());
    }
    prepare_with(dev, p, prog, extra)?;
    launch_all(dev, prog)?;
    for (b, h) in out.iter_mut() {
        let h = match h {
            HostSliceMut::F32(s) => HostSliceMut::F32(s),
            HostSliceMut::I32(s) => HostSliceMut::I32(s),
            HostSliceMut::U32(s) => HostSliceMut::U32(s),
            HostSliceMut::U64(s) => HostSliceMut::U64(s),
        };
        dev.download(*b, 0, h)?;
    }
    dev.finish()
}
