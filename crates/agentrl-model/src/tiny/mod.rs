//! TinyAgent: a small causal transformer policy with a value head, in candle.
//!
//! Data flow: the tiny renderer (`agentrl-chat`'s `tiny` module) turns gym observations into symbol ids;
//! the local engine (`agentrl-engine`) samples action tokens from [`TinyAgent::decode_last`]
//! with a [`DecodeCache`]; the trainer recomputes log-probs and values with
//! [`TinyAgent::forward`] over the exact sampled tokens. Both paths compute the same function
//! with the same kernels, so their log-probs agree to float rounding (the tests tie them).
//!
//! Architecture: token embedding + learned positions, `n_layers` pre-norm blocks (RMSNorm,
//! causal multi-head self-attention, GELU MLP), a final RMSNorm, an LM head and a value head
//! (`V(s_t)`, a linear map of the final hidden state, ALGORITHMS.md §2).
//!
//! Pointer head (when `pointer_markers` is set; the default run sets it): choosing `edit Ck`
//! should mean reading candidate `k`, but an LM-head row for `Ck` is a fixed vector, so a
//! policy trained through it learns *where* fixes tend to sit rather than *what* they say. So
//! the logit of marker `Ck` is replaced, from the end of the task observation on, by a
//! pointer score `(W_q h_t) · (W_k m_k) / sqrt(d)`: `h_t` is the decision state and `m_k` the
//! pooled final hidden states of candidate `k`'s span (the tokens between `Ck … Ck`), encoded
//! by the same blocks as a sequence of its own ([`PointerPool`]: half their mean and half the
//! last position by default, so a one-token difference between a fix and its decoy is not
//! averaged away). A candidate's key therefore depends on its content
//! only, not on its slot or on its neighbours, and what is learned about one task carries over
//! to the same fix listed elsewhere. Candidates the task does not list keep their LM-head logit
//! (choosing one is a format error the policy must learn to avoid). The training forward and
//! the KV-cache path find the spans with the same token scan, so they agree.
//!
//! Only differentiable ops are used: candle's fused `softmax_last_dim` / `rms_norm` record no
//! backward pass and would silently starve the weights upstream of gradient (shared/DESIGN.md,
//! "candle"). RMSNorm, GELU and the causal softmax are our own fused ops with hand-written
//! backward passes ([`crate::fused`]); the ragged incremental path uses `ops::softmax`. The
//! test `every_parameter_gets_a_finite_nonzero_gradient` guards this.
//!
//! Training forward: the update scores a batch through [`TinyAgent::forward_at_for_update`],
//! which runs the trunk (embeddings and blocks, about 95% of a step's FLOPs) as explicit loops
//! outside candle's graph (`trunk.rs`) and hands its output to candle as a leaf variable; the
//! heads, the pointer head and the loss stay in candle, and the returned
//! [`PendingGradients`] runs the trunk's backward pass from that leaf's gradient once candle's
//! backward pass is done. Through candle's graph the step was bound by per-op costs, not by
//! arithmetic (ARCHITECTURE.md, "The training step's compute"). Every other caller (sampling,
//! evaluation) goes through [`TinyAgent::forward`]; a test ties the two paths' outputs and
//! every gradient together.
//!
//! Weights live in one [`VarMap`] and are initialised from a seeded ChaCha generator (candle's
//! CPU RNG cannot be seeded), so the same seed always gives the same model.
//!
//! Layout: `config.rs` ([`TinyConfig`], the shape), `block.rs` (one transformer block),
//! `cache.rs` ([`KvCache`], candle's decoding state), `decode.rs` ([`DecodeCache`] and
//! [`TinyAgent::decode_last`], decoding as explicit loops: what the local engine calls),
//! `pointer.rs` (the pointer head), `trunk.rs` (the training forward's explicit trunk and its
//! backward pass); this file
//! holds the model itself: weights, initialisation, save/load and the two forward paths.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use candle_core::backprop::GradStore;
use candle_core::{Device, Module, Tensor, Var, D};
use candle_nn::{Linear, VarMap};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::fused;
use crate::policy::{ForUpdate, PendingGradients, Policy, PolicyOutput};

