//! Below the engine face: a step's metadata laid out as a step plan
//! ([`plan`]), the ordered kernel launches built once from it
//! ([`pipeline`]), and the devices that run them ([`device`]: the CPU,
//! CUDA, the Ascend glue). Imports only [`crate::error`] and
//! `sampler-kernels`.

pub mod device;
pub mod logits;
pub mod pipeline;
pub mod plan;
