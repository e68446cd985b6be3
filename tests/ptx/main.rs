//! The committed PTX: well formed, fresh (rebuilt with nightly, byte for byte) and stable.
//! Alone in its binary: its checks walk the kernel registry, which test-defined kernels would join.

/// The PTX tool (examples/regenerate.rs), shared by both modules.
#[path = "../../examples/regenerate.rs"]
#[allow(dead_code)]
mod regenerate;

mod fresh;
mod stable;
