//! A step's device-ready plan: flat per-row / per-group arrays that every
//! backend runs through the same kernel sequence, and the raw results.
//!
//! Pipeline (SAMPLER.md sections 3-8), all kernels from `sampler_kernels::kernels`:
//! 1. `mask_check`   `[R, V]` logits (masked in place), `status[R]`; for raw
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
//! ([`StepPlan::prefix_width`]): `force_topn` with N = w, `row_mass`,
//! `process_prefix_draw`, and every later kernel on w columns.

/// Prefix width asked for a row without top-k on the prefix path
/// ([`StepPlan::prefix_width`]): top-p 0.9 keeps fewer tokens than this on
/// typical LLM logits; rows that keep more are rerun on the full-row path.
pub const PREFIX_TOPK_OFF: u32 = 1024;

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

/// Group kinds of the `finalize` kernel.
pub const GROUP_FRESH: u32 = 0;
/// A verify group: rows `0..m-1` verify drafts, the last row is fresh.
pub const GROUP_VERIFY: u32 = 1;
/// A prompt-logprobs group: no token is drawn.
pub const GROUP_NO_DRAW: u32 = 2;
/// A tree group (SAMPLER.md section 11): `finalize` leaves its rows at -1 and
/// `tree_walk` decides them.
pub const GROUP_TREE: u32 = 3;

/// Tree proposal laws (`StepPlan::tree_mode`, SAMPLER.md 11.3).
pub const TREE_FIXED: u32 = 0;
/// Children drawn with replacement from the node's draft distribution.
pub const TREE_WITH_REPLACEMENT: u32 = 1;
/// Children drawn without replacement.
pub const TREE_WITHOUT_REPLACEMENT: u32 = 2;

/// Everything a backend needs for one step, as flat arrays.
#[derive(Clone, Debug, Default)]
pub struct StepPlan {
    /// Rows R.
    pub rows: u32,
    /// Vocabulary size V.
    pub vocab: u32,
    /// Candidate width N (`== vocab` when force top-k is off).
    pub n: u32,
    /// Top-logprobs width k (<= N).
    pub k: u32,
    /// `[R, V]` f32 logits.
    pub logits: Vec<f32>,
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
    /// `[R]` f32 min-p in [0, 1] (0 = off; section 10.1).
    pub min_p: Vec<f32>,
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

impl StepPlan {
    /// Number of groups G.
    pub fn groups(&self) -> usize {
        self.group_first.len()
    }
    /// The rows of [`Self::processed_rows`], checked to be below R.
    pub fn processed_rows_checked(&self, backend: &'static str) -> Result<impl Iterator<Item = usize> + '_, crate::error::BackendError> {
        match self.processed_rows.iter().find(|&&r| r >= self.rows) {
            Some(bad) => Err(crate::error::BackendError::Device { backend, msg: format!("processed_rows has row {bad} of {}", self.rows) }),
            None => Ok(self.processed_rows.iter().map(|&r| r as usize)),
        }
    }
    /// Candidate width of the prefix path for this step, or `None` for the
    /// full-row path.
    ///
    /// Without force top-k (N = V) the kept set of SAMPLER.md 3.7-3.8 is
    /// usually a short prefix of the order of 3.6. The prefix path selects
    /// only the first `w` candidates (`force_topn` / `topn_*` with N = `w`),
    /// takes the softmax total over all V from `row_mass`, and runs every
    /// later kernel on `w` columns (`process_prefix_draw`). Its outputs equal the
    /// full-row path's bit for bit whenever each row's kept set and the
    /// top-logprobs width fit in `w`; `process_prefix_draw` flags the rows where
    /// they may not, and backends then rerun the step on the full-row path
    /// ([`Self::prefix_overflowed`]). Results never depend on `w`.
    ///
    /// `w` is the next power of two (at least 64) of the largest top-k of
    /// the batch ([`PREFIX_TOPK_OFF`] for a row without top-k) and of k.
    /// `None` when force top-k is on, processed distributions are asked for
    /// (they are V wide), a row keeps every token (top-p 1, top-k off and
    /// min-p 0, greedy rows included), or `w` would exceed 16384 or reach V.
    pub fn prefix_width(&self) -> Option<u32> {
        if self.n < self.vocab || !self.processed_rows.is_empty() || self.rows == 0 {
            return None;
        }
        let mut need = self.k.max(1);
        for (i, (&tk, &tp)) in self.top_k.iter().zip(&self.top_p).enumerate() {
            // Min-p cuts a prefix too: such a row takes the prefix path
            // (and overflows to the full row when min-p keeps past it).
            let mp = self.min_p.get(i).copied().unwrap_or(0.0);
            if tk < 0 && tp >= 1.0 && mp <= 0.0 {
                return None;
            }
            need = need.max(if tk > 0 { tk as u32 } else { PREFIX_TOPK_OFF });
        }
        let w = need.next_power_of_two().max(64);
        (w <= 16384 && w < self.vocab).then_some(w)
    }

    /// Whether a prefix-path step (see [`Self::prefix_width`]) must be rerun
    /// on the full-row path: some row of a group that did not fail has its
    /// `overflow` flag (`[R]` u32 from `process_prefix_draw`) set.
    pub fn prefix_overflowed(&self, group_status: &[i32], overflow: &[u32]) -> bool {
        let mut failed = vec![false; self.rows as usize];
        for g in 0..self.groups() {
            if group_status.get(g).copied().unwrap_or(0) != 0 {
                let (f, m) = (self.group_first[g] as usize, self.group_rows[g] as usize);
                failed.iter_mut().skip(f).take(m).for_each(|x| *x = true);
            }
        }
        overflow.iter().zip(&failed).any(|(&o, &bad)| o != 0 && !bad)
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

/// A backend runs a [`StepPlan`] through the kernel sequence.
pub trait Backend: Send {
    /// Short name (`"cpu"`, `"cuda"`).
    fn name(&self) -> &'static str;
    /// Runs one step. Errors are device failures, never bad requests.
    fn run(&mut self, plan: &StepPlan) -> Result<StepResult, crate::error::BackendError>;
}
