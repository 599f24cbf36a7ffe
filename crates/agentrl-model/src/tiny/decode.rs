//! TinyAgent's incremental decoding as explicit loops: [`DecodeCache`] (each row's keys,
//! values, position and pointer state) and [`TinyAgent::decode_last`], which feeds each row its
//! new tokens and returns the logits at each row's last fed position, what a sampler draws from.
//!
//! Data flow: the local engine (`agentrl-engine`) makes one cache per batch of episodes
//! ([`TinyAgent::new_decode_cache`]), calls [`TinyAgent::decode_last`] once for the prompts and
//! once per sampled token, and drops finished rows with [`DecodeCache::retain_rows`]. The
//! training forward never uses it.
//!
//! Why not candle's ops here: a decoding step of the default run is 64 rows of one token through
//! two blocks of width 64; through candle each of its ~40 ops allocated (and the kernel zeroed)
//! a fresh output, and a step's padded `[B, H, 1, slots]` scores went through libm's `expf`
//! (`perf` on `agentrl bench sampling`: fresh pages 23%, `memset` 8%, `expf` 6%, the GEMM 21%).
//! Here the weights are read in place from the model's variables (no copy), the working buffers
//! are kept from one call to the next, every projection is one `gemm` call over all the rows'
//! new tokens, and attention reads each row's own cache ([`crate::fused`]'s `SequenceKv`), so a
//! ragged batch needs no padding slots or mask. Rows are independent, so the batch runs as
//! chunks of rows, one per rayon task. Only the last position's logits are computed: the LM head
//! and the pointer head run on one hidden state per row.
//!
//! The candle path ([`TinyAgent::forward_step_ragged`] over a [`KvCache`]) stays for other
//! devices; the tests tie both to the full forward ([`TinyAgent::forward`]).

use std::sync::{Arc, Mutex};

use candle_core::{CpuStorage, Storage, Tensor};
use rayon::prelude::*;

use super::pointer::SpanScan;
use super::trunk::{embed, fit, project};
use super::{KvCache, TinyAgent, TinyConfig};
use crate::fused::{gelu_forward, rms_norm_forward, SequenceKv};

/// The decoding state of a batch of independent sequences.
pub struct DecodeCache {
    state: State,
    /// Where the explicit path's key and value buffers go back to when a row is dropped (the
    /// model's [`KvPool`]).
    pool: Arc<KvPool>,
}

/// Key and value buffers of finished sequences, emptied but with their capacity, for the next
/// cache of the same model: a rollout makes a cache of 64 sequences per call, and buffers
/// allocated afresh each time are pages the kernel must fault in and zero again. Holds at most
/// what the largest batch so far used.
pub(super) type KvPool = Mutex<Vec<SequenceKv>>;

impl Drop for DecodeCache {
    fn drop(&mut self) {
        if let State::Explicit(rows) = &mut self.state {
            give_back(&self.pool, rows.drain(..));
        }
    }
}

/// Empties `rows`' key and value buffers into `pool`.
fn give_back(pool: &KvPool, rows: impl Iterator<Item = RowState>) {
    if let Ok(mut pool) = pool.lock() {
        for mut kv in rows.flat_map(|row| row.layers) {
            kv.clear();
            pool.push(kv);
        }
    }
}

enum State {
    /// The explicit path (CPU): one [`RowState`] per sequence.
    Explicit(Vec<RowState>),
    /// candle's path (other devices).
    Candle(KvCache),
}

/// One sequence's state in the explicit path.
#[derive(Debug, Clone)]
struct RowState {
    /// Tokens fed so far (= the next position).
    position: usize,
    /// Per layer.
    layers: Vec<SequenceKv>,
    scan: SpanScan,
    /// The candidate spans' encodings `[K, d]` once the segment has ended
    /// ([`TinyAgent::encode_spans`]); zero rows for absent candidates.
    spans: Option<Vec<f32>>,
}

impl DecodeCache {
    /// Sequences held.
    pub fn rows(&self) -> usize {
        match &self.state {
            State::Explicit(rows) => rows.len(),
            State::Candle(cache) => cache.rows(),
        }
    }

