//! Tensors in through DLPack (https://dmlc.github.io/dlpack/latest/), without copies.
//!
//! We ask the producer for `__dlpack__(max_version=(1, 0))` (a
//! `"dltensor_versioned"` capsule, which can also carry read-only arrays) and
//! fall back to `__dlpack__()` (a legacy `"dltensor"` capsule) for producers
//! that do not take `max_version`. We read the data pointer while holding the
//! capsule and never rename it, so the producer's capsule destructor frees
//! the tensor when the capsule goes away (the protocol's "not consumed"
//! path); the producer keeps owning the memory and we never copy f32 data.
//!
//! CUDA tensors ([`import_cuda`]): kDLCUDA capsules, asked for with the
//! consumer's stream (`__dlpack__(stream=...)`: the producer orders its work
//! before that stream), and torch CUDA tensors read through their own
//! attributes (`data_ptr()`, `shape`, `stride()`, `dtype`, `get_device()`):
//! the same zero-copy borrow without torch's Python-level `__dlpack__`
//! (several microseconds a call).

use std::ffi::{c_void, CStr};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::IntoPyDict;

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
            d => {
                return Err(PyTypeError::new_err(format!(
                    "{arg}: expected a floating-point array, got dtype {}",
                    d.name()
                )))
            }
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
                    out.push(
                        i64::try_from(x)
                            .map_err(|_| PyValueError::new_err(format!("{arg}: value {x} does not fit in int64")))?,
                    );
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
            .map(|x| {
                u64::try_from(x).map_err(|_| PyValueError::new_err(format!("{arg}: expected values >= 0, got {x}")))
            })
            .collect()
    }
    /// 32-bit words (grammar masks): int32 and uint32 reinterpreted as u32 bits.
    pub fn to_u32_words(&self, arg: &str) -> PyResult<Vec<u32>> {
        match self.dtype {
            Dtype::I32 | Dtype::U32 => {
                Ok(self.raw().chunks_exact(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect())
            }
            d => Err(PyTypeError::new_err(format!(
                "{arg}: a bit mask must be int32 or uint32 words, got dtype {}",
                d.name()
            ))),
        }
    }
}

/// The DLPack device of `obj` (`__dlpack_device__()`), when it has one.
fn device_of(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Option<(i32, i32)>> {
    if !obj.hasattr(pyo3::intern!(obj.py(), "__dlpack_device__"))? {
        return Ok(None);
    }
    let d = obj.call_method0(pyo3::intern!(obj.py(), "__dlpack_device__"))?;
    let (t, id): (i32, i32) = d.extract().map_err(|_| {
        PyTypeError::new_err(format!("{arg}: __dlpack_device__() did not return (device_type, device_id)"))
    })?;
    Ok(Some((t, id)))
}

/// Whether `obj` speaks DLPack.
pub fn is_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    obj.hasattr(pyo3::intern!(obj.py(), "__dlpack__"))
}

/// A clear error for a tensor on a device the argument cannot be read from.
fn device_error(arg: &str, dev: (i32, i32)) -> PyErr {
    match dev.0 {
        KDL_CUDA | KDL_CUDA_MANAGED => ValueError(format!(
            "{arg}: expected a host array here, got a CUDA tensor (DLPack device type {}, device {}) without a `.cpu()` method",
            dev.0, dev.1
        )),
        t => ValueError(format!("{arg}: expected a CPU or CUDA tensor (DLPack device type {KDL_CPU}, {KDL_CUDA_HOST} or {KDL_CUDA}), got DLPack device type {t} (device {})", dev.1)),
    }
}

/// Whether `obj` is a CUDA tensor that can be read on the host through its
/// `.cpu()` (torch): small per-row parameters given on the device.
fn cpu_copy<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    if is_cuda(obj) && obj.hasattr(pyo3::intern!(obj.py(), "cpu"))? {
        // A device-to-host copy: it waits for the producer's stream (documented).
        return Ok(Some(obj.call_method0(pyo3::intern!(obj.py(), "cpu"))?));
    }
    Ok(None)
}

