//! The policy interface the trainer sees: a full forward pass over a padded batch of token
//! ids that returns next-token logits (and values, where the policy has a value head), plus
//! the trainable variables and their save and load.
//!
//! Sits between the models (TinyAgent, Qwen3, either behind a [`crate::ConstrainedPolicy`])
//! and everything that consumes logits on the trainer side: the update and the evaluation in
//! `agentrl-train`. Sampling goes through `agentrl-engine`, which needs an incremental decode
//! step instead (its `Decoder` trait).

use std::path::Path;

use candle_core::backprop::GradStore;
use candle_core::{Device, Result, Tensor, Var};

/// What a full forward pass returns.
#[derive(Debug, Clone)]
pub struct PolicyOutput {
    /// Next-token logits, `[B, T, V]` f32: position `t` scores token `t + 1`.
    pub logits: Tensor,
    /// Value estimates `V(s_t)` from a value head, `[B, T]` f32 (PPO's critic,
    /// ALGORITHMS.md §2); `None` for a policy without one.
    pub values: Option<Tensor>,
}

/// Gradients a policy computes itself, outside candle's graph, once candle's backward pass has
/// run: TinyAgent's trunk runs as explicit loops ([`crate::tiny`], "Training forward") and
/// leaves here the backward pass from its output to its weights.
pub trait PendingGradients {
    /// Reads the gradients candle's backward pass left in `grads` (at the leaf the policy
    /// handed to the graph) and adds the policy's own into `grads`, so an optimizer sees the
    /// full gradient of every trainable variable.
    fn complete(self: Box<Self>, grads: &mut GradStore) -> anyhow::Result<()>;
}

/// A training forward pass: the output, and the part of the backward pass candle's graph does
/// not hold ([`PendingGradients::complete`] must run after `loss.backward()`, before the
/// gradients are read). `pending` is `None` where the whole pass is in candle's graph.
pub struct ForUpdate {
    pub output: PolicyOutput,
    pub pending: Option<Box<dyn PendingGradients>>,
}

impl ForUpdate {
    /// Runs the pending part of the backward pass, if any.
    pub fn complete(
        pending: Option<Box<dyn PendingGradients>>,
        grads: &mut GradStore,
    ) -> anyhow::Result<()> {
        match pending {
            Some(pending) => pending.complete(grads),
            None => Ok(()),
        }
    }
}

impl PolicyOutput {
    /// The output at a subset of positions (u32 `[N]`, indexing the batch's `B*T` positions
    /// row-major): logits `[N, V]` and values `[N]`.
    pub fn at(self, positions: &Tensor) -> Result<PolicyOutput> {
        let (b, t, v) = self.logits.dims3()?;
        let logits = self
            .logits
            .reshape((b * t, v))?
            .index_select(positions, 0)?;
        let values = match self.values {
            Some(values) => Some(values.reshape(b * t)?.index_select(positions, 0)?),
            None => None,
        };
        Ok(PolicyOutput { logits, values })
    }
}

/// A causal language-model policy the trainer can score and update.
pub trait Policy {
    /// Full (training) forward pass over `ids` `[B, T]` u32, positions `0..T` in every row
    /// (rows are right-padded, so padding never shifts a real token's position).
    fn forward(&self, ids: &Tensor) -> Result<PolicyOutput>;
    /// The forward pass at a subset of positions only: `positions` (u32, `[N]`) index the
    /// batch's `B*T` positions row-major, and the output is logits `[N, V]` (and values
    /// `[N]`). The update scores action tokens only; a model with a large vocabulary
    /// overrides this to project just those hidden states onto the vocabulary (Qwen3's
    /// 151,936-entry head over every prompt token would dominate the step's memory).
    fn forward_at(&self, ids: &Tensor, positions: &Tensor) -> Result<PolicyOutput> {
        self.forward(ids)?.at(positions)
    }
    /// [`Policy::forward_at`] for an update: the same output, possibly computed partly outside
    /// candle's graph, whose gradients [`ForUpdate::pending`] then completes. The default is
    /// `forward_at` with nothing pending.
    fn forward_at_for_update(&self, ids: &Tensor, positions: &Tensor) -> Result<ForUpdate> {
        Ok(ForUpdate {
            output: self.forward_at(ids, positions)?,
            pending: None,
        })
    }
    /// Size of the output vocabulary (last dimension of the logits).
    fn vocab_size(&self) -> usize;
    /// Longest sequence the policy accepts.
    fn max_seq(&self) -> usize;
    fn device(&self) -> &Device;
    /// The variables an optimizer updates, sorted by name (so optimizer state has a stable
    /// order): all weights, or only the adapters of a LoRA policy.
    fn trainable_vars(&self) -> Vec<(String, Var)>;
    /// Writes the trainable variables to one safetensors file.
    fn save(&self, path: &Path) -> anyhow::Result<()> {
        crate::weights::save_vars(&self.trainable_vars(), path)
    }
    /// Loads the trainable variables in place from a file written by [`Policy::save`];
    /// refuses missing, misshapen and non-finite tensors, naming the file and the tensor.
    fn load(&self, path: &Path) -> anyhow::Result<()> {
        crate::weights::load_into_vars(&self.trainable_vars(), path, self.device())
    }
}

impl<P: Policy + ?Sized> Policy for &P {
    fn forward(&self, ids: &Tensor) -> Result<PolicyOutput> {
        (**self).forward(ids)
    }
    fn forward_at(&self, ids: &Tensor, positions: &Tensor) -> Result<PolicyOutput> {
        (**self).forward_at(ids, positions)
    }
    fn forward_at_for_update(&self, ids: &Tensor, positions: &Tensor) -> Result<ForUpdate> {
        (**self).forward_at_for_update(ids, positions)
    }
    fn vocab_size(&self) -> usize {
        (**self).vocab_size()
    }
    fn max_seq(&self) -> usize {
        (**self).max_seq()
    }
    fn device(&self) -> &Device {
        (**self).device()
    }
    fn trainable_vars(&self) -> Vec<(String, Var)> {
        (**self).trainable_vars()
    }
    fn save(&self, path: &Path) -> anyhow::Result<()> {
        (**self).save(path)
    }
    fn load(&self, path: &Path) -> anyhow::Result<()> {
        (**self).load(path)
    }
}
