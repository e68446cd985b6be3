//! The sampler kernels (SAMPLER.md sections 3-8), each one program per row
//! (or per request group for `finalize`), one module per family.
//!
//! Shapes: R rows, V vocabulary, N candidate columns (force top-k width, or
//! V when off), G request groups. Candidates are always kept in the order of
//! section 3.6 (logit descending, ties by lower id), so kept sets are
//! prefixes and the top logprobs are the first columns.
//!
//! Tile variants: register tiles up to 16384 elements on NVIDIA, larger
//! ones (force top-k off) in global scratch. Results never depend on the
//! variant: sums are exact fixed-point integer sums (`rt::math`).
//!
//! Family modules are not named after a kernel (`kernels::process` is the
//! kernel's own module).
//!
//! A `#[kernel_fn]` helper is a macro of its module; a `pub` one is
//! importable from a sibling (`use super::mask::row_status_of;`).

// Every `#[kernel]` registers itself (`crate::registry`): there is no hand-kept list.

// In the order the kernels stood in one file (the PTX sorts its entries by
// name, so the order is only for reading).
pub mod logprobs;
pub mod mask;
pub mod sample;
pub mod select;
pub mod speculative;

// Every kernel module at `kernels::NAME`, as before the split.
pub use logprobs::*;
pub use mask::*;
pub use sample::*;
pub use select::*;
pub use speculative::*;
