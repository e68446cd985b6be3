//! What an engine hands the sampler each step, and what it gets back.

use crate::error::RequestError;
use crate::params::SamplingParams;

pub use crate::draft::DraftDist;

/// One request's role in the step; it owns consecutive rows of the logits.
#[derive(Clone, Debug, PartialEq)]
pub enum RequestKind {
    /// One prefill row; position = `seqlen_k` (the prompt length after this chunk).
    Prefill {
        /// Tokens in context after this prefill chunk.
        seqlen_k: u64,
    },
    /// A decode request owning `seqlen_q` rows (1 = a plain fresh row): row j
    /// verifies `drafts[j]` (`d_{j+1}`, -1 = a placeholder, always rejected),
    /// the last row is fresh. `drafts` and `draft_dists` must hold
    /// `seqlen_q - 1` entries, else the request fails (section 6).
    /// `sample_position = seqlen_k - seqlen_q + 1`; row j uses position
    /// `sample_position + j * 10000019`.
    Decode {
        /// Tokens in context, drafts included.
        seqlen_k: u64,
        /// Rows owned: drafts + 1.
        seqlen_q: u64,
        /// Draft tokens `d_1..` (-1 = placeholder).
        drafts: Vec<i32>,
        /// The draft model's processed distribution of each draft; an empty
        /// one (an n-gram or other model-free draft) counts as one-hot on the
        /// draft token (q = 1).
        draft_dists: Vec<DraftDist>,
    },
    /// Draft-model draws, one per row: row `i - 1` draws draft i at position
    /// `sample_position + last_valid_offset + i` with seed `seq_seed + 1000000007`.
    Draft {
        /// As the decode request the drafts are for.
        seqlen_k: u64,
        /// As the decode request the drafts are for.
        seqlen_q: u64,
        /// Offset of the last accepted token (positions continue from it).
        last_valid_offset: u64,
        /// Draft draws (rows).
        rows: u32,
    },
    /// Prompt logprobs (section 8): one row per prompt position, `targets[i]`
    /// is the next prompt token (-1 = none). No token is drawn.
    PromptLogprobs {
        /// Next prompt token per row (-1 none).
        targets: Vec<i32>,
    },
    /// A decode request verifying a draft tree (section 11): it owns one row
    /// per node (`seqlen_q = M = tree.parent.len()`), row n scoring node n's
    /// children; `sample_position = seqlen_k - M + 1`. `golden` is one id
    /// per depth (11.7). A malformed tree fails only this request (11.10).
    Tree {
        /// Tokens in the KV cache, the M tree nodes included.
        seqlen_k: u64,
        /// The draft tree (parents, tokens, proposal law).
        tree: crate::draft::DraftTree,
    },
}

/// One request of a step.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// Raw parameters (validated by the sampler; errors fail only this request).
    pub params: SamplingParams,
    /// What the request's rows are for.
    pub kind: RequestKind,
    /// Golden tokens already assigned to this step's rows, one per row (-1 none);
    /// empty = no teacher forcing this step (section 7). Tree requests: one
    /// per depth 0, 1, .. (at most D + 1; section 11.7).
    pub golden: Vec<i32>,
    /// Grammar masks, one `ceil(V/32)`-word mask per row; `None` = unconstrained.
    pub masks: Option<Vec<Vec<u32>>>,
}

