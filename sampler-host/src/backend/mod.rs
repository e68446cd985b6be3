//! Backends that run a [`crate::plan::StepPlan`].

pub mod cpu;

use crate::error::ConfigError;
use crate::plan::Backend;

/// The CUDA backend, or a typed error when no driver/GPU is present.
pub fn make_cuda() -> Result<Box<dyn Backend>, ConfigError> {
    Err(ConfigError::BackendUnavailable("cuda", "this build has no CUDA backend".into()))
}
