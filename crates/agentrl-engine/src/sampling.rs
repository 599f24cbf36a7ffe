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
//! temperature 1. [`sample_token_as`] reports the other kinds (raw, or processed =
//! renormalised over the kept tokens) from the same draw, to reproduce a server's
//! `logprobs_mode`.
//!
//! Sampling is deterministic for a given seeded generator: one uniform number per token.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::LogprobKind;

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

/// The tokens top-k then top-p keep of a row of log-probs, by the plain definition: sort the
/// whole vocabulary by probability (ties by id), keep the top k, then the shortest prefix
/// whose mass reaches top-p. All tokens, by id, when `params` does not truncate. The sampler
/// keeps exactly this set faster (a partial sort); the preflight uses it to rebuild a
/// truncated distribution from the trainer's logits.
pub fn kept_tokens(logp: &[f64], params: &SamplingParams) -> Vec<usize> {
    let mut order: Vec<usize> = (0..logp.len()).collect();
    if !params.truncates() {
        return order;
    }
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
    order
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
    sample_token_as(logits, params, LogprobKind::TemperatureScaled, rng)
}

/// [`sample_token`], reporting the log-prob of the chosen `kind` (the token drawn does not
/// depend on it):
/// * [`LogprobKind::Raw`]: `log softmax(logits)`, no temperature (vLLM's `raw_logprobs`);
/// * [`LogprobKind::TemperatureScaled`]: `log softmax(logits / T)` over the full vocabulary;
/// * [`LogprobKind::Processed`]: the same, renormalised over the tokens top-k/top-p kept, i.e.
///   the log-prob under the distribution actually sampled from (vLLM's `processed_logprobs`).
///
/// Greedy decoding (`T = 0`) reports `log softmax(logits)` for every kind, as vLLM does for
/// greedy requests (no temperature, no truncation).
pub fn sample_token_as<R: Rng + ?Sized>(
    logits: &[f32],
    params: &SamplingParams,
    kind: LogprobKind,
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
    let temperature = if params.temperature > 0.0 {
        params.temperature
    } else {
        1.0
    };
    // One pass of exponentials over the vocabulary, reused by the truncation and the CDF walk:
    // at Qwen3's 150k tokens the sampler otherwise costs more than a tiny model's step.
    // `weights` are the unnormalised probabilities exp(z/T - max); `lse` is exactly
    // `scaled_log_softmax`'s.
    let scaled: Vec<f64> = logits.iter().map(|&x| x as f64 / temperature).collect();
    let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = scaled.iter().map(|x| (x - max).exp()).collect();
    let total: f64 = weights.iter().sum();
    let lse = max + total.ln();
    let raw_logprob = |token: usize| -> f64 {
        if temperature == 1.0 {
            scaled[token] - lse
        } else {
            scaled_log_softmax(logits, 1.0)[token]
        }
    };
    if params.temperature == 0.0 {
        let (best, _) = scaled
            .iter()
            .enumerate()
            .fold(
                (0, f64::NEG_INFINITY),
                |acc, (i, &x)| {
                    if x > acc.1 {
                        (i, x)
                    } else {
                        acc
                    }
                },
            );
        return Ok((best as u32, (scaled[best] - lse) as f32));
    }
    // Candidates in the order we walk the CDF: all tokens by id, or (top-k/top-p) the kept
    // set by descending probability (ties by id, so the order is total and reproducible).
    let mut order: Vec<usize> = Vec::new();
    let mut kept_weight = total;
    if params.truncates() {
        order = (0..logits.len()).collect();
        let by_probability =
            |a: &usize, b: &usize| scaled[*b].total_cmp(&scaled[*a]).then(a.cmp(b));
        let limit = match params.top_k {
            0 => order.len(),
            k => k.min(order.len()),
        };
        let nucleus = params.top_p * total;
        // Sorting a 150k vocabulary per token would dominate sampling, and the nucleus is
        // usually a few dozen tokens: sort only the `width` most likely (partitioned out in
        // linear time), widening until the nucleus fits. The order is total, so the kept
        // prefix and its mass are exactly those of a full sort.
        let mut width = if params.top_p < 1.0 {
            limit.min(64)
        } else {
            limit
        };
        let (keep, cumulative) = loop {
            if width < order.len() {
                order.select_nth_unstable_by(width - 1, by_probability);
            }
            order[..width].sort_by(by_probability);
            let mut cumulative = 0.0;
            let mut keep = 0;
            for &i in &order[..width] {
                cumulative += weights[i];
                keep += 1;
                if cumulative >= nucleus {
                    break;
                }
            }
            if cumulative >= nucleus || width == limit {
                break (keep, cumulative);
            }
            width = (2 * width).min(limit);
        };
        order.truncate(keep);
        kept_weight = cumulative;
    }
    let target: f64 = rng.random::<f64>() * kept_weight;
    let mut cumulative = 0.0;
    let chosen = if order.is_empty() {
        // Untruncated: walk the vocabulary by id.
        let mut chosen = logits.len() - 1;
        for (i, w) in weights.iter().enumerate() {
            cumulative += w;
            if target < cumulative {
                chosen = i;
                break;
            }
        }
        chosen
    } else {
        let mut chosen = order[order.len() - 1];
        for &i in &order {
            cumulative += weights[i];
            if target < cumulative {
                chosen = i;
                break;
            }
        }
        chosen
    };
    let scaled_logprob = scaled[chosen] - lse;
    let logprob = match kind {
        LogprobKind::TemperatureScaled => scaled_logprob,
        LogprobKind::Processed => scaled_logprob - (kept_weight / total).ln(),
        LogprobKind::Raw => raw_logprob(chosen),
    };
    Ok((chosen as u32, logprob as f32))
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
    fn logprob_kinds_report_raw_scaled_and_renormalised_values() {
        let logits = [2.0f32, 1.0, 0.0, -1.0];
        let params = SamplingParams {
            temperature: 0.5,
            top_k: 2,
            ..Default::default()
        };
        let scaled = scaled_log_softmax(&logits, 0.5);
        let raw = scaled_log_softmax(&logits, 1.0);
        let kept_mass = scaled[0].exp() + scaled[1].exp();
        let mut drawn = [false; 2];
        for seed in 0..40 {
            let draw = |kind| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                sample_token_as(&logits, &params, kind, &mut rng).unwrap()
            };
            let (token, as_scaled) = draw(LogprobKind::TemperatureScaled);
            let (raw_token, as_raw) = draw(LogprobKind::Raw);
            let (processed_token, as_processed) = draw(LogprobKind::Processed);
            // The kind changes what is reported, never what is drawn.
            assert_eq!((token, token), (raw_token, processed_token));
            let t = token as usize;
            drawn[t] = true;
            assert!((as_scaled as f64 - scaled[t]).abs() < 1e-6);
            assert!((as_raw as f64 - raw[t]).abs() < 1e-6);
            assert!((as_processed as f64 - (scaled[t] - kept_mass.ln())).abs() < 1e-6);
        }
        assert_eq!(
            drawn,
            [true, true],
            "both kept tokens are drawn over 40 seeds"
        );
        // Greedy reports log softmax(logits) whatever the kind.
        let greedy = SamplingParams {
            temperature: 0.0,
            top_k: 2,
            ..Default::default()
        };
        for kind in [
            LogprobKind::Raw,
            LogprobKind::TemperatureScaled,
            LogprobKind::Processed,
        ] {
            let mut rng = ChaCha8Rng::seed_from_u64(0);
            let (token, lp) = sample_token_as(&logits, &greedy, kind, &mut rng).unwrap();
            assert_eq!(token, 0);
            assert!((lp as f64 - raw[0]).abs() < 1e-6);
        }
    }

    /// The plain definition: sort the whole vocabulary, keep the top k, then the nucleus.
    fn reference_sample(logits: &[f32], params: &SamplingParams, u: f64) -> (u32, f32) {
        let logp = scaled_log_softmax(logits, params.temperature);
        assert!(
            params.truncates(),
            "the reference walks the kept set by probability"
        );
        let order = kept_tokens(&logp, params);
        let cumulative: f64 = order.iter().map(|&i| logp[i].exp()).sum();
        let target = u * cumulative;
        let mut walked = 0.0;
        for &i in &order {
            walked += logp[i].exp();
            if target < walked {
                return (i as u32, logp[i] as f32);
            }
        }
        let last = order[order.len() - 1];
        (last as u32, logp[last] as f32)
    }

    #[test]
    fn partial_sorting_draws_exactly_what_a_full_sort_draws() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let knobs = [
            (0.9, 0),
            (0.5, 0),
            (0.999, 0),
            (0.9, 30),
            (1.0, 10),
            (0.95, 20),
        ];
        for case in 0..60 {
            // Flat rows force the nucleus past the first partition width; peaked rows do not.
            let spread = if case % 2 == 0 { 0.2 } else { 6.0 };
            let logits: Vec<f32> = (0..500)
                .map(|_| (rng.random::<f32>() - 0.5) * spread)
                .collect();
            for &(top_p, top_k) in &knobs {
                let params = SamplingParams {
                    temperature: 0.8,
                    top_p,
                    top_k,
                };
                let seed = case as u64 * 31 + top_k as u64;
                let u = ChaCha8Rng::seed_from_u64(seed).random::<f64>();
                let mut draw_rng = ChaCha8Rng::seed_from_u64(seed);
                let got = sample_token(&logits, &params, &mut draw_rng).unwrap();
                assert_eq!(got, reference_sample(&logits, &params, u), "{params:?}");
            }
        }
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
