//! Qwen3 in the local engine: [`Decoder`] for [`Qwen3`] (the trainer's own model, borrowed) and
//! for [`Qwen3Replica`] (an engine-side copy in its own dtype and device, e.g. a bf16 engine
//! against an f32 trainer).
//!
//! Where it sits: the rollout driver asks a `LocalEngine<&Qwen3>` or
//! `LocalEngine<Qwen3Replica>` for one assistant turn per live episode; each decoding step is
//! one [`Qwen3::forward_step_ragged_last`] over every row that still feeds tokens (prompts of
//! different lengths prefill in the same step as rows that decode one token), and only the
//! logits at each row's last fed position are copied to the host, in f32, for sampling.
//!
//! Weight sync: an engine over `&Qwen3` reads the trainer's weights as they are
//! ([`crate::WeightSync::Shared`]); a replica is refreshed from the trainer with
//! [`LocalEngine::sync_from`] and refuses a shared sync, which would leave it stale.
//!
//! The CPU's AMX unit (`engine.cpu_matmul`, [`Qwen3Replica::pack_for_amx`]) is only ever used
//! through a replica: packing the trainer's own model would move its inference forwards (the
//! old and reference log-probs) off the f32 path as well.

use agentrl_model::qwen3::{Qwen3, RaggedKvCache};
use candle_core::{DType, Device};

use crate::local::{Decoder, LocalEngine};

impl Decoder for Qwen3 {
    type Cache = RaggedKvCache;

    fn new_cache(&self, rows: usize) -> RaggedKvCache {
        RaggedKvCache::new(rows)
    }

    fn decode(
        &self,
        rows: &[&[u32]],
        cache: &mut RaggedKvCache,
    ) -> anyhow::Result<Vec<Option<Vec<f32>>>> {
        let mut result = vec![None; rows.len()];
        if rows.iter().all(|r| r.is_empty()) {
            return Ok(result);
        }
        let logits = self
            .forward_step_ragged_last(rows, cache)?
            .to_dtype(DType::F32)?
            .to_vec2::<f32>()?;
        let feeding = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.is_empty())
            .map(|(row, _)| row);
        for (row, logits) in feeding.zip(logits) {
            result[row] = Some(logits);
        }
        Ok(result)
    }

    fn retain_rows(&self, cache: &mut RaggedKvCache, keep: &[usize]) -> anyhow::Result<()> {
        cache.retain_rows(keep)
    }

    fn max_seq(&self) -> usize {
        self.config().max_position_embeddings
    }
}

/// An engine-side copy of a trainer's Qwen3 in its own dtype and device (LoRA adapters
/// included, unmerged; see [`Qwen3::inference_copy`]). Its weights change only through
/// [`Qwen3Replica::refresh`] (or [`LocalEngine::sync_from`]).
#[derive(Debug)]
pub struct Qwen3Replica {
    model: Qwen3,
}

impl Qwen3Replica {
    /// A copy of `trainer`'s current weights in `dtype` on `device`.
    pub fn new(trainer: &Qwen3, dtype: DType, device: &Device) -> anyhow::Result<Self> {
        Ok(Self {
            model: trainer.inference_copy(dtype, device)?,
        })
    }

    /// The copied model.
    pub fn model(&self) -> &Qwen3 {
        &self.model
    }

    /// Packs the replica's frozen f32 weights for the CPU's AMX unit ([`Qwen3::pack_for_amx`]),
    /// so its prefills and decoding steps of 16 rows or more run there; [`Self::refresh`]
    /// keeps it packed (a LoRA sync keeps the packed base, a new base is packed again).
    /// Returns whether anything was packed (false on a CPU without AMX, for a bf16 or GPU
    /// replica, or where no weight is a whole number of 32 × 32 blocks).
    pub fn pack_for_amx(&mut self) -> anyhow::Result<bool> {
        self.model.pack_for_amx()
    }

    /// Copies `trainer`'s current weights into this replica, keeping its dtype, device and
    /// AMX packing.
    pub fn refresh(&mut self, trainer: &Qwen3) -> anyhow::Result<()> {
        self.model.copy_weights_from(trainer)
    }
}

impl Decoder for Qwen3Replica {
    type Cache = RaggedKvCache;

    fn new_cache(&self, rows: usize) -> RaggedKvCache {
        self.model.new_cache(rows)
    }

    fn decode(
        &self,
        rows: &[&[u32]],
        cache: &mut RaggedKvCache,
    ) -> anyhow::Result<Vec<Option<Vec<f32>>>> {
        self.model.decode(rows, cache)
    }

    fn retain_rows(&self, cache: &mut RaggedKvCache, keep: &[usize]) -> anyhow::Result<()> {
        self.model.retain_rows(cache, keep)
    }

    fn max_seq(&self) -> usize {
        Decoder::max_seq(&self.model)
    }

    fn holds_own_weights(&self) -> bool {
        true
    }
}

impl LocalEngine<Qwen3Replica> {
    /// Copies `trainer`'s current weights into the replica and samples as weight version
    /// `version` from now on (the prefix cache is dropped).
    pub fn sync_from(&mut self, trainer: &Qwen3, version: u64) -> anyhow::Result<()> {
        self.update_decoder(version, |replica| replica.refresh(trainer))
    }
}
