//! Drawing one token from a row of logits: temperature, top-k, top-p, and the log-prob that
//! is reported for it.
//!
//! **Which log-prob.** We report `log softmax(logits / temperature)[token]`: the temperature-
//! scaled *full* distribution, **without** top-k/top-p renormalisation
//! ([`crate::LogprobKind::TemperatureScaled`]). This is what TRL and verl compute on the
//! trainer side (they divide logits by the temperature and never apply top-p), so with
//! `top_p = 1` and `top_k = 0` the engine and the trainer agree to float rounding, and with a
//! truncation the difference is the known mismatch that IS correction (ALGORITHMS.md §13)
//! handles. `temperature = 0` means greedy decoding; its log-prob is then reported at
//! temperature 1.
//!
//! Sampling is deterministic for a given seeded generator: one uniform number per token.

use rand::Rng;
use serde::{Deserialize, Serialize};

/// How tokens are drawn. The one sampling-parameter type of the workspace: the trainer's
/// `[sampling]` section, evaluation and every engine use it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplingParams {
    /// Softmax temperature; 0 = greedy.
    pub temperature: f64,
    /// Nucleus sampling: keep the smallest set of tokens whose probability reaches `top_p`.
    pub top_p: f64,
    /// Keep only the `top_k` most likely tokens; 0 = no limit.
    pub top_k: usize,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
        }
    }
}

impl SamplingParams {
    /// Checks the knobs; errors name the knob as `sampling.<name>`.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.temperature >= 0.0 && self.temperature.is_finite(),
            "sampling.temperature must be >= 0 (0 = greedy), got {}",
            self.temperature
        );
        anyhow::ensure!(
            self.top_p > 0.0 && self.top_p <= 1.0,
            "sampling.top_p must lie in (0, 1], got {}",
            self.top_p
        );
        Ok(())
    }

    /// Whether the sampled distribution is truncated (so the reported log-probs are of a
    /// wider distribution than the one sampled from).
    pub fn truncates(&self) -> bool {
        self.top_p < 1.0 || self.top_k > 0
    }
}

/// Log-softmax of `logits / temperature` (temperature 0 is treated as 1), in f64 for accuracy.
pub fn scaled_log_softmax(logits: &[f32], temperature: f64) -> Vec<f64> {
    let t = if temperature > 0.0 { temperature } else { 1.0 };
    let scaled: Vec<f64> = logits.iter().map(|&x| x as f64 / t).collect();
    let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + scaled.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
    scaled.iter().map(|x| x - lse).collect()
}

/// Draws one token from `logits` with temperature, top-k and top-p; returns the token and its
/// log-prob under the temperature-scaled full distribution (see the module doc). Fails on an
/// empty row or a NaN logit, which would otherwise be sampled silently and surface much later
/// as a NaN loss.
pub fn sample_token<R: Rng + ?Sized>(
    logits: &[f32],
    params: &SamplingParams,
    rng: &mut R,
) -> anyhow::Result<(u32, f32)> {
    anyhow::ensure!(!logits.is_empty(), "sampling: the logits row is empty");
    if let Some(bad) = logits.iter().position(|x| x.is_nan()) {
        anyhow::bail!(
            "sampling: the policy produced a NaN logit (token {bad} of {}); the weights are \
             probably no longer finite",
            logits.len()
        );
    }
    let logp = scaled_log_softmax(logits, params.temperature);
    if params.temperature == 0.0 {
        let (best, lp) = logp
            .iter()
            .enumerate()
            .fold((0, f64::NEG_INFINITY), |acc, (i, &lp)| {
                if lp > acc.1 {
                    (i, lp)
                } else {
                    acc
                }
            });
        return Ok((best as u32, lp as f32));
    }
    // Candidates in the order we walk the CDF: all tokens by id, or (top-k/top-p) the kept
    // set by descending probability.
    let mut order: Vec<usize> = (0..logp.len()).collect();
    let mut mass = 1.0;
    if params.truncates() {
        order.sort_by(|&a, &b| logp[b].total_cmp(&logp[a]).then(a.cmp(&b)));
        if params.top_k > 0 {
            order.truncate(params.top_k);
        }
        let mut cumulative = 0.0;
        let mut keep = 0;
        for &i in &order {
            cumulative += logp[i].exp();
            keep += 1;
            if cumulative >= params.top_p {
                break;
            }
        }
        order.truncate(keep);
        mass = cumulative;
    }
    let u: f64 = rng.random::<f64>() * mass;
    let mut cumulative = 0.0;
    let mut chosen = order[order.len() - 1];
    for &i in &order {
        cumulative += logp[i].exp();
        if u < cumulative {
            chosen = i;
            break;
        }
    }
    Ok((chosen as u32, logp[chosen] as f32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn temperature_top_k_and_top_p_shape_the_distribution() -> anyhow::Result<()> {
        let logits = [2.0f32, 1.0, 0.0, -1.0];
        // Greedy picks the argmax and reports its temperature-1 log-prob.
        let greedy = SamplingParams {
            temperature: 0.0,
            ..Default::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let (tok, lp) = sample_token(&logits, &greedy, &mut rng)?;
        assert_eq!(tok, 0);
        assert!((lp as f64 - scaled_log_softmax(&logits, 1.0)[0]).abs() < 1e-6);
        // top_p small enough keeps only the top token; its log-prob is not renormalised.
        let nucleus = SamplingParams {
            top_p: 0.5,
            ..Default::default()
        };
        for _ in 0..50 {
            let (tok, lp) = sample_token(&logits, &nucleus, &mut rng)?;
            assert_eq!(tok, 0);
            assert!(lp < 0.0);
        }
        // top_k = 2 never draws the two least likely tokens.
        let top2 = SamplingParams {
            top_k: 2,
            ..Default::default()
        };
        for _ in 0..200 {
            assert!(sample_token(&logits, &top2, &mut rng)?.0 < 2);
        }
        // Empirical frequencies follow softmax(logits / T).
        let hot = SamplingParams {
            temperature: 2.0,
            ..Default::default()
        };
        let want: Vec<f64> = scaled_log_softmax(&logits, 2.0)
            .iter()
            .map(|l| l.exp())
            .collect();
        let mut counts = [0usize; 4];
        let n = 20_000;
        for _ in 0..n {
            counts[sample_token(&logits, &hot, &mut rng)?.0 as usize] += 1;
        }
        for (c, p) in counts.iter().zip(&want) {
            assert!(
                (*c as f64 / n as f64 - p).abs() < 0.02,
                "{counts:?} vs {want:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn nan_logits_and_bad_knobs_are_errors() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let err = sample_token(&[0.0, f32::NAN], &SamplingParams::default(), &mut rng)
            .unwrap_err()
            .to_string();
        assert!(err.contains("NaN"), "{err}");
        let bad = SamplingParams {
            top_p: 0.0,
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("top_p"));
        let bad = SamplingParams {
            temperature: -1.0,
            ..Default::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("temperature"));
    }
}
