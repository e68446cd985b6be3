//! The step arena: device buffers grown to the sizes steps need, the
//! packing of a step's inputs into pinned staging, and the raw driver
//! calls (memsets, copies) that move them, each with its SAFETY note.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use sampler_kernels::spec::Prim;

use super::*;
use crate::error::BackendError;
use crate::runtime::pipeline::{self, Buf, HostSlice};

/// One device buffer of a step, grown (never shrunk) to the sizes steps need.
pub(super) enum DStore {
    F32(CudaSlice<f32>),
    I32(CudaSlice<i32>),
    U32(CudaSlice<u32>),
    U64(CudaSlice<u64>),
}

/// Grows `s` to hold `len` (by half again at least); true when it moved.
pub(super) fn grow<T: DeviceRepr + ValidAsZeroBits>(
    s: &mut CudaSlice<T>,
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<Option<CudaSlice<T>>, BackendError> {
    if s.len() < len.max(1) {
        let want = len.max(1).max(s.len() + s.len() / 2);
        return Ok(Some(std::mem::replace(s, stream.alloc_zeros::<T>(want).map_err(dev)?)));
    }
    Ok(None)
}

/// Pinned bytes reserved (on the first step) for the metadata of steps
/// captured into a caller's CUDA graph: see `CudaDevice::capture_pool`.
pub(super) const CAPTURE_POOL_BYTES: usize = 4 << 20;

/// Writes a step's uploaded inputs (data, and fills of classes 0-1 of
/// `upload_inputs`) into the host staging `host` at their arena offsets.
pub(super) fn pack_inputs(
    list: &[(Buf, pipeline::Upload<'_>)],
    class: &dyn Fn(Buf, &pipeline::Upload<'_>) -> i32,
    input_at: &[Option<(usize, usize)>],
    host: &mut [u8],
) {
    use pipeline::Upload;
    for (b, u) in list {
        let Some((off, bytes)) = input_at[*b as usize] else { continue };
        match u {
            Upload::Data(h) => host[off..off + bytes].copy_from_slice(host_bytes(h)),
            Upload::Fill(..) if class(*b, u) >= 2 => {}
            Upload::Fill(x, _) => {
                let bits = x.scalar_bits().unwrap_or(0).to_le_bytes();
                let w = prim_bytes(b.prim());
                host[off..off + bytes].chunks_exact_mut(w).for_each(|c| c.copy_from_slice(&bits[..w]));
            }
            Upload::Output(_) => {}
        }
    }
}

/// Bytes of `h` as a byte slice.
pub(super) fn host_bytes<'a>(h: &HostSlice<'a>) -> &'a [u8] {
    // SAFETY: plain-old-data element types, viewed as bytes for a copy.
    unsafe {
        match *h {
            HostSlice::F32(s) => std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)),
            HostSlice::I32(s) => std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)),
            HostSlice::U32(s) => std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)),
            HostSlice::U64(s) => std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)),
        }
    }
}

pub(super) fn prim_bytes(p: Prim) -> usize {
    match p {
        Prim::Bool => 1,
        Prim::I64 | Prim::U64 | Prim::F64 => 8,
        _ => 4,
    }
}

/// Byte alignment of each buffer in the input arena.
pub(super) const ARENA_ALIGN: usize = 256;
