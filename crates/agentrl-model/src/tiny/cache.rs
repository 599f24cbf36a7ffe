//! TinyAgent's decoding state: [`KvCache`], the keys and values of earlier tokens per layer and
//! row, plus each row's position and pointer-head state.
//!
//! Data flow: the local engine creates one per batch of episodes
//! ([`KvCache::new`]), [`super::TinyAgent::forward_step_ragged`] extends it with every fed token,
//! and the engine drops finished rows with [`KvCache::retain_rows`]. The training forward never
//! uses it.

use candle_core::{Device, Tensor};

use super::pointer::{PointerRow, SpanScan};
use super::TinyConfig;

/// Keys and values of earlier tokens, per layer, for a batch of independent sequences.
///
/// Rows advance together one "slot" per fed token, but each row may feed a different number of
/// real tokens per call (a ragged batch: e.g. observations of different lengths). Slots a row
/// did not use are marked invalid and masked out of attention, and each row keeps its own
/// position counter, so a row's results do not depend on what the other rows did.
#[derive(Debug, Clone)]
pub struct KvCache {
    pub(super) layers: Vec<Option<(Tensor, Tensor)>>,
    /// `slot_valid[row][slot]`: that slot holds a real token of that row.
    pub(super) slot_valid: Vec<Vec<bool>>,
    /// Real tokens fed so far per row (= next position).
    pub(super) positions: Vec<usize>,
    /// The pointer head's candidate spans seen so far, per row.
    pub(super) pointer: Vec<PointerRow>,
}

impl KvCache {
    /// An empty cache for `rows` sequences.
    pub fn new(cfg: &TinyConfig, rows: usize) -> Self {
        Self {
            layers: vec![None; cfg.n_layers],
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
                Some((k, _)) => k.device().clone(),
                None => Device::Cpu,
            };
            let index = Tensor::from_vec(
                keep.iter().map(|&r| r as u32).collect::<Vec<_>>(),
                keep.len(),
                &device,
            )?;
            for layer in self.layers.iter_mut().flatten() {
                layer.0 = layer.0.index_select(&index, 0)?;
                layer.1 = layer.1.index_select(&index, 0)?;
            }
        }
        self.slot_valid = keep.iter().map(|&r| self.slot_valid[r].clone()).collect();
        self.positions = keep.iter().map(|&r| self.positions[r]).collect();
        self.pointer = keep.iter().map(|&r| self.pointer[r].clone()).collect();
        Ok(())
    }
}
