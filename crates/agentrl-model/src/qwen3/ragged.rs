//! Ragged batched decoding for Qwen3: [`RaggedKvCache`] and [`Qwen3::forward_step_ragged`].
//!
//! Where it sits: the local engine (`agentrl-engine`) keeps one [`RaggedKvCache`] for the
//! episodes it is sampling; every decoding step feeds each row whatever it has not fed yet (a
//! long prompt for a row that just joined, one sampled token for a row that is decoding, nothing
//! for a row that has stopped) and samples from the logits at each row's last fed position
//! ([`Qwen3::forward_step_ragged_last`]). The training forward never uses this path.
//!
//! How a step runs:
//! * All fed tokens of all rows are flattened into one `[N, H]` matrix, so every projection and
//!   MLP matmul is one GEMM for the whole batch, with no padding.
//! * Rotary embeddings use each token's own position (its row's cached length plus its index in
//!   the row's feed).
//! * Attention is batched over rows against a padded cache `[rows, kv_heads, slots, head_dim]`:
//!   each step appends `n_max` slots to every row (`n_max` = the longest feed of the step), a
//!   row that fed fewer tokens leaves its extra slots invalid, and an additive mask hides
//!   invalid slots and future tokens. This is TinyAgent's layout (`crate::tiny::KvCache`); it
//!   keeps a step to a fixed number of kernels whatever the number of rows (per-row attention
//!   would launch a few kernels per row and layer, which dominates on a GPU). The cache is
//!   preallocated with spare capacity and written in place, so a decoding step copies only the
//!   new keys and values, never the whole cache. The price is attention work on invalid slots:
//!   the length differences within a step (a prefill of uneven prompts), and the steps a row
//!   sits out (a finished row while others decode). [`RaggedKvCache::retain_rows`] drops slots
//!   no kept row uses, and [`RaggedKvCache::compact`] (run by a step once the slots pass twice
//!   the longest row) moves each row's real tokens to the front, so the slots stay near the
//!   longest row instead of growing with every row's prompts and observations.
//! * The logits use the same inference kernels as `ForwardMode::Inference`, so they match the
//!   full forward pass to float rounding, and a row's logits do not depend on the other rows
//!   (masked entries contribute exact zeros).

use std::sync::Arc;

use anyhow::{bail, ensure, Context, Result};
use candle_core::{DType, Device, Tensor};

use super::model::{apply_rotary, softmax_last, Attention, DecoderLayer};
use super::{ForwardMode, Qwen3};
use crate::fused;

/// Spare slots allocated at least when a cache grows, so a run of decoding steps does not
/// reallocate at every step.
const MIN_GROWTH: usize = 64;

/// A cache whose slots pass this multiple of its longest row's real tokens is compacted before
/// the next step ([`RaggedKvCache::compact`]).
const COMPACT_FACTOR: usize = 2;

/// Most attention scores (floats) one ragged step materialises at once (64 Mi floats, 256 MB in
/// f32); longer prefills are sliced by query position (see `ragged_attention`).
const SCORES_BUDGET: usize = 64 << 20;

/// One layer's keys and values (after RoPE), `[rows, kv_heads, capacity, head_dim]` each;
/// slots `0..RaggedKvCache::slots` are in use.
#[derive(Debug)]
struct LayerKv {
    keys: Tensor,
    values: Tensor,
}

impl LayerKv {
    fn capacity(&self) -> Result<usize> {
        Ok(self.keys.dim(2)?)
    }

    /// Writes `keys`/`values` `[rows, kv_heads, n, head_dim]` at slots `at..at + n`, growing
    /// the buffers first when they are too short.
    fn write(slot: &mut Option<LayerKv>, keys: &Tensor, values: &Tensor, at: usize) -> Result<()> {
        let (rows, kv_heads, n, head_dim) = keys.dims4()?;
        let needed = at + n;
        let grown = match slot.take() {
            None => {
                let capacity = needed.max(MIN_GROWTH);
                let shape = (rows, kv_heads, capacity, head_dim);
                LayerKv {
                    keys: Tensor::zeros(shape, keys.dtype(), keys.device())?,
                    values: Tensor::zeros(shape, values.dtype(), values.device())?,
                }
            }
            Some(layer) if layer.capacity()? < needed => {
                let capacity = needed.max(2 * layer.capacity()?).max(MIN_GROWTH);
                let grow = |old: &Tensor| -> Result<Tensor> {
                    let spare = Tensor::zeros(
                        (rows, kv_heads, capacity - at, head_dim),
                        old.dtype(),
                        old.device(),
                    )?;
                    Ok(Tensor::cat(&[&old.narrow(2, 0, at)?, &spare], 2)?)
                };
                LayerKv {
                    keys: grow(&layer.keys)?,
                    values: grow(&layer.values)?,
                }
            }
            Some(layer) => layer,
        };
        // In place: the cache owns these buffers and hands out no views that outlive a step.
        grown.keys.slice_set(keys, 2, at)?;
        grown.values.slice_set(values, 2, at)?;
        *slot = Some(grown);
        Ok(())
    }
}