#[allow(non_snake_case)]
fn ValueError(msg: String) -> PyErr {
    PyValueError::new_err(msg)
}

/// Imports a CPU tensor through DLPack without copying.
///
/// A torch CUDA tensor is first copied to the host with `.cpu()` (small
/// per-row arguments; logits take [`import_cuda`]). Checks: `__dlpack__`
/// present (TypeError), device CPU (else ValueError), a dtype we read
/// (TypeError), `ndim` in `ndims` (ValueError), row-major contiguous strides
/// (ValueError) and element alignment (ValueError). Every message starts
/// with `arg`.
pub fn import<'py>(obj: &Bound<'py, PyAny>, arg: &str, ndims: &[usize]) -> PyResult<Borrowed<'py>> {
    // Host arguments given as torch CUDA tensors (e.g. per-row top_k) are copied to the host.
    if !is_numpy(obj) {
        if let Some(host) = cpu_copy(obj)? {
            return import(&host, arg, ndims);
        }
    }
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
            return Err(PyTypeError::new_err(format!(
                "{arg}: expected an array with __dlpack__ (numpy, torch, ...), got {ty}"
            )));
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
    let t = capsule_tensor(py, &capsule, arg)?;
    let dev = (t.device.device_type, t.device.device_id);
    if dev.0 != KDL_CPU && dev.0 != KDL_CUDA_HOST {
        return Err(device_error(arg, dev));
    }
    let dtype = Dtype::from_dl(t.dtype).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "{arg}: unsupported DLPack dtype (code {}, bits {}, lanes {})",
            t.dtype.code, t.dtype.bits, t.dtype.lanes
        ))
    })?;
    let (shape_i, strides) = dl_shape(t, arg, ndims)?;
    let shape = check_layout(arg, ndims, shape_i, strides)?;
    let n: usize = shape.iter().product();
    let ptr = if n == 0 {
        std::ptr::NonNull::<u64>::dangling().as_ptr() as *const u8
    } else {
        (t.data as *const u8).wrapping_add(t.byte_offset as usize)
    };
    if n > 0 && (ptr.is_null() || (ptr as usize) % dtype.size() != 0) {
        return Err(ValueError(format!(
            "{arg}: data pointer {ptr:p} is null or not aligned to {} bytes",
            dtype.size()
        )));
    }
    Ok(Borrowed { _capsule: capsule, ptr, dtype, shape })
}

/// Shape and strides (None: row-major) of a DLPack tensor, after the `ndim` check.
fn dl_shape<'t>(t: &'t DLTensor, arg: &str, ndims: &[usize]) -> PyResult<(&'t [i64], Option<&'t [i64]>)> {
    let ndim = usize::try_from(t.ndim).unwrap_or(usize::MAX);
    if !ndims.contains(&ndim) {
        return Err(ValueError(format!(
            "{arg}: expected {} dimensions, got {}",
            ndims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(" or "),
            t.ndim
        )));
    }
    if ndim == 0 {
        return Ok((&[], None));
    }
    // SAFETY: `ndim` entries (shape; strides when not null), per DLPack.
    let shape = unsafe { std::slice::from_raw_parts(t.shape, ndim) };
    let strides = (!t.strides.is_null()).then(|| unsafe { std::slice::from_raw_parts(t.strides, ndim) });
    Ok((shape, strides))
}

