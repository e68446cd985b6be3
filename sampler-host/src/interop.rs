//! The CUDA types an engine hands to the sampler, from **cudarc 0.19**
//! (the version pinned in `Cargo.lock`; features `driver`,
//! `dynamic-loading`, `f16`). This is the only place the public API names
//! cudarc: an engine that uses another cudarc version passes raw device
//! pointers through [`CudaLogits::from_raw`].
//!
//! The element types of half-precision logits are the `half` crate's
//! [`half::bf16`] and [`half::f16`], re-exported here. Device logits in f32,
//! bf16 or f16 are all read in place: the kernels widen bf16 and f16 to f32
//! at load, exactly, so the results equal those of the widened f32 logits
//! bit for bit (no `[R, V]` f32 copy is made).

pub use cudarc::driver::{CudaContext, CudaSlice, CudaStream, CudaView};
pub use half::{bf16, f16};

pub use crate::runtime::logits::{CudaLogits, Dtype};

/// Where a step's outputs go on the device ([`crate::Sampler::sample_async_into`]).
pub use crate::runtime::device::cuda::OutputPtrs;
