//! Facade of the sampler workspace: re-exports the host crate (what engines
//! use) and the kernel crate (what kernel authors edit).

pub use sampler_host as host;
pub use sampler_kernels as kernels;

pub mod logits;
