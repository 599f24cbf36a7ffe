//! The local engine: batched, KV-cached decoding of any [`Decoder`] in this process.
//!
//! A [`Decoder`] is a model with an incremental step: feed each row what it has not yet seen,
//! get the logits at each row's last fed position. [`LocalEngine`] turns that into the
//! turn-level [`Engine`] contract: all rows of a call decode together, one batched forward per
//! decoding step, each row drawing from its own seeded stream.
//!
//! **Prefix caching.** Between calls the engine keeps each row's KV cache under the request's
//! `session`. When every request of the next call names a cached session and its prompt
//! extends what that session holds, only the new suffix (the last sampled token plus the
//! observation) is fed, as vLLM's automatic prefix caching would do; otherwise the cache is
//! rebuilt from the full prompts. Either way the logits are the same: the cache is an
//! optimisation, never a change of what is computed. A weight change drops the cache (its keys
//! and values were computed with the old weights).
//!
//! **Shared prefill.** When the cache is rebuilt, prompts share their prefill: the prefix
//! common to all of them (a chat model's system prompt and tool list) is fed once as one row and
//! forked, and a prompt that several requests repeat (a GRPO group's samples of one task) is
//! fed once and forked to each, so only the rest (at least each prompt's last token) is fed
//! per request. vLLM's prefix cache gets the same saving from shared blocks. The keys and
//! values are those of each row fed alone, up to float rounding of a different batch shape.
//!
//! **Log-probs.** By default the engine reports [`LogprobKind::TemperatureScaled`], what the
//! trainer scores. [`LocalEngine::with_logprob_kind`] makes it report `Raw` or `Processed`
//! instead, as a server with that `logprobs_mode` would: the samples are the same, only the
//! reported log-probs (and their declared kind) change. That is how tests inject a known
//! semantic mismatch.
//!
//! **Weights.** A decoder that borrows the trainer's model (`LocalEngine<&Qwen3>`) samples
//! with its current weights, and [`WeightSync::Shared`] only records the version. A decoder
//! that holds a copy of its own ([`Decoder::holds_own_weights`], e.g. a bf16 replica) refuses
//! `Shared` — the copy would silently go stale — and is refreshed with
//! [`LocalEngine::update_decoder`].

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use agentrl_model::{ConstrainedPolicy, DecodeCache, Policy, TinyAgent};

use crate::sampling::sample_token_as;
use crate::{
    Completion, Engine, FinishReason, GenerateParams, GenerateRequest, LogprobKind, WeightSync,
};

/// A policy that can be decoded incrementally with a per-row cache.
pub trait Decoder {
    type Cache;
    /// An empty cache for `rows` independent sequences.
    fn new_cache(&self, rows: usize) -> Self::Cache;
    /// Feeds `rows[b]` (possibly empty) after what the cache holds and returns, for every row
    /// that fed at least one token, the logits `[V]` at its last fed position (rows that fed
    /// nothing get `None`).
    fn decode(
        &self,
        rows: &[&[u32]],
        cache: &mut Self::Cache,
    ) -> anyhow::Result<Vec<Option<Vec<f32>>>>;
    /// Keeps only the listed rows of the cache, in that order.
    fn retain_rows(&self, cache: &mut Self::Cache, keep: &[usize]) -> anyhow::Result<()>;
    /// Longest sequence the policy accepts.
    fn max_seq(&self) -> usize;
    /// Whether the decoder samples with a copy of the trainer's weights rather than the
    /// trainer's own (see the module doc, "Weights").
    fn holds_own_weights(&self) -> bool {
        false
    }
}

impl Decoder for TinyAgent {
    type Cache = DecodeCache;

    fn new_cache(&self, rows: usize) -> DecodeCache {
        self.new_decode_cache(rows)
    }

    fn decode(
        &self,
        rows: &[&[u32]],
        cache: &mut DecodeCache,
    ) -> anyhow::Result<Vec<Option<Vec<f32>>>> {
        Ok(self.decode_last(rows, cache)?)
    }

    fn retain_rows(&self, cache: &mut DecodeCache, keep: &[usize]) -> anyhow::Result<()> {
        Ok(cache.retain_rows(keep)?)
    }

    fn max_seq(&self) -> usize {
        self.config().max_seq
    }
}

/// The constrained policy decodes with the bias row of each row's last fed token, the same
/// bias its trainer-side forward adds (see `agentrl_model::constrained`).
impl<P: Policy + Decoder> Decoder for ConstrainedPolicy<P> {
    type Cache = P::Cache;

    fn new_cache(&self, rows: usize) -> Self::Cache {
        self.inner().new_cache(rows)
    }

