//! The sampler kernels of SAMPLER.md, written once in the tile DSL.
//!
//! Each `#[kernel]` function expands to a module holding the host program
//! (`cpu`), the PTX entry points (when built for `nvptx64-nvidia-cuda`),
//! the AscendC source and a registration in [`registry`]. The runtimes in
//! [`rt`] give the tile ops their meaning on each target.

#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, stdarch_nvptx, asm_experimental_arch))]

extern crate self as sampler_kernels;

pub mod codes;
pub mod kernels;
pub mod rt;
pub mod spec;

#[cfg(not(target_arch = "nvptx64"))]
pub mod registry;

#[cfg(not(target_arch = "nvptx64"))]
pub use inventory;

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // Kernels contain no panicking paths; this only satisfies no_std.
    loop {}
}
