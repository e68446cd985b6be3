//! A step's device-ready plan: flat per-row / per-group arrays that every
//! backend runs through the same kernel sequence, and the raw results.
//!
//! Pipeline (SAMPLER.md sections 3-8), all kernels from `sampler_kernels::kernels`:
//! 1. `mask_check`   `[R, V]` logits (f32, bf16 or f16, widened at load;
//!    with a grammar mask in the step, every row masked and widened into
//!    the f32 `masked` copy the later kernels read), `status[R]`; for raw
//!    rows (section 10.3) also the per-tile partial sums `raw_max`, `raw_sum`
//!    `[R, raw_tiles(V)]`
//! 2. `force_topn`   -> `cand[R, N]`, `cand_ids[R, N]` (order of section 3.6)
//! 3. `process`      -> `logprobs[R, N]` (min-p and the filter order of section 10 included)
//! 4. `draw`         case 0 for every row -> `fresh[R]`
//! 5. `remap_draft`  (when any verify row) -> `q_logprobs[R, N]`, `draft_col[R]`, `draft_q[R]`
//! 6. `verify`       (when any verify row) -> `accept[R]`, `residual[R]`
//! 7. `finalize`     per group -> `tokens[R]`, `lookup[R]`, `accepted[G]`, `status[G]`
//! 8. `token_info`   `lookup` tokens (output token or prompt target) -> `token_lp[R]`, `sum_smaller[R]`
//! 9. `top_logprobs` -> `top_ids[R, k]`, `top_lps[R, k]`
//! 10. `tree_walk`   (when any tree request; after `finalize`, before `token_info`)
//!     per group -> `tokens`, `lookup`, `accepted` of tree groups, `path[R]`
//! 11. `raw_logprobs` (when [`StepPlan::any_raw`]) overwrites `token_lp` and
//!     `top_lps` of the raw rows with raw logprobs (section 10.3)
//!
//! Without force top-k, steps 2-3 are usually the prefix path instead
//! (`StepPlan::prefix_width`, decided in `runtime::pipeline::PrefixPolicy`):
//! `force_topn` with N = w, `row_mass`, `process_prefix_draw`, and every
//! later kernel on w columns.

/// Blocks per row of `row_mass` (by V only; the sum is exact in any split).
pub fn mass_chunks(v: u32) -> u32 {
    v.div_ceil(MASS_CHUNK).max(1)
}

/// Logits per program of `row_mass`.
pub const MASS_CHUNK: u32 = 16384;

/// `filter_order` value: top-p, then top-k (the seed; SAMPLER.md 3.7-3.8).
pub const ORDER_TOP_P_FIRST: u32 = 0;
/// `filter_order` value: top-k, then top-p on the renormalised top-k mass (SAMPLER.md 10.2).
pub const ORDER_TOP_K_FIRST: u32 = 1;

/// Logits per tile of the raw-logprob partial sums (`mask_check`'s tile):
/// `mask_check` / `mask_check_chunk` write one (max, sum) pair per tile of
/// each raw row, `[R, raw_tiles(V)]`.
pub const RAW_TILE: u32 = 4096;

/// Tiles per row of the raw-logprob partial sums, `ceil(V / RAW_TILE)`.
pub fn raw_tiles(v: u32) -> u32 {
    v.div_ceil(RAW_TILE).max(1)
}

pub use sampler_kernels::codes::{
    GROUP_FRESH, GROUP_NO_DRAW, GROUP_TREE, GROUP_VERIFY, TREE_FIXED, TREE_WITHOUT_REPLACEMENT, TREE_WITH_REPLACEMENT,
};

pub use crate::runtime::logits::Logits;

