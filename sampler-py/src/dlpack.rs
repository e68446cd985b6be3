//! Tensors in through DLPack (https://dmlc.github.io/dlpack/latest/), without copies.
//!
//! We ask the producer for `__dlpack__(max_version=(1, 0))` (a
//! `"dltensor_versioned"` capsule, which can also carry read-only arrays) and
//! fall back to `__dlpack__()` (a legacy `"dltensor"` capsule) for producers
//! that do not take `max_version`. We read the data pointer while holding the
//! capsule and never rename it, so the producer's capsule destructor frees
//! the tensor when the capsule goes away (the protocol's "not consumed"
//! path); the producer keeps owning the memory and we never copy f32 data.

use std::ffi::{c_void, CStr};

use pyo3::exceptions::{PyNotImplementedError, PyTypeError, PyValueError};
use pyo3::prelude::*;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// DLPack device types we name in messages.
const KDL_CPU: i32 = 1;
const KDL_CUDA: i32 = 2;
const KDL_CUDA_HOST: i32 = 3;
const KDL_CUDA_MANAGED: i32 = 13;

#[repr(C)]
struct DLManagedTensorVersioned {
    version: [u32; 2],
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

const DLTENSOR: &CStr = c"dltensor";
const DLTENSOR_VERSIONED: &CStr = c"dltensor_versioned";

/// Element types the binding reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F64,
    F16,
    Bf16,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
}

impl Dtype {
    fn from_dl(t: DLDataType) -> Option<Dtype> {
        if t.lanes != 1 {
            return None;
        }
        Some(match (t.code, t.bits) {
            (2, 32) => Dtype::F32,
            (2, 64) => Dtype::F64,
            (2, 16) => Dtype::F16,
            (4, 16) => Dtype::Bf16,
            (0, 8) => Dtype::I8,
            (0, 16) => Dtype::I16,
            (0, 32) => Dtype::I32,
            (0, 64) => Dtype::I64,
            (1, 8) => Dtype::U8,
            (1, 16) => Dtype::U16,
            (1, 32) => Dtype::U32,
            (1, 64) => Dtype::U64,
            (6, 8) => Dtype::Bool,
            _ => return None,
        })
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::I8 | Dtype::U8 | Dtype::Bool => 1,
            Dtype::F16 | Dtype::Bf16 | Dtype::I16 | Dtype::U16 => 2,
            Dtype::F32 | Dtype::I32 | Dtype::U32 => 4,
            Dtype::F64 | Dtype::I64 | Dtype::U64 => 8,
        }
    }
    /// numpy-style name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "float32",
            Dtype::F64 => "float64",
            Dtype::F16 => "float16",
            Dtype::Bf16 => "bfloat16",
            Dtype::I8 => "int8",
            Dtype::I16 => "int16",
            Dtype::I32 => "int32",
            Dtype::I64 => "int64",
            Dtype::U8 => "uint8",
            Dtype::U16 => "uint16",
            Dtype::U32 => "uint32",
            Dtype::U64 => "uint64",
            Dtype::Bool => "bool",
        }
    }
}

/// A CPU tensor borrowed from its producer: valid while `_capsule` lives.
pub struct Borrowed<'py> {
    _capsule: Bound<'py, PyAny>,
    ptr: *const u8,
    pub dtype: Dtype,
    /// Shape (row-major, contiguous: checked on import).
    pub shape: Vec<usize>,
}

