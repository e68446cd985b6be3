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

use std::marker::PhantomData;
use std::sync::Arc;

pub use cudarc::driver::{CudaContext, CudaSlice, CudaStream, CudaView};
pub use half::{bf16, f16};

/// Element type of logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// IEEE single precision.
    F32,
    /// bfloat16 (widened to f32 exactly at load).
    Bf16,
    /// IEEE half precision (widened to f32 exactly at load).
    F16,
}

impl Dtype {
    /// The element type code the kernels' `Logits` parameters take
    /// (`sampler_kernels::codes::LOGITS_F32`, `LOGITS_BF16`, `LOGITS_F16`).
    pub fn code(self) -> u32 {
        use sampler_kernels::codes::{LOGITS_BF16, LOGITS_F16, LOGITS_F32};
        match self {
            Dtype::F32 => LOGITS_F32,
            Dtype::Bf16 => LOGITS_BF16,
            Dtype::F16 => LOGITS_F16,
        }
    }
    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::Bf16 | Dtype::F16 => 2,
        }
    }
}

/// `[R, V]` logits in CUDA device memory, row-major, borrowed for one
/// `Sampler::sample` call, in f32, bf16 or f16 ([`Dtype`]). The sampler only
/// reads them, in their own element type (widened to f32 exactly inside the
/// kernels, at load), on the stream given with them: the sampler's stream
/// waits for that stream's work before it reads, so the engine need not
/// synchronise. With a grammar mask, the mask check writes the masked rows,
/// widened, to the sampler's own f32 buffer in the same pass, and the rest
/// of the step reads that.
#[derive(Clone, Debug)]
pub struct CudaLogits<'a> {
    ptr: u64,
    len: usize,
    dtype: Dtype,
    stream: Arc<CudaStream>,
    _borrow: PhantomData<&'a ()>,
}

macro_rules! ctor {
    ($slice:ident, $view:ident, $t:ty, $d:ident) => {
        /// Borrows a device buffer (its own stream orders the read).
        pub fn $slice(s: &'a CudaSlice<$t>) -> CudaLogits<'a> {
            use cudarc::driver::DevicePtr;
            let stream = s.stream().clone();
            let ptr = s.device_ptr(&stream).0;
            CudaLogits { ptr, len: s.len(), dtype: Dtype::$d, stream, _borrow: PhantomData }
        }
        /// Borrows a device view (its stream orders the read).
        pub fn $view(s: &'a CudaView<'_, $t>) -> CudaLogits<'a> {
            use cudarc::driver::{DevicePtr, DeviceSlice};
            let stream = s.stream().clone();
            let ptr = s.device_ptr(&stream).0;
            CudaLogits { ptr, len: s.len(), dtype: Dtype::$d, stream, _borrow: PhantomData }
        }
    };
}

impl<'a> CudaLogits<'a> {
    ctor!(f32, f32_view, f32, F32);
    ctor!(bf16, bf16_view, half::bf16, Bf16);
    ctor!(f16, f16_view, half::f16, F16);

    /// From a raw device pointer to `len` elements of `dtype`, written on `stream`.
    ///
    /// # Safety
    /// `ptr` must point to `len` readable elements in the sampler's CUDA
    /// context for as long as `'a`.
    pub unsafe fn from_raw(ptr: u64, len: usize, dtype: Dtype, stream: Arc<CudaStream>) -> CudaLogits<'a> {
        CudaLogits { ptr, len, dtype, stream, _borrow: PhantomData }
    }
    /// Number of logits (R x V).
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    /// Device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    /// The stream the logits were written on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

/// Where a step's outputs go on the device ([`crate::Sampler::sample_async_into`]).
pub use crate::runtime::device::cuda::OutputPtrs;
