//! TinyAgent: a small causal transformer policy with a value head, in candle.
//!
//! Data flow: the tiny renderer (`agentrl-chat`'s `tiny` module) turns gym observations into symbol ids;
//! the local engine (`agentrl::engine`) samples action tokens from [`TinyAgent::forward_step`]
//! with a [`KvCache`]; the trainer recomputes log-probs and values with [`TinyAgent::forward`]
//! over the exact sampled tokens. Both paths share the same block code, so their log-probs agree
//! to float rounding.
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
//! mean final hidden state of candidate `k`'s span (the tokens between `Ck … Ck`), encoded by
//! the same blocks as a sequence of its own. A candidate's key therefore depends on its content
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
//! Weights live in one [`VarMap`] and are initialised from a seeded ChaCha generator (candle's
//! CPU RNG cannot be seeded), so the same seed always gives the same model.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use candle_core::{Device, Module, Tensor, Var, D};
use candle_nn::{Linear, VarMap};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::fused;
use crate::policy::{Policy, PolicyOutput};

/// What TinyAgent's forward passes return: logits and the value head's estimates.
#[derive(Debug, Clone)]
pub struct TinyOutput {
    /// `[B, T, V]` next-token logits.
    pub logits: Tensor,
    /// `[B, T]` value estimates.
    pub values: Tensor,
}

/// TinyAgent's shape. [`TinyConfig::for_vocab`] gives the shape sized for a 2-core CPU
/// (about 160k parameters) over a given vocabulary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TinyConfig {
    /// Output/input vocabulary size (set from the tiny tokenizer).
    pub vocab_size: usize,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    /// MLP hidden width = `mlp_ratio * d_model`.
    pub mlp_ratio: usize,
    /// Longest sequence (number of learned positions).
    pub max_seq: usize,
    pub rms_eps: f64,
    /// Pointer head: the ids of the candidate markers `C0, C1, …`; empty means no pointer head.
    /// See [`TinyAgent`] ("Pointer head").
    pub pointer_markers: Vec<u32>,
    /// The token that closes the segment holding the candidates (the task observation's
    /// `</obs>`); pointer logits apply from its position on.
    pub pointer_segment_end: u32,
}

impl TinyConfig {
    /// The default shape (d 64, 2 layers, 4 heads) over a vocabulary of `vocab_size` words;
    /// the vocabulary comes from the codec (`agentrl_chat::tiny`), which this crate does not
    /// know about.
    pub fn for_vocab(vocab_size: usize) -> Self {
        Self {
            vocab_size,
            d_model: 64,
            n_layers: 2,
            n_heads: 4,
            mlp_ratio: 4,
            max_seq: 512,
            rms_eps: 1e-5,
            pointer_markers: Vec::new(),
            pointer_segment_end: 0,
        }
    }
}

impl TinyConfig {
    /// Checks that the shape makes sense; names the field at fault.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.vocab_size > 0, "tiny config: vocab_size must be > 0");
        anyhow::ensure!(self.d_model > 0, "tiny config: d_model must be > 0");
        anyhow::ensure!(self.n_layers > 0, "tiny config: n_layers must be > 0");
        anyhow::ensure!(
            self.d_model.checked_rem(self.n_heads) == Some(0),
            "tiny config: n_heads ({}) must be > 0 and divide d_model ({})",
            self.n_heads,
            self.d_model
        );
        anyhow::ensure!(self.mlp_ratio > 0, "tiny config: mlp_ratio must be > 0");
        anyhow::ensure!(self.max_seq > 0, "tiny config: max_seq must be > 0");
        anyhow::ensure!(self.rms_eps > 0.0, "tiny config: rms_eps must be > 0");
        for &id in self
            .pointer_markers
            .iter()
            .chain(std::iter::once(&self.pointer_segment_end))
        {
            anyhow::ensure!(
                (id as usize) < self.vocab_size,
                "tiny config: pointer token id {id} is outside the vocabulary ({})",
                self.vocab_size
            );
        }
        anyhow::ensure!(
            !self.pointer_markers.contains(&self.pointer_segment_end),
            "tiny config: pointer_segment_end must not also be a pointer marker"
        );
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads
    }
}

/// `x [N, in] @ w[out, in]^T`, on a 2-D view so candle runs one GEMM for the whole batch.
fn dense(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    let dims = x.dims().to_vec();
    let (last, lead) = dims.split_last().expect("dense input has at least one dim");
    let rows: usize = lead.iter().product();
    let out = w.dim(0)?;
    let y = x.reshape((rows, *last))?.matmul(&w.t()?)?;
    let mut out_dims = lead.to_vec();
    out_dims.push(out);
    y.reshape(out_dims)
}

