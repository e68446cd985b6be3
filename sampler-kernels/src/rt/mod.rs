//! Tile runtimes: what each tile op means on each target.
//!
//! [`math`] and [`elem`] are shared scalar code; [`cpu`] is the host tile
//! runtime (the reference semantics); `gpu` is the nvptx one.

pub mod elem;
pub mod math;

#[cfg(not(target_arch = "nvptx64"))]
pub mod cpu;
#[cfg(not(target_arch = "nvptx64"))]
pub mod host_algo;
#[cfg(not(target_arch = "nvptx64"))]
pub mod stream_select;

#[cfg(target_arch = "nvptx64")]
pub mod gpu;