/// Checks the number of dimensions and that `strides` (in elements; None =
/// row-major) are row-major contiguous; returns the shape.
fn check_layout(arg: &str, ndims: &[usize], shape_i: &[i64], strides: Option<&[i64]>) -> PyResult<Vec<usize>> {
    if !ndims.contains(&shape_i.len()) {
        return Err(ValueError(format!(
            "{arg}: expected {} dimensions, got {}",
            ndims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(" or "),
            shape_i.len()
        )));
    }
    let shape: Vec<usize> = shape_i
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| ValueError(format!("{arg}: negative dimension in shape {shape_i:?}"))))
        .collect::<PyResult<_>>()?;
    // An empty array's strides do not matter (numpy gives zeros).
    if let Some(strides) = strides.filter(|_| shape.iter().product::<usize>() > 0) {
        if strides.len() != shape.len() {
            return Err(ValueError(format!("{arg}: {} strides for {} dimensions", strides.len(), shape.len())));
        }
        // Row-major contiguous; the stride of a dimension of size 1 does not matter.
        let mut want: i64 = 1;
        for k in (0..shape.len()).rev() {
            if shape[k] != 1 && strides[k] != want {
                return Err(ValueError(format!(
                    "{arg}: expected a row-major contiguous array, got shape {shape:?} with strides {strides:?} (in elements); use np.ascontiguousarray(x) or x.contiguous()"
                )));
            }
            want = want.saturating_mul(shape_i[k]);
        }
    }
    Ok(shape)
}

/// Whether `obj` is a tensor on a CUDA device (DLPack kDLCUDA; torch: `is_cuda`).
pub fn is_cuda(obj: &Bound<'_, PyAny>) -> bool {
    if let Some(t) = torch_api(obj) {
        if obj.is_instance(t.tensor.bind(obj.py())).unwrap_or(false) {
            return obj.getattr(pyo3::intern!(obj.py(), "is_cuda")).and_then(|c| c.extract::<bool>()).unwrap_or(false);
        }
    }
    matches!(device_of(obj, ""), Ok(Some((KDL_CUDA, _))) | Ok(Some((KDL_CUDA_MANAGED, _))))
}

// ---------------------------------------------------------------- CUDA tensors

/// Logits element types on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaDtype {
    F32,
    Bf16,
    F16,
}

impl CudaDtype {
    pub fn bytes(self) -> usize {
        match self {
            CudaDtype::F32 => 4,
            _ => 2,
        }
    }
}

/// A tensor in CUDA device memory borrowed from its producer (valid while
/// `_keep`, the tensor or its capsule, lives and the producer does not free
/// it: torch frees a dropped tensor's memory for reuse on the stream the
/// caller works on, which waits for the sampler's reads).
pub struct CudaBorrowed<'py> {
    _keep: Bound<'py, PyAny>,
    /// Device address of the first element.
    pub ptr: u64,
    pub dtype: CudaDtype,
    /// Row-major contiguous shape (checked).
    pub shape: Vec<usize>,
    /// CUDA device ordinal.
    pub device: i32,
    /// Whether it is a torch tensor (outputs are then torch tensors).
    pub torch: bool,
}

/// torch objects the fast path compares with, looked up once (only after
/// the caller passed a torch tensor: we never import torch ourselves).
pub struct TorchApi {
    pub tensor: Py<PyAny>,
    pub f32: Py<PyAny>,
    pub bf16: Py<PyAny>,
    pub f16: Py<PyAny>,
    pub int32: Py<PyAny>,
    /// `torch._C._cuda_getCurrentRawStream(device) -> int` (the caller's current stream).
    pub raw_stream: Py<PyAny>,
    /// `{"dtype": torch.int32}` / `{"dtype": torch.uint8}`: keyword arguments built once.
    pub kw_int32: Py<pyo3::types::PyDict>,
    pub kw_uint8: Py<pyo3::types::PyDict>,
    /// `torch._C._to_dlpack` (C++, no Python frame): a tensor's device, dtype, shape,
    /// strides and address in one call ([`torch_dl`]); `None` on a torch without it.
    pub to_dlpack: Option<Py<PyAny>>,
}

static TORCH_API: pyo3::sync::PyOnceLock<TorchApi> = pyo3::sync::PyOnceLock::new();

