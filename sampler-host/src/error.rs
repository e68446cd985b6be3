//! Typed errors. Each names the field and the bad value; none panics.

use thiserror::Error;

/// A bad sampling parameter (SAMPLER.md section 1). Fails only its request.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum ParamError {
    /// `temperature` is negative (`< 0`; -0.0 is 0), NaN or +inf.
    #[error("temperature must be finite and >= 0, got {0:?}")]
    Temperature(f32),
    /// `top_p` is outside (0, 1] (or NaN).
    #[error("top_p must be in (0, 1], got {0:?}")]
    TopP(f32),
    /// `top_k` is 0, below -1 or above `i32::MAX`.
    #[error("top_k must be -1 or in 1..=2147483647, got {0}")]
    TopK(i64),
    /// `top_logprobs` exceeds the candidate width N.
    #[error("top_logprobs larger than N: top_logprobs = {top_logprobs}, N = {n}")]
    TopLogprobs {
        /// The value asked for.
        top_logprobs: u32,
        /// The sampler's candidate width N.
        n: u32,
    },
    /// `min_p` is outside [0, 1] (or NaN).
    #[error("min_p must be in [0, 1], got {0:?}")]
    MinP(f32),
    /// `filter_order` is not one of the two orders (SAMPLER.md 10.2).
    #[error("filter_order must be \"top_p_then_top_k\" or \"top_k_then_top_p\", got {0:?}")]
    FilterOrder(String),
    /// `logprobs_mode` is not "processed" or "raw" (SAMPLER.md 10.3).
    #[error("logprobs_mode must be \"processed\" or \"raw\", got {0:?}")]
    LogprobsMode(String),
}

/// Why one request of a batch failed; the others are unaffected.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum RequestError {
    /// A bad sampling parameter (section 1).
    #[error(transparent)]
    Param(#[from] ParamError),
    /// A NaN or `+inf` logit (after masking) in a row of the request (section 3.2).
    #[error("invalid logits (NaN or +inf) in row {row} of the request")]
    BadLogits {
        /// Row within the request (not the batch).
        row: usize,
    },
    /// Every logit of a row is `-inf` after masking (section 3.2).
    #[error("no allowed token (all logits -inf) in row {row} of the request")]
    AllMasked {
        /// Row within the request (not the batch).
        row: usize,
    },
    /// The grammar masks do not match the request's rows or the vocabulary.
    #[error("bad mask (need {need} masks of {words} u32 words, got {got_masks} masks{detail})")]
    BadMask {
        /// Masks needed (one per row).
        need: usize,
        /// Words per mask, `ceil(V / 32)`.
        words: usize,
        /// Masks given.
        got_masks: usize,
        /// Which mask is wrong, when one is.
        detail: String,
    },
    /// Another field of the request is invalid (drafts, golden ids, rows ...).
    #[error("bad request field `{field}`: {msg}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong, with the value.
        msg: String,
    },
    /// The grammar matcher of the request failed (engine layer).
    #[error("grammar matcher error: {0}")]
    Matcher(String),
    /// The request could not be built from its description (a tool's input,
    /// such as a conformance case): names the field and its value.
    #[error("malformed request: {msg}")]
    Malformed {
        /// The field.
        field: String,
        /// What is wrong, with the value.
        msg: String,
    },
}

/// A configuration error (SAMPLER.md section 9): refused when the sampler is built.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum ConfigError {
    /// `force_topk` is above the platform's limit (`codes::MAX_N_NVIDIA`, `codes::MAX_N_ASCEND`).
    #[error("force_topk = {n} exceeds the {platform} limit of {limit}")]
    ForceTopkTooLarge {
        /// The width asked for.
        n: u32,
        /// `"nvidia"` or `"ascend"`.
        platform: &'static str,
        /// The platform's limit.
        limit: u32,
    },
    /// `vocab_size` is 0 or above the kernels' limit.
    #[error("vocab_size = {0} is out of range (1..=524288)")]
    VocabSize(u64),
    /// The chosen backend (name, reason) cannot run here: no driver, no device, no CANN.
    #[error("backend `{0}` is not available: {1}")]
    BackendUnavailable(&'static str, String),
    /// Another configuration field is invalid.
    #[error("bad configuration field `{field}`: {msg}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong, with the value.
        msg: String,
    },
}

/// A failure of the device or the backend itself (not of a request).
#[derive(Clone, Debug, Error, PartialEq)]
pub enum BackendError {
    /// The device or its driver failed (launch, copy, allocation).
    #[error("{backend}: {msg}")]
    Device {
        /// `"cpu"`, `"cuda"`, ...
        backend: &'static str,
        /// The driver's message.
        msg: String,
    },
    /// A kernel was launched with arguments that do not match its signature.
    #[error(transparent)]
    Kernel(#[from] sampler_kernels::rt::cpu::ArgError),
}

/// An error of the batch as a whole (its shape), before any request runs.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum BatchError {
    /// The logits do not hold `rows x vocab_size` values.
    #[error("logits has {got} values, expected rows * vocab_size = {rows} * {vocab} = {expected}")]
    LogitsShape {
        /// Values given.
        got: usize,
        /// Rows of the requests.
        rows: usize,
        /// The sampler's V.
        vocab: usize,
        /// `rows * vocab`.
        expected: usize,
    },
    /// A request whose row count cannot be run in this batch.
    #[error("request {index}: `rows` = {rows} is invalid ({why})")]
    Rows {
        /// The request.
        index: usize,
        /// The value.
        rows: u64,
        /// Why.
        why: String,
    },
    /// An argument of the call itself (not of one request) is invalid: the
    /// batch's total row count, a processed-row index.
    #[error("bad `{field}`: {msg}")]
    Field {
        /// The argument.
        field: &'static str,
        /// What is wrong, with the value.
        msg: String,
    },
    /// The device failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}