/// Everything a backend needs for one step, as flat arrays.
#[derive(Clone, Debug, Default)]
pub struct StepPlan<'a> {
    /// Rows R.
    pub rows: u32,
    /// Vocabulary size V.
    pub vocab: u32,
    /// Candidate width N (`== vocab` when force top-k is off).
    pub n: u32,
    /// Top-logprobs width k (<= N).
    pub k: u32,
    /// `[R, V]` logits (borrowed from the caller; f32, bf16, f16 or device).
    pub logits: Logits<'a>,
    /// `[R]` u32: nonzero when the row has a grammar mask.
    pub has_mask: Vec<u32>,
    /// `[R, ceil(V/32)]` u32 mask words (empty when no row has a mask).
    pub masks: Vec<u32>,
    /// `[R]` f32 temperature after clamping (section 1).
    pub temperature: Vec<f32>,
    /// `[R]` f32 top-p (1 = off).
    pub top_p: Vec<f32>,
    /// `[R]` i32 top-k (-1 = off).
    pub top_k: Vec<i32>,
    /// `[R]` f32 min-p threshold `L = ln(min_p)` of section 10.1
    /// ([`crate::params::log_min_p`]: f64 `ln` rounded to f32 once per
    /// request; `-inf` = off, 0 for min_p = 1): the kernels remove candidate
    /// i when `x_i < L`.
    pub log_min_p: Vec<f32>,
    /// `[R]` u32 filter order (section 10.2): [`ORDER_TOP_P_FIRST`] or [`ORDER_TOP_K_FIRST`].
    pub filter_order: Vec<u32>,
    /// `[R]` u32 nonzero when the row reports raw logprobs (section 10.3).
    pub raw_logprobs: Vec<u32>,
    /// `[R]` u64 seed of the row's random stream (draft rows: seq_seed + 1000000007).
    pub seed: Vec<u64>,
    /// `[R]` u64 `3 * position + 0`.
    pub seq_draw: Vec<u64>,
    /// `[R]` u64 `3 * position + 1`.
    pub seq_accept: Vec<u64>,
    /// `[R]` u64 `3 * position + 2`.
    pub seq_residual: Vec<u64>,
    /// `[R]` i32 golden token per row (-1 none), or the prompt target for prompt-logprobs rows.
    pub golden: Vec<i32>,
    /// `[R]` i32 draft token `d_{j+1}` verified by row j (-1 none).
    pub drafts: Vec<i32>,
    /// Whether any row reports raw logprobs (`raw_logprobs` runs only then).
    pub any_raw: bool,
    /// Whether any row verifies a draft of a chain (kernels 5-6 run only then;
    /// tree rows with draft distributions need only `tree_walk`).
    pub any_verify: bool,
    /// Draft distribution width `wd`.
    pub draft_width: u32,
    /// `[R, wd]` i32 draft distribution ids per verify row, and per internal
    /// tree node's row (-1 padding).
    pub draft_ids: Vec<i32>,
    /// `[R, wd]` f32 draft processed logprobs per verify row (-inf padding).
    pub draft_lps: Vec<f32>,
    /// `[G]` u32 first row of each group.
    pub group_first: Vec<u32>,
    /// `[G]` u32 rows of each group.
    pub group_rows: Vec<u32>,
    /// `[G]` u32 group kind (`GROUP_*`).
    pub group_kind: Vec<u32>,
    /// `[G]` i32 nonzero when the group already failed (bad parameters, mask, ...).
    pub group_status: Vec<i32>,
    /// Whether any group is a tree (`GROUP_TREE`): `tree_walk` runs only then.
    pub any_tree: bool,
    /// `[R]` i32 parent node (local index) of the node at each tree row; -1 for
    /// the root and for rows of other groups.
    pub tree_parent: Vec<i32>,
    /// `[R]` i32 draft token of the node at each tree row (-1: root, placeholder, other groups).
    pub tree_token: Vec<i32>,
    /// `[G]` u32 proposal law of a tree group (`TREE_*`); 0 for other groups.
    pub tree_mode: Vec<u32>,
    /// Rows whose processed top-N distribution (`cand_ids`, `logprobs` after
    /// kernel 3) the backend must return in [`StepResult::processed_ids`] /
    /// [`StepResult::processed_lps`], in this order. Empty (the default) = none.
    /// The engine asks for the draft-model rows to fill the MTP info pool.
    pub processed_rows: Vec<u32>,
}