/// The torch objects when `obj`'s type comes from torch.
pub fn torch_api<'py>(obj: &Bound<'py, PyAny>) -> Option<&'static TorchApi> {
    let py = obj.py();
    if let Some(t) = TORCH_API.get(py) {
        return Some(t);
    }
    let module = obj.get_type().module().map(|m| m.to_string()).unwrap_or_default();
    if module != "torch" && !module.starts_with("torch.") {
        return None;
    }
    torch_api_py(py).ok()
}

/// The torch objects if they were looked up already (never imports torch).
pub fn torch_api_loaded(py: Python<'_>) -> Option<&'static TorchApi> {
    TORCH_API.get(py)
}

/// The torch objects, importing torch (for outputs of non-torch CUDA inputs).
pub fn torch_api_py(py: Python<'_>) -> PyResult<&'static TorchApi> {
    TORCH_API.get_or_try_init(py, || -> PyResult<TorchApi> {
        let torch = py.import("torch")?;
        let get = |n: &str| torch.getattr(n).map(Bound::unbind);
        Ok(TorchApi {
            tensor: get("Tensor")?,
            f32: get("float32")?,
            bf16: get("bfloat16")?,
            f16: get("float16")?,
            int32: get("int32")?,
            raw_stream: torch.getattr("_C")?.getattr("_cuda_getCurrentRawStream")?.unbind(),
            kw_int32: [("dtype", torch.getattr("int32")?)].into_py_dict(py)?.unbind(),
            kw_uint8: [("dtype", torch.getattr("uint8")?)].into_py_dict(py)?.unbind(),
            to_dlpack: torch.getattr("_C")?.getattr("_to_dlpack").ok().map(Bound::unbind),
        })
    })
}

fn cuda_dtype_dl(t: DLDataType, arg: &str) -> PyResult<CudaDtype> {
    match Dtype::from_dl(t) {
        Some(Dtype::F32) => Ok(CudaDtype::F32),
        Some(Dtype::Bf16) => Ok(CudaDtype::Bf16),
        Some(Dtype::F16) => Ok(CudaDtype::F16),
        Some(d) => {
            Err(PyTypeError::new_err(format!("{arg}: expected float32, bfloat16 or float16 logits, got {}", d.name())))
        }
        None => Err(PyTypeError::new_err(format!(
            "{arg}: unsupported DLPack dtype (code {}, bits {}, lanes {})",
            t.code, t.bits, t.lanes
        ))),
    }
}

fn check_aligned(arg: &str, ptr: u64, n: usize, dtype: CudaDtype) -> PyResult<()> {
    if n > 0 && (ptr == 0 || ptr % dtype.bytes() as u64 != 0) {
        return Err(ValueError(format!(
            "{arg}: device pointer {ptr:#x} is null or not aligned to {} bytes",
            dtype.bytes()
        )));
    }
    Ok(())
}

impl<'py> CudaBorrowed<'py> {
    /// The tensor (torch) or capsule it was read from.
    pub fn keep(&self) -> &Bound<'py, PyAny> {
        &self._keep
    }
}

/// A torch tensor's shape: `torch.Size` is a tuple, read by index rather
/// than through the sequence protocol.
fn torch_shape(obj: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    let s = obj.getattr(pyo3::intern!(obj.py(), "shape"))?;
    match s.cast::<pyo3::types::PyTuple>() {
        Ok(t) => t.iter().map(|d| d.extract::<i64>()).collect(),
        Err(_) => s.extract(),
    }
}

/// A torch tensor's dtype when it is one of the logits' float types
/// (float32, bfloat16, float16), else `None`.
fn torch_float(obj: &Bound<'_, PyAny>, t: &TorchApi) -> PyResult<Option<CudaDtype>> {
    let py = obj.py();
    let dt = obj.getattr(pyo3::intern!(py, "dtype"))?;
    Ok([(&t.f32, CudaDtype::F32), (&t.bf16, CudaDtype::Bf16), (&t.f16, CudaDtype::F16)]
        .into_iter()
        .find(|(d, _)| dt.is(d.bind(py)))
        .map(|(_, c)| c))
}

/// A torch tensor's shape, and its strides only when torch says it is not
/// contiguous: `is_contiguous()` is our row-major check (dimensions of size
/// 1 and empty tensors ignored alike), one call cheaper than the strides,
/// which are read only to be checked and named in the error.
fn torch_dims(obj: &Bound<'_, PyAny>) -> PyResult<(Vec<i64>, Option<Vec<i64>>)> {
    let py = obj.py();
    let shape = torch_shape(obj)?;
    let contiguous: bool = obj.call_method0(pyo3::intern!(py, "is_contiguous"))?.extract()?;
    let strides = if contiguous { None } else { Some(obj.call_method0(pyo3::intern!(py, "stride"))?.extract()?) };
    Ok((shape, strides))
}

/// Whether `obj` is a numpy array: a host array, known without a Python call
/// (numpy's C API type check), so the CUDA probes can be skipped.
pub fn is_numpy(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<numpy::PyUntypedArray>()
}

/// Host logits given as a torch CPU tensor of float32 / bfloat16 / float16,
/// borrowed through its attributes like a CUDA one (no `__dlpack__`, which
/// torch implements in Python: about 3 us of a host call,
/// `bench/binding_profile.py`). `None` for anything else (other dtypes take
/// the DLPack path, which names them in its error).
pub fn torch_host<'py>(obj: &Bound<'py, PyAny>, arg: &str, ndims: &[usize]) -> PyResult<Option<Borrowed<'py>>> {
    let py = obj.py();
    let Some(t) = TORCH_API.get(py) else { return Ok(None) };
    if !obj.is_instance(t.tensor.bind(py))? {
        return Ok(None);
    }
    if let Some(r) = torch_dl(obj, ndims, t).filter(|r| r.device_type == KDL_CPU) {
        let dtype = match r.dtype {
            CudaDtype::F32 => Dtype::F32,
            CudaDtype::Bf16 => Dtype::Bf16,
            CudaDtype::F16 => Dtype::F16,
        };
        let n: usize = r.shape.iter().product();
        let ptr = if n == 0 {
            std::ptr::NonNull::<u64>::dangling().as_ptr() as *const u8
        } else {
            r.ptr as usize as *const u8
        };
        return Ok(Some(Borrowed { _capsule: obj.clone(), ptr, dtype, shape: r.shape }));
    }
    // Any tensor whose attributes cannot be read so (sparse layouts, ...) takes the DLPack
    // path, which raises its ValueError naming `arg`.
    match torch_host_attrs(obj, arg, ndims, t) {
        Ok(b) => b.map_or(Ok(None), |b| b.map(Some)),
        Err(_) => Ok(None),
    }
}