/// Qwen3's decoding state for a batch of independent sequences of different lengths: every
/// layer's keys and values, which slots hold a real token of which row, and each row's length.
///
/// Not `Clone`: the buffers are written in place, so a shallow copy would alias them. To fork a
/// row (several samples of one prompt), list it several times in [`RaggedKvCache::retain_rows`].
#[derive(Debug, Default)]
pub struct RaggedKvCache {
    layers: Vec<Option<LayerKv>>,
    /// Slots in use (the same for every row).
    slots: usize,
    /// `slot_valid[row][slot]`: that slot holds a real token of that row.
    slot_valid: Vec<Vec<bool>>,
    /// Tokens fed so far per row (= the position of its next token).
    positions: Vec<usize>,
}

impl RaggedKvCache {
    /// An empty cache for `rows` sequences. The buffers are allocated on the first step, in the
    /// model's dtype and device.
    pub fn new(rows: usize) -> Self {
        Self {
            layers: Vec::new(),
            slots: 0,
            slot_valid: vec![Vec::new(); rows],
            positions: vec![0; rows],
        }
    }

    /// Number of sequences.
    pub fn rows(&self) -> usize {
        self.positions.len()
    }

    /// Tokens row `row` has fed so far (the position of its next token), or `None` when there
    /// is no such row.
    pub fn position(&self, row: usize) -> Option<usize> {
        self.positions.get(row).copied()
    }

    /// Tokens fed so far, per row.
    pub fn positions(&self) -> &[usize] {
        &self.positions
    }

    /// Slots in use: real tokens plus the padding of shorter feeds.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Keeps the rows listed in `keep`, in that order; a row may be listed several times (it is
    /// then forked). Slots that no kept row uses are dropped.
    pub fn retain_rows(&mut self, keep: &[usize]) -> Result<()> {
        let rows = self.rows();
        if let Some(&bad) = keep.iter().find(|&&row| row >= rows) {
            bail!("retain_rows: row {bad} is out of range (the cache has {rows} rows)");
        }
        let slot_valid: Vec<Vec<bool>> = keep.iter().map(|&r| self.slot_valid[r].clone()).collect();
        let used: Vec<usize> = (0..self.slots)
            .filter(|&slot| slot_valid.iter().any(|valid| valid[slot]))
            .collect();
        if used.is_empty() {
            self.layers.clear();
        } else {
            let device = match self.layers.iter().flatten().next() {
                Some(layer) => layer.keys.device().clone(),
                None => Device::Cpu,
            };
            let row_index = index_tensor(keep.iter().copied(), &device)?;
            let slot_index = (used.len() < self.slots)
                .then(|| index_tensor(used.iter().copied(), &device))
                .transpose()?;
            for layer in self.layers.iter_mut().flatten() {
                let select = |buffer: &Tensor| -> Result<Tensor> {
                    let picked = buffer.index_select(&row_index, 0)?;
                    Ok(match &slot_index {
                        Some(slots) => picked.index_select(slots, 2)?,
                        None => picked,
                    })
                };
                layer.keys = select(&layer.keys)?;
                layer.values = select(&layer.values)?;
            }
        }
        self.slot_valid = slot_valid
            .into_iter()
            .map(|valid| used.iter().map(|&slot| valid[slot]).collect())
            .collect();
        self.positions = keep.iter().map(|&r| self.positions[r]).collect();
        self.slots = used.len();
        Ok(())
    }
}

