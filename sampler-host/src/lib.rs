//! Host side of the sampler: what an inference engine links.
//!
//! Pipeline: [`params`] (validation, section 1) -> [`batch`] (metadata:
//! positions, row groups, parameter expansion; sections 2, 6, 7) ->
//! [`plan::StepPlan`] -> a [`plan::Backend`] runs the kernels ->
//! [`sampler::Sampler`] assembles per-row and per-request outputs (sections 5-8).

pub mod batch;
pub mod engine;
pub mod case;
pub mod compare;
pub mod error;
pub mod params;
pub mod pipeline;
pub mod plan;
pub mod interop;
pub mod request;
pub mod sampler;

pub mod backend;

pub use error::{BackendError, BatchError, ConfigError, ParamError, RequestError};
pub use plan::Logits;
pub use sampler::{PendingStep, ProcessedRows};

/// The README's code runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
pub use params::{SamplingParams, ValidParams};
pub use request::{DraftDist, Request, RequestKind, RequestOutput, RowOutput, StepOutput};
pub use sampler::{BackendKind, Sampler, SamplerConfig};