/// How attention hides keys: the training forward is plainly causal (one fused op); the
/// incremental path needs an explicit additive mask for its ragged rows.
enum AttentionMask<'a> {
    Causal,
    Additive(&'a Tensor),
}

struct Block {
    norm_attn: Tensor,
    qkv: Tensor,
    attn_out: Tensor,
    norm_mlp: Tensor,
    mlp_up: Tensor,
    mlp_down: Tensor,
}

impl Block {
    /// One pre-norm block. `mask` is additive `[B or 1, 1, T_new, T_keys]`; `cache` holds this
    /// layer's keys/values `[B, H, S, Dh]` from earlier calls and is extended with the new ones.
    fn forward(
        &self,
        x: &Tensor,
        mask: AttentionMask,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
        cfg: &TinyConfig,
    ) -> candle_core::Result<Tensor> {
        let (b, t, d) = x.dims3()?;
        let (h, dh) = (cfg.n_heads, cfg.head_dim());
        let scale = 1.0 / (dh as f64).sqrt();
        let normed = fused::rms_norm(x, &self.norm_attn, cfg.rms_eps)?;
        let projected = dense(&normed, &self.qkv)?;
        if let (AttentionMask::Causal, None) = (&mask, &cache) {
            // The training forward: one fused op, straight from the projection.
            let ctx = fused::causal_attention(&projected, h, scale)?;
            return self.finish(x, &ctx, cfg);
        }
        let qkv = projected
            .reshape((b, t, 3, h, dh))?
            .permute((2, 0, 3, 1, 4))?;
        let q = qkv.get(0)?.contiguous()?;
        let mut k = qkv.get(1)?.contiguous()?;
        let mut v = qkv.get(2)?.contiguous()?;
        if let Some(slot) = cache {
            if let Some((k_old, v_old)) = slot.as_ref() {
                k = Tensor::cat(&[k_old, &k], 2)?;
                v = Tensor::cat(&[v_old, &v], 2)?;
            }
            *slot = Some((k.clone(), v.clone()));
        }
        let scores = q.matmul(&k.t()?)?;
        let probs = match mask {
            AttentionMask::Causal => fused::causal_softmax(&scores, scale)?,
            AttentionMask::Additive(mask) => {
                candle_nn::ops::softmax(&(scores * scale)?.broadcast_add(mask)?, D::Minus1)?
            }
        };
        let ctx = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b, t, d))?;
        self.finish(x, &ctx, cfg)
    }

    /// The rest of the block after attention: output projection, residual, MLP, residual.
    fn finish(&self, x: &Tensor, ctx: &Tensor, cfg: &TinyConfig) -> candle_core::Result<Tensor> {
        let x = (x + dense(ctx, &self.attn_out)?)?;
        let normed = fused::rms_norm(&x, &self.norm_mlp, cfg.rms_eps)?;
        let hidden = fused::gelu(&dense(&normed, &self.mlp_up)?)?;
        x + dense(&hidden, &self.mlp_down)?
    }
}

/// Keys and values of earlier tokens, per layer, for a batch of independent sequences.
///
/// Rows advance together one "slot" per fed token, but each row may feed a different number of
/// real tokens per call (a ragged batch: e.g. observations of different lengths). Slots a row
/// did not use are marked invalid and masked out of attention, and each row keeps its own
/// position counter, so a row's results do not depend on what the other rows did.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    /// `slot_valid[row][slot]`: that slot holds a real token of that row.
    slot_valid: Vec<Vec<bool>>,
    /// Real tokens fed so far per row (= next position).
    positions: Vec<usize>,
    /// The pointer head's candidate spans seen so far, per row.
    pointer: Vec<PointerRow>,
}

/// Reads one row's tokens in order and collects the candidate spans `Ck … Ck` (the tokens
/// between the two markers) before the segment end. The training forward and the incremental
/// path both feed it token by token, so they always agree on the spans.
#[derive(Debug, Clone, Default)]
struct SpanScan {
    open: Option<usize>,
    /// Position of the segment-end token, once seen.
    segment_end: Option<usize>,
    /// Interior tokens of each candidate's span (the last span wins if a marker repeats).
    spans: Vec<Vec<u32>>,
}

