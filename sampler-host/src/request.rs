//! What an engine hands the sampler each step, and what it gets back.

use crate::error::RequestError;
use crate::params::SamplingParams;

pub use crate::draft::DraftDist;

/// A grammar mask over a vocabulary of V tokens: `ceil(V/32)` u32 words,
/// bit `t % 32` of word `t / 32` set = token t allowed (bit 0 is the least
/// significant; SAMPLER.md section 3 step 1). Bits at ids >= V stay clear and
/// are ignored by the sampler. [`Request::with_masks`] takes one per row;
/// `Vec<u32>::from(mask)` gives the raw words, the layout of a `[R, ceil(V/32)]`
/// u32 (or int32) tensor.
///
/// ```
/// use sampler_host::TokenMask;
/// let mut m = TokenMask::none(40); // 2 words, nothing allowed
/// m.allow(0).unwrap();
/// m.allow(33).unwrap();
/// assert_eq!(m.words(), [1, 1 << 1]);
/// assert!(m.is_allowed(33) && !m.is_allowed(32));
/// assert!(m.allow(40).is_err()); // not a token of V = 40
/// assert_eq!(TokenMask::all(40).words(), [u32::MAX, 0xff]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenMask {
    vocab: u32,
    words: Vec<u32>,
}

impl TokenMask {
    /// Nothing allowed (every bit clear): start here and [`TokenMask::allow`] tokens.
    pub fn none(vocab_size: u32) -> TokenMask {
        TokenMask { vocab: vocab_size, words: vec![0; vocab_size.div_ceil(32) as usize] }
    }
    /// Every token of `0..vocab_size` allowed (an unconstrained row of a masked request).
    pub fn all(vocab_size: u32) -> TokenMask {
        let mut m = TokenMask { vocab: vocab_size, words: vec![u32::MAX; vocab_size.div_ceil(32) as usize] };
        // Bits at ids >= V stay clear.
        let tail = vocab_size % 32;
        if let (Some(last), true) = (m.words.last_mut(), tail > 0) {
            *last = (1u32 << tail) - 1;
        }
        m
    }
    /// Only the tokens `ids` allowed. Errors: an id outside `0..vocab_size`
    /// ([`RequestError::Field`] naming `masks` and the id).
    pub fn from_allowed(vocab_size: u32, ids: impl IntoIterator<Item = u32>) -> Result<TokenMask, RequestError> {
        let mut m = TokenMask::none(vocab_size);
        for t in ids {
            m.allow(t)?;
        }
        Ok(m)
    }
    fn slot(&self, token: u32) -> Result<(usize, u32), RequestError> {
        if token >= self.vocab {
            return Err(RequestError::Field {
                field: "masks",
                msg: format!("token {token} is not a vocabulary id in 0..{}", self.vocab),
            });
        }
        Ok(((token / 32) as usize, 1u32 << (token % 32)))
    }
    /// Allows `token`. Errors: `token >= vocab_size` (naming `masks`).
    pub fn allow(&mut self, token: u32) -> Result<&mut TokenMask, RequestError> {
        let (w, b) = self.slot(token)?;
        self.words[w] |= b;
        Ok(self)
    }
    /// Forbids `token`. Errors: `token >= vocab_size` (naming `masks`).
    pub fn forbid(&mut self, token: u32) -> Result<&mut TokenMask, RequestError> {
        let (w, b) = self.slot(token)?;
        self.words[w] &= !b;
        Ok(self)
    }
    /// Whether `token` is allowed (false for ids >= V).
    pub fn is_allowed(&self, token: u32) -> bool {
        self.slot(token).is_ok_and(|(w, b)| self.words[w] & b != 0)
    }
    /// The `ceil(V/32)` words.
    pub fn words(&self) -> &[u32] {
        &self.words
    }
}