    fn decode(
        &self,
        rows: &[&[u32]],
        cache: &mut Self::Cache,
    ) -> anyhow::Result<Vec<Option<Vec<f32>>>> {
        let mut out = self.inner().decode(rows, cache)?;
        if let Some(bias) = self.bias() {
            for (row, logits) in rows.iter().zip(out.iter_mut()) {
                let (Some(&prev), Some(logits)) = (row.last(), logits.as_mut()) else {
                    continue;
                };
                for (x, b) in logits.iter_mut().zip(bias.row(prev)) {
                    *x += b;
                }
            }
        }
        Ok(out)
    }

    fn retain_rows(&self, cache: &mut Self::Cache, keep: &[usize]) -> anyhow::Result<()> {
        self.inner().retain_rows(cache, keep)
    }

    fn max_seq(&self) -> usize {
        Decoder::max_seq(self.inner())
    }

    fn holds_own_weights(&self) -> bool {
        self.inner().holds_own_weights()
    }
}

impl<D: Decoder + ?Sized> Decoder for &D {
    type Cache = D::Cache;
    fn new_cache(&self, rows: usize) -> Self::Cache {
        (**self).new_cache(rows)
    }
    fn decode(
        &self,
        rows: &[&[u32]],
        cache: &mut Self::Cache,
    ) -> anyhow::Result<Vec<Option<Vec<f32>>>> {
        (**self).decode(rows, cache)
    }
    fn retain_rows(&self, cache: &mut Self::Cache, keep: &[usize]) -> anyhow::Result<()> {
        (**self).retain_rows(cache, keep)
    }
    fn max_seq(&self) -> usize {
        (**self).max_seq()
    }
    fn holds_own_weights(&self) -> bool {
        (**self).holds_own_weights()
    }
}

/// A cache ready for a call, and what each of its rows still has to feed.
type Prepared<C> = (CachedRows<C>, Vec<Vec<u32>>);

/// The rows a cache holds between calls.
struct CachedRows<C> {
    cache: C,
    /// Per cache row: its session and the tokens it has been fed.
    rows: Vec<(u64, Vec<u32>)>,
}

/// Turn-level sampling over a [`Decoder`] in this process (see the module doc for prefix
/// caching, log-prob kinds and weights).
pub struct LocalEngine<D: Decoder> {
    decoder: D,
    cached: Option<CachedRows<D::Cache>>,
    version: u64,
    logprob_kind: LogprobKind,
}

impl<D: Decoder> LocalEngine<D> {
    /// An engine reporting [`LogprobKind::TemperatureScaled`] log-probs, at weight version 0.
    pub fn new(decoder: D) -> Self {
        Self {
            decoder,
            cached: None,
            version: 0,
            logprob_kind: LogprobKind::TemperatureScaled,
        }
    }

    /// Reports log-probs of `kind` (vLLM's `logprobs_mode`) instead of the temperature-scaled
    /// ones the trainer scores; the sampled tokens do not change.
    pub fn with_logprob_kind(mut self, kind: LogprobKind) -> Self {
        self.logprob_kind = kind;
        self
    }

    /// The kind of log-prob every completion reports.
    pub fn logprob_kind(&self) -> LogprobKind {
        self.logprob_kind
    }

    pub fn decoder(&self) -> &D {
        &self.decoder
    }

    /// Changes the decoder's weights with `update` (e.g. refreshes a replica from the
    /// trainer), then drops the prefix cache and samples as weight version `version`.
    pub fn update_decoder(
        &mut self,
        version: u64,
        update: impl FnOnce(&mut D) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        self.cached = None;
        update(&mut self.decoder)?;
        self.version = version;
        Ok(())
    }

    /// Reuses the cache when every request extends a cached session; returns the cache, each
    /// row's tokens already fed, and what each row still has to feed.
    fn prepare(&mut self, requests: &[GenerateRequest]) -> anyhow::Result<Prepared<D::Cache>> {
        if let Some(mut cached) = self.cached.take() {
            let mut keep = Vec::with_capacity(requests.len());
            for req in requests {
                let Some(session) = req.session else { break };
                let Some(row) = cached.rows.iter().position(|(s, fed)| {
                    *s == session && fed.len() < req.prompt.len() && req.prompt.starts_with(fed)
                }) else {
                    break;
                };
                keep.push(row);
            }
            let mut distinct = keep.clone();
            distinct.sort_unstable();
            distinct.dedup();
            if keep.len() == requests.len() && distinct.len() == keep.len() {
                self.decoder.retain_rows(&mut cached.cache, &keep)?;
                let rows: Vec<(u64, Vec<u32>)> = keep
                    .iter()
                    .map(|&r| std::mem::take(&mut cached.rows[r]))
                    .collect();
                let feeds = rows
                    .iter()
                    .zip(requests)
                    .map(|((_, fed), req)| req.prompt[fed.len()..].to_vec())
                    .collect();
                return Ok((
                    CachedRows {
                        cache: cached.cache,
                        rows,
                    },
                    feeds,
                ));
            }
        }
        self.cold_start(requests)
    }

