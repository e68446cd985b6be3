//! The C++ helpers every generated AscendC source includes. They are real
//! header files beside the emulation header, in `sampler-host/ascendc/include/`:
//!
//! - `sampler_prelude.h`: scalar-unit helpers reproducing
//!   `sampler_kernels::rt::{elem, math}` with 32/64-bit integers and f32 only
//!   (dav-2201 has no 64-bit vector integers, no fp64), a two-word 128-bit
//!   integer for the exact fixed-point decisions, and `sk::sync<E>()`
//!   (SetFlag/WaitFlag on an ID from `FetchEventID`);
//! - `sampler_top_n.h`: the top-N routine (SAMPLER.md sections 3.3 and 3.6):
//!   `Sort32` + `MrgSort` over chunks of `TILE / 2` logits, lists of at most
//!   4095 elements, ties to the lower id.
//!
//! Builds pass their directory as an include path (`build_aot.sh`, the
//! emulation tests), and the aclrtc glue hands both to `aclrtcCreateProg` in
//! memory (`sampler_host::runtime::device::ascend::HEADERS`).

/// Include name of the scalar-unit helpers (always included).
pub const PRELUDE_H: &str = "sampler_prelude.h";
/// Include name of the top-N routine (included by kernels using `top_n`).
pub const TOP_N_H: &str = "sampler_top_n.h";