impl From<TokenMask> for Vec<u32> {
    fn from(m: TokenMask) -> Vec<u32> {
        m.words
    }
}

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
    /// `sample_position + j * 10000019`. [`Request::verify`] and
    /// [`Request::fresh`] build one with `seqlen_q` derived.
    Decode {
        /// Tokens in context (the KV cache), drafts included: at least
        /// `seqlen_q`, else the request fails naming `seqlen_k`.
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
    /// [`Request::with_golden_from`] assigns them from the whole golden output.
    pub golden: Vec<i32>,
    /// Grammar masks, one `ceil(V/32)`-word mask per row (tree: per node);
    /// bit `t % 32` of word `t / 32` set = token t allowed ([`TokenMask`]
    /// builds one). `None` = unconstrained. See [`Request::with_masks`].
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
    /// A decode request of `seqlen_q` rows verifying `drafts` (empty = one
    /// fresh row). `seqlen_q` must equal `drafts.len() + 1`, and `drafts` and
    /// `draft_dists` must be equally long; [`Request::verify`] and
    /// [`Request::fresh`] derive `seqlen_q` for you.
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
    /// A decode request verifying the draft chain `drafts` (`d_1..`, -1 = a
    /// placeholder), `seqlen_q = drafts.len() + 1` derived (SAMPLER.md
    /// section 6): it owns `drafts.len() + 1` rows, row j verifying
    /// `drafts[j]` and the last row fresh. `seqlen_k` counts the tokens in
    /// the KV cache, the drafts included (so `sample_position = seqlen_k -
    /// drafts.len()`; at least `drafts.len() + 1`, else the request fails
    /// naming `seqlen_k`). `draft_dists[j]` is the draft model's processed
    /// distribution that proposed `drafts[j]`; drafts without one (n-gram,
    /// prompt lookup) pass `vec![DraftDist::default(); drafts.len()]`.
    ///
    /// ```
    /// use sampler_host::{DraftDist, Request, RequestKind, SamplingParams};
    /// let r = Request::verify(SamplingParams::default(), 55, vec![7, 9], vec![DraftDist::default(); 2]);
    /// assert_eq!(r.rows(), 3);
    /// assert!(matches!(r.kind, RequestKind::Decode { seqlen_q: 3, .. }));
    /// ```
    pub fn verify(params: SamplingParams, seqlen_k: u64, drafts: Vec<i32>, draft_dists: Vec<DraftDist>) -> Request {
        let seqlen_q = drafts.len() as u64 + 1;
        Request::decode(params, seqlen_k, seqlen_q, drafts, draft_dists)
    }
    /// One plain decode row (`seqlen_q = 1`, no drafts) at position `seqlen_k`.
    pub fn fresh(params: SamplingParams, seqlen_k: u64) -> Request {
        Request::decode(params, seqlen_k, 1, Vec::new(), Vec::new())
    }
    /// This step's golden tokens (SAMPLER.md section 7), already assigned:
    /// one id per row (-1 = none at that row), or for a tree request one id
    /// per depth 0, 1, .. (at most D + 1; section 11.7). A wrong count or an
    /// id outside `0..V` other than -1 fails the request naming `golden`.
    /// [`Request::with_golden_from`] does the assignment from the whole
    /// golden output.
    pub fn with_golden(mut self, golden: Vec<i32>) -> Request {
        self.golden = golden;
        self
    }
    /// Teacher forcing from the request's whole golden output
    /// (`golden_token_ids`, the tokens it must emit) and the number of tokens
    /// it has emitted so far, as SAMPLER.md section 7 assigns them: the next
    /// `min(seqlen_q, nextn + 1)` golden tokens go to rows 0.. (a prefill
    /// row takes one; a tree request's go to depths 0..=D), the other rows
    /// get -1. When `output_len >= golden_token_ids.len()` nothing is left to
    /// force and `golden` stays empty. `nextn` is the sampler's
    /// (`SamplerConfig::nextn`). This is what the engine layer does with
    /// `SamplingParams::golden_token_ids`, which the `Sampler` itself refuses.
    /// A prompt-logprobs request is left as it is (it draws nothing).
    ///
    /// ```
    /// use sampler_host::{DraftDist, Request, SamplingParams};
    /// let golden = [10, 11, 12, 13];
    /// // Two tokens emitted so far; a verify request of 3 rows takes 12, 13 and -1.
    /// let r = Request::verify(SamplingParams::default(), 40, vec![12, 5], vec![DraftDist::default(); 2])
    ///     .with_golden_from(&golden, 2, 5);
    /// assert_eq!(r.golden, [12, 13, -1]);
    /// ```
    pub fn with_golden_from(mut self, golden_token_ids: &[i32], output_len: usize, nextn: usize) -> Request {
        // Rows 0.. (one per row, seqlen_q of a decode request), or depths 0..=D of a tree.
        let slots = match &self.kind {
            RequestKind::Tree { tree, .. } => {
                crate::draft::shape(&tree.parent).map_or(tree.nodes(), |sh| sh.max_depth as usize + 1)
            }
            // Its rows are scored against `targets`, never drawn.
            RequestKind::PromptLogprobs { .. } => return self,
            _ => self.rows(),
        };
        self.golden = if output_len >= golden_token_ids.len() {
            Vec::new()
        } else {
            let take = slots.min(nextn.saturating_add(1));
            (0..slots)
                .map(|j| if j < take { golden_token_ids.get(output_len + j).copied().unwrap_or(-1) } else { -1 })
                .collect()
        };
        self
    }
    /// Grammar masks, one per row (for a tree request one per node), each
    /// `ceil(V/32)` u32 words: bit `t % 32` (least significant bit = 0) of
    /// word `t / 32` set means token t is allowed (SAMPLER.md section 3
    /// step 1); bits at ids >= V are ignored. Build one with [`TokenMask`]
    /// or pass raw word vectors. A wrong count of masks or of words fails the
    /// request ([`RequestError::BadMask`]); a mask that allows no token with
    /// a finite logit fails it as [`RequestError::AllMasked`].
    ///
    /// ```
    /// use sampler_host::{Request, SamplingParams, TokenMask};
    /// let allow = TokenMask::from_allowed(100, [3, 64]).unwrap();
    /// assert_eq!(allow.words(), [1 << 3, 0, 1, 0]); // token 64: bit 0 of word 2
    /// let r = Request::prefill(SamplingParams::default(), 41).with_masks([allow]);
    /// assert_eq!(r.masks.as_ref().unwrap()[0].len(), 4); // ceil(100 / 32)
    /// ```
    pub fn with_masks<M: Into<Vec<u32>>>(mut self, masks: impl IntoIterator<Item = M>) -> Request {
        self.masks = Some(masks.into_iter().map(Into::into).collect());
        self
    }
    /// `seqlen_k` against the rows it must hold: a decode (or draft, or tree)
    /// request's `seqlen_k` counts the KV cache's tokens including this
    /// step's `seqlen_q` query rows, so `seqlen_k < seqlen_q` is a request
    /// error naming `seqlen_k` (its `sample_position = seqlen_k - seqlen_q + 1`
    /// would be below 1).
    pub(crate) fn check_seqlen(&self) -> Result<(), RequestError> {
        let (k, q, what) = match &self.kind {
            RequestKind::Decode { seqlen_k, seqlen_q, .. } => (*seqlen_k, *seqlen_q, "seqlen_q"),
            RequestKind::Draft { seqlen_k, seqlen_q, .. } => (*seqlen_k, *seqlen_q, "seqlen_q"),
            RequestKind::Tree { seqlen_k, tree } => (*seqlen_k, tree.nodes() as u64, "the tree's node count M"),
            RequestKind::Prefill { .. } | RequestKind::PromptLogprobs { .. } => return Ok(()),
        };
        if k < q {
            return Err(RequestError::Field {
                field: "seqlen_k",
                msg: format!(
                    "= {k} is below {what} = {q}: seqlen_k counts the tokens in the KV cache, this step's {q} query rows included"
                ),
            });
        }
        Ok(())
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