/// [`torch_host`]'s reads: `Err` for an attribute torch cannot give (then
/// DLPack decides), `Ok(None)` for a tensor that is not a float CPU one,
/// `Ok(Some(Err))` for a layout error of ours (naming `arg`).
fn torch_host_attrs<'py>(
    obj: &Bound<'py, PyAny>,
    arg: &str,
    ndims: &[usize],
    t: &TorchApi,
) -> PyResult<Option<PyResult<Borrowed<'py>>>> {
    let py = obj.py();
    if obj.call_method0(pyo3::intern!(py, "get_device"))?.extract::<i64>()? != -1 {
        return Ok(None);
    }
    // The layout of a CPU tensor (get_device() == -1 for the CPU only); `requires_grad` does not
    // matter for a read (torch's `__dlpack__` refuses it; `.detach()` is the same memory).
    let Some(dtype) = torch_float(obj, t)? else { return Ok(None) };
    let dtype = match dtype {
        CudaDtype::F32 => Dtype::F32,
        CudaDtype::Bf16 => Dtype::Bf16,
        CudaDtype::F16 => Dtype::F16,
    };
    if !obj.getattr(pyo3::intern!(py, "is_cpu"))?.extract::<bool>()? {
        return Ok(None); // e.g. a meta tensor (get_device() -1 too): DLPack names it
    }
    let (shape_i, strides) = torch_dims(obj)?;
    let addr: u64 = obj.call_method0(pyo3::intern!(py, "data_ptr"))?.extract()?;
    let shape = match check_layout(arg, ndims, &shape_i, strides.as_deref()) {
        Ok(s) => s,
        Err(e) => return Ok(Some(Err(e))),
    };
    let n: usize = shape.iter().product();
    let ptr =
        if n == 0 { std::ptr::NonNull::<u64>::dangling().as_ptr() as *const u8 } else { addr as usize as *const u8 };
    if n > 0 && (ptr.is_null() || (ptr as usize) % dtype.size() != 0) {
        return Ok(Some(Err(ValueError(format!(
            "{arg}: data pointer {ptr:p} is null or not aligned to {} bytes",
            dtype.size()
        )))));
    }
    // The tensor itself keeps the memory alive (as the capsule does on the DLPack path).
    Ok(Some(Ok(Borrowed { _capsule: obj.clone(), ptr, dtype, shape })))
}