mod block;
mod cache;
mod config;
mod decode;
mod pointer;
mod trunk;

use block::{dense, AttentionMask, Block};
// Public for the integration tests (tests/model/tiny_agent.rs).
#[doc(hidden)]
pub use pointer::SpanScan;

pub use cache::KvCache;
pub use config::{PointerPool, TinyConfig};
pub use decode::DecodeCache;

/// What TinyAgent's forward passes return: logits and the value head's estimates.
#[derive(Debug, Clone)]
pub struct TinyOutput {
    /// `[B, T, V]` next-token logits.
    pub logits: Tensor,
    /// `[B, T]` value estimates.
    pub values: Tensor,
}

/// The TinyAgent policy.
pub struct TinyAgent {
    cfg: TinyConfig,
    varmap: VarMap,
    device: Device,
    tok_emb: Tensor,
    pos_emb: Tensor,
    blocks: Vec<Block>,
    norm_final: Tensor,
    lm_head: Tensor,
    value_head: Linear,
    /// Pointer head projections (query from the decision state, key from a candidate span);
    /// present when `cfg.pointer_markers` is not empty.
    pointer: Option<(Tensor, Tensor)>,
    /// The explicit trunk's last tape, handed back after its backward pass so the next
    /// training forward refills its buffers instead of allocating them.
    spare_tape: Arc<Mutex<Option<trunk::Tape>>>,
    /// Working buffers of explicit decoding ([`TinyAgent::decode_last`]), one per chunk of
    /// rows in flight, kept from one call to the next.
    decode_scratch: decode::ScratchPool,
    /// Key and value buffers of dropped decoding rows, for the next [`DecodeCache`].
    kv_pool: Arc<decode::KvPool>,
}

impl TinyAgent {
    /// A freshly initialised model; the same `seed` gives the same weights.
    ///
    /// Linear weights are uniform in `±1/sqrt(fan_in)` (PyTorch's `nn.Linear` bound), output
    /// projections of residual branches are scaled by `1/sqrt(2·n_layers)` (GPT-2), embeddings
    /// and the LM head start small so the initial policy is close to uniform.
    pub fn new(cfg: TinyConfig, seed: u64, device: &Device) -> anyhow::Result<Self> {
        cfg.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let varmap = VarMap::new();
        let d = cfg.d_model;
        let hidden = cfg.mlp_ratio * d;
        let residual_scale = 1.0 / ((2 * cfg.n_layers) as f32).sqrt();
        let mut add = |name: String, shape: &[usize], bound: f32| -> anyhow::Result<()> {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = if bound == 0.0 {
                vec![0.0; n]
            } else if bound < 0.0 {
                vec![-bound; n] // a constant (norm weights)
            } else {
                (0..n).map(|_| rng.random_range(-bound..bound)).collect()
            };
            let tensor = Tensor::from_vec(values, shape, device)?;
            let var = Var::from_tensor(&tensor)?;
            varmap
                .data()
                .lock()
                .map_err(|_| anyhow::anyhow!("tiny model: var map lock poisoned"))?
                .insert(name, var);
            Ok(())
        };
        let lin = |fan_in: usize| 1.0 / (fan_in as f32).sqrt();
        add("tok_emb.weight".into(), &[cfg.vocab_size, d], 0.1)?;
        add("pos_emb.weight".into(), &[cfg.max_seq, d], 0.1)?;
        for layer in 0..cfg.n_layers {
            let p = format!("blocks.{layer}");
            add(format!("{p}.norm_attn.weight"), &[d], -1.0)?;
            add(format!("{p}.attn.qkv.weight"), &[3 * d, d], lin(d))?;
            add(
                format!("{p}.attn.out.weight"),
                &[d, d],
                lin(d) * residual_scale,
            )?;
            add(format!("{p}.norm_mlp.weight"), &[d], -1.0)?;
            add(format!("{p}.mlp.up.weight"), &[hidden, d], lin(d))?;
            add(
                format!("{p}.mlp.down.weight"),
                &[d, hidden],
                lin(hidden) * residual_scale,
            )?;
        }
        add("norm_final.weight".into(), &[d], -1.0)?;
        add("lm_head.weight".into(), &[cfg.vocab_size, d], 0.1 * lin(d))?;
        add("value_head.weight".into(), &[1, d], lin(d))?;
        add("value_head.bias".into(), &[1], 0.0)?;
        if !cfg.pointer_markers.is_empty() {
            add("pointer.query.weight".into(), &[d, d], lin(d))?;
            add("pointer.key.weight".into(), &[d, d], lin(d))?;
        }
        Self::from_varmap(cfg, varmap, device)
    }