    /// Tokens row `row` has fed (its next position).
    pub fn position(&self, row: usize) -> usize {
        match &self.state {
            State::Explicit(rows) => rows[row].position,
            State::Candle(cache) => cache.position(row),
        }
    }

    /// Keeps only the rows listed in `keep`, in that order (e.g. to drop finished episodes).
    pub fn retain_rows(&mut self, keep: &[usize]) -> candle_core::Result<()> {
        match &mut self.state {
            State::Explicit(rows) => {
                if let Some(&bad) = keep.iter().find(|&&row| row >= rows.len()) {
                    candle_core::bail!("retain_rows: row {bad} out of range {}", rows.len());
                }
                // A row listed twice is copied for all but its last use; every other row moves.
                let mut uses = vec![0usize; rows.len()];
                for &row in keep {
                    uses[row] += 1;
                }
                let mut taken: Vec<Option<RowState>> = rows.drain(..).map(Some).collect();
                for &row in keep {
                    uses[row] -= 1;
                    let state = if uses[row] == 0 {
                        taken[row].take()
                    } else {
                        taken[row].clone()
                    };
                    rows.extend(state);
                }
                give_back(&self.pool, taken.into_iter().flatten());
                Ok(())
            }
            State::Candle(cache) => cache.retain_rows(keep),
        }
    }
}

/// The model's weights, borrowed from its variables' storage for one call.
struct Weights<'a> {
    tok_emb: &'a [f32],
    pos_emb: &'a [f32],
    blocks: Vec<[&'a [f32]; 6]>,
    norm_final: &'a [f32],
    lm_head: &'a [f32],
    /// The pointer head's query and key projections.
    pointer: Option<(&'a [f32], &'a [f32])>,
}

/// Indices into a block's weights, in [`TinyAgent::decode_tensors`]'s order.
const NORM_ATTN: usize = 0;
const QKV: usize = 1;
const ATTN_OUT: usize = 2;
const NORM_MLP: usize = 3;
const MLP_UP: usize = 4;
const MLP_DOWN: usize = 5;

/// A chunk's working buffers, kept between calls (the model holds a pool of them).
#[derive(Default)]
pub(super) struct Scratch {
    x: Vec<f32>,
    normed: Vec<f32>,
    qkv: Vec<f32>,
    ctx: Vec<f32>,
    up: Vec<f32>,
    act: Vec<f32>,
    scores: Vec<f32>,
    last: Vec<f32>,
    logits: Vec<f32>,
    query: Vec<f32>,
    keys: Vec<f32>,
}

/// The pool of [`Scratch`] buffers a model keeps for its decoding calls.
pub(super) type ScratchPool = Mutex<Vec<Scratch>>;

/// A call's new tokens are split into about this many chunks of rows (enough for every core of
/// a small machine), each with at least [`MIN_CHUNK_TOKENS`] (fewer rows per GEMM cost more in
/// per-call overhead than the split gains) and at most [`MAX_CHUNK_TOKENS`] (a chunk's
/// activations, about 16 floats per token and unit of `d_model`, stay in a core's L2 cache
/// from op to op).
const CHUNKS: usize = 8;
const MIN_CHUNK_TOKENS: usize = 32;
const MAX_CHUNK_TOKENS: usize = 512;

impl TinyAgent {
    /// An empty decoding state for `rows` sequences: the explicit path on the CPU, candle's
    /// elsewhere.
    pub fn new_decode_cache(&self, rows: usize) -> DecodeCache {
        let pool = Arc::clone(&self.kv_pool);
        let state = if self.device.is_cpu() {
            let mut spare = pool.lock().map(|mut spare| std::mem::take(&mut *spare));
            let mut layer = || spare.as_mut().ok().and_then(Vec::pop).unwrap_or_default();
            let states = (0..rows)
                .map(|_| RowState {
                    position: 0,
                    layers: (0..self.cfg.n_layers).map(|_| layer()).collect(),
                    scan: SpanScan::new(&self.cfg),
                    spans: None,
                })
                .collect();
            if let (Ok(spare), Ok(mut pool)) = (spare, pool.lock()) {
                pool.extend(spare);
            }
            State::Explicit(states)
        } else {
            State::Candle(KvCache::new(&self.cfg, rows))
        };
        DecodeCache { state, pool }
    }