    /// A fresh cache for `requests` with their shared prefill done (see the module doc,
    /// "Shared prefill"): the prefix common to every prompt is fed once and forked, then each
    /// distinct prompt's own middle is fed once and forked to the requests that repeat it;
    /// what is left to feed is the rest of each prompt (at least its last token, whose logits
    /// the first draw needs).
    fn cold_start(&self, requests: &[GenerateRequest]) -> anyhow::Result<Prepared<D::Cache>> {
        let plan = SharedPrefill::of(requests.iter().map(|r| r.prompt.as_slice()));
        let mut cache = self.decoder.new_cache(plan.first_rows());
        if plan.common > 0 {
            let prefix = &requests[0].prompt[..plan.common];
            self.decoder.decode(&[prefix], &mut cache)?;
            self.decoder
                .retain_rows(&mut cache, &vec![0; plan.distinct.len()])?;
        }
        let mut fed_before = plan.common;
        if plan.forks_repeats() {
            let middles: Vec<&[u32]> = plan
                .distinct
                .iter()
                .map(|&r| {
                    let prompt = &requests[r].prompt;
                    &prompt[plan.common..prompt.len() - 1]
                })
                .collect();
            if middles.iter().any(|m| !m.is_empty()) {
                self.decoder.decode(&middles, &mut cache)?;
            }
            self.decoder.retain_rows(&mut cache, &plan.of_request)?;
            fed_before = usize::MAX;
        }
        let mut rows = Vec::with_capacity(requests.len());
        let mut feeds = Vec::with_capacity(requests.len());
        for r in requests {
            let fed = fed_before.min(r.prompt.len() - 1);
            rows.push((r.session.unwrap_or(u64::MAX), r.prompt[..fed].to_vec()));
            feeds.push(r.prompt[fed..].to_vec());
        }
        Ok((CachedRows { cache, rows }, feeds))
    }
}

/// Fewest tokens of common prefix worth a prefill of their own (a one-row forward, then a copy
/// of its keys and values into every row).
const MIN_SHARED_PREFIX: usize = 16;

/// How a cold call's prompts share their prefill: the prefix common to all of them, and which
/// requests repeat the same prompt (a GRPO group samples one prompt several times).
#[derive(Debug, PartialEq, Eq)]
struct SharedPrefill {
    /// Tokens every prompt starts with that are fed once (0 = none), always short of every
    /// prompt's last token.
    common: usize,
    /// The first request of each distinct prompt, in order of first appearance.
    distinct: Vec<usize>,
    /// For each request, the index in `distinct` of its prompt.
    of_request: Vec<usize>,
}

impl SharedPrefill {
    fn of<'a>(prompts: impl Iterator<Item = &'a [u32]>) -> Self {
        let prompts: Vec<&[u32]> = prompts.collect();
        let mut distinct: Vec<usize> = Vec::new();
        let mut of_request = Vec::with_capacity(prompts.len());
        for (i, prompt) in prompts.iter().enumerate() {
            match distinct.iter().position(|&d| prompts[d] == *prompt) {
                Some(j) => of_request.push(j),
                None => {
                    of_request.push(distinct.len());
                    distinct.push(i);
                }
            }
        }
        let common = match distinct.split_first() {
            Some((&first, rest)) if !rest.is_empty() => {
                let first = prompts[first];
                let shared = rest.iter().fold(first.len(), |len, &d| {
                    first[..len]
                        .iter()
                        .zip(prompts[d])
                        .take_while(|(a, b)| a == b)
                        .count()
                });
                let shortest = distinct.iter().map(|&d| prompts[d].len()).min();
                shared.min(shortest.unwrap_or(1).saturating_sub(1))
            }
            _ => 0,
        };
        Self {
            common: if common >= MIN_SHARED_PREFIX {
                common
            } else {
                0
            },
            distinct,
            of_request,
        }
    }

    /// Some prompt is requested more than once.
    fn forks_repeats(&self) -> bool {
        self.distinct.len() < self.of_request.len()
    }

    /// Rows of the fresh cache before any fork.
    fn first_rows(&self) -> usize {
        if self.common > 0 {
            1
        } else if self.forks_repeats() {
            self.distinct.len()
        } else {
            self.of_request.len()
        }
    }
}

