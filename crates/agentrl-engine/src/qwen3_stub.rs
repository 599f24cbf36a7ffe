//! TEMPORARY (branch `remote`; the lead deletes this file at merge): a minimal
//! [`Decoder`] for [`Qwen3`] so that `agentrl serve` and the loopback tests compile before the
//! real, batched implementation (written on another branch) lands.
//!
//! It decodes row by row with [`Qwen3::forward_with_cache`], one [`KvCache`] per row: correct
//! and simple, not fast. Nothing else in the crate depends on this file, only on the
//! `Decoder for Qwen3` impl existing.

use agentrl_model::qwen3::{KvCache, Qwen3};
use candle_core::{IndexOp, Tensor};

use crate::local::Decoder;

impl Decoder for Qwen3 {
    type Cache = Vec<KvCache>;

    fn new_cache(&self, rows: usize) -> Self::Cache {
        vec![KvCache::new(); rows]
    }

    fn decode(
        &self,
        rows: &[&[u32]],
        cache: &mut Self::Cache,
    ) -> anyhow::Result<Vec<Option<Vec<f32>>>> {
        anyhow::ensure!(
            rows.len() == cache.len(),
            "qwen3 decode: {} rows for a cache of {}",
            rows.len(),
            cache.len()
        );
        let mut out = Vec::with_capacity(rows.len());
        for (row, row_cache) in rows.iter().zip(cache.iter_mut()) {
            if row.is_empty() {
                out.push(None);
                continue;
            }
            let ids = Tensor::from_slice(row, (1, row.len()), self.device())?;
            let logits = self.forward_with_cache(&ids, row_cache)?;
            let last = logits.i((0, row.len() - 1))?;
            out.push(Some(
                last.to_dtype(candle_core::DType::F32)?.to_vec1::<f32>()?,
            ));
        }
        Ok(out)
    }

    fn retain_rows(&self, cache: &mut Self::Cache, keep: &[usize]) -> anyhow::Result<()> {
        let mut kept = Vec::with_capacity(keep.len());
        for &row in keep {
            let row_cache = cache
                .get(row)
                .ok_or_else(|| anyhow::anyhow!("qwen3 retain_rows: no cache row {row}"))?;
            kept.push(row_cache.clone());
        }
        *cache = kept;
        Ok(())
    }

    fn max_seq(&self) -> usize {
        self.config().max_position_embeddings
    }
}
