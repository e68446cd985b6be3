//! A step's logits as the host hands them over ([`Logits`]): host slices
//! in f32, bf16 or f16, or CUDA memory ([`CudaLogits`], re-exported by
//! [`crate::interop`]).

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView};

/// A step's `[R, V]` logits as the host hands them over: borrowed (f32,
/// bf16 or f16, never copied by the plan) or owned f32. Half-precision
/// logits are widened to f32 when the kernels load them (the CPU and CUDA
/// devices bind them in their own element type; the Ascend device widens
/// them on the host); the widening is exact, so results equal those of the
/// widened f32 logits.
#[derive(Clone, Debug)]
pub enum Logits<'a> {
    /// Borrowed f32.
    F32(&'a [f32]),
    /// Borrowed bfloat16.
    Bf16(&'a [half::bf16]),
    /// Borrowed IEEE half.
    F16(&'a [half::f16]),
    /// Owned f32 (tests and tools that build plans without a caller's buffer).
    Owned(Vec<f32>),
    /// Device memory on the CUDA engine stream ([`CudaLogits`]).
    Cuda(CudaLogits<'a>),
}

impl Default for Logits<'_> {
    fn default() -> Self {
        Logits::Owned(Vec::new())
    }
}

impl<'a> Logits<'a> {
    /// Number of logits (R x V).
    pub fn len(&self) -> usize {
        match self {
            Logits::F32(s) => s.len(),
            Logits::Bf16(s) => s.len(),
            Logits::F16(s) => s.len(),
            Logits::Owned(v) => v.len(),
            Logits::Cuda(c) => c.len(),
        }
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The host logits as f32, borrowed when they already are (half
    /// precision widened: exact). Device logits give an empty slice.
    pub fn to_f32_cow(&self) -> std::borrow::Cow<'_, [f32]> {
        use std::borrow::Cow;
        match self {
            Logits::F32(s) => Cow::Borrowed(s),
            Logits::Owned(v) => Cow::Borrowed(v),
            Logits::Bf16(s) => Cow::Owned(s.iter().map(|x| x.to_f32()).collect()),
            Logits::F16(s) => Cow::Owned(s.iter().map(|x| x.to_f32()).collect()),
            Logits::Cuda(_) => Cow::Owned(Vec::new()),
        }
    }
    /// Widens host logits `range` into `out` (same length). Device logits: no-op.
    pub fn widen_into(&self, range: std::ops::Range<usize>, out: &mut [f32]) {
        match self {
            Logits::F32(s) => out.copy_from_slice(&s[range]),
            Logits::Owned(v) => out.copy_from_slice(&v[range]),
            Logits::Bf16(s) => out.iter_mut().zip(&s[range]).for_each(|(o, x)| *o = x.to_f32()),
            Logits::F16(s) => out.iter_mut().zip(&s[range]).for_each(|(o, x)| *o = x.to_f32()),
            Logits::Cuda(_) => {}
        }
    }
    /// The f32 host slice when the logits are f32 on the host (no copy).
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            Logits::F32(s) => Some(s),
            Logits::Owned(v) => Some(v),
            _ => None,
        }
    }
    /// An owned copy (f32, widened), for plans that outlive the caller's buffer.
    pub fn into_owned(self) -> Logits<'static> {
        match self {
            Logits::Owned(v) => Logits::Owned(v),
            other => Logits::Owned(other.to_f32_cow().into_owned()),
        }
    }
}

impl<'a> From<&'a [f32]> for Logits<'a> {
    fn from(s: &'a [f32]) -> Self {
        Logits::F32(s)
    }
}
impl<'a> From<&'a Vec<f32>> for Logits<'a> {
    fn from(s: &'a Vec<f32>) -> Self {
        Logits::F32(s)
    }
}
impl<'a, const N: usize> From<&'a [f32; N]> for Logits<'a> {
    fn from(s: &'a [f32; N]) -> Self {
        Logits::F32(s)
    }
}
impl<'a> From<&'a [half::bf16]> for Logits<'a> {
    fn from(s: &'a [half::bf16]) -> Self {
        Logits::Bf16(s)
    }
}
impl<'a> From<&'a Vec<half::bf16>> for Logits<'a> {
    fn from(s: &'a Vec<half::bf16>) -> Self {
        Logits::Bf16(s)
    }
}
impl<'a> From<&'a [half::f16]> for Logits<'a> {
    fn from(s: &'a [half::f16]) -> Self {
        Logits::F16(s)
    }
}
impl<'a> From<&'a Vec<half::f16>> for Logits<'a> {
    fn from(s: &'a Vec<half::f16>) -> Self {
        Logits::F16(s)
    }
}
impl<'a> From<CudaLogits<'a>> for Logits<'a> {
    fn from(c: CudaLogits<'a>) -> Self {
        Logits::Cuda(c)
    }
}

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
