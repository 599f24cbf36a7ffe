//! The local sampling engine: token ids in, sampled token ids and their log-probs out.
//!
//! Data flow: the rollout driver ([`crate::episode`]) feeds prompt and observation ids to a
//! [`StepPolicy`] (TinyAgent with its KV cache), and [`sample_token`] draws the next action
//! token from the last position's logits. The returned log-prob is what the trainer later uses
//! as the old/rollout log-prob (ALGORITHMS.md §0 `μ`, §13).
//!
//! **Which log-prob.** We report `log softmax(logits / temperature)[token]`: the temperature-
//! scaled *full* distribution, **without** top-p renormalisation. This is what TRL and verl
//! compute on the trainer side (they divide logits by the temperature and never apply top-p), so
//! with `top_p = 1` the engine and the trainer agree to float rounding, and with `top_p < 1` the
//! difference is the known truncation mismatch that IS correction (ALGORITHMS.md §13) handles.
//! `temperature = 0` means greedy decoding; its log-prob is then reported at temperature 1.
//!
//! Sampling is deterministic for a given seeded generator (`rand_chacha`): rows draw in row
//! order, one uniform number per sampled token.

use candle_core::{IndexOp, Tensor};
use rand::Rng;
use serde::{Deserialize, Serialize};

use agentrl_model::{KvCache, TinyAgent};

/// How actions are sampled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplingConfig {
    /// Softmax temperature; 0 = greedy.
    pub temperature: f32,
    /// Nucleus sampling: keep the smallest set of tokens whose probability reaches `top_p`.
    pub top_p: f32,
    /// Longest action per turn in tokens (the stop token included).
    pub max_action_tokens: usize,
    /// Longest episode in tokens; past it the episode is cut and submitted on the agent's
    /// behalf (and marked truncated). Capped by the model's `max_seq`.
    pub max_episode_tokens: usize,
    /// Environment steps run at once (tests run in child processes, so this overlaps them).
    pub env_threads: usize,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            max_action_tokens: agentrl_chat::tiny::DEFAULT_MAX_ACTION_TOKENS,
            max_episode_tokens: 512,
            env_threads: 2,
        }
    }
}

impl SamplingConfig {
    /// Checks the knobs; names the one at fault.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.temperature >= 0.0 && self.temperature.is_finite(),
            "sampling.temperature must be >= 0 (0 = greedy), got {}",
            self.temperature
        );
        anyhow::ensure!(
            self.top_p > 0.0 && self.top_p <= 1.0,
            "sampling.top_p must be in (0, 1], got {}",
            self.top_p
        );
        anyhow::ensure!(
            self.max_action_tokens > 0,
            "sampling.max_action_tokens must be > 0"
        );
        anyhow::ensure!(
            self.max_episode_tokens > 0,
            "sampling.max_episode_tokens must be > 0"
        );
        anyhow::ensure!(self.env_threads > 0, "sampling.env_threads must be > 0");
        Ok(())
    }
}

/// A policy that can be decoded incrementally with a per-row cache.
pub trait StepPolicy {
    type Cache;
    /// An empty cache for `rows` independent sequences.
    fn new_cache(&self, rows: usize) -> Self::Cache;
    /// Feeds `rows[b]` (possibly empty) after what the cache holds and returns, for every row
    /// that fed at least one token, the logits `[V]` at its last fed position (rows that fed
    /// nothing get `None`).
    fn step(
        &self,
        rows: &[&[u32]],
        cache: &mut Self::Cache,
    ) -> anyhow::Result<Vec<Option<Vec<f32>>>>;
    /// Keeps only the listed rows of the cache, in that order.
    fn retain_rows(&self, cache: &mut Self::Cache, keep: &[usize]) -> anyhow::Result<()>;
    /// Longest sequence the policy accepts.
    fn max_seq(&self) -> usize;
}

impl StepPolicy for TinyAgent {
    type Cache = KvCache;

    fn new_cache(&self, rows: usize) -> KvCache {
        KvCache::new(self.config(), rows)
    }

    fn step(&self, rows: &[&[u32]], cache: &mut KvCache) -> anyhow::Result<Vec<Option<Vec<f32>>>> {
        let out = self.forward_step_ragged(rows, cache)?;
        let (b, n, v) = out.logits.dims3()?;
        // Gather each row's last fed position before copying to the host: prefill chunks can
        // be long, and only one position per row is sampled from.
        let wanted: Vec<(usize, u32)> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.is_empty())
            .map(|(row, r)| (row, (row * n + r.len() - 1) as u32))
            .collect();
        let index = Tensor::from_vec(
            wanted.iter().map(|&(_, i)| i).collect::<Vec<_>>(),
            wanted.len(),
            out.logits.device(),
        )?;
        let picked = out
            .logits
            .reshape((b * n, v))?
            .index_select(&index, 0)?
            .to_vec2::<f32>()?;
        let mut result = vec![None; b];
        for ((row, _), logits) in wanted.into_iter().zip(picked) {
            result[row] = Some(logits);
        }
        Ok(result)
    }

    fn retain_rows(&self, cache: &mut KvCache, keep: &[usize]) -> anyhow::Result<()> {
        Ok(cache.retain_rows(keep)?)
    }

    fn max_seq(&self) -> usize {
        self.config().max_seq
    }
}

