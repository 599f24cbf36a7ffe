//! TinyAgent's pointer head: finds the candidate spans `Ck … Ck` in the task observation,
//! encodes each span on its own, and replaces the logit of marker `Ck` by a pointer score from
//! the end of the observation on (the why is in the [`super`] module doc, "Pointer head").
//!
//! Data flow: token ids → [`SpanScan`] (the same token-by-token scan in the training forward and
//! the incremental path, so both find the same spans) → `encode_spans` (`[rows, K, d]`) →
//! `pointer_gate` (where the pointer applies) → `apply_pointer` (logits with the marker columns
//! replaced). The incremental path keeps each row's scan and encoding in a [`PointerRow`] of the
//! [`KvCache`] (`pointer_step`).

use candle_core::Tensor;

use super::block::dense;
use super::{KvCache, TinyAgent, TinyConfig};

/// Reads one row's tokens in order and collects the candidate spans `Ck … Ck` (the tokens
/// between the two markers) before the segment end. The training forward and the incremental
/// path both feed it token by token, so they always agree on the spans.
// Public for the integration tests (tests/model/tiny_agent.rs).
#[doc(hidden)]
#[derive(Debug, Clone, Default)]
pub struct SpanScan {
    open: Option<usize>,
    /// Position of the segment-end token, once seen.
    pub(super) segment_end: Option<usize>,
    /// Interior tokens of each candidate's span (the last span wins if a marker repeats).
    pub spans: Vec<Vec<u32>>,
}

impl SpanScan {
    /// An empty scan for `cfg`'s pointer markers.
    pub fn new(cfg: &TinyConfig) -> Self {
        Self {
            open: None,
            segment_end: None,
            spans: vec![Vec::new(); cfg.pointer_markers.len()],
        }
    }

    /// Reads the token at `position`.
    pub fn feed(&mut self, token: u32, position: usize, cfg: &TinyConfig) {
        if self.segment_end.is_some() {
            return;
        }
        if token == cfg.pointer_segment_end {
            self.segment_end = Some(position);
            self.open = None;
            return;
        }
        let marker = cfg.pointer_markers.iter().position(|&m| m == token);
        match (self.open, marker) {
            (Some(k), Some(m)) if m == k => self.open = None,
            (Some(k), _) => self.spans[k].push(token),
            (None, Some(m)) => {
                self.open = Some(m);
                self.spans[m].clear();
            }
            (None, None) => {}
        }
    }

    /// Whether pointer logits apply at `position`.
    pub(super) fn applies_at(&self, position: usize) -> bool {
        self.segment_end.is_some_and(|end| position >= end)
    }
}

/// One row's pointer state in the incremental path: the scan and, once the segment has ended,
/// the encoded candidate spans `[K, d]` (zero rows for absent candidates).
#[derive(Debug, Clone)]
pub(super) struct PointerRow {
    pub(super) scan: SpanScan,
    pub(super) encoded: Option<Tensor>,
}

impl TinyAgent {
    /// Encodes the candidate spans of each row on their own: every distinct span is run
    /// through the blocks as a separate sequence (positions from 0) and its final hidden states
    /// are pooled (`cfg.pointer_pool`: the mean, or half the mean and half the last position),
    /// so a candidate's key depends on its content only, never on where it sits in the prompt
    /// or which candidates come before it. Returns `[rows, K, d]`, zero rows for absent
    /// candidates.
    // Public for the integration tests (tests/model/tiny_agent.rs).
    #[doc(hidden)]
    pub fn encode_spans(&self, scans: &[SpanScan]) -> candle_core::Result<Tensor> {
        let (k, d) = (self.cfg.pointer_markers.len(), self.cfg.d_model);
        // Row 0 of the table is the zero encoding of absent candidates; distinct spans follow.
        let mut distinct: Vec<&[u32]> = Vec::new();
        let mut lookup: std::collections::HashMap<&[u32], u32> = Default::default();
        let mut index = Vec::with_capacity(scans.len() * k);
        for span in scans.iter().flat_map(|scan| &scan.spans) {
            if span.is_empty() {
                index.push(0);
                continue;
            }
            let next = distinct.len() as u32 + 1;
            index.push(*lookup.entry(span.as_slice()).or_insert_with(|| {
                distinct.push(span.as_slice());
                next
            }));
        }
        let mut table = Tensor::zeros((1, d), candle_core::DType::F32, &self.device)?;
        if !distinct.is_empty() {
            let longest = distinct.iter().map(|s| s.len()).max().unwrap_or(1);
            if longest > self.cfg.max_seq {
                candle_core::bail!(
                    "TinyAgent pointer head: a candidate span of {longest} tokens exceeds max_seq {}",
                    self.cfg.max_seq
                );
            }
            let n = distinct.len();
            let mut ids = vec![0u32; n * longest];
            let mut pool = vec![0f32; n * longest];
            for (i, span) in distinct.iter().enumerate() {
                ids[i * longest..i * longest + span.len()].copy_from_slice(span);
                pool[i * longest..i * longest + span.len()]
                    .copy_from_slice(&self.cfg.pointer_pool.weights(span.len()));
            }
            let ids = Tensor::from_vec(ids, (n, longest), &self.device)?;
            let h = self.hidden(&ids)?;
            let pool = Tensor::from_vec(pool, (n, 1, longest), &self.device)?;
            let encoded = pool.matmul(&h)?.reshape((n, d))?;
            table = Tensor::cat(&[&table, &encoded], 0)?;
        }
        let index = Tensor::from_vec(index, scans.len() * k, &self.device)?;
        table.index_select(&index, 0)?.reshape((scans.len(), k, d))
    }