impl RaggedKvCache {
    /// Whether the padding slots outweigh the real ones enough to pay for [`Self::compact`]:
    /// the slots in use pass [`COMPACT_FACTOR`] times the longest row's real tokens (and
    /// [`MIN_GROWTH`], so a short cache is never compacted).
    fn wants_compaction(&self) -> bool {
        // Every fed token holds one valid slot of its row, so a row's real tokens are its
        // position.
        let longest = self.positions.iter().copied().max().unwrap_or(0);
        self.slots > COMPACT_FACTOR * longest + MIN_GROWTH
    }

    /// Moves each row's real tokens to its first slots, in order, so the slots in use shrink
    /// to the longest row's real tokens. Every step appends the step's longest feed to every
    /// row, so without this the slots grow with the sum of all rows' feeds (each row's prompt
    /// and observations are padding in every other row), and so do the cache's memory and
    /// every decoding step's attention work. A row's keys keep their rotary positions (they
    /// are stored after RoPE) and its real slots keep their order, so what a row attends to is
    /// unchanged; the masked slots contribute exact zeros wherever they sit.
    pub fn compact(&mut self) -> Result<()> {
        let longest = self.positions.iter().copied().max().unwrap_or(0);
        if longest == self.slots {
            return Ok(());
        }
        if longest == 0 {
            self.layers.clear();
            self.slots = 0;
            self.slot_valid.iter_mut().for_each(Vec::clear);
            return Ok(());
        }
        let device = match self.layers.iter().flatten().next() {
            Some(layer) => layer.keys.device().clone(),
            None => Device::Cpu,
        };
        // Row `r`'s new slot `j` reads its `j`-th real slot; the padding after its last real
        // slot reads slot 0 (masked).
        let picks: Vec<Tensor> = self
            .slot_valid
            .iter()
            .zip(&self.positions)
            .map(|(valid, &count)| {
                let real = valid.iter().enumerate().filter(|(_, &v)| v).map(|(s, _)| s);
                index_tensor(real.chain(std::iter::repeat_n(0, longest - count)), &device)
            })
            .collect::<Result<_>>()?;
        // Spare capacity as a growing buffer would have, so decoding does not regrow at once.
        let capacity = 2 * longest.max(MIN_GROWTH);
        let compacted = |buffer: &Tensor| -> Result<Tensor> {
            let rows = picks
                .iter()
                .enumerate()
                .map(|(row, pick)| buffer.narrow(0, row, 1)?.index_select(pick, 2))
                .collect::<candle_core::Result<Vec<_>>>()?;
            let packed = Tensor::cat(&rows, 0)?;
            let (r, heads, _, d) = packed.dims4()?;
            let spare = Tensor::zeros(
                (r, heads, capacity - longest, d),
                packed.dtype(),
                packed.device(),
            )?;
            Ok(Tensor::cat(&[&packed, &spare], 2)?)
        };
        // Every layer first, so a failure leaves the cache as it was.
        let layers = self
            .layers
            .iter()
            .map(|layer| {
                layer
                    .as_ref()
                    .map(|layer| {
                        Ok(LayerKv {
                            keys: compacted(&layer.keys)?,
                            values: compacted(&layer.values)?,
                        })
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        self.layers = layers;
        for (valid, &count) in self.slot_valid.iter_mut().zip(&self.positions) {
            *valid = (0..longest).map(|slot| slot < count).collect();
        }
        self.slots = longest;
        Ok(())
    }
}

fn index_tensor(values: impl Iterator<Item = usize>, device: &Device) -> Result<Tensor> {
    let values: Vec<u32> = values.map(|v| v as u32).collect();
    let len = values.len();
    Ok(Tensor::from_vec(values, len, device)?)
}

/// The fused decoding attention's input besides Q, K and V.
struct FusedDecode {
    visible: Option<Arc<[bool]>>,
}

/// What one ragged step feeds, laid out for the kernels.
struct StepPlan {
    rows: usize,
    /// The longest feed of the step: slots appended to every row.
    width: usize,
    /// Tokens fed in all (the `N` of the flattened `[N, H]` matrix).
    fed: usize,
    /// `(padded, flat)`: for each padded place `row * width + j`, the flat token it reads
    /// (padding reads token 0), and for each flat token, its padded place. `None` when every
    /// row feeds `width` tokens, so the two layouts coincide.
    gather: Option<(Tensor, Tensor)>,
    /// Additive `[rows, 1, 1, width, slots + width]`; `None` when no real query has anything
    /// to hide (one token per row and no invalid slot in a feeding row), or when the step
    /// runs the fused decoding attention (`visible` instead).
    mask: Option<Tensor>,
    /// A decoding step on the CPU in f32 (one token per row at most) runs
    /// [`fused::ragged_decode_attention`]; `visible[row * (slots + 1) + slot]` is the mask's
    /// `0` entries (`None`: nothing to hide).
    decode: Option<FusedDecode>,
    /// Rotary cos and sin per flat token, `[N, head_dim / 2]`.
    cos: Tensor,
    sin: Tensor,
}

impl Qwen3 {
    /// Feeds `rows[b]` (possibly empty) after what `cache` holds for row `b` and returns the
    /// logits `[N, V]` at every fed position, rows concatenated in order (`N` = the total
    /// number of fed tokens). Inference kernels, no gradient.
    pub fn forward_step_ragged(
        &self,
        rows: &[&[u32]],
        cache: &mut RaggedKvCache,
    ) -> Result<Tensor> {
        let hidden = self.ragged_hidden(rows, cache)?;
        self.logits_from_hidden(&hidden, ForwardMode::Inference)
    }

    /// [`Qwen3::forward_step_ragged`], but only the logits at each feeding row's last fed
    /// position: `[R, V]` for the `R` rows that fed something, in row order. What a sampler
    /// needs; the output projection runs on `R` rows instead of `N`.
    pub fn forward_step_ragged_last(
        &self,
        rows: &[&[u32]],
        cache: &mut RaggedKvCache,
    ) -> Result<Tensor> {
        let hidden = self.ragged_hidden(rows, cache)?;
        let mut last = Vec::with_capacity(rows.len());
        let mut end = 0;
        for row in rows {
            end += row.len();
            if !row.is_empty() {
                last.push(end - 1);
            }
        }
        let hidden = if last.len() == end {
            hidden
        } else {
            hidden.index_select(&index_tensor(last.into_iter(), &self.device)?, 0)?
        };
        self.logits_from_hidden(&hidden, ForwardMode::Inference)
    }

    /// The final hidden states `[N, H]` of the fed tokens, before the final norm; extends the
    /// cache. The cache is left as it was when this fails.
    fn ragged_hidden(&self, rows: &[&[u32]], cache: &mut RaggedKvCache) -> Result<Tensor> {
        if cache.wants_compaction() {
            cache.compact()?;
        }
        let plan = self.plan_step(rows, cache)?;
        if cache.layers.is_empty() {
            cache.layers = (0..self.layers.len()).map(|_| None).collect();
        }
        ensure!(
            cache.layers.len() == self.layers.len(),
            "ragged step: the cache holds {} layers, the model has {}",
            cache.layers.len(),
            self.layers.len()
        );
        let ids: Vec<u32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        let ids = Tensor::from_vec(ids, plan.fed, &self.device)?;
        let mut hidden = self.embed(&ids)?; // [N, H]
        for (layer, slot) in self.layers.iter().zip(cache.layers.iter_mut()) {
            hidden = self.ragged_layer(layer, &hidden, &plan, slot, cache.slots)?;
        }
        for (row, tokens) in rows.iter().enumerate() {
            let valid = &mut cache.slot_valid[row];
            valid.extend((0..plan.width).map(|j| j < tokens.len()));
            cache.positions[row] += tokens.len();
        }
        cache.slots += plan.width;
        Ok(hidden)
    }

    /// Checks the feeds against the cache and the model, and lays them out (see [`StepPlan`]).
    fn plan_step(&self, rows: &[&[u32]], cache: &RaggedKvCache) -> Result<StepPlan> {
        ensure!(
            rows.len() == cache.rows(),
            "ragged step: {} rows fed, the cache holds {}",
            rows.len(),
            cache.rows()
        );
        let (vocab, max_positions) = (self.config.vocab_size, self.config.max_position_embeddings);
        for (row, tokens) in rows.iter().enumerate() {
            if let Some(bad) = tokens.iter().find(|&&id| id as usize >= vocab) {
                bail!(
                    "ragged step: row {row} feeds token id {bad}, outside the vocabulary ({vocab})"
                );
            }
            let end = cache.positions[row] + tokens.len();
            ensure!(
                end <= max_positions,
                "ragged step: row {row} would reach position {end}, past max_position_embeddings \
                 {max_positions}"
            );
        }
        let width = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let fed: usize = rows.iter().map(|r| r.len()).sum();
        ensure!(fed > 0, "ragged step: no row feeds any token");
        let n_rows = rows.len();

        let gather = if fed == n_rows * width {
            None
        } else {
            let mut padded = vec![0usize; n_rows * width];
            let mut flat = Vec::with_capacity(fed);
            let mut next = 0;
            for (row, tokens) in rows.iter().enumerate() {
                for j in 0..tokens.len() {
                    padded[row * width + j] = next;
                    flat.push(row * width + j);
                    next += 1;
                }
            }
            Some((
                index_tensor(padded.into_iter(), &self.device)?,
                index_tensor(flat.into_iter(), &self.device)?,
            ))
        };

        let old = cache.slots;
        let total = old + width;
        let hides_something = width > 1
            || rows
                .iter()
                .zip(&cache.slot_valid)
                .any(|(tokens, valid)| !tokens.is_empty() && valid.iter().any(|v| !v));
        let decode = (width == 1 && self.device.is_cpu() && self.dtype == DType::F32).then(|| {
            FusedDecode {
                visible: hides_something.then(|| {
                    rows.iter()
                        .zip(&cache.slot_valid)
                        .flat_map(|(tokens, valid)| {
                            // A padding query sees only its own (new) slot, as in the mask.
                            let feeds = !tokens.is_empty();
                            valid.iter().map(move |&v| feeds && v).chain([true])
                        })
                        .collect()
                }),
            }
        });
        let mask = if hides_something && decode.is_none() {
            let mut mask = vec![f32::NEG_INFINITY; n_rows * width * total];
            for (row, tokens) in rows.iter().enumerate() {
                for j in 0..width {
                    let query = &mut mask[(row * width + j) * total..(row * width + j + 1) * total];
                    if j < tokens.len() {
                        for (slot, &valid) in cache.slot_valid[row].iter().enumerate() {
                            if valid {
                                query[slot] = 0.0;
                            }
                        }
                        query[old..=old + j].fill(0.0);
                    } else {
                        // A padding query sees only its own slot: finite, and discarded.
                        query[old + j] = 0.0;
                    }
                }
            }
            let mask = Tensor::from_vec(mask, (n_rows, 1, 1, width, total), &self.device)?;
            Some(mask.to_dtype(self.dtype)?)
        } else {
            None
        };

        // The same f32 angles as the full forward's rotary tables.
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(fed * half);
        let mut sin = Vec::with_capacity(fed * half);
        for (row, tokens) in rows.iter().enumerate() {
            let start = cache.positions[row];
            for position in start..start + tokens.len() {
                for &freq in &self.inv_freq {
                    let angle = position as f32 * freq;
                    cos.push(angle.cos());
                    sin.push(angle.sin());
                }
            }
        }
        let cos = Tensor::from_vec(cos, (fed, half), &self.device)?.to_dtype(self.dtype)?;
        let sin = Tensor::from_vec(sin, (fed, half), &self.device)?.to_dtype(self.dtype)?;
        Ok(StepPlan {
            rows: n_rows,
            width,
            fed,
            gather,
            mask,
            decode,
            cos,
            sin,
        })
    }

    fn ragged_layer(
        &self,
        layer: &DecoderLayer,
        hidden: &Tensor,
        plan: &StepPlan,
        kv: &mut Option<LayerKv>,
        old_slots: usize,
    ) -> Result<Tensor> {
        let mode = ForwardMode::Inference;
        let normed = self.rms_norm(hidden, &layer.input_layernorm, mode)?;
        let attended = self.ragged_attention(&layer.self_attn, &normed, plan, kv, old_slots)?;
        let hidden = (hidden + attended)?;
        self.mlp_residual(layer, &hidden, mode)
    }

    /// Grouped-query attention of the flattened tokens `x: [N, H]` against each row's cache
    /// (see the module doc), heads grouped as in the full forward.
    fn ragged_attention(
        &self,
        attn: &Attention,
        x: &Tensor,
        plan: &StepPlan,
        kv: &mut Option<LayerKv>,
        old_slots: usize,
    ) -> Result<Tensor> {
        let mode = ForwardMode::Inference;
        let c = &self.config;
        let (n_q, n_kv, head_dim) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let group = n_q / n_kv;
        let (rows, width, fed) = (plan.rows, plan.width, plan.fed);
        let q = attn
            .q_proj
            .forward(x, mode)?
            .reshape((1, fed, n_q, head_dim))?;
        let k = attn
            .k_proj
            .forward(x, mode)?
            .reshape((1, fed, n_kv, head_dim))?;
        let v = attn.v_proj.forward(x, mode)?;
        let (q, k) = self.qk_norm(attn, q, k, mode)?;
        let q = apply_rotary(&q, &plan.cos, &plan.sin, mode)?.reshape((fed, n_q * head_dim))?;
        let k = apply_rotary(&k, &plan.cos, &plan.sin, mode)?.reshape((fed, n_kv * head_dim))?;
        // Flat [N, heads * d] → padded [rows, heads, width, d].
        let padded = |t: &Tensor, heads: usize| -> Result<Tensor> {
            let t = match &plan.gather {
                Some((padded, _)) => t.index_select(padded, 0)?,
                None => t.clone(),
            };
            Ok(t.reshape((rows, width, heads, head_dim))?
                .transpose(1, 2)?
                .contiguous()?)
        };
        let q = padded(&q, n_q)?.reshape((rows, n_kv, group * width, head_dim))?;
        let k = padded(&k, n_kv)?;
        let v = padded(&v, n_kv)?;
        LayerKv::write(kv, &k, &v, old_slots)?;
        let layer = kv
            .as_ref()
            .context("internal: the layer cache was just written")?;
        let total = old_slots + width;
        let keys = layer.keys.narrow(2, 0, total)?;
        let values = layer.values.narrow(2, 0, total)?;
        let scale = 1.0 / (head_dim as f64).sqrt();
        let attend = |q: &Tensor, mask: Option<&Tensor>, len: usize| -> Result<Tensor> {
            let scores = (q.matmul(&keys.t()?)? * scale)?; // [rows, n_kv, group*len, total]
            let scores = match mask {
                None => scores,
                Some(mask) => scores
                    .reshape((rows, n_kv, group, len, total))?
                    .broadcast_add(mask)?
                    .reshape((rows, n_kv, group * len, total))?,
            };
            Ok(softmax_last(&scores, mode)?.matmul(&values)?) // [rows, n_kv, group*len, d]
        };
        // The scores of a long prefill over many rows are `rows · n_q · width · total` floats
        // (4.7 GB for 9 rows of 2,500 tokens of SmolLM2, several such tensors live at once):
        // above SCORES_BUDGET the queries go through in slices of positions. A query's row of
        // scores is the same either way; small steps (every decoding step) stay one product.
        let per_position = rows * n_q * total;
        let slice = (SCORES_BUDGET / per_position.max(1)).max(1);
        let out = if let Some(decode) = &plan.decode {
            fused::ragged_decode_attention(&q, &keys, &values, decode.visible.clone(), scale)?
        } else if width <= slice {
            attend(&q, plan.mask.as_ref(), width)?
        } else {
            let q = q.reshape((rows, n_kv, group, width, head_dim))?;
            let mut parts = Vec::with_capacity(width.div_ceil(slice));
            let mut start = 0;
            while start < width {
                let len = slice.min(width - start);
                let q_part = q.narrow(3, start, len)?.contiguous()?.reshape((
                    rows,
                    n_kv,
                    group * len,
                    head_dim,
                ))?;
                let mask_part = match &plan.mask {
                    None => None,
                    Some(mask) => Some(mask.narrow(3, start, len)?.contiguous()?),
                };
                parts.push(
                    attend(&q_part, mask_part.as_ref(), len)?
                        .reshape((rows, n_kv, group, len, head_dim))?,
                );
                start += len;
            }
            Tensor::cat(&parts, 3)?.reshape((rows, n_kv, group * width, head_dim))?
        };
        let out = out
            .reshape((rows, n_q, width, head_dim))?
            .transpose(1, 2)?
            .reshape((rows * width, n_q * head_dim))?;
        let out = match &plan.gather {
            Some((_, flat)) => out.index_select(flat, 0)?,
            None => out,
        };
        attn.o_proj.forward(&out, mode)
    }
}
