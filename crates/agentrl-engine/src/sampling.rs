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

thread_local! {
    /// The untruncated sampler's weights by id, reused across tokens (a 150k-token row is
    /// 1.2 MB; allocating it per token faulted fresh pages in every time).
    static UNTRUNCATED_WEIGHTS: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

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

/// The `width` token ids ranked first by descending `scores`, ties by ascending id (a total
/// order), in that order: what a full sort's first `width` entries are.
///
/// One pass keeps the `width` best seen so far in a heap whose top is the worst of them, so a
/// token that does not beat it costs one comparison: at a 150k vocabulary and a width of a
/// few dozen this is several times faster than partitioning an index vector of the whole
/// vocabulary (`select_nth_unstable`, which it replaced: 20% of a Qwen3 evaluation's time,
/// `perf`). Ids are visited in increasing order, so a later token equal to the worst kept
/// ranks below it and only a strictly larger score gets in.
pub fn most_likely(scores: &[f64], width: usize) -> Vec<usize> {
    most_likely_of(scores, width)
}

/// A score [`most_likely`] ranks by: a float under its IEEE total order.
#[doc(hidden)]
pub trait RankScore: Copy {
    fn rank_cmp(&self, other: &Self) -> std::cmp::Ordering;
}
impl RankScore for f64 {
    fn rank_cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.total_cmp(other)
    }
}
impl RankScore for f32 {
    fn rank_cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.total_cmp(other)
    }
}

/// [`most_likely`] over f32 or f64 scores. The sampler ranks the raw f32 logits: dividing by a
/// positive temperature in f64 maps distinct f32 values to distinct f64 values in the same
/// order, so the ranking is that of the scaled scores without materialising them.
#[doc(hidden)]
pub fn most_likely_of<S: RankScore>(scores: &[S], width: usize) -> Vec<usize> {
    use std::cmp::Ordering;
    use std::collections::BinaryHeap;

    /// A kept token, ordered so that the heap's maximum is the worst ranked.
    struct Kept<S>(S, usize);
    impl<S: RankScore> Ord for Kept<S> {
        fn cmp(&self, other: &Self) -> Ordering {
            other.0.rank_cmp(&self.0).then(self.1.cmp(&other.1))
        }
    }
    impl<S: RankScore> PartialOrd for Kept<S> {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }
    impl<S: RankScore> PartialEq for Kept<S> {
        fn eq(&self, other: &Self) -> bool {
            self.cmp(other) == Ordering::Equal
        }
    }
    impl<S: RankScore> Eq for Kept<S> {}

    let by_rank = |a: &usize, b: &usize| scores[*b].rank_cmp(&scores[*a]).then(a.cmp(b));
    if width >= scores.len() {
        let mut all: Vec<usize> = (0..scores.len()).collect();
        all.sort_by(by_rank);
        return all;
    }
    if width == 0 {
        return Vec::new();
    }
    let mut heap: BinaryHeap<Kept<S>> = (0..width).map(|i| Kept(scores[i], i)).collect();
    let Some(mut worst) = heap.peek().map(|k| k.0) else {
        return Vec::new();
    };
    for (i, &score) in scores.iter().enumerate().skip(width) {
        if score.rank_cmp(&worst) == Ordering::Greater {
            heap.pop();
            heap.push(Kept(score, i));
            worst = heap.peek().map_or(score, |k| k.0);
        }
    }
    let mut kept: Vec<usize> = heap.into_iter().map(|k| k.1).collect();
    kept.sort_by(by_rank);
    kept
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
    // One pass of exponentials over the vocabulary; at Qwen3's 150k tokens the sampler
    // otherwise costs more than a tiny model's step. No vocabulary-wide f64 row is built: the
    // scaled logit `x / T` and its weight `exp(x / T - max)` are recomputed where needed, which
    // gives bit for bit the values (and sums, in the same order) a stored row would. The
    // maximum of the scaled logits is the scaled maximum logit (division by T > 0 keeps order).
    let max = f64::from(logits.iter().copied().fold(f32::NEG_INFINITY, f32::max)) / temperature;
    let scaled = |token: usize| f64::from(logits[token]) / temperature;
    let weight = |token: usize| (scaled(token) - max).exp();
    let untruncated_walk = params.temperature != 0.0 && !params.truncates();
    let total: f64 = if untruncated_walk {
        // The walk by id below reads every weight again: keep them, in a buffer per thread.
        UNTRUNCATED_WEIGHTS.with_borrow_mut(|weights| {
            weights.clear();
            weights.extend((0..logits.len()).map(weight));
            weights.iter().sum()
        })
    } else {
        (0..logits.len()).map(weight).sum()
    };
    let lse = max + total.ln();
    let raw_logprob = |token: usize| -> f64 {
        if temperature == 1.0 {
            scaled(token) - lse
        } else {
            scaled_log_softmax(logits, 1.0)[token]
        }
    };
    if params.temperature == 0.0 {
        // The first maximum by id, as a strict `>` scan of the scaled row finds it.
        let mut best = 0;
        let mut best_logit = f32::NEG_INFINITY;
        for (i, &x) in logits.iter().enumerate() {
            if x > best_logit {
                best = i;
                best_logit = x;
            }
        }
        return Ok((best as u32, (scaled(best) - lse) as f32));
    }
    // Candidates in the order we walk the CDF: all tokens by id, or (top-k/top-p) the kept
    // set by descending probability (ties by id, so the order is total and reproducible).
    let mut order: Vec<usize> = Vec::new();
    let mut kept_weight = total;
    if params.truncates() {
        let limit = match params.top_k {
            0 => logits.len(),
            k => k.min(logits.len()),
        };
        let nucleus = params.top_p * total;
        // Sorting a 150k vocabulary per token would dominate sampling, and the nucleus is
        // usually a few dozen tokens: rank only the `width` most likely, widening until the
        // nucleus fits. The order is total, so the kept prefix and its mass are exactly those
        // of a full sort.
        let mut width = if params.top_p < 1.0 {
            limit.min(64)
        } else {
            limit
        };
        let (keep, cumulative) = loop {
            order = most_likely_of(logits, width);
            let mut cumulative = 0.0;
            let mut keep = 0;
            for &i in &order {
                cumulative += weight(i);
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
        UNTRUNCATED_WEIGHTS.with_borrow(|weights| {
            let mut chosen = logits.len() - 1;
            for (i, w) in weights.iter().enumerate() {
                cumulative += w;
                if target < cumulative {
                    chosen = i;
                    break;
                }
            }
            chosen
        })
    } else {
        let mut chosen = order[order.len() - 1];
        for &i in &order {
            cumulative += weight(i);
            if target < cumulative {
                chosen = i;
                break;
            }
        }
        chosen
    };
    let scaled_logprob = scaled(chosen) - lse;
    let logprob = match kind {
        LogprobKind::TemperatureScaled => scaled_logprob,
        LogprobKind::Processed => scaled_logprob - (kept_weight / total).ln(),
        LogprobKind::Raw => raw_logprob(chosen),
    };
    Ok((chosen as u32, logprob as f32))
}