/// Log-softmax of `logits / temperature` (temperature 0 is treated as 1), in f64 for accuracy.
pub fn scaled_log_softmax(logits: &[f32], temperature: f32) -> Vec<f64> {
    let t = if temperature > 0.0 {
        temperature as f64
    } else {
        1.0
    };
    let scaled: Vec<f64> = logits.iter().map(|&x| x as f64 / t).collect();
    let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + scaled.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
    scaled.iter().map(|x| x - lse).collect()
}

/// Draws one token from `logits` with temperature and top-p; returns the token and its log-prob
/// under the temperature-scaled full distribution (see the module doc).
pub fn sample_token<R: Rng + ?Sized>(
    logits: &[f32],
    cfg: &SamplingConfig,
    rng: &mut R,
) -> (u32, f32) {
    let logp = scaled_log_softmax(logits, cfg.temperature);
    if cfg.temperature == 0.0 {
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
        return (best as u32, lp as f32);
    }
    // Candidates in the order we walk the CDF: all tokens by id, or (top-p) the nucleus by
    // descending probability.
    let mut order: Vec<usize> = (0..logp.len()).collect();
    let mut mass = 1.0;
    if cfg.top_p < 1.0 {
        order.sort_by(|&a, &b| logp[b].total_cmp(&logp[a]).then(a.cmp(&b)));
        let mut cumulative = 0.0;
        let mut keep = 0;
        for &i in &order {
            cumulative += logp[i].exp();
            keep += 1;
            if cumulative >= cfg.top_p as f64 {
                break;
            }
        }
        order.truncate(keep);
        mass = cumulative;
    }
    let u: f64 = rng.random::<f64>() * mass;
    let mut cumulative = 0.0;
    let mut chosen = *order.last().expect("vocabulary is not empty");
    for &i in &order {
        cumulative += logp[i].exp();
        if u < cumulative {
            chosen = i;
            break;
        }
    }
    (chosen as u32, logp[chosen] as f32)
}

/// One sampled continuation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    pub tokens: Vec<u32>,
    pub logprobs: Vec<f32>,
    /// Ended on a stop token (rather than the length cap).
    pub stopped: bool,
}

/// Samples a continuation of every prompt, all rows in one batched forward per decoding step,
/// until a token in `stop` or `max_tokens` tokens.
pub fn generate<P: StepPolicy, R: Rng + ?Sized>(
    policy: &P,
    prompts: &[Vec<u32>],
    stop: &[u32],
    max_tokens: usize,
    cfg: &SamplingConfig,
    rng: &mut R,
) -> anyhow::Result<Vec<Generation>> {
    cfg.validate()?;
    let mut out: Vec<Generation> = prompts
        .iter()
        .map(|_| Generation {
            tokens: Vec::new(),
            logprobs: Vec::new(),
            stopped: false,
        })
        .collect();
    for (i, p) in prompts.iter().enumerate() {
        anyhow::ensure!(!p.is_empty(), "generate: prompt {i} is empty");
        anyhow::ensure!(
            p.len() + max_tokens <= policy.max_seq(),
            "generate: prompt {i} ({} tokens) + {max_tokens} new tokens exceeds the model's max_seq {}",
            p.len(),
            policy.max_seq()
        );
    }
    let mut cache = policy.new_cache(prompts.len());
    // `live[j]` = index into `out` of cache row j.
    let mut live: Vec<usize> = (0..prompts.len()).collect();
    let mut feeds: Vec<Vec<u32>> = prompts.to_vec();
    while !live.is_empty() {
        let refs: Vec<&[u32]> = feeds.iter().map(Vec::as_slice).collect();
        let logits = policy.step(&refs, &mut cache)?;
        let mut keep = Vec::new();
        let mut next_feeds = Vec::new();
        for (row, &idx) in live.iter().enumerate() {
            let row_logits = logits[row]
                .as_ref()
                .ok_or_else(|| anyhow::anyhow!("generate: row {row} fed nothing"))?;
            let (token, logprob) = sample_token(row_logits, cfg, rng);
            let gen = &mut out[idx];
            gen.tokens.push(token);
            gen.logprobs.push(logprob);
            gen.stopped = stop.contains(&token);
            if !gen.stopped && gen.tokens.len() < max_tokens {
                keep.push(row);
                next_feeds.push(vec![token]);
            }
        }
        if keep.len() != live.len() {
            policy.retain_rows(&mut cache, &keep)?;
            live = keep.iter().map(|&r| live[r]).collect();
        }
        feeds = next_feeds;
    }
    Ok(out)
}

