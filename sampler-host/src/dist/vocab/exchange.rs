//! The exchange of a vocabulary-parallel step: this rank's masks, the
//! all-gathers of candidates (one or two rounds), the prefix path's row
//! maxima and masses (widened by `PrefixPolicy::Widening`), and the
//! full-row fallback; and gather-then-sample's logits gather.

use sampler_kernels::rt::math::{order_bits, order_key};

use super::shard::bit_slice;
use super::*;
use crate::dist::collective::Collective;
use crate::layout::RequestInfo;
use crate::runtime::device::cpu::{CpuBackend, CpuDevice};
use crate::runtime::pipeline::{build_local, run_local, After, Buf, HostSlice, HostSliceMut, LocalStage, PrefixPolicy};
use crate::runtime::plan::{mass_chunks, Logits, StepPlan, StepResult};

/// A step's gathered data after the exchange, for the finish.
pub(super) struct Gathered {
    pub(super) row_status: Vec<i32>,
    /// `[R, M]` candidates of all shards, concatenated by `lo`.
    pub(super) cand: Vec<f32>,
    pub(super) cand_ids: Vec<i32>,
    pub(super) m: u32,
    /// `[R]` total fixed-point mass (prefix path).
    pub(super) mass: Option<Vec<u64>>,
}

/// How a step continues after a prefix-path finish (broadcast in [`FinishOn::Driver`]).
const NEXT_DONE: i32 = 0;
const NEXT_FULL: i32 = -1;

pub(super) fn u64_to_i32s(x: u64) -> [i32; 2] {
    [x as u32 as i32, (x >> 32) as u32 as i32]
}
pub(super) fn i32s_to_u64(lo: i32, hi: i32) -> u64 {
    (lo as u32 as u64) | ((hi as u32 as u64) << 32)
}

impl<C: Collective> VocabParallelSampler<C> {
    /// This rank's `[R, ceil(real/32)]` mask words and `[R]` has-mask flags,
    /// and (shard masks) per request a local mask error `[G * 3]`:
    /// `(1, masks given, first bad mask index + 1 or 0)`, zeros when fine.
    pub(super) fn local_masks(
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
    pub(super) fn exchange_candidates(
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
    pub(super) fn exchange_once(
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
    pub(super) fn prefix_step(
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
    pub(super) fn full_rows(
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