    /// Where pointer scores replace logits: `gate [B, T, V]` is 1 at position `j` of row `r`
    /// (`rows[r] = (scan, start, len)`: the row's scan, the position of its first token here,
    /// and how many of the `t` slots are real) when the pointer applies there, in the marker
    /// columns of the candidates the row lists. `None` when it is 0 everywhere.
    pub(super) fn pointer_gate(
        &self,
        rows: &[(&SpanScan, usize, usize)],
        t: usize,
    ) -> candle_core::Result<Option<Tensor>> {
        let v = self.cfg.vocab_size;
        let mut applies = vec![0f32; rows.len() * t];
        let mut listed = vec![0f32; rows.len() * v];
        let mut any = false;
        for (row, &(scan, start, len)) in rows.iter().enumerate() {
            let mut lists_one = false;
            for (span, &marker) in scan.spans.iter().zip(&self.cfg.pointer_markers) {
                if !span.is_empty() {
                    listed[row * v + marker as usize] = 1.0;
                    lists_one = true;
                }
            }
            for j in (0..len).filter(|&j| scan.applies_at(start + j)) {
                applies[row * t + j] = 1.0;
                any |= lists_one;
            }
        }
        if !any {
            return Ok(None);
        }
        let applies = Tensor::from_vec(applies, (rows.len(), t, 1), &self.device)?;
        let listed = Tensor::from_vec(listed, (rows.len(), 1, v), &self.device)?;
        Ok(Some(applies.broadcast_mul(&listed)?))
    }

    /// Replaces the logits of marker tokens by pointer scores where `gate [B, T, V]` is 1:
    /// `score_k(t) = (W_q h_t) · (W_k m_k) / sqrt(d)`, with `m_k [B, K, d]` candidate `k`'s
    /// encoded span ([`TinyAgent::encode_spans`]).
    pub(super) fn apply_pointer(
        &self,
        logits: &Tensor,
        h: &Tensor,
        spans: &Tensor,
        gate: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let Some((w_query, w_key)) = &self.pointer else {
            return Ok(logits.clone());
        };
        let (b, t, v) = logits.dims3()?;
        let k = self.cfg.pointer_markers.len();
        let d = self.cfg.d_model;
        let query = dense(h, w_query)?;
        let key = dense(spans, w_key)?;
        let scores = (query.matmul(&key.transpose(1, 2)?.contiguous()?)? / (d as f64).sqrt())?;
        let mut placement = vec![0f32; k * v];
        for (i, &id) in self.cfg.pointer_markers.iter().enumerate() {
            placement[i * v + id as usize] = 1.0;
        }
        let placement = Tensor::from_vec(placement, (k, v), &self.device)?;
        let scattered = scores
            .reshape((b * t, k))?
            .matmul(&placement)?
            .reshape((b, t, v))?;
        let keep = gate.affine(-1.0, 1.0)?;
        (logits * keep)? + (scattered * gate)?
    }

    /// The incremental path's pointer head: scans the new tokens, encodes the candidate spans
    /// of rows whose segment has just ended (once per row), then scores the markers at the
    /// positions where the pointer applies (`cache.positions` already counts the new tokens).
    pub(super) fn pointer_step(
        &self,
        rows: &[&[u32]],
        cache: &mut KvCache,
        logits: &Tensor,
        h: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let n = logits.dim(1)?;
        let (k, d) = (self.cfg.pointer_markers.len(), self.cfg.d_model);
        let mut newly_ended = Vec::new();
        for (row, tokens) in rows.iter().enumerate() {
            let start = cache.positions[row] - tokens.len();
            let state = &mut cache.pointer[row];
            for (j, &token) in tokens.iter().enumerate() {
                state.scan.feed(token, start + j, &self.cfg);
            }
            if state.encoded.is_none() && state.scan.segment_end.is_some() {
                newly_ended.push(row);
            }
        }
        if !newly_ended.is_empty() {
            let scans: Vec<SpanScan> = newly_ended
                .iter()
                .map(|&row| cache.pointer[row].scan.clone())
                .collect();
            let encoded = self.encode_spans(&scans)?;
            for (i, &row) in newly_ended.iter().enumerate() {
                cache.pointer[row].encoded = Some(encoded.get(i)?);
            }
        }
        let gate_rows: Vec<_> = rows
            .iter()
            .enumerate()
            .map(|(row, tokens)| {
                let start = cache.positions[row] - tokens.len();
                (&cache.pointer[row].scan, start, tokens.len())
            })
            .collect();
        let Some(gate) = self.pointer_gate(&gate_rows, n)? else {
            return Ok(logits.clone());
        };
        let zeros = Tensor::zeros((k, d), candle_core::DType::F32, &self.device)?;
        let spans: Vec<Tensor> = cache
            .pointer
            .iter()
            .map(|state| state.encoded.clone().unwrap_or_else(|| zeros.clone()))
            .collect();
        self.apply_pointer(logits, h, &Tensor::stack(&spans, 0)?, &gate)
    }
}