impl Request {
    /// Rows of the logits this request owns.
    pub fn rows(&self) -> usize {
        match &self.kind {
            RequestKind::Prefill { .. } => 1,
            // Section 6: the request owns `seqlen_q` rows whatever its drafts
            // say, so a wrong draft count fails only this request.
            RequestKind::Decode { seqlen_q, .. } => usize::try_from(*seqlen_q).unwrap_or(usize::MAX),
            RequestKind::Draft { rows, .. } => *rows as usize,
            RequestKind::PromptLogprobs { targets } => targets.len(),
            RequestKind::Tree { tree, .. } => tree.parent.len(),
        }
    }
    /// A prefill row with these parameters.
    pub fn prefill(params: SamplingParams, seqlen_k: u64) -> Request {
        Request { params, kind: RequestKind::Prefill { seqlen_k }, golden: Vec::new(), masks: None }
    }
    /// A decode request verifying `drafts` (empty = one fresh row).
    pub fn decode(
        params: SamplingParams,
        seqlen_k: u64,
        seqlen_q: u64,
        drafts: Vec<i32>,
        draft_dists: Vec<DraftDist>,
    ) -> Request {
        Request {
            params,
            kind: RequestKind::Decode { seqlen_k, seqlen_q, drafts, draft_dists },
            golden: Vec::new(),
            masks: None,
        }
    }
    /// A decode request verifying the draft tree `tree` (section 11).
    pub fn tree(params: SamplingParams, seqlen_k: u64, tree: crate::draft::DraftTree) -> Request {
        Request { params, kind: RequestKind::Tree { seqlen_k, tree }, golden: Vec::new(), masks: None }
    }
}

/// Per-row outputs (SAMPLER.md section 5).
#[derive(Clone, Debug, PartialEq)]
pub struct RowOutput {
    /// Vocabulary id, or -1 (rows after a rejection, prompt-logprobs rows, failed requests).
    pub token: i32,
    /// Reported logprob of `token`: processed (-inf when none or removed), or
    /// raw with [`crate::LogprobsMode::Raw`] (SAMPLER.md 10.3).
    pub logprob: f32,
    /// `(id, reported logprob)` of the first k candidates in order (values
    /// raw with [`crate::LogprobsMode::Raw`]); empty for failed requests.
    pub top_logprobs: Vec<(i32, f32)>,
    /// Section 5's `sum_smaller_probs`; 0 when `token` is -1 or its logprob is -inf.
    pub sum_smaller_probs: f32,
}

/// Per-request outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestOutput {
    /// Ok, or why this request failed (its rows then output -1).
    pub status: Result<(), RequestError>,
    /// Drafts accepted (verify and tree requests), else 0.
    pub accepted: u32,
    /// Tree requests that did not fail: the accepted path, node indices root
    /// first (`accepted + 1` entries; section 11.9), for the engine's KV
    /// compaction. `None` for every other request.
    pub path: Option<Vec<u32>>,
    /// Tokens the request outputs this step (sample/draft: one per row; verify and tree: accepted + 1).
    pub emitted: Vec<i32>,
    /// Reported (processed or raw) logprob of each emitted token at the row that emitted it.
    pub emitted_logprobs: Vec<f32>,
    /// Prompt logprobs (processed or raw): one per row with a target.
    pub prompt_logprobs: Vec<f32>,
    /// The request's rows in [`StepOutput::rows`].
    pub rows: std::ops::Range<usize>,
    /// The request's own top-logprobs width (its `top_logprobs`; 0 when it
    /// failed). The rows keep the batch width k (section 5):
    /// [`StepOutput::top_logprobs`] gives each row cut to this width.
    pub top_logprobs_width: usize,
}

impl StepOutput {
    /// Row `j` of request `request`, its top logprobs cut to the request's
    /// own width; `None` when either index is out of range.
    pub fn top_logprobs(&self, request: usize, j: usize) -> Option<&[(i32, f32)]> {
        let r = self.requests.get(request)?;
        let row = self.rows.get(r.rows.start + j).filter(|_| j < r.rows.len())?;
        Some(&row.top_logprobs[..r.top_logprobs_width.min(row.top_logprobs.len())])
    }
}

/// Everything a step returns.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOutput {
    /// One per row of the logits.
    pub rows: Vec<RowOutput>,
    /// One per request, in order.
    pub requests: Vec<RequestOutput>,
    /// Width k of every ok row's `top_logprobs`.
    pub top_logprobs_width: usize,
}