/// `f(arg)` without an argument tuple (`PyObject_CallFunctionObjArgs`; pyo3's `call1` builds one
/// under the stable ABI): torch's C functions of one argument, on the hot path.
pub fn call_one<'py>(f: &Bound<'py, PyAny>, arg: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: live objects, a null-terminated argument list; the result is a new reference or null.
    unsafe {
        let p = pyo3::ffi::PyObject_CallFunctionObjArgs(
            f.as_ptr(),
            arg.as_ptr(),
            std::ptr::null_mut::<pyo3::ffi::PyObject>(),
        );
        Bound::from_owned_ptr_or_err(f.py(), p)
    }
}

/// What one `torch._C._to_dlpack(tensor)` call says of a float tensor laid out as the logits
/// must be (the DLPack fields; the capsule is dropped at once, the tensor keeps the memory).
pub struct TorchRead {
    pub device_type: i32,
    pub device: i32,
    pub dtype: CudaDtype,
    pub shape: Vec<usize>,
    /// Address of the first element (0 or anything for an empty tensor).
    pub ptr: u64,
}

/// A torch tensor read by ONE call into torch's C++ (`torch._C._to_dlpack`, not the
/// Python-level `__dlpack__`) instead of five attribute reads (`dtype`, `shape`,
/// `is_contiguous()`, `data_ptr()`, `get_device()`): about 0.2 us less a call
/// (issue 26; `bench/binding_profile.py`). `None` whenever the call fails or the tensor is not
/// float32 / bfloat16 / float16, `ndims`-dimensional, row-major contiguous and aligned: the
/// attribute path then decides and raises its own errors, so every message stays as it was.
pub fn torch_dl(obj: &Bound<'_, PyAny>, ndims: &[usize], t: &TorchApi) -> Option<TorchRead> {
    let py = obj.py();
    let f = t.to_dlpack.as_ref()?;
    let cap = match call_one(f.bind(py), obj) {
        Ok(c) => c,
        Err(_) => return None, // e.g. a sparse or meta tensor: the attribute path names it
    };
    let dl = capsule_tensor(py, &cap, "").ok()?;
    let dtype = match Dtype::from_dl(dl.dtype)? {
        Dtype::F32 => CudaDtype::F32,
        Dtype::Bf16 => CudaDtype::Bf16,
        Dtype::F16 => CudaDtype::F16,
        _ => return None,
    };
    let ndim = usize::try_from(dl.ndim).ok()?;
    if !ndims.contains(&ndim) {
        return None;
    }
    let (shape_i, strides) = dl_shape(dl, "", ndims).ok()?;
    let shape = check_layout("", ndims, shape_i, strides).ok()?;
    let ptr = (dl.data as u64).wrapping_add(dl.byte_offset);
    if shape.iter().product::<usize>() > 0 && (ptr == 0 || ptr % dtype.bytes() as u64 != 0) {
        return None;
    }
    Some(TorchRead { device_type: dl.device.device_type, device: dl.device.device_id, dtype, shape, ptr })
    // `cap` goes here, unconsumed: its destructor frees torch's DLPack wrapper.
}

