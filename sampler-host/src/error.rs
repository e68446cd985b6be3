//! Typed errors. Each names the field and the bad value; none panics.

use thiserror::Error;

/// A bad sampling parameter (SAMPLER.md section 1). Fails only its request.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum ParamError {
    #[error("temperature must be >= 0, got {0:?}")]
    Temperature(f32),
    #[error("top_p must be in (0, 1], got {0:?}")]
    TopP(f32),
    #[error("top_k must be -1 or in 1..=2147483647, got {0}")]
    TopK(i64),
    #[error("top_logprobs larger than N: top_logprobs = {top_logprobs}, N = {n}")]
    TopLogprobs { top_logprobs: u32, n: u32 },
    #[error("min_p must be in [0, 1], got {0:?}")]
    MinP(f32),
    #[error("filter_order must be \"top_p_then_top_k\" or \"top_k_then_top_p\", got {0:?}")]
    FilterOrder(String),
    #[error("logprobs_mode must be \"processed\" or \"raw\", got {0:?}")]
    LogprobsMode(String),
}

/// Why one request of a batch failed; the others are unaffected.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum RequestError {
    #[error(transparent)]
    Param(#[from] ParamError),
    #[error("invalid logits (NaN or +inf) in row {row} of the request")]
    BadLogits { row: usize },
    #[error("no allowed token (all logits -inf) in row {row} of the request")]
    AllMasked { row: usize },
    #[error("bad mask (need {need} masks of {words} u32 words, got {got_masks} masks{detail})")]
    BadMask { need: usize, words: usize, got_masks: usize, detail: String },
    #[error("bad request field `{field}`: {msg}")]
    Field { field: &'static str, msg: String },
    #[error("grammar matcher error: {0}")]
    Matcher(String),
    /// A malformed request of a conformance case (names the field and value).
    #[error("malformed request: {0}")]
    Malformed(#[from] crate::case::RequestCaseError),
}

/// A configuration error (SAMPLER.md section 9): refused when the sampler is built.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum ConfigError {
    #[error("force_topk = {n} exceeds the {platform} limit of {limit}")]
    ForceTopkTooLarge { n: u32, platform: &'static str, limit: u32 },
    #[error("vocab_size = {0} is out of range (1..=524288)")]
    VocabSize(u64),
    #[error("backend `{0}` is not available: {1}")]
    BackendUnavailable(&'static str, String),
    #[error("bad configuration field `{field}`: {msg}")]
    Field { field: &'static str, msg: String },
}

/// A failure of the device or the backend itself (not of a request).
#[derive(Clone, Debug, Error, PartialEq)]
pub enum BackendError {
    #[error("{backend}: {msg}")]
    Device { backend: &'static str, msg: String },
    #[error(transparent)]
    Kernel(#[from] sampler_kernels::rt::cpu::ArgError),
}

/// An error of the batch as a whole (its shape), before any request runs.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum BatchError {
    #[error("logits has {got} values, expected rows * vocab_size = {rows} * {vocab} = {expected}")]
    LogitsShape { got: usize, rows: usize, vocab: usize, expected: usize },
    #[error("vocab_size = {got} differs from the sampler's vocab_size = {want}")]
    Vocab { got: u32, want: u32 },
    #[error("request {index}: `rows` = {rows} is invalid ({why})")]
    Rows { index: usize, rows: u64, why: String },
    #[error(transparent)]
    Backend(#[from] BackendError),
}