impl StepPlan<'_> {
    /// The same plan owning its logits (f32, widened): for plans kept past the caller's buffer.
    pub fn into_owned(self) -> StepPlan<'static> {
        let StepPlan {
            rows,
            vocab,
            n,
            k,
            logits,
            has_mask,
            masks,
            temperature,
            top_p,
            top_k,
            log_min_p,
            filter_order,
            raw_logprobs,
            seed,
            seq_draw,
            seq_accept,
            seq_residual,
            golden,
            drafts,
            any_raw,
            any_verify,
            draft_width,
            draft_ids,
            draft_lps,
            group_first,
            group_rows,
            group_kind,
            group_status,
            any_tree,
            tree_parent,
            tree_token,
            tree_mode,
            processed_rows,
        } = self;
        StepPlan {
            rows,
            vocab,
            n,
            k,
            logits: logits.into_owned(),
            has_mask,
            masks,
            temperature,
            top_p,
            top_k,
            log_min_p,
            filter_order,
            raw_logprobs,
            seed,
            seq_draw,
            seq_accept,
            seq_residual,
            golden,
            drafts,
            any_raw,
            any_verify,
            draft_width,
            draft_ids,
            draft_lps,
            group_first,
            group_rows,
            group_kind,
            group_status,
            any_tree,
            tree_parent,
            tree_token,
            tree_mode,
            processed_rows,
        }
    }

    /// The plan's metadata without its logits (to keep past the caller's buffer).
    pub fn without_logits(self) -> StepPlan<'static> {
        let StepPlan {
            rows,
            vocab,
            n,
            k,
            logits: _,
            has_mask,
            masks,
            temperature,
            top_p,
            top_k,
            log_min_p,
            filter_order,
            raw_logprobs,
            seed,
            seq_draw,
            seq_accept,
            seq_residual,
            golden,
            drafts,
            any_raw,
            any_verify,
            draft_width,
            draft_ids,
            draft_lps,
            group_first,
            group_rows,
            group_kind,
            group_status,
            any_tree,
            tree_parent,
            tree_token,
            tree_mode,
            processed_rows,
        } = self;
        StepPlan {
            rows,
            vocab,
            n,
            k,
            logits: Logits::default(),
            has_mask,
            masks,
            temperature,
            top_p,
            top_k,
            log_min_p,
            filter_order,
            raw_logprobs,
            seed,
            seq_draw,
            seq_accept,
            seq_residual,
            golden,
            drafts,
            any_raw,
            any_verify,
            draft_width,
            draft_ids,
            draft_lps,
            group_first,
            group_rows,
            group_kind,
            group_status,
            any_tree,
            tree_parent,
            tree_token,
            tree_mode,
            processed_rows,
        }
    }

    /// Number of groups G.
    pub fn groups(&self) -> usize {
        self.group_first.len()
    }
    /// The rows of [`Self::processed_rows`], checked to be below R.
    pub fn processed_rows_checked(
        &self,
        backend: &'static str,
    ) -> Result<impl Iterator<Item = usize> + '_, crate::error::BackendError> {
        match self.processed_rows.iter().find(|&&r| r >= self.rows) {
            Some(bad) => Err(crate::error::BackendError::Device {
                backend,
                msg: format!("processed_rows has row {bad} of {}", self.rows),
            }),
            None => Ok(self.processed_rows.iter().map(|&r| r as usize)),
        }
    }
    /// Words per mask row, `ceil(V / 32)`.
    pub fn mask_words(&self) -> u32 {
        self.vocab.div_ceil(32)
    }
}