/// Reads a torch CUDA tensor ([`torch_dl`], else through its attributes; no `__dlpack__` call).
/// `None` when `obj` is not a torch tensor on a CUDA device.
fn torch_cuda<'py>(obj: &Bound<'py, PyAny>, arg: &str, ndims: &[usize]) -> PyResult<Option<CudaBorrowed<'py>>> {
    let Some(t) = torch_api(obj) else { return Ok(None) };
    let py = obj.py();
    // `is_cuda` first (one attribute): host logits then cost no more than before.
    if !obj.is_instance(t.tensor.bind(py))? || !obj.getattr(pyo3::intern!(py, "is_cuda"))?.extract::<bool>()? {
        return Ok(None);
    }
    if let Some(r) = torch_dl(obj, ndims, t).filter(|r| r.device_type == KDL_CUDA) {
        let TorchRead { device, dtype, shape, ptr, .. } = r;
        return Ok(Some(CudaBorrowed { _keep: obj.clone(), ptr, dtype, shape, device, torch: true }));
    }
    read_torch(obj, arg, ndims, t).map(Some)
}

/// The attribute reads of [`torch_cuda`] once `obj` is known to be a torch
/// tensor (also timed on a CPU tensor by `_bench_binding_pieces`).
pub fn read_torch<'py>(
    obj: &Bound<'py, PyAny>,
    arg: &str,
    ndims: &[usize],
    t: &TorchApi,
) -> PyResult<CudaBorrowed<'py>> {
    let py = obj.py();
    let Some(dtype) = torch_float(obj, t)? else {
        let dt = obj.getattr(pyo3::intern!(py, "dtype"))?;
        return Err(PyTypeError::new_err(format!(
            "{arg}: expected float32, bfloat16 or float16 logits, got {}",
            dt.str()?
        )));
    };
    let (shape_i, strides) = torch_dims(obj)?;
    let shape = check_layout(arg, ndims, &shape_i, strides.as_deref())?;
    let ptr: u64 = obj.call_method0(pyo3::intern!(py, "data_ptr"))?.extract()?;
    let device: i32 = obj.call_method0(pyo3::intern!(py, "get_device"))?.extract()?;
    check_aligned(arg, ptr, shape.iter().product(), dtype)?;
    Ok(CudaBorrowed { _keep: obj.clone(), ptr, dtype, shape, device, torch: true })
}

