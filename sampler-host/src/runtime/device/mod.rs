//! Backends that run a [`crate::runtime::plan::StepPlan`].

pub mod ascend;
pub mod cpu;
pub mod cuda;

use crate::error::ConfigError;
use crate::runtime::plan::Backend;

/// The CUDA backend, or a typed error when no driver/GPU is present.
pub fn make_cuda() -> Result<Box<dyn Backend>, ConfigError> {
    Ok(Box::new(cuda::CudaBackend::new()?))
}