    /// Feeds `rows[b]` (possibly empty) after what `cache` holds and returns, for every row that
    /// fed at least one token, the logits `[V]` at its last fed position (`None` for the rest).
    pub fn decode_last(
        &self,
        rows: &[&[u32]],
        cache: &mut DecodeCache,
    ) -> candle_core::Result<Vec<Option<Vec<f32>>>> {
        if rows.len() != cache.rows() {
            candle_core::bail!(
                "decode: {} rows given but the cache holds {}",
                rows.len(),
                cache.rows()
            );
        }
        if rows.iter().all(|r| r.is_empty()) {
            candle_core::bail!("decode: nothing to feed");
        }
        match &mut cache.state {
            State::Candle(kv) => self.decode_last_candle(rows, kv),
            State::Explicit(states) => self.decode_last_explicit(rows, states),
        }
    }

    /// candle's path: the ragged forward over all fed positions, then each row's last one.
    fn decode_last_candle(
        &self,
        rows: &[&[u32]],
        cache: &mut KvCache,
    ) -> candle_core::Result<Vec<Option<Vec<f32>>>> {
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

    fn decode_last_explicit(
        &self,
        rows: &[&[u32]],
        states: &mut [RowState],
    ) -> candle_core::Result<Vec<Option<Vec<f32>>>> {
        let cfg = &self.cfg;
        for (row, (tokens, state)) in rows.iter().zip(states.iter()).enumerate() {
            if state.position + tokens.len() > cfg.max_seq {
                candle_core::bail!(
                    "decode: row {row} would reach position {} > max_seq {}",
                    state.position + tokens.len(),
                    cfg.max_seq
                );
            }
            if let Some(&bad) = tokens.iter().find(|&&id| id as usize >= cfg.vocab_size) {
                candle_core::bail!(
                    "decode: row {row}: token id {bad} is outside the vocabulary ({})",
                    cfg.vocab_size
                );
            }
        }
        if self.pointer.is_some() {
            self.scan_and_encode(rows, states)?;
        }
        // Chunks of consecutive rows that feed something, each with up to `budget` new tokens
        // (a longer row is a chunk of its own). The budget depends on the feeds only, never on
        // the thread count, so neither do the chunks' GEMM shapes nor the logits.
        let total: usize = rows.iter().map(|r| r.len()).sum();
        let budget = total
            .div_ceil(CHUNKS)
            .clamp(MIN_CHUNK_TOKENS, MAX_CHUNK_TOKENS);
        let mut chunks: Vec<Vec<(usize, &[u32], &mut RowState)>> = Vec::new();
        let mut in_chunk = 0;
        for (row, (tokens, state)) in rows.iter().zip(states.iter_mut()).enumerate() {
            if tokens.is_empty() {
                continue;
            }
            if chunks.is_empty() || in_chunk + tokens.len() > budget {
                chunks.push(Vec::new());
                in_chunk = 0;
            }
            in_chunk += tokens.len();
            if let Some(chunk) = chunks.last_mut() {
                chunk.push((row, tokens, state));
            }
        }
        let guards: Vec<_> = self
            .decode_tensors()
            .into_iter()
            .map(|t| t.storage_and_layout())
            .collect();
        let mut slices = Vec::with_capacity(guards.len());
        for (storage, layout) in &guards {
            let (Storage::Cpu(CpuStorage::F32(data)), Some((start, end))) =
                (&**storage, layout.contiguous_offsets())
            else {
                candle_core::bail!("decode: the weights must be contiguous f32 on the CPU");
            };
            slices.push(&data[start..end]);
        }
        let weights = self.weights_from(&slices);
        let pool = &self.decode_scratch;
        let logits: Vec<Vec<(usize, Vec<f32>)>> = chunks
            .into_par_iter()
            .map(|mut chunk| {
                let mut scratch = pool
                    .lock()
                    .ok()
                    .and_then(|mut spare| spare.pop())
                    .unwrap_or_default();
                let out = decode_chunk(&weights, cfg, &mut chunk, &mut scratch);
                if let Ok(mut spare) = pool.lock() {
                    spare.push(scratch);
                }
                out
            })
            .collect();
        let mut result = vec![None; rows.len()];
        for (row, row_logits) in logits.into_iter().flatten() {
            result[row] = Some(row_logits);
        }
        Ok(result)
    }

    /// Feeds the new tokens to each row's span scan and encodes the candidate spans of rows
    /// whose segment has just ended (once per row), as the candle path's pointer step does.
    fn scan_and_encode(&self, rows: &[&[u32]], states: &mut [RowState]) -> candle_core::Result<()> {
        let mut newly_ended = Vec::new();
        for (row, (tokens, state)) in rows.iter().zip(states.iter_mut()).enumerate() {
            for (j, &token) in tokens.iter().enumerate() {
                state.scan.feed(token, state.position + j, &self.cfg);
            }
            if state.spans.is_none() && state.scan.segment_end.is_some() {
                newly_ended.push(row);
            }
        }
        if newly_ended.is_empty() {
            return Ok(());
        }
        let scans: Vec<SpanScan> = newly_ended
            .iter()
            .map(|&row| states[row].scan.clone())
            .collect();
        let encoded = self.encode_spans(&scans)?.to_vec3::<f32>()?;
        for (&row, spans) in newly_ended.iter().zip(encoded) {
            states[row].spans = Some(spans.into_iter().flatten().collect());
        }
        Ok(())
    }

    /// The tensors explicit decoding reads: the trunk's ([`TinyAgent::trunk_tensors`]: the
    /// embeddings, then each block's six weights in `NORM_ATTN … MLP_DOWN` order), the final
    /// norm, the LM head, then the pointer's query and key projections when present.
    fn decode_tensors(&self) -> Vec<&Tensor> {
        let mut tensors = self.trunk_tensors();
        tensors.extend([&self.norm_final, &self.lm_head]);
        if let Some((query, key)) = &self.pointer {
            tensors.extend([query, key]);
        }
        tensors
    }

    /// [`Weights`] over the slices of [`TinyAgent::decode_tensors`], in its order.
    fn weights_from<'a>(&self, slices: &[&'a [f32]]) -> Weights<'a> {
        let layers = self.cfg.n_layers;
        let blocks = (0..layers)
            .map(|l| std::array::from_fn(|i| slices[2 + 6 * l + i]))
            .collect();
        let after = 2 + 6 * layers;
        Weights {
            tok_emb: slices[0],
            pos_emb: slices[1],
            blocks,
            norm_final: slices[after],
            lm_head: slices[after + 1],
            pointer: self
                .pointer
                .as_ref()
                .map(|_| (slices[after + 2], slices[after + 3])),
        }
    }
}