/// Imports `[.., V]` logits on a CUDA device without a copy: a torch tensor
/// through its attributes, any other producer through DLPack with
/// `__dlpack__(stream=stream)` (`stream`: the consumer's raw CUDA stream,
/// DLPack's convention: 1 = the legacy default stream; the producer makes
/// that stream wait for its work). `None` when `obj` is not on a CUDA device.
/// Checks: dtype float32 / bfloat16 / float16 (TypeError), `ndim` in
/// `ndims`, row-major contiguous strides, alignment (ValueError).
pub fn import_cuda<'py>(
    obj: &Bound<'py, PyAny>,
    arg: &str,
    ndims: &[usize],
    stream: u64,
) -> PyResult<Option<CudaBorrowed<'py>>> {
    if is_numpy(obj) {
        return Ok(None); // host memory, known without the probes below
    }
    if let Some(t) = torch_cuda(obj, arg, ndims)? {
        return Ok(Some(t));
    }
    if torch_api(obj).is_some() && obj.is_instance(torch_api(obj).expect("checked").tensor.bind(obj.py()))? {
        return Ok(None); // a torch CPU tensor
    }
    let dev = match device_of(obj, arg) {
        Ok(Some(d)) if d.0 == KDL_CUDA || d.0 == KDL_CUDA_MANAGED => d,
        _ => return Ok(None),
    };
    let py = obj.py();
    let kwargs = pyo3::types::PyDict::new(py);
    // DLPack: 0 is not a valid stream value (ambiguous); the null stream is the legacy default, 1.
    kwargs.set_item("stream", if stream == 0 { 1 } else { stream })?;
    kwargs.set_item("max_version", (1u32, 0u32))?;
    let method = obj.getattr(pyo3::intern!(py, "__dlpack__"))?;
    let capsule = match method.call((), Some(&kwargs)) {
        Ok(c) => c,
        Err(e) if e.is_instance_of::<PyTypeError>(py) => {
            kwargs.del_item("max_version")?;
            method
                .call((), Some(&kwargs))
                .map_err(|e| ValueError(format!("{arg}: __dlpack__(stream=...) failed: {}", e.value(py))))?
        }
        Err(e) => return Err(ValueError(format!("{arg}: __dlpack__(stream=...) failed: {}", e.value(py)))),
    };
    let t = capsule_tensor(py, &capsule, arg)?;
    if t.device.device_type != dev.0 {
        return Err(ValueError(format!(
            "{arg}: __dlpack_device__ said device type {} but the capsule holds {}",
            dev.0, t.device.device_type
        )));
    }
    let dtype = cuda_dtype_dl(t.dtype, arg)?;
    let (shape_i, strides) = dl_shape(t, arg, ndims)?;
    let shape = check_layout(arg, ndims, shape_i, strides)?;
    let (ptr, device) = ((t.data as u64).wrapping_add(t.byte_offset), t.device.device_id);
    check_aligned(arg, ptr, shape.iter().product(), dtype)?;
    Ok(Some(CudaBorrowed { _keep: capsule, ptr, dtype, shape, device, torch: false }))
}

/// The `DLTensor` inside a `__dlpack__` capsule (versioned 1.x or legacy),
/// borrowed for as long as the capsule lives. TypeError naming `arg` for
/// anything else.
fn capsule_tensor<'c>(py: Python<'_>, capsule: &'c Bound<'_, PyAny>, arg: &str) -> PyResult<&'c DLTensor> {
    // SAFETY: PyCapsule_GetName / GetPointer check the object; null means an error (cleared below).
    let name = unsafe { pyo3::ffi::PyCapsule_GetName(capsule.as_ptr()) };
    let versioned = !name.is_null() && unsafe { CStr::from_ptr(name) } == DLTENSOR_VERSIONED;
    let want = if versioned { DLTENSOR_VERSIONED } else { DLTENSOR };
    let raw = unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule.as_ptr(), want.as_ptr()) };
    if raw.is_null() {
        let _ = PyErr::take(py);
        return Err(PyTypeError::new_err(format!(
            "{arg}: __dlpack__() did not return a \"dltensor\" or \"dltensor_versioned\" capsule"
        )));
    }
    // SAFETY: a live (versioned or legacy) managed tensor owned by the capsule, which outlives 'c.
    if versioned {
        let mv = raw as *const DLManagedTensorVersioned;
        let major = unsafe { (*mv).version[0] };
        if major != 1 {
            return Err(PyTypeError::new_err(format!("{arg}: DLPack major version {major} is not supported (1)")));
        }
        Ok(unsafe { &(*mv).dl_tensor })
    } else {
        Ok(unsafe { &(*(raw as *const DLManagedTensor)).dl_tensor })
    }
}