/// Per-position log-probs of `tokens` under a full forward pass, at a temperature: what the
/// trainer computes (`log softmax(logits/T)` at position `t-1`, gathered at token `t`).
/// Element 0 (no context) is 0.
pub fn score_tokens(
    model: &TinyAgent,
    tokens: &[u32],
    temperature: f32,
) -> anyhow::Result<Vec<f32>> {
    anyhow::ensure!(!tokens.is_empty(), "score_tokens: no tokens");
    let ids = Tensor::from_vec(tokens.to_vec(), (1, tokens.len()), model.device())?;
    let logits = model.forward(&ids)?.logits.i(0)?;
    let t = if temperature > 0.0 {
        temperature as f64
    } else {
        1.0
    };
    let logp = candle_nn::ops::log_softmax(&(logits / t)?, candle_core::D::Minus1)?;
    let rows = logp.to_vec2::<f32>()?;
    let mut out = vec![0.0];
    for (pos, &tok) in tokens.iter().enumerate().skip(1) {
        out.push(rows[pos - 1][tok as usize]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrl_model::TinyConfig;
    use candle_core::Device;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn model() -> TinyAgent {
        let cfg = TinyConfig {
            vocab_size: 19,
            d_model: 16,
            n_layers: 2,
            n_heads: 2,
            mlp_ratio: 2,
            max_seq: 64,
            rms_eps: 1e-5,
            pointer_markers: Vec::new(),
            pointer_segment_end: 0,
        };
        TinyAgent::new(cfg, 1, &Device::Cpu).unwrap()
    }

    #[test]
    fn sampled_logprobs_agree_with_the_full_forward_pass() {
        let model = model();
        let prompts = vec![vec![1, 2, 3], vec![4, 5, 6, 7, 8], vec![9]];
        let cfg = SamplingConfig::default();
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let gens = generate(&model, &prompts, &[18], 12, &cfg, &mut rng).unwrap();
        for (prompt, gen) in prompts.iter().zip(&gens) {
            assert!(!gen.tokens.is_empty());
            let mut seq = prompt.clone();
            seq.extend(&gen.tokens);
            let scored = score_tokens(&model, &seq, 1.0).unwrap();
            for (k, lp) in gen.logprobs.iter().enumerate() {
                let want = scored[prompt.len() + k];
                assert!(
                    (lp - want).abs() < 1e-5,
                    "token {k}: engine {lp} vs trainer {want}"
                );
            }
        }
    }

    #[test]
    fn sampling_is_seeded_and_respects_stop_and_length() {
        let model = model();
        let prompts = vec![vec![1, 2], vec![3]];
        let cfg = SamplingConfig::default();
        let run = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            generate(&model, &prompts, &[5, 6, 7], 10, &cfg, &mut rng).unwrap()
        };
        assert_eq!(run(3), run(3));
        let differs = (0..8).any(|s| run(s) != run(3));
        assert!(differs, "different seeds should give different samples");
        for gen in run(4) {
            assert!(gen.tokens.len() <= 10);
            let stops = gen.tokens.iter().filter(|t| [5, 6, 7].contains(*t)).count();
            assert_eq!(stops, usize::from(gen.stopped));
            assert_eq!(gen.stopped, [5, 6, 7].contains(gen.tokens.last().unwrap()));
        }
    }

    #[test]
    fn temperature_and_top_p_shape_the_distribution() {
        let logits = [2.0f32, 1.0, 0.0, -1.0];
        // Greedy picks the argmax and reports its temperature-1 log-prob.
        let greedy = SamplingConfig {
            temperature: 0.0,
            ..Default::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let (tok, lp) = sample_token(&logits, &greedy, &mut rng);
        assert_eq!(tok, 0);
        assert!((lp as f64 - scaled_log_softmax(&logits, 1.0)[0]).abs() < 1e-6);
        // top_p small enough keeps only the top token; its log-prob is not renormalised.
        let nucleus = SamplingConfig {
            top_p: 0.5,
            ..Default::default()
        };
        for _ in 0..50 {
            let (tok, lp) = sample_token(&logits, &nucleus, &mut rng);
            assert_eq!(tok, 0);
            assert!(lp < 0.0);
        }
        // Empirical frequencies follow softmax(logits / T).
        let hot = SamplingConfig {
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
            counts[sample_token(&logits, &hot, &mut rng).0 as usize] += 1;
        }
        for (c, p) in counts.iter().zip(&want) {
            assert!(
                (*c as f64 / n as f64 - p).abs() < 0.02,
                "{counts:?} vs {want:?}"
            );
        }
    }

    #[test]
    fn rejects_bad_settings_and_overlong_prompts() {
        let model = model();
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let bad = SamplingConfig {
            top_p: 0.0,
            ..Default::default()
        };
        assert!(generate(&model, &[vec![1]], &[], 4, &bad, &mut rng).is_err());
        let cfg = SamplingConfig::default();
        assert!(generate(&model, &[vec![1; 60]], &[], 8, &cfg, &mut rng).is_err());
        assert!(generate(&model, &[vec![]], &[], 8, &cfg, &mut rng).is_err());
    }
}
