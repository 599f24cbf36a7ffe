//! Evaluation estimators: unbiased pass@k, pass^k, and seeded bootstrap confidence intervals
//! (ALGORITHMS.md §16).
//!
//! Data flow: per task, `n` samples of which `c` passed the hidden tests → [`pass_at_k`] /
//! [`pass_hat_k`] per task → mean over tasks, with [`bootstrap_ci`] resampling *tasks*.
//! Host-only (no tensors).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Result, RlError};

fn check_nck(func: &'static str, n: usize, c: usize, k: usize) -> Result<()> {
    if n == 0 {
        return Err(RlError::Empty {
            func,
            what: "a task needs at least one sample (n = 0)".into(),
        });
    }
    if c > n {
        return Err(RlError::invalid(
            func,
            "c",
            format!("correct count c={c} exceeds samples n={n}"),
        ));
    }
    if k == 0 {
        return Err(RlError::invalid(func, "k", "k must be >= 1"));
    }
    if k > n {
        return Err(RlError::invalid(
            func,
            "k",
            format!("k={k} exceeds the n={n} samples drawn"),
        ));
    }
    Ok(())
}

/// Unbiased pass@k `1 − C(n−c, k)/C(n, k)` in the numerically stable product form
/// `1 − Π_{i=n−c+1}^{n} (1 − k/i)` (ALGORITHMS.md §16; Chen et al. 2021, arXiv:2107.03374).
pub fn pass_at_k(n: usize, c: usize, k: usize) -> Result<f64> {
    check_nck("pass_at_k", n, c, k)?;
    if n - c < k {
        return Ok(1.0);
    }
    let prod: f64 = ((n - c + 1)..=n)
        .map(|i| 1.0 - k as f64 / i as f64)
        .product();
    Ok(1.0 - prod)
}

/// pass^k `C(c, k)/C(n, k) = Π_{i=0}^{k−1} (c−i)/(n−i)`: the probability that k i.i.d. trials
/// all succeed (ALGORITHMS.md §16; τ-bench, arXiv:2406.12045).
pub fn pass_hat_k(n: usize, c: usize, k: usize) -> Result<f64> {
    check_nck("pass_hat_k", n, c, k)?;
    if c < k {
        return Ok(0.0);
    }
    Ok((0..k).map(|i| (c - i) as f64 / (n - i) as f64).product())
}

/// Mean of [`pass_at_k`] over tasks given as `(n, c)`.
pub fn mean_pass_at_k(tasks: &[(usize, usize)], k: usize) -> Result<f64> {
    mean_over("mean_pass_at_k", tasks, |n, c| pass_at_k(n, c, k))
}

/// Mean of [`pass_hat_k`] over tasks given as `(n, c)`.
pub fn mean_pass_hat_k(tasks: &[(usize, usize)], k: usize) -> Result<f64> {
    mean_over("mean_pass_hat_k", tasks, |n, c| pass_hat_k(n, c, k))
}

fn mean_over(
    func: &'static str,
    tasks: &[(usize, usize)],
    f: impl Fn(usize, usize) -> Result<f64>,
) -> Result<f64> {
    if tasks.is_empty() {
        return Err(RlError::Empty {
            func,
            what: "no tasks to average over".into(),
        });
    }
    let mut sum = 0.0;
    for &(n, c) in tasks {
        sum += f(n, c)?;
    }
    Ok(sum / tasks.len() as f64)
}

/// A point estimate with a percentile bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConfidenceInterval {
    /// The statistic on the original sample.
    pub estimate: f64,
    /// Lower percentile bound.
    pub low: f64,
    /// Upper percentile bound.
    pub high: f64,
    /// Confidence level, e.g. 0.95.
    pub level: f64,
}

/// Linear-interpolation quantile of sorted data (numpy's default).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Percentile bootstrap CI (ALGORITHMS.md §16; Miller 2024, arXiv:2411.00640): resample the
/// `items` (tasks) with replacement `resamples` times with a ChaCha8 RNG seeded by `seed`,
/// recompute `statistic`, and take the `(1−level)/2` and `(1+level)/2` percentiles.
/// Deterministic for a given seed.
pub fn bootstrap_ci<T: Clone>(
    items: &[T],
    statistic: impl Fn(&[T]) -> Result<f64>,
    resamples: usize,
    level: f64,
    seed: u64,
) -> Result<ConfidenceInterval> {
    const F: &str = "bootstrap_ci";
    if items.is_empty() {
        return Err(RlError::Empty {
            func: F,
            what: "no items to resample".into(),
        });
    }
    if resamples == 0 {
        return Err(RlError::invalid(F, "resamples", "must be >= 1"));
    }
    if !(level > 0.0 && level < 1.0) {
        return Err(RlError::invalid(
            F,
            "level",
            format!("must lie in (0, 1), got {level}"),
        ));
    }
    let estimate = statistic(items)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut buf: Vec<T> = Vec::with_capacity(items.len());
    let mut stats = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        buf.clear();
        for _ in 0..items.len() {
            buf.push(items[rng.random_range(0..items.len())].clone());
        }
        let s = statistic(&buf)?;
        if !s.is_finite() {
            return Err(RlError::NonFinite {
                func: F,
                arg: "statistic(resample)",
                index: stats.len(),
                value: s,
            });
        }
        stats.push(s);
    }
    stats.sort_by(f64::total_cmp);
    Ok(ConfidenceInterval {
        estimate,
        low: quantile(&stats, (1.0 - level) / 2.0),
        high: quantile(&stats, (1.0 + level) / 2.0),
        level,
    })
}