/// What a backend returns for a step (raw, before per-request assembly).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepResult {
    /// `[R]` i32 row status from `mask_check`: 0 ok, 1 NaN/+inf, 2 all -inf.
    pub row_status: Vec<i32>,
    /// `[R]` i32 output token per row (-1 none).
    pub tokens: Vec<i32>,
    /// `[R]` f32 processed logprob of the row's token (or prompt target).
    pub token_lp: Vec<f32>,
    /// `[R]` f32 sum_smaller_probs of the row's token.
    pub sum_smaller: Vec<f32>,
    /// `[R, k]` i32 top-logprob ids.
    pub top_ids: Vec<i32>,
    /// `[R, k]` f32 top logprobs.
    pub top_lps: Vec<f32>,
    /// `[G]` u32 accepted drafts per group.
    pub accepted: Vec<u32>,
    /// `[G]` i32 group status after the step: 0 ok, else the host status or the first bad row status.
    pub group_status: Vec<i32>,
    /// `[P, N]` i32 candidate ids (order of section 3.6) of the rows in
    /// [`StepPlan::processed_rows`] (P of them); empty when none were asked.
    pub processed_ids: Vec<i32>,
    /// `[P, N]` f32 processed logprobs (section 3.9) matching `processed_ids`.
    pub processed_lps: Vec<f32>,
    /// `[R]` i32 from `tree_walk`: for a tree group starting at row f,
    /// `path[f + j]` is the accepted node at depth j (-1 past the path);
    /// -1 elsewhere. Empty when the step has no tree.
    pub path: Vec<i32>,
}

/// A block of consecutive rows of a step ([`StepPlan::row_blocks`]).
#[derive(Debug)]
pub struct RowBlock<'a> {
    /// The block as a step of its own (logits borrowed from the parent).
    pub plan: StepPlan<'a>,
    /// For each group of the block: whether it continues the previous block's last group.
    pub continues: Vec<bool>,
}