impl Borrowed<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// Address of the first element (for the zero-copy check).
    pub fn data_ptr(&self) -> usize {
        self.ptr as usize
    }
    /// The elements as f32 without a copy (dtype must be f32).
    ///
    /// The slice is only valid while `self` lives; the caller keeps `self`
    /// alive across the use (also while the GIL is released).
    pub fn as_f32(&self) -> &[f32] {
        assert_eq!(self.dtype, Dtype::F32);
        let n = self.len();
        if n == 0 {
            return &[];
        }
        // SAFETY: the producer guarantees `n` contiguous f32 at `ptr` (shape,
        // strides and alignment are checked on import) while the capsule lives.
        unsafe { std::slice::from_raw_parts(self.ptr as *const f32, n) }
    }
    fn raw(&self) -> &[u8] {
        let n = self.len() * self.dtype.size();
        if n == 0 {
            return &[];
        }
        // SAFETY: as `as_f32`, in bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, n) }
    }
    /// The elements widened to f32: f16 and bf16 exactly, f64 rounded to
    /// nearest (a copy; f32 should use [`Borrowed::as_f32`]).
    pub fn to_f32_vec(&self, arg: &str) -> PyResult<Vec<f32>> {
        let b = self.raw();
        let two = |c: &[u8]| u16::from_ne_bytes([c[0], c[1]]);
        Ok(match self.dtype {
            Dtype::F32 => self.as_f32().to_vec(),
            Dtype::F64 => b.chunks_exact(8).map(|c| f64::from_ne_bytes(c.try_into().unwrap()) as f32).collect(),
            Dtype::F16 => b.chunks_exact(2).map(|c| half::f16::from_bits(two(c)).to_f32()).collect(),
            Dtype::Bf16 => b.chunks_exact(2).map(|c| half::bf16::from_bits(two(c)).to_f32()).collect(),
            d => return Err(PyTypeError::new_err(format!("{arg}: expected a floating-point array, got dtype {}", d.name()))),
        })
    }
    /// The elements as i64 (integer or bool dtypes; u64 above i64::MAX is an error).
    pub fn to_i64_vec(&self, arg: &str) -> PyResult<Vec<i64>> {
        let b = self.raw();
        let v: Vec<i64> = match self.dtype {
            Dtype::I8 => b.iter().map(|&x| x as i8 as i64).collect(),
            Dtype::U8 | Dtype::Bool => b.iter().map(|&x| x as i64).collect(),
            Dtype::I16 => b.chunks_exact(2).map(|c| i16::from_ne_bytes([c[0], c[1]]) as i64).collect(),
            Dtype::U16 => b.chunks_exact(2).map(|c| u16::from_ne_bytes([c[0], c[1]]) as i64).collect(),
            Dtype::I32 => b.chunks_exact(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap()) as i64).collect(),
            Dtype::U32 => b.chunks_exact(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap()) as i64).collect(),
            Dtype::I64 => b.chunks_exact(8).map(|c| i64::from_ne_bytes(c.try_into().unwrap())).collect(),
            Dtype::U64 => {
                let mut out = Vec::with_capacity(self.len());
                for c in b.chunks_exact(8) {
                    let x = u64::from_ne_bytes(c.try_into().unwrap());
                    out.push(i64::try_from(x).map_err(|_| PyValueError::new_err(format!("{arg}: value {x} does not fit in int64")))?);
                }
                out
            }
            d => return Err(PyTypeError::new_err(format!("{arg}: expected an integer array, got dtype {}", d.name()))),
        };
        Ok(v)
    }
    /// The elements as u64 bit patterns of 64-bit values (seeds): u64 as is,
    /// signed integers must be >= 0.
    pub fn to_u64_vec(&self, arg: &str) -> PyResult<Vec<u64>> {
        if self.dtype == Dtype::U64 {
            return Ok(self.raw().chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap())).collect());
        }
        self.to_i64_vec(arg)?
            .into_iter()
            .map(|x| u64::try_from(x).map_err(|_| PyValueError::new_err(format!("{arg}: expected values >= 0, got {x}"))))
            .collect()
    }
    /// 32-bit words (grammar masks): int32 and uint32 reinterpreted as u32 bits.
    pub fn to_u32_words(&self, arg: &str) -> PyResult<Vec<u32>> {
        match self.dtype {
            Dtype::I32 | Dtype::U32 => Ok(self.raw().chunks_exact(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect()),
            d => Err(PyTypeError::new_err(format!("{arg}: a bit mask must be int32 or uint32 words, got dtype {}", d.name()))),
        }
    }
}

