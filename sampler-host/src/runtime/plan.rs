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

pub use crate::layout::build_plan;
pub use sampler_kernels::codes::{
    GROUP_FRESH, GROUP_NO_DRAW, GROUP_TREE, GROUP_VERIFY, TREE_FIXED, TREE_WITHOUT_REPLACEMENT, TREE_WITH_REPLACEMENT,
};

/// A step's `[R, V]` logits as the host hands them over: borrowed (f32,
/// bf16 or f16, never copied by the plan) or owned f32. Half-precision
/// logits are widened to f32 when the kernels load them (the CPU and CUDA
/// devices bind them in their own element type; the Ascend device widens
/// them on the host); the widening is exact, so results equal those of the
/// widened f32 logits.
#[derive(Clone, Debug)]
pub enum Logits<'a> {
    /// Borrowed f32.
    F32(&'a [f32]),
    /// Borrowed bfloat16.
    Bf16(&'a [half::bf16]),
    /// Borrowed IEEE half.
    F16(&'a [half::f16]),
    /// Owned f32 (tests and tools that build plans without a caller's buffer).
    Owned(Vec<f32>),
    /// Device memory on the CUDA engine stream ([`crate::interop::CudaLogits`]).
    Cuda(crate::interop::CudaLogits<'a>),
}

impl Default for Logits<'_> {
    fn default() -> Self {
        Logits::Owned(Vec::new())
    }
}

impl<'a> Logits<'a> {
    /// Number of logits (R x V).
    pub fn len(&self) -> usize {
        match self {
            Logits::F32(s) => s.len(),
            Logits::Bf16(s) => s.len(),
            Logits::F16(s) => s.len(),
            Logits::Owned(v) => v.len(),
            Logits::Cuda(c) => c.len(),
        }
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The host logits as f32, borrowed when they already are (half
    /// precision widened: exact). Device logits give an empty slice.
    pub fn to_f32_cow(&self) -> std::borrow::Cow<'_, [f32]> {
        use std::borrow::Cow;
        match self {
            Logits::F32(s) => Cow::Borrowed(s),
            Logits::Owned(v) => Cow::Borrowed(v),
            Logits::Bf16(s) => Cow::Owned(s.iter().map(|x| x.to_f32()).collect()),
            Logits::F16(s) => Cow::Owned(s.iter().map(|x| x.to_f32()).collect()),
            Logits::Cuda(_) => Cow::Owned(Vec::new()),
        }
    }
    /// Widens host logits `range` into `out` (same length). Device logits: no-op.
    pub fn widen_into(&self, range: std::ops::Range<usize>, out: &mut [f32]) {
        match self {
            Logits::F32(s) => out.copy_from_slice(&s[range]),
            Logits::Owned(v) => out.copy_from_slice(&v[range]),
            Logits::Bf16(s) => out.iter_mut().zip(&s[range]).for_each(|(o, x)| *o = x.to_f32()),
            Logits::F16(s) => out.iter_mut().zip(&s[range]).for_each(|(o, x)| *o = x.to_f32()),
            Logits::Cuda(_) => {}
        }
    }
    /// The f32 host slice when the logits are f32 on the host (no copy).
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            Logits::F32(s) => Some(s),
            Logits::Owned(v) => Some(v),
            _ => None,
        }
    }
    /// An owned copy (f32, widened), for plans that outlive the caller's buffer.
    pub fn into_owned(self) -> Logits<'static> {
        match self {
            Logits::Owned(v) => Logits::Owned(v),
            other => Logits::Owned(other.to_f32_cow().into_owned()),
        }
    }
}

impl<'a> From<&'a [f32]> for Logits<'a> {
    fn from(s: &'a [f32]) -> Self {
        Logits::F32(s)
    }
}
impl<'a> From<&'a Vec<f32>> for Logits<'a> {
    fn from(s: &'a Vec<f32>) -> Self {
        Logits::F32(s)
    }
}
impl<'a, const N: usize> From<&'a [f32; N]> for Logits<'a> {
    fn from(s: &'a [f32; N]) -> Self {
        Logits::F32(s)
    }
}
impl<'a> From<&'a [half::bf16]> for Logits<'a> {
    fn from(s: &'a [half::bf16]) -> Self {
        Logits::Bf16(s)
    }
}
impl<'a> From<&'a Vec<half::bf16>> for Logits<'a> {
    fn from(s: &'a Vec<half::bf16>) -> Self {
        Logits::Bf16(s)
    }
}
impl<'a> From<&'a [half::f16]> for Logits<'a> {
    fn from(s: &'a [half::f16]) -> Self {
        Logits::F16(s)
    }
}
impl<'a> From<&'a Vec<half::f16>> for Logits<'a> {
    fn from(s: &'a Vec<half::f16>) -> Self {
        Logits::F16(s)
    }
}
impl<'a> From<crate::interop::CudaLogits<'a>> for Logits<'a> {
    fn from(c: crate::interop::CudaLogits<'a>) -> Self {
        Logits::Cuda(c)
    }
}

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
            min_p,
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
            min_p,
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
            min_p,
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
            min_p,
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

    /// Whether the prefix path of this step can never ask for the full-row
    /// rerun: every row has a top-k (a kept set within top-k fits the prefix,
    /// `tests/prefix_path.rs`). The device-resident path takes the prefix
    /// path only then, so it never waits on the device mid-step.
    pub fn prefix_never_reruns(&self) -> bool {
        self.top_k.iter().all(|&k| k > 0)
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
        (w <= sampler_kernels::codes::MAX_N_NVIDIA && w < self.vocab).then_some(w)
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
    fn run(&mut self, plan: &StepPlan<'_>) -> Result<StepResult, crate::error::BackendError>;
    /// Starts one step without waiting for it: `Some(result)` when the
    /// backend ran it to the end (the CPU), `None` when it is enqueued on a
    /// device ([`Backend::collect`] reads it back). The default runs it.
    fn enqueue(&mut self, plan: &StepPlan<'_>) -> Result<Option<StepResult>, crate::error::BackendError> {
        self.run(plan).map(Some)
    }
    /// Reads back the step [`Backend::enqueue`] left on the device (waits for it).
    fn collect(&mut self, plan: &StepPlan<'_>) -> Result<StepResult, crate::error::BackendError> {
        let _ = plan;
        Err(crate::error::BackendError::Device { backend: self.name(), msg: "no enqueued step to collect".into() })
    }
    /// The CUDA backend behind this one, for device-resident outputs and graphs.
    fn as_cuda(&mut self) -> Option<&mut crate::runtime::device::cuda::CudaBackend> {
        None
    }
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
            min_p: self.min_p[r.clone()].to_vec(),
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
            out.path.extend(std::iter::repeat(-1).take(rows));
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
