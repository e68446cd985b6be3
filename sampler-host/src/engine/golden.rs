//! Golden teacher forcing across steps (SAMPLER.md section 7).
//!
//! The engine keeps the request's `golden_token_ids` and its output so far.
//! Each step it takes a window of `2 * nextn + 1` golden tokens starting at
//! the current output length (padded with -1, the reference's
//! `next_golden_tokens`), and assigns the first `min(seqlen_q, nextn + 1)`
//! of them to the step's rows 0.. in order (`prepare_sampler_inputs`); other
//! rows get -1. Since every emitted token of a teacher-forced row is the
//! golden token, the output follows the golden text exactly.

/// `2 * nextn + 1` golden tokens from `output_len`, padded with -1.
pub fn next_golden_tokens(golden: &[i32], output_len: usize, nextn: usize) -> Vec<i32> {
    let w = 2 * nextn + 1;
    (0..w).map(|i| golden.get(output_len + i).copied().unwrap_or(-1)).collect()
}

/// One golden token per row for a step of `rows` rows with `seqlen_q`
/// (for a decode request `seqlen_q == rows`): the first
/// `min(seqlen_q, nextn + 1)` values of `window` go to rows 0.., the rest -1.
pub fn assign_golden(window: &[i32], seqlen_q: usize, nextn: usize, rows: usize) -> Vec<i32> {
    let take = seqlen_q.min(nextn + 1).min(window.len());
    (0..rows).map(|j| if j < take { window[j] } else { -1 }).collect()
}

/// The `Request::golden` of a step: empty when the request has no golden
/// tokens left at `output_len` (no teacher forcing), else one per row.
pub fn step_golden(golden: &[i32], output_len: usize, nextn: usize, seqlen_q: usize, rows: usize) -> Vec<i32> {
    if output_len >= golden.len() {
        return Vec::new();
    }
    assign_golden(&next_golden_tokens(golden, output_len, nextn), seqlen_q, nextn, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_and_assignment() {
        let g = [10, 11, 12, 13];
        assert_eq!(next_golden_tokens(&g, 1, 2), vec![11, 12, 13, -1, -1]);
        assert_eq!(assign_golden(&[1, 2, 3, 4, 5, 6, 7], 6, 2, 6), vec![1, 2, 3, -1, -1, -1]);
        assert_eq!(step_golden(&g, 4, 2, 3, 3), Vec::<i32>::new());
    }
}
