//! The CPU backend: runs the kernels' host programs, one program per row
//! (rayon over rows), in the sequence of [`crate::plan`].

use rayon::prelude::*;
use sampler_kernels::kernels as k;
use sampler_kernels::rt::cpu::Gm;

use crate::error::BackendError;
use crate::plan::{mass_chunks, Backend, StepPlan, StepResult, MASS_CHUNK};

/// Runs every kernel on the host CPU with rayon.
///
/// Without force top-k it takes the prefix path when the step allows it
/// ([`StepPlan::prefix_width`]) and falls back to the full-row path when a
/// row's kept set does not fit; [`CpuBackend::full_row`] forces the full-row
/// path (tests compare the two bit for bit).
#[derive(Clone, Debug, Default)]
pub struct CpuBackend {
    full_row: bool,
}

impl CpuBackend {
    /// A backend that always takes the full-row path (no prefix path).
    pub fn full_row() -> CpuBackend {
        CpuBackend { full_row: true }
    }

    /// One step on the prefix path of width `w` only (no fallback), with
    /// `process_prefix_draw`'s `[R]` overflow flags: what [`Backend::run`] does
    /// before it checks [`StepPlan::prefix_overflowed`]. For tests and
    /// benchmarks; `w` must be a tile size of `process_prefix_draw` below V.
    pub fn run_prefix(&self, p: &StepPlan, w: u32) -> Result<(StepResult, Vec<u32>), BackendError> {
        run_path(p, Some(w))
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
            let (res, overflow) = run_path(p, Some(w))?;
            if !p.prefix_overflowed(&res.group_status, &overflow) {
                return Ok(res);
            }
        }
        Ok(run_path(p, None)?.0)
    }
}

/// One step on the full-row path (`prefix == None`) or the prefix path of
/// width w; also returns `process_prefix_draw`'s overflow flags (`[R]`, zeros on
/// the full-row path).
fn run_path(p: &StepPlan, prefix: Option<u32>) -> Result<(StepResult, Vec<u32>), BackendError> {
    {
        let (r, v, kk) = (p.rows as usize, p.vocab, p.k);
        let n = prefix.unwrap_or(p.n);
        let g = p.groups();
        let mut logits = p.logits.clone();
        let mut row_status = vec![0i32; r];
        {
            let (lg, st) = (Gm::new_mut(&mut logits), Gm::new_mut(&mut row_status));
            let (masks, has) = (Gm::new(&p.masks), Gm::new(&p.has_mask));
            // SAFETY (all launches): each program writes only its own row's elements.
            launch(r, |i| unsafe { k::mask_check::cpu(i, lg, v, masks, has, st) });
        }
        let mut cand = vec![0f32; r * n as usize];
        let mut cand_ids = vec![0i32; r * n as usize];
        {
            let (lg, c, ci) = (Gm::new(&logits), Gm::new_mut(&mut cand), Gm::new_mut(&mut cand_ids));
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
                let (lg, c, t, ms) = (Gm::new(&logits), Gm::new(&cand), Gm::new(&p.temperature), Gm::new_mut(&mut mass));
                launch(r * chunks as usize, |i| unsafe { k::row_mass::cpu(i, lg, v, MASS_CHUNK, chunks, c, n, t, ms) });
            }
            let (c, ci, ms, lp, of) = (Gm::new(&cand), Gm::new(&cand_ids), Gm::new(&mass), Gm::new_mut(&mut logprobs), Gm::new_mut(&mut overflow));
            let (t, tp, tk, s, sq) = (Gm::new(&p.temperature), Gm::new(&p.top_p), Gm::new(&p.top_k), Gm::new(&p.seed), Gm::new(&p.seq_draw));
            let f = Gm::new_mut(&mut fresh);
            launch(r, |i| unsafe { k::process_prefix_draw::cpu(i, c, ci, n, v, ms, chunks, t, tp, tk, s, sq, lp, of, f) });
        } else {
            let (c, lp) = (Gm::new(&cand), Gm::new_mut(&mut logprobs));
            let (t, tp, tk) = (Gm::new(&p.temperature), Gm::new(&p.top_p), Gm::new(&p.top_k));
            launch(r, |i| unsafe { k::process::cpu(i, c, n, t, tp, tk, lp) });
            let (lp, ci, f) = (Gm::new(&logprobs), Gm::new(&cand_ids), Gm::new_mut(&mut fresh));
            let (s, sq) = (Gm::new(&p.seed), Gm::new(&p.seq_draw));
            launch(r, |i| unsafe { k::draw::cpu(i, lp, ci, n, s, sq, f) });
        }
        let mut accept = vec![0u32; r];
        let mut residual = vec![-1i32; r];
        if p.any_verify {
            let mut col_of = vec![-1i32; r * v as usize];
            let mut q_lps = vec![0f32; r * n as usize];
            let mut draft_col = vec![-1i32; r];
            let mut draft_q = vec![f32::NEG_INFINITY; r];
            {
                let (ci, di, dl, dt) = (Gm::new(&cand_ids), Gm::new(&p.draft_ids), Gm::new(&p.draft_lps), Gm::new(&p.drafts));
                let (co, q, dc, dq) = (Gm::new_mut(&mut col_of), Gm::new_mut(&mut q_lps), Gm::new_mut(&mut draft_col), Gm::new_mut(&mut draft_q));
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
