//! Python arguments -> Rust values: errors naming the argument, scalars,
//! sequences, masks and per-row parameters.

use super::*;

pub(crate) fn config_err(e: ConfigError) -> PyErr {
    match e {
        ConfigError::BackendUnavailable(..) => PyRuntimeError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

pub(crate) fn device_err(msg: String) -> PyErr {
    PyRuntimeError::new_err(msg)
}

pub(crate) fn batch_err(e: BatchError) -> PyErr {
    match e {
        BatchError::Backend(_) => PyRuntimeError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

pub(crate) fn value_err(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}

// ---------------------------------------------------------------- arguments

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// A Python int in `0..=u64::MAX` (ValueError / TypeError naming `arg`).
pub(crate) fn u64_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<u64> {
    if obj.is_instance_of::<pyo3::types::PyFloat>() || obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!("{arg} must be an int, got {}", type_name(obj))));
    }
    if let Ok(x) = obj.extract::<u64>() {
        return Ok(x);
    }
    match obj.extract::<i128>() {
        Ok(x) => Err(value_err(format!("{arg} must be in 0..=18446744073709551615, got {x}"))),
        Err(_) => Err(PyTypeError::new_err(format!("{arg} must be an int, got {}", type_name(obj)))),
    }
}

pub(crate) fn i64_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<i64> {
    // Python 3.9 would truncate a float through `__int__` (deprecated there);
    // a bool is an int to Python, but `top_k=True` is a mistake, as
    // `temperature=True` is for `f32_arg`.
    if obj.is_instance_of::<pyo3::types::PyFloat>() || obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!("{arg} must be an int, got {}", type_name(obj))));
    }
    if let Ok(x) = obj.extract::<i64>() {
        return Ok(x);
    }
    match obj.extract::<i128>() {
        Ok(x) => Err(value_err(format!("{arg} must fit in int64, got {x}"))),
        Err(_) => Err(PyTypeError::new_err(format!("{arg} must be an int, got {}", type_name(obj)))),
    }
}

/// A Python int that is a size or an index (ValueError / TypeError naming `arg`).
pub(crate) fn usize_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<usize> {
    let v = u64_arg(obj, arg)?;
    usize::try_from(v).map_err(|_| value_err(format!("{arg} must be in 0..={}, got {v}", usize::MAX)))
}

/// An optional Python int in `0..=u32::MAX` (default when absent), errors naming `arg`.
pub(crate) fn u32_opt(obj: Option<&Bound<'_, PyAny>>, arg: &str, default: u32) -> PyResult<u32> {
    let Some(x) = obj.filter(|o| !o.is_none()) else { return Ok(default) };
    let v = i64_arg(x, arg)?;
    u32::try_from(v).map_err(|_| value_err(format!("{arg} must be in 0..=4294967295, got {v}")))
}

pub(crate) fn f32_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<f32> {
    if obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!("{arg} must be a float, got bool")));
    }
    // Rounded to nearest f32, as SAMPLER.md section 1 does for a caller's f64.
    obj.extract::<f64>()
        .map(|x| x as f32)
        .map_err(|_| PyTypeError::new_err(format!("{arg} must be a float, got {}", type_name(obj))))
}

/// A 1-D sequence of ints: a DLPack array of any integer dtype, or a list / tuple.
pub(crate) fn i64_list(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<i64>> {
    if dlpack::is_dlpack(obj)? {
        return dlpack::import(obj, arg, &[1])?.to_i64_vec(arg);
    }
    if obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(PyTypeError::new_err(format!("{arg} must be a sequence of ints, got str")));
    }
    let items: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("{arg} must be a sequence of ints, got {}", type_name(obj))))?
        .collect::<PyResult<_>>()?;
    items.iter().enumerate().map(|(i, x)| i64_arg(x, &format!("{arg}[{i}]"))).collect()
}