/// One token for each live row (`live`, increasing), drawn in parallel on the current rayon
/// pool: at a 150k vocabulary the sampler costs more than the decode step, and each row draws
/// from its own seeded generator, so the tokens do not depend on the thread count.
fn draw_live_rows(
    logits: &[Option<Vec<f32>>],
    live: &[usize],
    rngs: &mut [ChaCha8Rng],
    params: &GenerateParams,
    kind: LogprobKind,
) -> Vec<anyhow::Result<(u32, f32)>> {
    use rayon::prelude::*;
    let mut is_live = vec![false; rngs.len()];
    for &i in live {
        is_live[i] = true;
    }
    rngs.iter_mut()
        .enumerate()
        .filter(|(i, _)| is_live[*i])
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|(i, rng)| {
            let row_logits = logits
                .get(i)
                .and_then(Option::as_ref)
                .ok_or_else(|| anyhow::anyhow!("generate: row {i} fed nothing"))?;
            sample_token_as(row_logits, &params.sampling, kind, rng)
        })
        .collect()
}

impl<D: Decoder> Engine for LocalEngine<D> {
    fn generate(
        &mut self,
        requests: &[GenerateRequest],
        params: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>> {
        params.sampling.validate()?;
        anyhow::ensure!(params.max_tokens > 0, "generate: max_tokens must be > 0");
        let max_seq = self.decoder.max_seq();
        for (i, r) in requests.iter().enumerate() {
            anyhow::ensure!(!r.prompt.is_empty(), "generate: prompt {i} is empty");
            anyhow::ensure!(
                r.prompt.len() < max_seq,
                "generate: prompt {i} ({} tokens) leaves no room within the model's max_seq {max_seq}",
                r.prompt.len()
            );
        }
        let mut out: Vec<Completion> = requests
            .iter()
            .map(|_| Completion {
                tokens: Vec::new(),
                logprobs: Vec::new(),
                finish: FinishReason::Length,
                logprob_kind: self.logprob_kind,
                weight_version: self.version,
            })
            .collect();
        if requests.is_empty() {
            return Ok(out);
        }
        let (mut cached, mut feeds) = self.prepare(requests)?;
        let mut rngs: Vec<ChaCha8Rng> = requests
            .iter()
            .map(|r| ChaCha8Rng::seed_from_u64(r.seed))
            .collect();
        // `live[j]` = request index of cache row j; finished rows stay in the cache (they may
        // be continued next call) but feed nothing more.
        let mut live: Vec<usize> = (0..requests.len()).collect();
        while !live.is_empty() {
            let mut row_feeds: Vec<&[u32]> = vec![&[]; requests.len()];
            for &i in &live {
                row_feeds[i] = &feeds[i];
            }
            let logits = self.decoder.decode(&row_feeds, &mut cached.cache)?;
            let draws = draw_live_rows(&logits, &live, &mut rngs, params, self.logprob_kind);
            let mut still = Vec::with_capacity(live.len());
            for (&i, draw) in live.iter().zip(draws) {
                let fed = std::mem::take(&mut feeds[i]);
                cached.rows[i].1.extend(&fed);
                let (token, logprob) = draw.map_err(|e| {
                    e.context(format!(
                        "generate: row {i}, completion token {}",
                        out[i].tokens.len()
                    ))
                })?;
                let completion = &mut out[i];
                completion.tokens.push(token);
                completion.logprobs.push(logprob);
                let total = requests[i].prompt.len() + completion.tokens.len();
                if params.stop.contains(&token) {
                    completion.finish = FinishReason::Stop;
                } else if completion.tokens.len() < params.max_tokens && total < max_seq {
                    feeds[i] = vec![token];
                    still.push(i);
                }
            }
            live = still;
        }
        self.cached = Some(cached);
        Ok(out)
    }

    fn max_seq(&self) -> usize {
        self.decoder.max_seq()
    }

    fn sync_weights(&mut self, sync: &WeightSync) -> anyhow::Result<()> {
        match sync {
            WeightSync::Shared { .. } if self.decoder.holds_own_weights() => anyhow::bail!(
                "sync_weights: this local engine samples with its own copy of the weights, which \
                 a shared sync would leave stale; refresh it with LocalEngine::update_decoder"
            ),
            WeightSync::Shared { version } => {
                // The trainer changed the weights in place: cached keys and values are stale.
                self.cached = None;
                self.version = *version;
                Ok(())
            }
            other => anyhow::bail!(
                "the local engine reads the trainer's weights in place; it cannot load {other:?}"
            ),
        }
    }

    fn weight_version(&self) -> u64 {
        self.version
    }
}
