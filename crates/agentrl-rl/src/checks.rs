//! Input validation shared by every module: shape checks that name the argument at fault,
//! finiteness checks, and small host-side helpers (reading a `[B, T]` tensor into rows).
//!
//! These run before any tensor arithmetic so that a wrongly wired trainer gets an [`RlError`]
//! naming the function and argument rather than a candle broadcast error or a silent
//! broadcast.

use candle_core::{DType, Tensor};

use crate::error::{Result, RlError};

/// Checks that `t` is rank 2 and returns `(B, T)`.
pub(crate) fn dims2(func: &'static str, arg: &'static str, t: &Tensor) -> Result<(usize, usize)> {
    match t.dims() {
        [b, n] => Ok((*b, *n)),
        other => Err(RlError::Shape {
            func,
            arg,
            got: other.to_vec(),
            expected: "[B, T] (rank 2)".to_string(),
        }),
    }
}

/// Checks that `t` has exactly the shape `[b, n]`.
pub(crate) fn same2(
    func: &'static str,
    arg: &'static str,
    t: &Tensor,
    b: usize,
    n: usize,
) -> Result<()> {
    if t.dims() == [b, n] {
        Ok(())
    } else {
        Err(RlError::Shape {
            func,
            arg,
            got: t.dims().to_vec(),
            expected: format!("[{b}, {n}] (same as the first per-token argument)"),
        })
    }
}

/// Checks that `t` has exactly the shape `[b]`.
pub(crate) fn same1(func: &'static str, arg: &'static str, t: &Tensor, b: usize) -> Result<()> {
    if t.dims() == [b] {
        Ok(())
    } else {
        Err(RlError::Shape {
            func,
            arg,
            got: t.dims().to_vec(),
            expected: format!("[{b}]"),
        })
    }
}

/// Checks that a slice has length `b`.
pub(crate) fn len_is<T>(func: &'static str, arg: &'static str, s: &[T], b: usize) -> Result<()> {
    if s.len() == b {
        Ok(())
    } else {
        Err(RlError::Shape {
            func,
            arg,
            got: vec![s.len()],
            expected: format!("[{b}]"),
        })
    }
}

/// Rejects NaN / infinite values in a slice.
pub(crate) fn finite(func: &'static str, arg: &'static str, values: &[f32]) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(index) => Err(RlError::NonFinite {
            func,
            arg,
            index,
            value: f64::from(values[index]),
        }),
    }
}

/// Reads a rank-2 tensor into host rows of f32 (any float dtype accepted).
pub(crate) fn rows(t: &Tensor) -> Result<Vec<Vec<f32>>> {
    Ok(t.to_dtype(DType::F32)?.to_vec2::<f32>()?)
}

/// Reads a rank-2 tensor into host rows and rejects non-finite values.
pub(crate) fn finite_rows(
    func: &'static str,
    arg: &'static str,
    t: &Tensor,
) -> Result<Vec<Vec<f32>>> {
    let r = rows(t)?;
    let width = r.first().map_or(0, Vec::len);
    for (i, row) in r.iter().enumerate() {
        if let Some(j) = row.iter().position(|v| !v.is_finite()) {
            return Err(RlError::NonFinite {
                func,
                arg,
                index: i * width + j,
                value: f64::from(row[j]),
            });
        }
    }
    Ok(r)
}

/// Builds a `[B, T]` tensor from host rows on the device and dtype of `like`.
pub(crate) fn from_rows(rows: &[Vec<f32>], like: &Tensor) -> Result<Tensor> {
    let b = rows.len();
    let n = rows.first().map_or(0, Vec::len);
    let flat: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Ok(Tensor::from_vec(flat, (b, n), like.device())?.to_dtype(like.dtype())?)
}

/// Builds a `[B, 1]` column tensor from host values on the device and dtype of `like`.
pub(crate) fn column(values: &[f32], like: &Tensor) -> Result<Tensor> {
    Ok(
        Tensor::from_vec(values.to_vec(), (values.len(), 1), like.device())?
            .to_dtype(like.dtype())?,
    )
}

/// Validates a loss mask: rank 2 with shape `[b, n]`, every entry 0 or 1. Returns its rows.
pub(crate) fn mask_rows(
    func: &'static str,
    mask: &Tensor,
    b: usize,
    n: usize,
) -> Result<Vec<Vec<f32>>> {
    same2(func, "mask", mask, b, n)?;
    let r = rows(mask)?;
    for (i, row) in r.iter().enumerate() {
        if let Some(j) = row.iter().position(|&v| v != 0.0 && v != 1.0) {
            return Err(RlError::invalid(
                func,
                "mask",
                format!("entries must be 0 or 1, found {} at [{i}, {j}]", row[j]),
            ));
        }
    }
    Ok(r)
}