/// The DLPack device of `obj` (`__dlpack_device__()`), when it has one.
fn device_of(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Option<(i32, i32)>> {
    if !obj.hasattr(pyo3::intern!(obj.py(), "__dlpack_device__"))? {
        return Ok(None);
    }
    let d = obj.call_method0(pyo3::intern!(obj.py(), "__dlpack_device__"))?;
    let (t, id): (i32, i32) = d.extract().map_err(|_| PyTypeError::new_err(format!("{arg}: __dlpack_device__() did not return (device_type, device_id)")))?;
    Ok(Some((t, id)))
}

/// Whether `obj` speaks DLPack.
pub fn is_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    obj.hasattr(pyo3::intern!(obj.py(), "__dlpack__"))
}

/// A clear error for tensors on a device this build cannot read yet.
fn device_error(arg: &str, dev: (i32, i32)) -> PyErr {
    match dev.0 {
        KDL_CUDA | KDL_CUDA_MANAGED => PyNotImplementedError::new_err(format!(
            "{arg}: CUDA tensors (DLPack device type {} = kDLCUDA{}, device {}) are not supported by this build yet: \
             they need the device-resident logits API of sampler_host::Sampler (the `engine` branch). \
             Pass a CPU tensor (e.g. `x.cpu()`) for now",
            dev.0,
            if dev.0 == KDL_CUDA_MANAGED { "Managed" } else { "" },
            dev.1
        )),
        t => ValueError(format!("{arg}: expected a CPU tensor (DLPack device type {KDL_CPU} or {KDL_CUDA_HOST}), got DLPack device type {t} (device {})", dev.1)),
    }
}

#[allow(non_snake_case)]
fn ValueError(msg: String) -> PyErr {
    PyValueError::new_err(msg)
}

