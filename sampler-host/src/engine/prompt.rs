//! Prompt logprobs with chunked prefill (SAMPLER.md section 8).
//!
//! A prompt of P tokens has P - 1 prompt logprobs: row i (prompt position i)
//! scores token `i + 1`. A scheduler may prefill the prompt in chunks across
//! steps; a chunk covers positions `start .. start + len` and has a row for
//! every position with a following prompt token, so a non-final chunk's last
//! row targets the first token of the next chunk and the last row of the
//! last chunk has none.
//!
//! Independently of that, the rows of a step are run through the sampler in
//! pieces of at most `max_rows` (8192 by default) rows, so the f32 logits
//! held at once never exceed `max_rows * V * 4` bytes; a request's rows may
//! span pieces. The results are joined and split back into one list per
//! request.

use crate::error::RequestError;
use crate::params::SamplingParams;
use crate::request::{Request, RequestKind};
use crate::sampler::Sampler;

use super::EngineError;

/// Rows per sampler call for prompt logprobs (section 8).
pub const MAX_PROMPT_ROWS: usize = 8192;

/// Targets of the prompt-logprob rows of the chunk `start .. start + len` of
/// `prompt`: `prompt[i + 1]` for each position i of the chunk that has one.
pub fn chunk_targets(prompt: &[i32], start: usize, len: usize) -> Vec<i32> {
    let end = (start + len).min(prompt.len());
    (start..end).filter(|&i| i + 1 < prompt.len()).map(|i| prompt[i + 1]).collect()
}

/// One request's chunk of prompt rows.
#[derive(Clone, Debug)]
pub struct PromptJob<'a> {
    /// Parameters (temperature, top-p, top-k apply; force top-k is the sampler's).
    pub params: SamplingParams,
    /// The whole prompt.
    pub prompt: &'a [i32],
    /// First prompt position of the chunk.
    pub start: usize,
    /// Positions in the chunk.
    pub len: usize,
}

impl PromptJob<'_> {
    /// Prompt positions of this chunk that have a target (one row each).
    pub fn positions(&self) -> std::ops::Range<usize> {
        let end = (self.start + self.len).min(self.prompt.len().saturating_sub(1));
        self.start..end.max(self.start)
    }
}

/// One row asked of the model: `(job index, prompt position)`; its logits
/// score the next prompt token `prompt[position + 1]`.
pub type PromptRow = (usize, usize);

/// How the rows were cut (for the memory rule of section 8).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PromptStats {
    /// Sampler calls made.
    pub calls: usize,
    /// Most rows in one call (<= max_rows).
    pub max_rows_per_call: usize,
    /// Largest logits buffer held at once, bytes (<= max_rows * V * 4).
    pub max_logits_bytes: usize,
}

/// Computes the prompt logprobs of `jobs`, asking `logits_for` for the
/// `[rows, V]` logits of at most `max_rows` rows at a time.
///
/// Returns one result per job (its prompt logprobs in position order, or why
/// it failed; a failed piece fails its job only) and the cut statistics.
/// Errors: [`EngineError`] when `logits_for` returns the wrong length or the
/// sampler rejects the batch's shape.
#[allow(clippy::type_complexity)]
pub fn compute_prompt_logprobs(
    sampler: &mut Sampler,
    jobs: &[PromptJob<'_>],
    max_rows: usize,
    mut logits_for: impl FnMut(&[PromptRow]) -> Result<Vec<f32>, EngineError>,
) -> Result<(Vec<Result<Vec<f32>, RequestError>>, PromptStats), EngineError> {
    let max_rows = max_rows.max(1);
    let v = sampler.config().vocab_size as usize;
    let all: Vec<PromptRow> =
        jobs.iter().enumerate().flat_map(|(j, job)| job.positions().map(move |p| (j, p))).collect();
    let mut out: Vec<Result<Vec<f32>, RequestError>> = jobs.iter().map(|_| Ok(Vec::new())).collect();
    let mut stats = PromptStats::default();
    for piece in all.chunks(max_rows) {
        let logits = logits_for(piece)?;
        if logits.len() != piece.len() * v {
            return Err(EngineError::Model(format!(
                "prompt logits: got {} values for {} rows of V = {v}",
                logits.len(),
                piece.len()
            )));
        }
        stats.calls += 1;
        stats.max_rows_per_call = stats.max_rows_per_call.max(piece.len());
        stats.max_logits_bytes = stats.max_logits_bytes.max(logits.len() * 4);
        // Consecutive rows of one job form one PromptLogprobs request.
        let mut reqs = Vec::new();
        let mut owners = Vec::new();
        let mut i = 0;
        while i < piece.len() {
            let j = piece[i].0;
            let mut e = i;
            while e < piece.len() && piece[e].0 == j {
                e += 1;
            }
            let job = &jobs[j];
            let targets = piece[i..e].iter().map(|&(_, p)| job.prompt[p + 1]).collect();
            reqs.push(Request {
                params: job.params.for_sampler(),
                kind: RequestKind::PromptLogprobs { targets },
                golden: Vec::new(),
                masks: None,
            });
            owners.push(j);
            i = e;
        }
        let res = sampler.sample(&logits, &reqs)?;
        for (r, &j) in res.requests.iter().zip(&owners) {
            match (&mut out[j], &r.status) {
                (Ok(v), Ok(())) => v.extend_from_slice(&r.prompt_logprobs),
                (slot @ Ok(_), Err(e)) => *slot = Err(e.clone()),
                (Err(_), _) => {}
            }
        }
    }
    Ok((out, stats))
}
