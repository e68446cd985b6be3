//! The prefix path (SAMPLER.md 3.6-3.9 on a short prefix of the
//! candidates): whether a step takes it, at which width, and what follows
//! when a kept set does not fit. The only place this is decided: every
//! device, the device-resident CUDA path and the vocabulary-parallel
//! exchange ask [`PrefixPolicy`].

use crate::runtime::plan::StepPlan;

/// Prefix width asked for a row without top-k on the prefix path
/// ([`StepPlan::prefix_width`]): top-p 0.9 keeps fewer tokens than this on
/// typical LLM logits; rows that keep more are rerun on the full-row path.
pub const PREFIX_TOPK_OFF: u32 = 1024;

/// Widest prefix (the widest N the NVIDIA kernels run at): a wider one
/// takes the full-row path.
pub const MAX_PREFIX_WIDTH: u32 = sampler_kernels::codes::MAX_N_NVIDIA;

/// How a caller takes the prefix path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefixPolicy {
    /// Always the full-row path (comparisons: `CpuBackend::full_row`, `set_full_row`).
    FullRow,
    /// The prefix path when the plan allows it ([`StepPlan::prefix_width`]),
    /// rerun on the full-row path when a kept set did not fit (the host
    /// reads the overflow flags mid-step).
    Eager,
    /// The prefix path only where it can never ask for a rerun
    /// ([`StepPlan::prefix_never_reruns`]): a device-resident step or a
    /// captured graph never waits on the device mid-step.
    DeviceResident,
    /// Vocabulary-parallel sampling: the prefix width ignores the rows of
    /// requests that already failed on the host (their outputs are
    /// discarded, and their default top-p 1 / top-k off would force the full
    /// rows for everyone); on overflow a prefix 8 times wider is gathered
    /// (the masses are reused), up to [`MAX_PREFIX_WIDTH`], then the full rows.
    Widening,
}

/// What follows a prefix-path run ([`PrefixPolicy::after`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    /// Every kept set fit: the results are the full-row path's.
    Done,
    /// Rerun on the full-row path.
    FullRow,
    /// Run the prefix path again at this width.
    Widen(u32),
}

impl PrefixPolicy {
    /// [`Self::Eager`], or [`Self::FullRow`] when `full_row`.
    pub fn eager(full_row: bool) -> PrefixPolicy {
        if full_row {
            PrefixPolicy::FullRow
        } else {
            PrefixPolicy::Eager
        }
    }

    /// [`Self::DeviceResident`], or [`Self::FullRow`] when `full_row`.
    pub fn device_resident(full_row: bool) -> PrefixPolicy {
        if full_row {
            PrefixPolicy::FullRow
        } else {
            PrefixPolicy::DeviceResident
        }
    }

    /// The prefix width of `p`'s step, or `None` for the full-row path.
    pub fn width(self, p: &StepPlan) -> Option<u32> {
        match self {
            PrefixPolicy::FullRow => None,
            PrefixPolicy::Eager => p.prefix_width(),
            PrefixPolicy::DeviceResident => p.prefix_width().filter(|_| p.prefix_never_reruns()),
            PrefixPolicy::Widening => width_without_failed(p),
        }
    }

    /// What follows a run of `p` on the prefix path of width `w` that gave
    /// `group_status` `[G]` and `overflow` `[R]` (`process_prefix_draw`'s flags).
    pub fn after(self, p: &StepPlan, w: u32, group_status: &[i32], overflow: &[u32]) -> After {
        if !p.prefix_overflowed(group_status, overflow) {
            return After::Done;
        }
        let wider = w.saturating_mul(8);
        match self {
            PrefixPolicy::Widening if wider <= MAX_PREFIX_WIDTH && wider < p.vocab => After::Widen(wider),
            _ => After::FullRow,
        }
    }
}

/// [`StepPlan::prefix_width`] ignoring the rows of groups that already failed.
fn width_without_failed(plan: &StepPlan) -> Option<u32> {
    // Top-k 1 asks for no width beyond k (always at least 64).
    let mut top_k = plan.top_k.clone();
    for g in 0..plan.groups() {
        if plan.group_status[g] != 0 {
            let (f, m) = (plan.group_first[g] as usize, plan.group_rows[g] as usize);
            top_k[f..f + m].iter_mut().for_each(|k| *k = 1);
        }
    }
    let view = StepPlan {
        rows: plan.rows,
        vocab: plan.vocab,
        n: plan.n,
        k: plan.k,
        top_p: plan.top_p.clone(),
        top_k,
        processed_rows: plan.processed_rows.clone(),
        ..Default::default()
    };
    view.prefix_width()
}

impl StepPlan<'_> {
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
    /// min-p 0, greedy rows included), or `w` would exceed [`MAX_PREFIX_WIDTH`] or reach V.
    pub fn prefix_width(&self) -> Option<u32> {
        if self.n < self.vocab || !self.processed_rows.is_empty() || self.rows == 0 {
            return None;
        }
        let mut need = self.k.max(1);
        for (i, (&tk, &tp)) in self.top_k.iter().zip(&self.top_p).enumerate() {
            // Min-p cuts a prefix too: such a row takes the prefix path
            // (and overflows to the full row when min-p keeps past it).
            let lmp = self.log_min_p.get(i).copied().unwrap_or(f32::NEG_INFINITY);
            if tk < 0 && tp >= 1.0 && lmp == f32::NEG_INFINITY {
                return None;
            }
            need = need.max(if tk > 0 { tk as u32 } else { PREFIX_TOPK_OFF });
        }
        let w = need.next_power_of_two().max(64);
        (w <= MAX_PREFIX_WIDTH && w < self.vocab).then_some(w)
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

    /// Whether the prefix path of this step can never ask for the full-row
    /// rerun: every row has a top-k (a kept set within top-k fits the prefix,
    /// `tests/devices/prefix_path.rs`). The device-resident path takes the prefix
    /// path only then, so it never waits on the device mid-step.
    pub fn prefix_never_reruns(&self) -> bool {
        self.top_k.iter().all(|&k| k > 0)
    }
}
