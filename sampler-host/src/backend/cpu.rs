//! The CPU backend: runs the kernels' host programs, one program per row
//! (rayon over rows), in the sequence of [`crate::plan`].

use rayon::prelude::*;
use sampler_kernels::kernels as k;
use sampler_kernels::rt::cpu::Gm;

use crate::error::BackendError;
use crate::plan::{mass_chunks, raw_tiles, Backend, StepPlan, StepResult, MASS_CHUNK};

/// Runs every kernel on the host CPU with rayon.
///
/// Without force top-k it takes the prefix path when the step allows it
/// ([`StepPlan::prefix_width`]) and falls back to the full-row path when a
/// row's kept set does not fit; [`CpuBackend::full_row`] forces the full-row
/// path (tests compare the two bit for bit).
#[derive(Clone, Debug, Default)]
pub struct CpuBackend {
    full_row: bool,
    /// `remap_draft`'s `[R, V]` column table, kept between steps: the kernel
    /// accepts any contents, so it is never cleared (no 4 R V bytes written per verify step).
    col_of: Scratch,
}

/// A reusable buffer (Debug shows only its length).
#[derive(Clone, Default)]
struct Scratch(Vec<i32>);

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scratch({} elements)", self.0.len())
    }
}

impl CpuBackend {
    /// A backend that always takes the full-row path (no prefix path).
    pub fn full_row() -> CpuBackend {
        CpuBackend { full_row: true, ..Default::default() }
    }

    /// One step on the prefix path of width `w` only (no fallback), with
    /// `process_prefix_draw`'s `[R]` overflow flags: what [`Backend::run`] does
    /// before it checks [`StepPlan::prefix_overflowed`]. For tests and
    /// benchmarks; `w` must be a tile size of `process_prefix_draw` below V.
    pub fn run_prefix(&self, p: &StepPlan, w: u32) -> Result<(StepResult, Vec<u32>), BackendError> {
        run_path(p, Some(w), &mut Vec::new())
    }
}


/// Runs `f(program)` for every program in `0..count`, in parallel.
fn launch(count: usize, f: impl Fn(u32) + Sync + Send) {
    (0..count as u32).into_par_iter().for_each(f);
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn run(&mut self, p: &StepPlan) -> Result<StepResult, BackendError> {
        if let Some(w) = p.prefix_width().filter(|_| !self.full_row) {
            let (res, overflow) = run_path(p, Some(w), &mut self.col_of.0)?;
            if !p.prefix_overflowed(&res.group_status, &overflow) {
                return Ok(res);
            }
        }
        Ok(run_path(p, None, &mut self.col_of.0)?.0)
    }
}

