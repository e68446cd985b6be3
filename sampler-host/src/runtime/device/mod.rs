//! The devices that run a [`StepPlan`]'s launch list: the CPU, CUDA and
//! the Ascend glue, and [`Backend`], the one a sampler holds.

pub mod ascend;
pub mod cpu;
pub mod cuda;

use crate::error::{BackendError, ConfigError};
use crate::runtime::plan::{StepPlan, StepResult};

/// The device a sampler runs its steps on.
#[derive(Debug)]
pub enum Backend {
    /// The host CPU (the kernels' host programs, rayon over rows).
    Cpu(cpu::CpuBackend),
    /// The first CUDA device.
    Cuda(Box<cuda::CudaBackend>),
    /// An Ascend NPU through CANN.
    Ascend(ascend::AscendBackend),
}

impl Backend {
    /// The CUDA backend, or [`ConfigError::BackendUnavailable`] when no driver/GPU is present.
    pub fn cuda() -> Result<Backend, ConfigError> {
        Ok(Backend::Cuda(Box::new(cuda::CudaBackend::new()?)))
    }

    /// Short name (`"cpu"`, `"cuda"`, `"ascend"`).
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Cpu(b) => b.name(),
            Backend::Cuda(b) => b.name(),
            Backend::Ascend(b) => b.name(),
        }
    }

    /// Runs one step. Errors are device failures, never bad requests.
    pub fn run(&mut self, plan: &StepPlan<'_>) -> Result<StepResult, BackendError> {
        match self {
            Backend::Cpu(b) => b.run(plan),
            Backend::Cuda(b) => b.run(plan),
            Backend::Ascend(b) => b.run(plan),
        }
    }

    /// Starts one step without waiting for it: `Some(result)` when the
    /// backend ran it to the end (CPU, Ascend), `None` when it is enqueued
    /// on a CUDA device ([`Backend::collect`] reads it back).
    pub fn enqueue(&mut self, plan: &StepPlan<'_>) -> Result<Option<StepResult>, BackendError> {
        match self {
            Backend::Cuda(b) => b.enqueue(plan),
            other => other.run(plan).map(Some),
        }
    }

    /// Reads back the step [`Backend::enqueue`] left on the device (waits
    /// for it). Errors: no step is enqueued (CPU, Ascend), or a device failure.
    pub fn collect(&mut self, plan: &StepPlan<'_>) -> Result<StepResult, BackendError> {
        match self {
            Backend::Cuda(b) => b.collect(plan),
            other => Err(BackendError::Device { backend: other.name(), msg: "no enqueued step to collect".into() }),
        }
    }
}
