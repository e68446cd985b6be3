//! The committed PTX: well formed, fresh (rebuilt with nightly, byte for byte) and stable.
//! Alone in its binary: its checks walk the kernel registry, which test-defined kernels would join.

mod fresh;
mod stable;