/// One chunk of rows through the trunk and the heads: appends every new token's keys and
/// values to its row, and returns each row's logits at its last fed position.
fn decode_chunk(
    w: &Weights,
    cfg: &TinyConfig,
    chunk: &mut [(usize, &[u32], &mut RowState)],
    s: &mut Scratch,
) -> Vec<(usize, Vec<f32>)> {
    let d = cfg.d_model;
    let hidden = cfg.mlp_ratio * d;
    let v = cfg.vocab_size;
    let eps = cfg.rms_eps as f32;
    let heads = cfg.n_heads;
    let scale = 1.0 / (cfg.head_dim() as f32).sqrt();
    let n: usize = chunk.iter().map(|(_, tokens, _)| tokens.len()).sum();
    let x = fit(&mut s.x, n * d);
    let mut offset = 0;
    for (_, tokens, state) in chunk.iter() {
        for (j, &id) in tokens.iter().enumerate() {
            let out = &mut x[(offset + j) * d..][..d];
            embed(out, w.tok_emb, w.pos_emb, id, state.position + j);
        }
        offset += tokens.len();
    }
    for (layer, block) in w.blocks.iter().enumerate() {
        rms_norm_forward(
            &s.x,
            block[NORM_ATTN],
            eps,
            fit(&mut s.normed, n * d),
            false,
        );
        project(
            fit(&mut s.qkv, n * 3 * d),
            &s.normed,
            block[QKV],
            n,
            3 * d,
            false,
        );
        let ctx = fit(&mut s.ctx, n * d);
        let mut offset = 0;
        for (_, tokens, state) in chunk.iter_mut() {
            let kv = &mut state.layers[layer];
            let start = kv.len();
            kv.reserve(tokens.len(), d, cfg.max_seq);
            for j in 0..tokens.len() {
                let qkv = &s.qkv[(offset + j) * 3 * d..][..3 * d];
                kv.push(&qkv[d..2 * d], &qkv[2 * d..]);
            }
            for j in 0..tokens.len() {
                let q = &s.qkv[(offset + j) * 3 * d..][..d];
                let out = &mut ctx[(offset + j) * d..][..d];
                kv.attend(q, start + j + 1, heads, scale, out, &mut s.scores);
            }
            offset += tokens.len();
        }
        project(&mut s.x, &s.ctx, block[ATTN_OUT], n, d, true);
        rms_norm_forward(&s.x, block[NORM_MLP], eps, fit(&mut s.normed, n * d), false);
        project(
            fit(&mut s.up, n * hidden),
            &s.normed,
            block[MLP_UP],
            n,
            hidden,
            false,
        );
        gelu_forward(&s.up, fit(&mut s.act, n * hidden), false);
        project(&mut s.x, &s.act, block[MLP_DOWN], n, d, true);
    }
    // The heads at each row's last fed position.
    let rows = chunk.len();
    let last = fit(&mut s.last, rows * d);
    let mut offset = 0;
    for ((_, tokens, _), h) in chunk.iter().zip(last.chunks_exact_mut(d)) {
        offset += tokens.len();
        h.copy_from_slice(&s.x[(offset - 1) * d..offset * d]);
    }
    rms_norm_forward(
        &s.last,
        w.norm_final,
        eps,
        fit(&mut s.normed, rows * d),
        false,
    );
    let logits = fit(&mut s.logits, rows * v);
    project(logits, &s.normed, w.lm_head, rows, v, false);
    let mut out = Vec::with_capacity(rows);
    for (i, (row, tokens, state)) in chunk.iter_mut().enumerate() {
        state.position += tokens.len();
        let mut row_logits = s.logits[i * v..(i + 1) * v].to_vec();
        if let Some((w_query, w_key)) = w.pointer {
            let h = &s.normed[i * d..(i + 1) * d];
            point(
                cfg,
                state,
                h,
                (w_query, w_key),
                (&mut s.query, &mut s.keys),
                &mut row_logits,
            );
        }
        out.push((*row, row_logits));
    }
    out
}

