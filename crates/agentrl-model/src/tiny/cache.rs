//! TinyAgent's decoding state: [`KvCache`], the keys and values of earlier tokens per layer and
//! row, plus each row's position and pointer-head state.
//!
//! Data flow: the local engine creates one per batch of episodes
//! ([`KvCache::new`]), [`super::TinyAgent::forward_step_ragged`] extends it with every fed token,
//! and the engine drops finished rows with [`KvCache::retain_rows`]. The training forward never
//! uses it.
//!
//! Each layer's keys and values live in candle-nn's preallocated [`candle_nn::kv_cache::KvCache`]
//! (`model.max_seq` slots, grown by as many again if padding slots outrun it), written in place
//! a step at a time. Concatenating a fresh cache every step instead copied the whole cache per
//! token, and the fresh buffers' page faults were half of a rollout's time (`agentrl bench
//! sampling`, issue 16).

use candle_core::{Device, Tensor};
use candle_nn::kv_cache::KvCache as LayerKv;

use super::pointer::{PointerRow, SpanScan};
use super::TinyConfig;

/// Keys and values of earlier tokens, per layer, for a batch of independent sequences.
///
/// Rows advance together one "slot" per fed token, but each row may feed a different number of
/// real tokens per call (a ragged batch: e.g. observations of different lengths). Slots a row
/// did not use are marked invalid and masked out of attention, and each row keeps its own
/// position counter, so a row's results do not depend on what the other rows did.
#[derive(Debug)]
pub struct KvCache {
    /// Per layer; `None` until the first token is fed. Keys and values `[B, H, slots, Dh]`.
    pub(super) layers: Vec<Option<LayerKv>>,
    /// Slots each layer's buffers start with (`model.max_seq`).
    capacity: usize,
    /// `slot_valid[row][slot]`: that slot holds a real token of that row.
    pub(super) slot_valid: Vec<Vec<bool>>,
    /// Real tokens fed so far per row (= next position).
    pub(super) positions: Vec<usize>,
    /// The pointer head's candidate spans seen so far, per row.
    pub(super) pointer: Vec<PointerRow>,
}

/// A new layer cache holding `select(keys)` and `select(values)` of `old`'s filled slots.
fn copied_layer(
    old: &LayerKv,
    capacity: usize,
    select: impl Fn(&Tensor) -> candle_core::Result<Tensor>,
) -> candle_core::Result<LayerKv> {
    let mut layer = LayerKv::new(2, capacity);
    if let (Some(k), Some(v)) = (old.k()?, old.v()?) {
        layer.append(&select(&k.contiguous()?)?, &select(&v.contiguous()?)?)?;
    }
    Ok(layer)
}

impl KvCache {
    /// Appends this layer's new keys and values `[B, H, n, Dh]` and returns all of them
    /// `[B, H, slots, Dh]`.
    pub(super) fn append(
        &mut self,
        layer: usize,
        keys: &Tensor,
        values: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let capacity = self.capacity;
        self.layers[layer]
            .get_or_insert_with(|| LayerKv::new(2, capacity))
            .append(keys, values)
    }

    /// An empty cache for `rows` sequences.
    pub fn new(cfg: &TinyConfig, rows: usize) -> Self {
        Self {
            layers: (0..cfg.n_layers).map(|_| None).collect(),
            capacity: cfg.max_seq.max(1),
            slot_valid: vec![Vec::new(); rows],
            positions: vec![0; rows],
            pointer: vec![
                PointerRow {
                    scan: SpanScan::new(cfg),
                    encoded: None,
                };
                rows
            ],
        }
    }

    pub fn rows(&self) -> usize {
        self.positions.len()
    }

    /// Number of real tokens row `row` has fed (its next position).
    pub fn position(&self, row: usize) -> usize {
        self.positions[row]
    }

    /// Slots used so far (real tokens plus padding of the longest row).
    pub fn slots(&self) -> usize {
        self.slot_valid.first().map_or(0, Vec::len)
    }

    /// Keeps only the rows listed in `keep` (in that order), e.g. to drop finished episodes.
    pub fn retain_rows(&mut self, keep: &[usize]) -> candle_core::Result<()> {
        for &row in keep {
            if row >= self.rows() {
                candle_core::bail!("retain_rows: row {row} out of range {}", self.rows());
            }
        }
        if keep.is_empty() {
            self.layers.iter_mut().for_each(|l| *l = None);
        } else {
            let device = match self.layers.iter().flatten().next() {
                Some(layer) => layer
                    .k_cache()
                    .all_data()
                    .as_ref()
                    .map(|k| k.device().clone()),
                None => None,
            }
            .unwrap_or(Device::Cpu);
            let index = Tensor::from_vec(
                keep.iter().map(|&r| r as u32).collect::<Vec<_>>(),
                keep.len(),
                &device,
            )?;
            let capacity = self.capacity;
            for layer in self.layers.iter_mut() {
                if let Some(old) = layer.as_ref() {
                    *layer = Some(copied_layer(old, capacity, |t| t.index_select(&index, 0))?);
                }
            }
        }
        self.slot_valid = keep.iter().map(|&r| self.slot_valid[r].clone()).collect();
        self.positions = keep.iter().map(|&r| self.positions[r]).collect();
        self.pointer = keep.iter().map(|&r| self.pointer[r].clone()).collect();
        Ok(())
    }
}