impl<'p> StepPlan<'p> {
    /// Splits the step into blocks of at most `max_rows` rows (more when a
    /// verify group is longer), at group boundaries; a fresh or
    /// prompt-logprobs group longer than that is split into parts, its
    /// per-row results unchanged (every kernel but `finalize` is per row,
    /// and `finalize` reads only a fresh or prompt row's own values). The
    /// only difference: when such a group fails, only its part with the bad
    /// row has the failed rows' outputs, and the merged group status is the
    /// first part's failure, as unsplit. Host logits only.
    pub fn row_blocks(&self, max_rows: usize) -> Vec<RowBlock<'_>> {
        let max_rows = max_rows.max(1);
        // (group, first row, rows) pieces in row order.
        let mut pieces: Vec<(usize, usize, usize, bool)> = Vec::new();
        for g in 0..self.groups() {
            let (f, m) = (self.group_first[g] as usize, self.group_rows[g] as usize);
            if self.group_kind[g] == GROUP_VERIFY || self.group_kind[g] == GROUP_TREE || m <= max_rows {
                pieces.push((g, f, m, false));
            } else {
                let mut at = 0;
                while at < m {
                    let take = (m - at).min(max_rows);
                    pieces.push((g, f + at, take, at > 0));
                    at += take;
                }
            }
        }
        let mut blocks = Vec::new();
        let mut i = 0;
        while i < pieces.len() {
            let mut j = i;
            let mut rows = 0;
            while j < pieces.len() && (j == i || rows + pieces[j].2 <= max_rows) {
                rows += pieces[j].2;
                j += 1;
            }
            blocks.push(self.block(&pieces[i..j]));
            i = j;
        }
        blocks
    }

    fn block(&self, pieces: &[(usize, usize, usize, bool)]) -> RowBlock<'_> {
        let r0 = pieces[0].1;
        let rows = pieces.iter().map(|p| p.2).sum::<usize>();
        let r = r0..r0 + rows;
        let (v, wd, words) = (
            self.vocab as usize,
            self.draft_width as usize,
            if self.masks.is_empty() { 0 } else { self.mask_words() as usize },
        );
        let lr = r.start * v..r.end * v;
        let logits = match &self.logits {
            Logits::F32(s) => Logits::F32(&s[lr]),
            Logits::Owned(s) => Logits::F32(&s[lr]),
            Logits::Bf16(s) => Logits::Bf16(&s[lr]),
            Logits::F16(s) => Logits::F16(&s[lr]),
            Logits::Cuda(_) => Logits::Owned(Vec::new()),
        };
        let mut p = StepPlan {
            rows: rows as u32,
            vocab: self.vocab,
            n: self.n,
            k: self.k,
            logits,
            has_mask: self.has_mask[r.clone()].to_vec(),
            masks: if words == 0 { Vec::new() } else { self.masks[r.start * words..r.end * words].to_vec() },
            temperature: self.temperature[r.clone()].to_vec(),
            top_p: self.top_p[r.clone()].to_vec(),
            top_k: self.top_k[r.clone()].to_vec(),
            log_min_p: self.log_min_p[r.clone()].to_vec(),
            filter_order: self.filter_order[r.clone()].to_vec(),
            raw_logprobs: self.raw_logprobs[r.clone()].to_vec(),
            tree_parent: self.tree_parent[r.clone()].to_vec(),
            tree_token: self.tree_token[r.clone()].to_vec(),
            seed: self.seed[r.clone()].to_vec(),
            seq_draw: self.seq_draw[r.clone()].to_vec(),
            seq_accept: self.seq_accept[r.clone()].to_vec(),
            seq_residual: self.seq_residual[r.clone()].to_vec(),
            golden: self.golden[r.clone()].to_vec(),
            drafts: self.drafts[r.clone()].to_vec(),
            any_verify: false,
            draft_width: self.draft_width,
            draft_ids: self.draft_ids[r.start * wd..r.end * wd].to_vec(),
            draft_lps: self.draft_lps[r.start * wd..r.end * wd].to_vec(),
            ..Default::default()
        };
        p.any_verify = self.any_verify && pieces.iter().any(|pc| self.group_kind[pc.0] == GROUP_VERIFY);
        p.any_tree = self.any_tree && pieces.iter().any(|pc| self.group_kind[pc.0] == GROUP_TREE);
        p.any_raw = p.raw_logprobs.iter().any(|&x| x != 0);
        let mut continues = Vec::new();
        for &(g, f, m, cont) in pieces {
            p.group_first.push((f - r0) as u32);
            p.group_rows.push(m as u32);
            p.group_kind.push(self.group_kind[g]);
            p.group_status.push(self.group_status[g]);
            p.tree_mode.push(self.tree_mode.get(g).copied().unwrap_or(0));
            continues.push(cont);
        }
        RowBlock { plan: p, continues }
    }
}

impl RowBlock<'_> {
    /// Appends the block's results to `out` (the results of the blocks before it).
    pub fn merge_into(&self, out: &mut StepResult, res: StepResult) {
        out.row_status.extend(res.row_status);
        out.tokens.extend(res.tokens);
        out.token_lp.extend(res.token_lp);
        out.sum_smaller.extend(res.sum_smaller);
        out.top_ids.extend(res.top_ids);
        out.top_lps.extend(res.top_lps);
        // A block without a tree has no path: its rows are -1 (the caller
        // drops the path of a step without trees).
        let rows = self.plan.rows as usize;
        if res.path.is_empty() {
            out.path.extend(std::iter::repeat_n(-1, rows));
        } else {
            out.path.extend(res.path);
        }
        for (i, &cont) in self.continues.iter().enumerate() {
            if cont {
                let last = out.group_status.len() - 1;
                out.accepted[last] += res.accepted[i];
                if out.group_status[last] == 0 {
                    out.group_status[last] = res.group_status[i];
                }
            } else {
                out.accepted.push(res.accepted[i]);
                out.group_status.push(res.group_status[i]);
            }
        }
    }
}
