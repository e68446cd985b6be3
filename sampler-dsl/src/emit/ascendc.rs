//! Emit AscendC C++ (dav-2201, AIV only) from the tile IR.
//!
//! Not written yet: the Ascend issue adds the writer, its UB planner and the
//! emulation harness. Until then no kernel carries AscendC source.

use crate::ir::Kernel;
use crate::parse::Errors;

/// The AscendC source of a kernel (all variants that fit), if this emitter supports it.
pub fn emit(_k: &Kernel) -> Option<String> {
    None
}

/// Compile-time checks of the AscendC target (UB plan fits, N <= 4096).
pub fn validate(_k: &Kernel, _errs: &mut Errors) {}