/// One step on the full-row path (`prefix == None`) or the prefix path of
/// width w; also returns `process_prefix_draw`'s overflow flags (`[R]`, zeros on
/// the full-row path). `col_of`: `remap_draft`'s scratch (grown as needed, any contents).
fn run_path(p: &StepPlan, prefix: Option<u32>, col_of: &mut Vec<i32>) -> Result<(StepResult, Vec<u32>), BackendError> {
    {
        let (r, v, kk) = (p.rows as usize, p.vocab, p.k);
        let n = prefix.unwrap_or(p.n);
        let g = p.groups();
        // The mask check writes logits only in rows with a mask: without masks
        // it reads the plan's logits in place (no copy of R x V floats), so a
        // read-only view may stand for its `GmMut` logits.
        let masked = p.has_mask.iter().any(|&m| m != 0);
        let mut copy = if masked { p.logits.clone() } else { Vec::new() };
        let mut row_status = vec![0i32; r];
        let tiles = raw_tiles(v);
        let mut raw_max = vec![f32::NEG_INFINITY; r * tiles as usize];
        let mut raw_sum = vec![0u64; r * tiles as usize];
        {
            // mask_check as mask_check_chunk with one chunk per row, then
            // status_merge: the same statuses, masked logits and raw tile sums,
            // with one fused count per tile (bad and finite together).
            let tile = k::mask_check_chunk::VARIANTS.iter().map(|x| x.tile).max().unwrap_or(1);
            let clen = v.div_ceil(tile).max(1) * tile;
            let (mut bad, mut fin) = (vec![0u32; r], vec![0u32; r]);
            let lg = if masked { Gm::new_mut(&mut copy) } else { Gm::new(&p.logits) };
            let (masks, has, raw) = (Gm::new(&p.masks), Gm::new(&p.has_mask), Gm::new(&p.raw_logprobs));
            let (rm, rs) = (Gm::new_mut(&mut raw_max), Gm::new_mut(&mut raw_sum));
            let (b, f) = (Gm::new_mut(&mut bad), Gm::new_mut(&mut fin));
            // SAFETY (all launches): each program writes only its own row's elements.
            launch(r, |i| unsafe { k::mask_check_chunk::cpu(i, lg, v, clen, 1, masks, has, raw, rm, rs, b, f) });
            let (b, f, st) = (Gm::new(&bad), Gm::new(&fin), Gm::new_mut(&mut row_status));
            launch(r, |i| unsafe { k::status_merge::cpu(i, b, f, 1, st) });
        }
        let logits: &[f32] = if masked { &copy } else { &p.logits };
        let mut cand = vec![0f32; r * n as usize];
        let mut cand_ids = vec![0i32; r * n as usize];
        {
            let (lg, c, ci) = (Gm::new(logits), Gm::new_mut(&mut cand), Gm::new_mut(&mut cand_ids));
            launch(r, |i| unsafe { k::force_topn::cpu(i, lg, v, n, c, ci) });
        }
        let mut logprobs = vec![0f32; r * n as usize];
        let mut overflow = vec![0u32; r];
        let mut fresh = vec![-1i32; r];
        if prefix.is_some() {
            // Steps 3-4 fused (the prefix path has only the fused kernel).
            let chunks = mass_chunks(v);
            let mut mass = vec![0u64; r * chunks as usize];
            {
                let (lg, c, t, ms) = (Gm::new(logits), Gm::new(&cand), Gm::new(&p.temperature), Gm::new_mut(&mut mass));
                launch(r * chunks as usize, |i| unsafe { k::row_mass::cpu(i, lg, v, MASS_CHUNK, chunks, c, n, t, ms) });
            }
            let (c, ci, ms, lp, of) = (Gm::new(&cand), Gm::new(&cand_ids), Gm::new(&mass), Gm::new_mut(&mut logprobs), Gm::new_mut(&mut overflow));
            let (t, tp, tk, s, sq) = (Gm::new(&p.temperature), Gm::new(&p.top_p), Gm::new(&p.top_k), Gm::new(&p.seed), Gm::new(&p.seq_draw));
            let (mp, fo) = (Gm::new(&p.min_p), Gm::new(&p.filter_order));
            let f = Gm::new_mut(&mut fresh);
            launch(r, |i| unsafe { k::process_prefix_draw::cpu(i, c, ci, n, v, ms, chunks, t, tp, tk, mp, fo, s, sq, lp, of, f) });
        } else {
            let (c, lp) = (Gm::new(&cand), Gm::new_mut(&mut logprobs));
            let (t, tp, tk, mp, fo) = (Gm::new(&p.temperature), Gm::new(&p.top_p), Gm::new(&p.top_k), Gm::new(&p.min_p), Gm::new(&p.filter_order));
            launch(r, |i| unsafe { k::process::cpu(i, c, n, t, tp, tk, mp, fo, lp) });
            let (lp, ci, f) = (Gm::new(&logprobs), Gm::new(&cand_ids), Gm::new_mut(&mut fresh));
            let (s, sq) = (Gm::new(&p.seed), Gm::new(&p.seq_draw));
            launch(r, |i| unsafe { k::draw::cpu(i, lp, ci, n, s, sq, f) });
        }
        let mut accept = vec![0u32; r];
        let mut residual = vec![-1i32; r];
        if p.any_verify {
            if col_of.len() < r * v as usize {
                col_of.resize(r * v as usize, -1);
            }
            let col_of = &mut col_of[..r * v as usize];
            let mut q_lps = vec![0f32; r * n as usize];
            let mut draft_col = vec![-1i32; r];
            let mut draft_q = vec![f32::NEG_INFINITY; r];
            {
                let (ci, di, dl, dt) = (Gm::new(&cand_ids), Gm::new(&p.draft_ids), Gm::new(&p.draft_lps), Gm::new(&p.drafts));
                let (co, q, dc, dq) = (Gm::new_mut(col_of), Gm::new_mut(&mut q_lps), Gm::new_mut(&mut draft_col), Gm::new_mut(&mut draft_q));
                launch(r, |i| unsafe { k::remap_draft::cpu(i, ci, n, v, di, dl, p.draft_width, dt, co, q, dc, dq) });
            }
            let (lp, ci, q) = (Gm::new(&logprobs), Gm::new(&cand_ids), Gm::new(&q_lps));
            let (dc, dq) = (Gm::new(&draft_col), Gm::new(&draft_q));
            let (s, sa, sr) = (Gm::new(&p.seed), Gm::new(&p.seq_accept), Gm::new(&p.seq_residual));
            let (a, res) = (Gm::new_mut(&mut accept), Gm::new_mut(&mut residual));
            launch(r, |i| unsafe { k::verify::cpu(i, lp, ci, q, n, dc, dq, s, sa, sr, a, res) });
        }
        let mut tokens = vec![-1i32; r];
        let mut lookup = vec![-1i32; r];
        let mut accepted = vec![0u32; g];
        let mut group_status = vec![0i32; g];
        {
            let (gf, gr, gk, gs) = (Gm::new(&p.group_first), Gm::new(&p.group_rows), Gm::new(&p.group_kind), Gm::new(&p.group_status));
            let (rs, gold, dr, af, res, fr) =
                (Gm::new(&row_status), Gm::new(&p.golden), Gm::new(&p.drafts), Gm::new(&accept), Gm::new(&residual), Gm::new(&fresh));
            let (t, lk, ac, st) = (Gm::new_mut(&mut tokens), Gm::new_mut(&mut lookup), Gm::new_mut(&mut accepted), Gm::new_mut(&mut group_status));
            launch(g, |i| unsafe { k::finalize::cpu(i, gf, gr, gk, gs, rs, gold, dr, af, res, fr, t, lk, ac, st) });
        }
        // Section 11: the tree walk, one program per group, after `finalize`.
        let mut path = Vec::new();
        if p.any_tree {
            path = vec![-1i32; r];
            let (gf, gr, gk, tm, st) = (Gm::new(&p.group_first), Gm::new(&p.group_rows), Gm::new(&p.group_kind), Gm::new(&p.tree_mode), Gm::new(&group_status));
            let (tp, tt, gold, fr) = (Gm::new(&p.tree_parent), Gm::new(&p.tree_token), Gm::new(&p.golden), Gm::new(&fresh));
            // Scratch of the id -> draft entry match (rows with a draft distribution only).
            let mut dpos = vec![-1i32; if p.draft_width > 0 { r * v as usize } else { 0 }];
            let (lp, ci, di, dl, dp) = (Gm::new(&logprobs), Gm::new(&cand_ids), Gm::new(&p.draft_ids), Gm::new(&p.draft_lps), Gm::new_mut(&mut dpos));
            let (s, sa, sr) = (Gm::new(&p.seed), Gm::new(&p.seq_accept), Gm::new(&p.seq_residual));
            let (t, lk, ac, pa) = (Gm::new_mut(&mut tokens), Gm::new_mut(&mut lookup), Gm::new_mut(&mut accepted), Gm::new_mut(&mut path));
            launch(g, |i| unsafe { k::tree_walk::cpu(i, gf, gr, gk, tm, st, tp, tt, gold, fr, lp, ci, n, v, di, dl, p.draft_width, dp, s, sa, sr, t, lk, ac, pa) });
        }
        let mut token_lp = vec![f32::NEG_INFINITY; r];
        let mut sum_smaller = vec![0f32; r];
        {
            let (c, ci, lp, lk) = (Gm::new(&cand), Gm::new(&cand_ids), Gm::new(&logprobs), Gm::new(&lookup));
            let (tl, ss) = (Gm::new_mut(&mut token_lp), Gm::new_mut(&mut sum_smaller));
            launch(r, |i| unsafe { k::token_info::cpu(i, c, ci, lp, n, lk, tl, ss) });
        }
        let mut top_ids = vec![-1i32; r * kk as usize];
        let mut top_lps = vec![f32::NEG_INFINITY; r * kk as usize];
        if kk > 0 {
            let (ci, lp) = (Gm::new(&cand_ids), Gm::new(&logprobs));
            let (oi, ol) = (Gm::new_mut(&mut top_ids), Gm::new_mut(&mut top_lps));
            launch(r, |i| unsafe { k::top_logprobs::cpu(i, ci, lp, n, kk, oi, ol) });
        }
        // Section 10.3: raw logprobs replace the reported values of the rows asking for them.
        if p.any_raw {
            let (lg, raw, rm, rs, lk, oi) =
                (Gm::new(&logits), Gm::new(&p.raw_logprobs), Gm::new(&raw_max), Gm::new(&raw_sum), Gm::new(&lookup), Gm::new(&top_ids));
            let (tl, ol) = (Gm::new_mut(&mut token_lp), Gm::new_mut(&mut top_lps));
            launch(r, |i| unsafe { k::raw_logprobs::cpu(i, lg, v, raw, rm, rs, tiles, lk, kk, oi, tl, ol) });
        }
        // Optional output: the processed top-N distribution of the rows asked for.
        let nn = n as usize;
        let mut processed_ids = Vec::with_capacity(p.processed_rows.len() * nn);
        let mut processed_lps = Vec::with_capacity(p.processed_rows.len() * nn);
        for row in p.processed_rows_checked("cpu")? {
            processed_ids.extend_from_slice(&cand_ids[row * nn..(row + 1) * nn]);
            processed_lps.extend_from_slice(&logprobs[row * nn..(row + 1) * nn]);
        }
        Ok((StepResult { row_status, tokens, token_lp, sum_smaller, top_ids, top_lps, accepted, group_status, processed_ids, processed_lps, path }, overflow))
    }
}
