//! The parts of a step's upload beyond [`Device::upload_inputs`]: the
//! filled outputs (device memsets) and the upload of a step being captured
//! into the caller's CUDA graph (metadata in the capture pool).
//!
//! [`Device::upload_inputs`]: crate::runtime::pipeline::Device::upload_inputs

use cudarc::driver::DevicePtr;

use super::arena::*;
use super::*;
use crate::error::BackendError;
use crate::runtime::pipeline::{self, Buf};

impl CudaDevice {
    /// Sets the filled outputs (class 2 of `upload_inputs`) by device memsets on our stream.
    pub(super) fn fill_outputs(
        &self,
        list: &[(Buf, pipeline::Upload<'_>)],
        class: &dyn Fn(Buf, &pipeline::Upload<'_>) -> i32,
    ) -> Result<(), BackendError> {
        let base = self.arena.as_ref().expect("sized by upload_inputs").device_ptr(&self.stream).0;
        for (b, u) in list {
            if let (pipeline::Upload::Fill(x, len), Some((off, _))) = (u, self.input_at[*b as usize]) {
                if class(*b, u) == 2 && *len > 0 {
                    let bits = x.scalar_bits().unwrap_or(0) as u32;
                    // The caller's buffer when the step writes into it (`enqueue_into`), else ours.
                    let dst = self.ext_out[*b as usize].unwrap_or(base + off as u64);
                    // SAFETY: `len` 4-byte elements at `dst`: in the arena (laid out above), or
                    // the caller's `[R]` buffer of `OutputPtrs`.
                    unsafe { cudarc::driver::sys::cuMemsetD32Async(dst, bits, *len, self.stream.cu_stream()) }
                        .result()
                        .map_err(dev)?;
                }
            }
        }
        Ok(())
    }

    /// `upload_inputs` for a step being captured into the caller's graph: the
    /// metadata goes to a range of the capture pool of its own (the graph's
    /// copy node reads it at every replay) and is copied on our capturing
    /// stream, without waiting, allocating or recording a shared event.
    /// Errors: no pool yet (no step ran before the capture), a full pool, or
    /// an arena too small for the step.
    pub(super) fn upload_captured(
        &mut self,
        list: &[(Buf, pipeline::Upload<'_>)],
        class: &dyn Fn(Buf, &pipeline::Upload<'_>) -> i32,
        total: usize,
        up: usize,
    ) -> Result<(), BackendError> {
        let Some((_, pool)) = self.capture_pool.as_ref() else {
            return Err(dev("a step captured into a CUDA graph needs one step run before the capture (it reserves the capture pool)"));
        };
        let Some(arena) = self.arena.as_ref().filter(|a| a.len() >= total) else {
            return Err(dev("a step captured into a CUDA graph must not allocate (the arena): run a step of this shape once before capturing"));
        };
        let start = self.capture_used.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        if start + up > CAPTURE_POOL_BYTES {
            return Err(dev(format!("the capture pool ({CAPTURE_POOL_BYTES} pinned bytes) is full after {start} bytes of captured steps' metadata")));
        }
        if up > 0 {
            // SAFETY: [start, start + up) lies inside the pool (checked), which lives as long as
            // `self`; no other capture uses this range and no copy reads it yet.
            let host = unsafe { std::slice::from_raw_parts_mut((*pool as *mut u8).add(start), up) };
            pack_inputs(list, class, &self.input_at, host);
            let dst = arena.device_ptr(&self.stream).0;
            // SAFETY: `up` bytes fit the arena (checked); ordered on our (capturing) stream.
            unsafe { cudarc::driver::result::memcpy_htod_async(dst, &*host, self.stream.cu_stream()) }.map_err(dev)?;
            self.capture_used = start + up;
        }
        self.fill_outputs(list, class)
    }
}
