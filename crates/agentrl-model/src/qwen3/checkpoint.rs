//! Gradient checkpointing of the update's forward pass (`qwen3.gradient_checkpointing`,
//! transformers' `gradient_checkpointing_enable()`): the decoder layers run outside candle's
//! graph, each keeping only its input; the graph holds the final norm and the LM head, from a
//! leaf at the last hidden state. After `loss.backward()`, [`CheckpointedLayers::complete`]
//! walks the layers from the top: it runs each layer's training forward again, in the graph,
//! from its saved input, and back-propagates the gradient that reached the layer's output.
//!
//! Why: candle keeps every intermediate of a forward pass alive until the backward pass. For
//! SmolLM2 (30 layers) a 2,500-token episode holds ~10 GB of activations and its update peaked
//! above 20 GB; checkpointed, one layer's activations live at a time (plus one `[T, H]` input
//! per layer), for one more forward pass of the layers.
//!
//! Where it sits: [`crate::Policy::forward_at_for_update`] of a [`Qwen3`] with checkpointing on
//! returns the logits and this as its pending part of the backward pass
//! ([`crate::PendingGradients`]); the trainer's update completes it before reading gradients.
//! The gradients equal the whole graph's to float rounding (the recomputed forward is the same
//! computation).

use anyhow::{bail, Context, Result};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};

use super::model::{ForwardMode, Qwen3};
use crate::policy::PendingGradients;

/// The decoder layers' part of a checkpointed backward pass: each layer's saved input and the
/// leaf the graph's part starts from.
pub struct CheckpointedLayers {
    /// A shallow copy of the model (its tensors are shared): the layers to run again.
    model: Qwen3,
    /// The input `[B*T, H]` of each layer, outside any graph.
    inputs: Vec<Tensor>,
    /// The last layer's output as a leaf of the graph's part.
    top: Var,
    shape: (usize, usize),
    cos: Tensor,
    sin: Tensor,
    mask: Option<Tensor>,
}

impl Qwen3 {
    /// Turns gradient checkpointing of the update's forward on or off (see the module doc).
    /// Needs a frozen base: the embedding's gradient is not computed.
    pub fn set_gradient_checkpointing(&mut self, on: bool) -> Result<()> {
        if on && !self.base_vars().is_empty() {
            bail!(
                "gradient checkpointing needs a frozen base (LoRA): this model trains its base \
                 weights"
            );
        }
        self.gradient_checkpointing = on;
        Ok(())
    }

    /// The training logits `[N, V]` at the flat `positions` of `ids: [B, T]`, as
    /// [`Qwen3::forward_at`], with the decoder layers checkpointed: the returned graph reaches
    /// back to the last hidden state only, and [`CheckpointedLayers::complete`] does the rest of
    /// the backward pass.
    pub fn forward_at_checkpointed(
        &self,
        ids: &Tensor,
        positions: &Tensor,
    ) -> Result<(Tensor, CheckpointedLayers)> {
        let (batch, seq, (cos, sin), mask) = self.layer_inputs(ids, 0)?;
        let mut hidden = self.embed(&ids.flatten_all()?)?.detach();
        let mut inputs = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            inputs.push(hidden.clone());
            // Detached at once: this layer's graph (and its activations) is dropped here.
            hidden = self
                .decoder_layer(
                    layer,
                    &hidden,
                    (batch, seq),
                    (&cos, &sin),
                    mask.as_ref(),
                    None,
                    ForwardMode::Train,
                )?
                .detach();
        }
        let top = Var::from_tensor(&hidden)?;
        let normed = self.rms_norm(top.as_tensor(), &self.norm, ForwardMode::Train)?;
        let logits =
            self.project_to_vocab(&normed.index_select(positions, 0)?, ForwardMode::Train)?;
        Ok((
            logits,
            CheckpointedLayers {
                model: self.clone(),
                inputs,
                top,
                shape: (batch, seq),
                cos,
                sin,
                mask,
            },
        ))
    }
}

impl PendingGradients for CheckpointedLayers {
    fn complete(self: Box<Self>, grads: &mut GradStore) -> anyhow::Result<()> {
        // A loss that does not depend on the logits leaves no gradient anywhere.
        let Some(mut upstream) = grads.remove(self.top.as_tensor()) else {
            return Ok(());
        };
        let vars = self.model.lora_vars();
        if is_exactly_zero(&upstream)? {
            // Every layer's gradient is `upstream · ∂output/∂θ`, so all of them are zero: a
            // GRPO minibatch whose advantages are all 0 (a group whose rewards are equal),
            // with no KL or entropy term, lands here. The recomputation and backward of the
            // layers (two thirds of the update's work) would only produce those zeros; each
            // factor gets its zero gradient here instead, as the layers' backward pass would
            // have given it, so the optimizer's step (its moments decay) is the same.
            for (_, var) in &vars {
                if grads.get(var.as_tensor()).is_none() {
                    grads.insert(var.as_tensor(), var.as_tensor().zeros_like()?);
                }
            }
            return Ok(());
        }
        for (index, layer) in self.model.layers.iter().enumerate().rev() {
            let input = Var::from_tensor(&self.inputs[index])?;
            let output = self.model.decoder_layer(
                layer,
                input.as_tensor(),
                self.shape,
                (&self.cos, &self.sin),
                self.mask.as_ref(),
                None,
                ForwardMode::Train,
            )?;
            // d(sum(output ⊙ upstream)) / dθ = upstream · d(output) / dθ: the chain rule
            // through this layer, with the gradient that reached its output.
            let mut layer_grads = (output * &upstream)?
                .sum_all()?
                .backward()
                .with_context(|| format!("backward pass of decoder layer {index}"))?;
            for (_, var) in &vars {
                if let Some(grad) = layer_grads.remove(var.as_tensor()) {
                    let total = match grads.remove(var.as_tensor()) {
                        Some(earlier) => (earlier + grad)?,
                        None => grad,
                    };
                    grads.insert(var.as_tensor(), total);
                }
            }
            upstream = layer_grads
                .remove(input.as_tensor())
                .with_context(|| format!("no gradient reached the input of layer {index}"))?;
        }
        Ok(())
    }
}

/// Whether every element of `gradient` is zero (`Σ|g| = 0`: a NaN or an infinity anywhere
/// makes the sum non-zero, so such a gradient takes the full backward pass and its error).
fn is_exactly_zero(gradient: &Tensor) -> Result<bool> {
    let total = gradient
        .abs()?
        .sum_all()?
        .to_dtype(candle_core::DType::F64)?
        .to_scalar::<f64>()?;
    Ok(total == 0.0)
}