/// Token ids (i32): see [`i64_list`].
pub(crate) fn ids_list(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<i32>> {
    i64_list(obj, arg)?
        .into_iter()
        .enumerate()
        .map(|(i, x)| i32::try_from(x).map_err(|_| value_err(format!("{arg}[{i}] = {x} is not a token id (int32)"))))
        .collect()
}

/// A 1-D sequence of floats (DLPack of a float dtype, or a list / tuple).
pub(crate) fn f32_list(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<f32>> {
    if dlpack::is_dlpack(obj)? {
        return dlpack::import(obj, arg, &[1])?.to_f32_vec(arg);
    }
    let items: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("{arg} must be a sequence of floats, got {}", type_name(obj))))?
        .collect::<PyResult<_>>()?;
    items.iter().enumerate().map(|(i, x)| f32_arg(x, &format!("{arg}[{i}]"))).collect()
}

/// Grammar bit masks `[rows, ceil(V/32)]` of int32 / uint32 words (one row:
/// 1-D), or a list of lists of ints. Counts are checked by the sampler (a
/// bad mask fails only its request).
pub(crate) fn masks_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<Vec<u32>>> {
    if dlpack::is_dlpack(obj)? {
        let b = dlpack::import(obj, arg, &[1, 2])?;
        let words = b.to_u32_words(arg)?;
        let w = *b.shape.last().unwrap_or(&0);
        if b.shape.len() == 1 {
            return Ok(vec![words]);
        }
        return Ok(if w == 0 { vec![Vec::new(); b.shape[0]] } else { words.chunks(w).map(|c| c.to_vec()).collect() });
    }
    let rows: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{arg} must be a [rows, words] array or a list of lists of ints, got {}",
                type_name(obj)
            ))
        })?
        .collect::<PyResult<_>>()?;
    rows.iter()
        .enumerate()
        .map(|(j, row)| {
            i64_list(row, &format!("{arg}[{j}]"))?
                .into_iter()
                .enumerate()
                .map(|(c, x)| {
                    // A word may be given as a signed int32 (torch has no uint32 bit ops).
                    if (-(1i64 << 31)..(1i64 << 32)).contains(&x) {
                        Ok(x as u32)
                    } else {
                        Err(value_err(format!("{arg}[{j}][{c}] = {x} is not a 32-bit word")))
                    }
                })
                .collect()
        })
        .collect()
}

/// A per-row parameter: `None` (default), a scalar (broadcast) or `r` values.
pub(crate) fn per_row<T: Clone>(
    obj: Option<&Bound<'_, PyAny>>,
    default: T,
    r: usize,
    arg: &str,
    scalar: impl Fn(&Bound<'_, PyAny>, &str) -> PyResult<T>,
    list: impl Fn(&Bound<'_, PyAny>, &str) -> PyResult<Vec<T>>,
) -> PyResult<Vec<T>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(vec![default; r]) };
    // A Python int or float (the usual scalar) is known without looking up
    // `__dlpack__`, whose AttributeError costs about a microsecond per argument.
    if obj.is_instance_of::<pyo3::types::PyFloat>() || obj.is_instance_of::<pyo3::types::PyInt>() {
        return Ok(vec![scalar(obj, arg)?; r]);
    }
    if let Ok(a) = obj.cast::<numpy::PyUntypedArray>() {
        // A numpy array (numpy's C API: no attribute lookups): 0-d is a scalar.
        if a.ndim() == 0 {
            return Ok(vec![scalar(obj, arg)?; r]);
        }
        let v = list(obj, arg)?;
        if v.len() != r {
            return Err(value_err(format!("{arg}: expected a scalar or {r} values (one per row), got {}", v.len())));
        }
        return Ok(v);
    }
    let is_seq = dlpack::is_dlpack(obj)?
        && obj.getattr("ndim").and_then(|n| n.extract::<usize>()).map_or(true, |n| n > 0)
        || obj.is_instance_of::<PyList>()
        || obj.is_instance_of::<PyTuple>();
    if !is_seq {
        return Ok(vec![scalar(obj, arg)?; r]);
    }
    let v = list(obj, arg)?;
    if v.len() != r {
        return Err(value_err(format!("{arg}: expected a scalar or {r} values (one per row), got {}", v.len())));
    }
    Ok(v)
}