impl SpanScan {
    fn new(cfg: &TinyConfig) -> Self {
        Self {
            open: None,
            segment_end: None,
            spans: vec![Vec::new(); cfg.pointer_markers.len()],
        }
    }

    fn feed(&mut self, token: u32, position: usize, cfg: &TinyConfig) {
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
    fn applies_at(&self, position: usize) -> bool {
        self.segment_end.is_some_and(|end| position >= end)
    }
}

/// One row's pointer state in the incremental path: the scan and, once the segment has ended,
/// the encoded candidate spans `[K, d]` (zero rows for absent candidates).
#[derive(Debug, Clone)]
struct PointerRow {
    scan: SpanScan,
    encoded: Option<Tensor>,
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

    /// Encodes the candidate spans of each row on their own: every distinct span is run
    /// through the blocks as a separate sequence (positions from 0) and its final hidden states
    /// are averaged, so a candidate's key depends on its content only, never on where it sits
    /// in the prompt or which candidates come before it. Returns `[rows, K, d]`, zero rows for
    /// absent candidates.
    fn encode_spans(&self, scans: &[SpanScan]) -> candle_core::Result<Tensor> {
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
                let weight = 1.0 / span.len() as f32;
                pool[i * longest..i * longest + span.len()].fill(weight);
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
    fn pointer_gate(
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
    fn apply_pointer(
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

    /// The blocks over `ids [B, T]` (positions `0..T`, causal attention), before the final norm.
    fn trunk(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t) = ids.dims2()?;
        if t > self.cfg.max_seq {
            candle_core::bail!(
                "TinyAgent forward: sequence length {t} exceeds max_seq {}",
                self.cfg.max_seq
            );
        }
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
            let scans: Vec<SpanScan> = ids
                .to_vec2::<u32>()?
                .iter()
                .map(|tokens| {
                    let mut scan = SpanScan::new(&self.cfg);
                    for (position, &token) in tokens.iter().enumerate() {
                        scan.feed(token, position, &self.cfg);
                    }
                    scan
                })
                .collect();
            let rows: Vec<_> = scans.iter().map(|scan| (scan, 0, t)).collect();
            if let Some(gate) = self.pointer_gate(&rows, t)? {
                let spans = self.encode_spans(&scans)?;
                out.logits = self.apply_pointer(&out.logits, &h, &spans, &gate)?;
            }
        }
        Ok(out)
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
        for (block, layer_cache) in self.blocks.iter().zip(cache.layers.iter_mut()) {
            x = block.forward(
                &x,
                AttentionMask::Additive(&mask),
                Some(layer_cache),
                &self.cfg,
            )?;
        }
        let (mut out, h) = self.head(&x)?;
        if self.pointer.is_some() {
            out.logits = self.pointer_step(rows, cache, &out.logits, &h)?;
        }
        Ok(out)
    }

    /// The incremental path's pointer head: scans the new tokens, encodes the candidate spans
    /// of rows whose segment has just ended (once per row), then scores the markers at the
    /// positions where the pointer applies (`cache.positions` already counts the new tokens).
    fn pointer_step(
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

impl Policy for TinyAgent {
    fn forward(&self, ids: &Tensor) -> candle_core::Result<PolicyOutput> {
        let out = TinyAgent::forward(self, ids)?;
        Ok(PolicyOutput {
            logits: out.logits,
            values: Some(out.values),
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, IndexOp};

    fn small() -> TinyConfig {
        TinyConfig {
            vocab_size: 23,
            d_model: 16,
            n_layers: 2,
            n_heads: 2,
            mlp_ratio: 2,
            max_seq: 32,
            rms_eps: 1e-5,
            pointer_markers: Vec::new(),
            pointer_segment_end: 0,
        }
    }

    /// `small()` with a pointer head over markers 13, 14, 15 and segment end 4.
    fn small_pointer() -> TinyConfig {
        TinyConfig {
            pointer_markers: vec![13, 14, 15],
            pointer_segment_end: 4,
            ..small()
        }
    }

    /// A prompt with spans `13 … 13` and `15 … 15` (no span for 14), then the segment end.
    const POINTER_PROMPT: [u32; 12] = [1, 3, 13, 7, 8, 13, 15, 9, 10, 11, 15, 4];

    fn ids(rows: &[&[u32]]) -> Tensor {
        let t = rows[0].len();
        let flat: Vec<u32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Tensor::from_vec(flat, (rows.len(), t), &Device::Cpu).unwrap()
    }

    #[test]
    fn forward_shapes_and_seeded_init() {
        let model = TinyAgent::new(small(), 7, &Device::Cpu).unwrap();
        let out = model
            .forward(&ids(&[&[1, 2, 3, 4], &[5, 6, 7, 8]]))
            .unwrap();
        assert_eq!(out.logits.dims(), &[2, 4, 23]);
        assert_eq!(out.values.dims(), &[2, 4]);
        let again = TinyAgent::new(small(), 7, &Device::Cpu).unwrap();
        let other = TinyAgent::new(small(), 8, &Device::Cpu).unwrap();
        let w = |m: &TinyAgent| m.lm_head.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(w(&model), w(&again));
        assert_ne!(w(&model), w(&other));
    }

    #[test]
    fn every_parameter_gets_a_finite_nonzero_gradient() {
        for cfg in [small(), small_pointer()] {
            let model = TinyAgent::new(cfg.clone(), 3, &Device::Cpu).unwrap();
            let mut first = POINTER_PROMPT.to_vec();
            first.extend([5, 15, 6]);
            let second: Vec<u32> = (1..=15).collect();
            let input = ids(&[&first, &second]);
            let out = model.forward(&input).unwrap();
            // A policy-gradient-like loss on the log-probs plus a value loss, so that every
            // parameter (value head included) is upstream of the scalar.
            let logp = candle_nn::ops::log_softmax(&out.logits, D::Minus1).unwrap();
            let weights = Tensor::arange(0f32, 23.0, &Device::Cpu)
                .unwrap()
                .cos()
                .unwrap();
            let pg = logp.broadcast_mul(&weights).unwrap().mean_all().unwrap();
            let value = out.values.sqr().unwrap().mean_all().unwrap();
            let loss = (pg + value).unwrap();
            let grads = loss.backward().unwrap();
            let names: Vec<String> = model.named_vars().into_iter().map(|(n, _)| n).collect();
            assert_eq!(
                names.iter().any(|n| n.starts_with("pointer.")),
                !cfg.pointer_markers.is_empty()
            );
            for (name, var) in model.named_vars() {
                let grad = grads
                    .get(var.as_tensor())
                    .unwrap_or_else(|| panic!("no gradient for {name}"));
                let g: Vec<f32> = grad.flatten_all().unwrap().to_vec1().unwrap();
                assert!(
                    g.iter().all(|x| x.is_finite()),
                    "{name}: non-finite gradient"
                );
                let norm: f32 = g.iter().map(|x| x * x).sum::<f32>().sqrt();
                assert!(norm > 0.0, "{name}: zero gradient");
            }
        }
    }

    #[test]
    fn pointer_scores_only_present_candidates_after_the_segment_end() {
        let plain = TinyAgent::new(small(), 9, &Device::Cpu).unwrap();
        let pointer = TinyAgent::new(small_pointer(), 9, &Device::Cpu).unwrap();
        let mut seq = POINTER_PROMPT.to_vec();
        seq.extend([5, 2, 6]);
        let a = plain.forward(&ids(&[&seq])).unwrap().logits;
        let b = pointer.forward(&ids(&[&seq])).unwrap().logits;
        let end = POINTER_PROMPT.len() - 1;
        for t in 0..seq.len() {
            let x = a.i((0, t)).unwrap().to_vec1::<f32>().unwrap();
            let y = b.i((0, t)).unwrap().to_vec1::<f32>().unwrap();
            for token in 0..23 {
                let scored = t >= end && (token == 13 || token == 15);
                assert_eq!(x[token] != y[token], scored, "t={t} token={token}");
            }
        }
    }

    #[test]
    fn encoded_spans_depend_on_content_not_on_order() {
        let model = TinyAgent::new(small_pointer(), 5, &Device::Cpu).unwrap();
        let scan = |tokens: &[u32]| {
            let mut scan = SpanScan::new(model.config());
            for (p, &t) in tokens.iter().enumerate() {
                scan.feed(t, p, model.config());
            }
            scan
        };
        // The same two candidates in the other order (and with a different prefix).
        let a = scan(&POINTER_PROMPT);
        let b = scan(&[1, 3, 9, 15, 9, 10, 11, 15, 13, 7, 8, 13, 4]);
        assert_eq!(a.spans, b.spans);
        let swapped = scan(&[1, 13, 9, 10, 11, 13, 15, 7, 8, 15, 4]);
        let encoded = model.encode_spans(&[a, swapped]).unwrap();
        let row = |r: usize, c: usize| encoded.i((r, c)).unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(row(0, 0), row(1, 2));
        assert_eq!(row(0, 2), row(1, 0));
        assert_ne!(row(0, 0), row(0, 2));
        assert!(
            row(0, 1).iter().all(|&x| x == 0.0),
            "absent candidate encodes to zeros"
        );
    }

    #[test]
    fn ragged_incremental_forward_matches_full_forward() {
        for cfg in [small(), small_pointer()] {
            ragged_incremental_matches_full(cfg);
        }
    }

    fn ragged_incremental_matches_full(cfg: TinyConfig) {
        let model = TinyAgent::new(cfg, 11, &Device::Cpu).unwrap();
        // Row a: candidate spans, the segment end inside a chunk, then action-like tokens.
        let seq_a: Vec<u32> = vec![1, 13, 7, 13, 14, 8, 4, 5, 14];
        let seq_b: Vec<u32> = vec![10, 11, 12, 13, 14, 15, 16];
        // Feed both rows in chunks of different sizes, including empty chunks.
        let chunks_a: [&[u32]; 4] = [&seq_a[0..3], &seq_a[3..4], &seq_a[4..4], &seq_a[4..9]];
        let chunks_b: [&[u32]; 4] = [&seq_b[0..1], &seq_b[1..5], &seq_b[5..6], &seq_b[6..7]];
        let mut cache = KvCache::new(model.config(), 2);
        let mut got_a = Vec::new();
        let mut got_b = Vec::new();
        for (ca, cb) in chunks_a.iter().zip(chunks_b.iter()) {
            let out = model.forward_step_ragged(&[ca, cb], &mut cache).unwrap();
            for j in 0..ca.len() {
                got_a.push(out.logits.i((0, j)).unwrap().to_vec1::<f32>().unwrap());
            }
            for j in 0..cb.len() {
                got_b.push(out.logits.i((1, j)).unwrap().to_vec1::<f32>().unwrap());
            }
        }
        assert_eq!(cache.position(0), seq_a.len());
        assert_eq!(cache.position(1), seq_b.len());
        for (seq, got) in [(&seq_a, &got_a), (&seq_b, &got_b)] {
            let full = model.forward(&ids(&[seq])).unwrap();
            for (t, row) in got.iter().enumerate() {
                let want = full.logits.i((0, t)).unwrap().to_vec1::<f32>().unwrap();
                for (x, y) in row.iter().zip(want.iter()) {
                    assert!((x - y).abs() < 1e-5, "position {t}: {x} vs {y}");
                }
            }
        }
        // Dropping a row keeps the other row's state intact.
        cache.retain_rows(&[1]).unwrap();
        let out = model.forward_step_ragged(&[&[17]], &mut cache).unwrap();
        let mut extended = seq_b.clone();
        extended.push(17);
        let full = model.forward(&ids(&[&extended])).unwrap();
        let want = full.logits.i((0, 7)).unwrap().to_vec1::<f32>().unwrap();
        let got = out.logits.i((0, 0)).unwrap().to_vec1::<f32>().unwrap();
        for (x, y) in got.iter().zip(want.iter()) {
            assert!((x - y).abs() < 1e-5);
        }
    }

    #[test]
    fn save_then_load_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.safetensors");
        let model = TinyAgent::new(small(), 5, &Device::Cpu).unwrap();
        model.save(&path).unwrap();
        let loaded = TinyAgent::load(small(), &path, &Device::Cpu).unwrap();
        let input = ids(&[&[3, 1, 4, 1, 5]]);
        let a = model.forward(&input).unwrap().logits.flatten_all().unwrap();
        let b = loaded
            .forward(&input)
            .unwrap()
            .logits
            .flatten_all()
            .unwrap();
        assert_eq!(a.to_vec1::<f32>().unwrap(), b.to_vec1::<f32>().unwrap());
        let wrong = TinyConfig {
            d_model: 32,
            ..small()
        };
        assert!(TinyAgent::load(wrong, &path, &Device::Cpu).is_err());
    }

    #[test]
    fn rejects_bad_config_and_overlong_input() {
        let bad = TinyConfig {
            n_heads: 3,
            ..small()
        };
        assert!(TinyAgent::new(bad, 0, &Device::Cpu).is_err());
        let model = TinyAgent::new(small(), 0, &Device::Cpu).unwrap();
        let long = Tensor::zeros((1, 33), DType::U32, &Device::Cpu).unwrap();
        assert!(model.forward(&long).is_err());
    }
}