/// Imports a CPU tensor through DLPack without copying.
///
/// Checks: `__dlpack__` present (TypeError), device CPU (CUDA:
/// NotImplementedError; other devices: ValueError), a dtype we read
/// (TypeError), `ndim` in `ndims` (ValueError), row-major contiguous strides
/// (ValueError) and element alignment (ValueError). Every message starts
/// with `arg`.
pub fn import<'py>(obj: &Bound<'py, PyAny>, arg: &str, ndims: &[usize]) -> PyResult<Borrowed<'py>> {
    let py = obj.py();
    // `__dlpack__(max_version=(1, 0))` first: one call on the fast path (the
    // device is read from the capsule). Only when it fails do we ask
    // `__dlpack_device__`, to name the device in the error.
    static KWARGS: pyo3::sync::PyOnceLock<Py<pyo3::types::PyDict>> = pyo3::sync::PyOnceLock::new();
    let kwargs = KWARGS
        .get_or_try_init(py, || -> PyResult<_> {
            let d = pyo3::types::PyDict::new(py);
            d.set_item("max_version", (1u32, 0u32))?;
            Ok(d.unbind())
        })?
        .bind(py);
    let method = match obj.getattr(pyo3::intern!(py, "__dlpack__")) {
        Ok(m) => m,
        Err(_) => {
            let ty = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
            return Err(PyTypeError::new_err(format!("{arg}: expected an array with __dlpack__ (numpy, torch, ...), got {ty}")));
        }
    };
    let failed = |e: PyErr| -> PyErr {
        match device_of(obj, arg) {
            Ok(Some(dev)) if dev.0 != KDL_CPU && dev.0 != KDL_CUDA_HOST => device_error(arg, dev),
            _ => PyValueError::new_err(format!("{arg}: __dlpack__() failed: {}", e.value(py))),
        }
    };
    let capsule = match method.call((), Some(kwargs)) {
        Ok(c) => c,
        // A producer older than DLPack 1.0 does not take `max_version`.
        Err(e) if e.is_instance_of::<PyTypeError>(py) => method.call0().map_err(failed)?,
        Err(e) => return Err(failed(e)),
    };
    // SAFETY: PyCapsule_GetName / GetPointer check the object; null means an error (cleared below).
    let name = unsafe { pyo3::ffi::PyCapsule_GetName(capsule.as_ptr()) };
    let versioned = !name.is_null() && unsafe { CStr::from_ptr(name) } == DLTENSOR_VERSIONED;
    let want = if versioned { DLTENSOR_VERSIONED } else { DLTENSOR };
    let raw = unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule.as_ptr(), want.as_ptr()) };
    if raw.is_null() {
        let _ = PyErr::take(py);
        return Err(PyTypeError::new_err(format!("{arg}: __dlpack__() did not return a \"dltensor\" or \"dltensor_versioned\" capsule")));
    }
    // SAFETY: a live (versioned or legacy) managed tensor owned by the capsule.
    let t: &DLTensor = if versioned {
        let mv = raw as *const DLManagedTensorVersioned;
        let major = unsafe { (*mv).version[0] };
        if major != 1 {
            return Err(PyTypeError::new_err(format!("{arg}: DLPack major version {major} is not supported (1)")));
        }
        unsafe { &(*mv).dl_tensor }
    } else {
        unsafe { &(*(raw as *const DLManagedTensor)).dl_tensor }
    };
    let dev = (t.device.device_type, t.device.device_id);
    if dev.0 != KDL_CPU && dev.0 != KDL_CUDA_HOST {
        return Err(device_error(arg, dev));
    }
    let dtype = Dtype::from_dl(t.dtype).ok_or_else(|| {
        PyTypeError::new_err(format!("{arg}: unsupported DLPack dtype (code {}, bits {}, lanes {})", t.dtype.code, t.dtype.bits, t.dtype.lanes))
    })?;
    let ndim = usize::try_from(t.ndim).unwrap_or(usize::MAX);
    if !ndims.contains(&ndim) {
        return Err(ValueError(format!("{arg}: expected {} dimensions, got {}", ndims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(" or "), t.ndim)));
    }
    // SAFETY: `ndim` entries (shape; strides when not null), per DLPack.
    let shape_i: &[i64] = if ndim == 0 { &[] } else { unsafe { std::slice::from_raw_parts(t.shape, ndim) } };
    let shape: Vec<usize> = shape_i
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| ValueError(format!("{arg}: negative dimension in shape {shape_i:?}"))))
        .collect::<PyResult<_>>()?;
    if !t.strides.is_null() && ndim > 0 {
        let strides = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
        // Row-major contiguous; the stride of a dimension of size 1 does not matter.
        let mut want: i64 = 1;
        for k in (0..ndim).rev() {
            if shape[k] != 1 && strides[k] != want {
                return Err(ValueError(format!(
                    "{arg}: expected a row-major contiguous array, got shape {shape:?} with strides {strides:?} (in elements); use np.ascontiguousarray(x) or x.contiguous()"
                )));
            }
            want = want.saturating_mul(shape_i[k]);
        }
    }
    let n: usize = shape.iter().product();
    let ptr = if n == 0 { std::ptr::NonNull::<u64>::dangling().as_ptr() as *const u8 } else { (t.data as *const u8).wrapping_add(t.byte_offset as usize) };
    if n > 0 && (ptr.is_null() || (ptr as usize) % dtype.size() != 0) {
        return Err(ValueError(format!("{arg}: data pointer {ptr:p} is null or not aligned to {} bytes", dtype.size())));
    }
    Ok(Borrowed { _capsule: capsule, ptr, dtype, shape })
}

/// Whether `obj` is a tensor on a CUDA device (DLPack kDLCUDA).
pub fn is_cuda(obj: &Bound<'_, PyAny>) -> bool {
    matches!(device_of(obj, ""), Ok(Some((KDL_CUDA, _))) | Ok(Some((KDL_CUDA_MANAGED, _))))
}
