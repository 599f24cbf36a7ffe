//! DAPO's overlong handling (ALGORITHMS.md §6 technique 4; Yu et al. 2025, arXiv:2503.14476
//! eq. 13): the soft overlong punishment added to the correctness reward, and overlong
//! filtering (masking the loss of truncated samples).
//!
//! Data flow: response lengths (policy tokens) → [`soft_overlong_penalty`] → added to each
//! `R_i` before the advantages; truncation flags → [`overlong_filter_mask`] → loss mask.

use candle_core::Tensor;

use crate::checks;
use crate::error::{Result, RlError};

/// `R_length(y)` of DAPO eq. 13: 0 up to `L_max − L_cache`, then a linear ramp down to −1 at
/// `L_max`, and −1 beyond. `max_len` = `L_max`, `cache_len` = `L_cache` (DAPO: 20480 / 4096).
pub fn soft_overlong_penalty(len: usize, max_len: usize, cache_len: usize) -> Result<f32> {
    const F: &str = "soft_overlong_penalty";
    if cache_len == 0 || cache_len > max_len {
        return Err(RlError::invalid(
            F,
            "cache_len",
            format!("need 0 < cache_len <= max_len, got {cache_len} (max_len {max_len})"),
        ));
    }
    let expected = max_len - cache_len;
    Ok(if len <= expected {
        0.0
    } else if len <= max_len {
        ((expected as f64 - len as f64) / cache_len as f64) as f32
    } else {
        -1.0
    })
}

/// [`soft_overlong_penalty`] for a batch of lengths.
pub fn soft_overlong_penalties(
    lens: &[usize],
    max_len: usize,
    cache_len: usize,
) -> Result<Vec<f32>> {
    lens.iter()
        .map(|&l| soft_overlong_penalty(l, max_len, cache_len))
        .collect()
}

/// Overlong filtering: zero the loss mask of every truncated sequence (`truncated[i]`).
pub fn overlong_filter_mask(mask: &Tensor, truncated: &[bool]) -> Result<Tensor> {
    const F: &str = "overlong_filter_mask";
    let (b, n) = checks::dims2(F, "mask", mask)?;
    checks::len_is(F, "truncated", truncated, b)?;
    checks::mask_rows(F, mask, b, n)?;
    let keep: Vec<f32> = truncated
        .iter()
        .map(|&t| if t { 0.0 } else { 1.0 })
        .collect();
    Ok(mask.broadcast_mul(&checks::column(&keep, mask)?)?)
}