/// The pointer head at a row's last fed position (`state.position` already counts it): where
/// the pointer applies, each listed candidate's marker logit becomes
/// `(W_q h) · (W_k m_k) / sqrt(d)` (see [`TinyAgent::apply_pointer`]).
fn point(
    cfg: &TinyConfig,
    state: &RowState,
    h: &[f32],
    (w_query, w_key): (&[f32], &[f32]),
    (query, keys): (&mut Vec<f32>, &mut Vec<f32>),
    logits: &mut [f32],
) {
    let d = cfg.d_model;
    let (Some(spans), true) = (&state.spans, state.scan.applies_at(state.position - 1)) else {
        return;
    };
    let query = fit(query, d);
    project(query, h, w_query, 1, d, false);
    let k = cfg.pointer_markers.len();
    let keys = fit(keys, k * d);
    project(keys, spans, w_key, k, d, false);
    let scale = 1.0 / (d as f32).sqrt();
    for ((span, &marker), key) in state
        .scan
        .spans
        .iter()
        .zip(&cfg.pointer_markers)
        .zip(keys.chunks_exact(d))
    {
        if span.is_empty() {
            continue;
        }
        let score: f32 = query.iter().zip(key).map(|(a, b)| a * b).sum();
        logits[marker as usize] = score * scale;
    }
}