    /// Loads weights saved by [`TinyAgent::save`]; `cfg` must match the saved shapes.
    pub fn load(cfg: TinyConfig, path: &Path, device: &Device) -> anyhow::Result<Self> {
        let mut model = Self::new(cfg, 0, device)?;
        model
            .varmap
            .load(path)
            .with_context(|| format!("loading TinyAgent weights from {}", path.display()))?;
        Ok(model)
    }

    /// Writes all weights to one safetensors file (names as in [`TinyAgent::named_vars`]).
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        self.varmap
            .save(path)
            .with_context(|| format!("saving TinyAgent weights to {}", path.display()))
    }

    fn from_varmap(cfg: TinyConfig, varmap: VarMap, device: &Device) -> anyhow::Result<Self> {
        let vars = {
            let data = varmap
                .data()
                .lock()
                .map_err(|_| anyhow::anyhow!("tiny model: var map lock poisoned"))?;
            data.iter()
                .map(|(name, var)| (name.clone(), var.as_tensor().clone()))
                .collect::<BTreeMap<_, _>>()
        };
        let get = |name: &str| -> anyhow::Result<Tensor> {
            vars.get(name)
                .cloned()
                .with_context(|| format!("tiny model: missing parameter {name}"))
        };
        let blocks = (0..cfg.n_layers)
            .map(|layer| {
                let p = format!("blocks.{layer}");
                Ok(Block {
                    norm_attn: get(&format!("{p}.norm_attn.weight"))?,
                    qkv: get(&format!("{p}.attn.qkv.weight"))?,
                    attn_out: get(&format!("{p}.attn.out.weight"))?,
                    norm_mlp: get(&format!("{p}.norm_mlp.weight"))?,
                    mlp_up: get(&format!("{p}.mlp.up.weight"))?,
                    mlp_down: get(&format!("{p}.mlp.down.weight"))?,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Self {
            tok_emb: get("tok_emb.weight")?,
            pos_emb: get("pos_emb.weight")?,
            blocks,
            norm_final: get("norm_final.weight")?,
            lm_head: get("lm_head.weight")?,
            value_head: Linear::new(get("value_head.weight")?, Some(get("value_head.bias")?)),
            pointer: if cfg.pointer_markers.is_empty() {
                None
            } else {
                Some((get("pointer.query.weight")?, get("pointer.key.weight")?))
            },
            cfg,
            varmap,
            device: device.clone(),
            spare_tape: Arc::default(),
            decode_scratch: Default::default(),
            kv_pool: Arc::default(),
        })
    }

    pub fn config(&self) -> &TinyConfig {
        &self.cfg
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The weights' variable map (what the optimizer updates and checkpoints save).
    pub fn varmap(&self) -> &VarMap {
        &self.varmap
    }

    /// All trainable variables sorted by name, so optimizer state has a stable order.
    pub fn named_vars(&self) -> Vec<(String, Var)> {
        let data = match self.varmap.data().lock() {
            Ok(data) => data,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut vars: Vec<_> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        vars
    }

    /// Number of scalar parameters.
    pub fn num_parameters(&self) -> usize {
        self.named_vars().iter().map(|(_, v)| v.elem_count()).sum()
    }

    /// Final norm, LM head and value head; also returns the final hidden states.
    fn head(&self, x: &Tensor) -> candle_core::Result<(TinyOutput, Tensor)> {
        let h = fused::rms_norm(x, &self.norm_final, self.cfg.rms_eps)?;
        let logits = dense(&h, &self.lm_head)?;
        let values = self.value_head.forward(&h)?.squeeze(D::Minus1)?;
        Ok((TinyOutput { logits, values }, h))
    }

    /// The blocks over `ids [B, T]` (positions `0..T`, causal attention), before the final norm.
    fn trunk(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t) = ids.dims2()?;
        self.check_length(t)?;
        let tokens =
            self.tok_emb
                .embedding(&ids.flatten_all()?)?
                .reshape((b, t, self.cfg.d_model))?;
        let pos = self.pos_emb.narrow(0, 0, t)?;
        let mut x = tokens.broadcast_add(&pos)?;
        for block in &self.blocks {
            x = block.forward(&x, AttentionMask::Causal, None, &self.cfg)?;
        }
        Ok(x)
    }

    /// Final hidden states (after the final norm) of `ids [B, T]`.
    fn hidden(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        fused::rms_norm(&self.trunk(ids)?, &self.norm_final, self.cfg.rms_eps)
    }

    /// Full forward over `ids [B, T]` u32 (positions `0..T`, causal attention).
    pub fn forward(&self, ids: &Tensor) -> candle_core::Result<TinyOutput> {
        let t = ids.dim(1)?;
        let x = self.trunk(ids)?;
        let (mut out, h) = self.head(&x)?;
        if self.pointer.is_some() {
            let scans = self.scan_rows(ids)?;
            let rows: Vec<_> = scans.iter().map(|scan| (scan, 0, t)).collect();
            if let Some(gate) = self.pointer_gate(&rows, t)? {
                let spans = self.encode_spans(&scans)?;
                out.logits = self.apply_pointer(&out.logits, &h, &spans, &gate)?;
            }
        }
        Ok(out)
    }

    /// [`TinyAgent::forward`] for an update, scored at `positions` only (u32 `[N]`, indexing
    /// the batch's `B*T` positions row-major): logits `[N, V]` and values `[N]`. The trunk runs
    /// outside candle's graph, as explicit loops (module `trunk`), and its gradients are
    /// completed by [`ForUpdate::pending`] after candle's backward pass; the heads run on the
    /// scored positions' hidden states alone, which is all an update's loss reads. Off the
    /// CPU, and for an empty batch, this is candle's forward with nothing pending.
    pub fn forward_at_for_update(
        &self,
        ids: &Tensor,
        positions: &Tensor,
    ) -> candle_core::Result<ForUpdate> {
        Ok(match self.explicit_trunk(ids)? {
            Some((x, pending)) => ForUpdate {
                output: policy_output(self.forward_at_from_trunk(ids, &x, positions)?),
                pending: Some(pending),
            },
            None => ForUpdate {
                output: policy_output(self.forward(ids)?).at(positions)?,
                pending: None,
            },
        })
    }

    /// The trunk of `ids` run as explicit loops (module `trunk`): its output as a leaf of
    /// candle's graph, and the backward pass that waits for candle's. `None` off the CPU and
    /// for an empty batch (candle's path then answers).
    fn explicit_trunk(
        &self,
        ids: &Tensor,
    ) -> candle_core::Result<Option<(Tensor, Box<dyn PendingGradients>)>> {
        let (b, t) = ids.dims2()?;
        if !self.device.is_cpu() || b == 0 || t == 0 {
            return Ok(None);
        }
        self.check_length(t)?;
        let weights = self.trunk_weights()?;
        let flat_ids = ids.flatten_all()?.to_vec1::<u32>()?;
        if let Some(&bad) = flat_ids
            .iter()
            .find(|&&id| id as usize >= self.cfg.vocab_size)
        {
            candle_core::bail!(
                "TinyAgent forward: token id {bad} is outside the vocabulary ({})",
                self.cfg.vocab_size
            );
        }
        let reuse = self
            .spare_tape
            .lock()
            .ok()
            .and_then(|mut spare| spare.take());
        let (x, tape) = trunk::forward(&weights, &self.cfg, &flat_ids, (b, t), reuse);
        let leaf = Var::from_vec(x, (b, t, self.cfg.d_model), &self.device)?;
        let pending = PendingTrunk {
            tape: Some(tape),
            spare: Arc::clone(&self.spare_tape),
            weights,
            cfg: self.cfg.clone(),
            leaf: leaf.as_tensor().clone(),
            params: self.trunk_params(),
        };
        Ok(Some((leaf.as_tensor().clone(), Box::new(pending))))
    }

    /// The heads (and the pointer head) at `positions` of the trunk's output `x [B, T, d]`.
    fn forward_at_from_trunk(
        &self,
        ids: &Tensor,
        x: &Tensor,
        positions: &Tensor,
    ) -> candle_core::Result<TinyOutput> {
        let (b, t) = ids.dims2()?;
        let (d, v) = (self.cfg.d_model, self.cfg.vocab_size);
        // The norm is per position, so only the scored positions are normed.
        let h = fused::rms_norm(
            &x.reshape((b * t, d))?.index_select(positions, 0)?,
            &self.norm_final,
            self.cfg.rms_eps,
        )?;
        let mut logits = dense(&h, &self.lm_head)?;
        let values = self.value_head.forward(&h)?.squeeze(D::Minus1)?;
        if self.pointer.is_some() {
            let scans = self.scan_rows(ids)?;
            let rows: Vec<_> = scans.iter().map(|scan| (scan, 0, t)).collect();
            if let Some(gate) = self.pointer_gate(&rows, t)? {
                let spans = self.encode_spans(&scans)?;
                // Each scored position as a batch row of one: its row's spans, its gate.
                let row_of: Vec<u32> = positions
                    .to_vec1::<u32>()?
                    .iter()
                    .map(|&p| p / t as u32)
                    .collect();
                let n = row_of.len();
                let row_of = Tensor::from_vec(row_of, n, &self.device)?;
                let gate = gate
                    .reshape((b * t, v))?
                    .index_select(positions, 0)?
                    .unsqueeze(1)?;
                logits = self
                    .apply_pointer(
                        &logits.unsqueeze(1)?,
                        &h.unsqueeze(1)?,
                        &spans.index_select(&row_of, 0)?,
                        &gate,
                    )?
                    .squeeze(1)?;
            }
        }
        Ok(TinyOutput { logits, values })
    }

    /// Each row's candidate spans, scanned token by token.
    fn scan_rows(&self, ids: &Tensor) -> candle_core::Result<Vec<SpanScan>> {
        Ok(ids
            .to_vec2::<u32>()?
            .iter()
            .map(|tokens| {
                let mut scan = SpanScan::new(&self.cfg);
                for (position, &token) in tokens.iter().enumerate() {
                    scan.feed(token, position, &self.cfg);
                }
                scan
            })
            .collect())
    }

    fn check_length(&self, t: usize) -> candle_core::Result<()> {
        if t > self.cfg.max_seq {
            candle_core::bail!(
                "TinyAgent forward: sequence length {t} exceeds max_seq {}",
                self.cfg.max_seq
            );
        }
        Ok(())
    }

    /// The trunk's weight tensors in [`trunk::TrunkWeights`]'s order (the variables' own
    /// tensors, so a gradient inserted for one reaches the optimizer).
    fn trunk_params(&self) -> Vec<Tensor> {
        self.trunk_tensors().into_iter().cloned().collect()
    }

    /// [`TinyAgent::trunk_params`], borrowed: the two embeddings, then each block's norm, QKV,
    /// output, norm, up and down projections.
    fn trunk_tensors(&self) -> Vec<&Tensor> {
        let mut tensors = vec![&self.tok_emb, &self.pos_emb];
        for block in &self.blocks {
            tensors.extend([
                &block.norm_attn,
                &block.qkv,
                &block.attn_out,
                &block.norm_mlp,
                &block.mlp_up,
                &block.mlp_down,
            ]);
        }
        tensors
    }

    /// A copy of the trunk's weights for one explicit pass.
    fn trunk_weights(&self) -> candle_core::Result<trunk::TrunkWeights> {
        let read = |t: &Tensor| t.flatten_all()?.to_vec1::<f32>();
        Ok(trunk::TrunkWeights {
            tok_emb: read(&self.tok_emb)?,
            pos_emb: read(&self.pos_emb)?,
            blocks: self
                .blocks
                .iter()
                .map(|block| {
                    Ok(trunk::BlockWeights {
                        norm_attn: read(&block.norm_attn)?,
                        qkv: read(&block.qkv)?,
                        attn_out: read(&block.attn_out)?,
                        norm_mlp: read(&block.norm_mlp)?,
                        mlp_up: read(&block.mlp_up)?,
                        mlp_down: read(&block.mlp_down)?,
                    })
                })
                .collect::<candle_core::Result<_>>()?,
        })
    }

    /// Incremental forward for sampling: feeds `ids_new [B, n]` after what `cache` holds
    /// (every row feeds all `n` tokens) and returns logits/values for the new tokens only.
    pub fn forward_step(
        &self,
        ids_new: &Tensor,
        cache: &mut KvCache,
    ) -> candle_core::Result<TinyOutput> {
        let rows: Vec<Vec<u32>> = ids_new.to_vec2::<u32>()?;
        let refs: Vec<&[u32]> = rows.iter().map(Vec::as_slice).collect();
        self.forward_step_ragged(&refs, cache)
    }

    /// Incremental forward where row `b` feeds `rows[b].len()` tokens (possibly none).
    ///
    /// Returns logits `[B, n_max, V]` and values `[B, n_max]`; for row `b` only the first
    /// `rows[b].len()` positions are meaningful (the rest are padding).
    pub fn forward_step_ragged(
        &self,
        rows: &[&[u32]],
        cache: &mut KvCache,
    ) -> candle_core::Result<TinyOutput> {
        if rows.len() != cache.rows() {
            candle_core::bail!(
                "forward_step: {} rows given but the cache holds {}",
                rows.len(),
                cache.rows()
            );
        }
        let b = rows.len();
        let n = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        if b == 0 || n == 0 {
            candle_core::bail!("forward_step: nothing to feed");
        }
        let old_slots = cache.slots();
        let new_slots = old_slots + n;
        let mut ids = Vec::with_capacity(b * n);
        let mut positions = Vec::with_capacity(b * n);
        let mut mask = vec![f32::NEG_INFINITY; b * n * new_slots];
        for (row, tokens) in rows.iter().enumerate() {
            let start = cache.positions[row];
            if start + tokens.len() > self.cfg.max_seq {
                candle_core::bail!(
                    "forward_step: row {row} would reach position {} > max_seq {}",
                    start + tokens.len(),
                    self.cfg.max_seq
                );
            }
            for j in 0..n {
                let real = j < tokens.len();
                ids.push(if real { tokens[j] } else { 0 });
                positions.push(if real { (start + j) as u32 } else { 0 });
                let mrow = &mut mask[(row * n + j) * new_slots..(row * n + j + 1) * new_slots];
                if real {
                    for (slot, &valid) in cache.slot_valid[row].iter().enumerate() {
                        if valid {
                            mrow[slot] = 0.0;
                        }
                    }
                    for i in 0..=j {
                        mrow[old_slots + i] = 0.0;
                    }
                } else {
                    // A padding query sees only itself: harmless and never NaN.
                    mrow[old_slots + j] = 0.0;
                }
            }
            for j in 0..n {
                cache.slot_valid[row].push(j < tokens.len());
            }
            cache.positions[row] += tokens.len();
        }
        let ids = Tensor::from_vec(ids, b * n, &self.device)?;
        let positions = Tensor::from_vec(positions, b * n, &self.device)?;
        let mask = Tensor::from_vec(mask, (b, 1, n, new_slots), &self.device)?;
        let d = self.cfg.d_model;
        let mut x = (self.tok_emb.embedding(&ids)? + self.pos_emb.embedding(&positions)?)?
            .reshape((b, n, d))?;
        for (layer, block) in self.blocks.iter().enumerate() {
            x = block.forward(
                &x,
                AttentionMask::Additive(&mask),
                Some((&mut *cache, layer)),
                &self.cfg,
            )?;
        }
        let (mut out, h) = self.head(&x)?;
        if self.pointer.is_some() {
            out.logits = self.pointer_step(rows, cache, &out.logits, &h)?;
        }
        Ok(out)
    }
}

/// The trunk's backward pass, waiting for candle's: see [`TinyAgent::forward_at_for_update`].
struct PendingTrunk {
    /// Always `Some` until dropped, when it goes back to `spare`.
    tape: Option<trunk::Tape>,
    spare: Arc<Mutex<Option<trunk::Tape>>>,
    weights: trunk::TrunkWeights,
    cfg: TinyConfig,
    /// The trunk's output as candle's graph saw it (a leaf variable).
    leaf: Tensor,
    /// The trunk's weight tensors, in [`trunk::TrunkWeights`]'s order.
    params: Vec<Tensor>,
}

impl Drop for PendingTrunk {
    fn drop(&mut self) {
        if let (Some(tape), Ok(mut spare)) = (self.tape.take(), self.spare.lock()) {
            *spare = Some(tape);
        }
    }
}

impl PendingGradients for PendingTrunk {
    fn complete(mut self: Box<Self>, grads: &mut GradStore) -> anyhow::Result<()> {
        // Nothing in the loss reached the trunk (an all-zero loss): no trunk gradient either.
        let Some(d_out) = grads.remove(&self.leaf) else {
            return Ok(());
        };
        let d_out = d_out.flatten_all()?.to_vec1::<f32>()?;
        let Some(tape) = self.tape.as_mut() else {
            anyhow::bail!("TinyAgent: the trunk's tape was already used");
        };
        let flat = tape
            .backward(&self.weights, &self.cfg, &d_out)
            .into_buffers();
        for (param, grad) in self.params.iter().zip(flat) {
            let grad = Tensor::from_vec(grad, param.shape(), param.device())?;
            // The pointer head runs candidate spans through the blocks inside candle's graph,
            // so a trunk weight may already hold a gradient: the two add.
            let total = match grads.remove(param) {
                Some(earlier) => (earlier + grad)?,
                None => grad,
            };
            grads.insert(param, total);
        }
        Ok(())
    }
}

fn policy_output(out: TinyOutput) -> PolicyOutput {
    PolicyOutput {
        logits: out.logits,
        values: Some(out.values),
    }
}

impl Policy for TinyAgent {
    fn forward(&self, ids: &Tensor) -> candle_core::Result<PolicyOutput> {
        Ok(policy_output(TinyAgent::forward(self, ids)?))
    }

    fn forward_at_for_update(
        &self,
        ids: &Tensor,
        positions: &Tensor,
    ) -> candle_core::Result<ForUpdate> {
        TinyAgent::forward_at_for_update(self, ids, positions)
    }

    fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }

    fn max_seq(&self) -> usize {
        self.cfg.max_seq
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn trainable_vars(&self) -> Vec<(String, Var)> {
        self.named_vars()
    }
}
