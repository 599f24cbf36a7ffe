//! The policy a run trains, seen from the RL recipe: the trainer's side ([`Policy`]: scored,
//! updated, checkpointed) and how a local engine samples from it ([`TrainPolicy`]).
//!
//! Where it sits: [`crate::recipes::rl::Trainer`] holds one `Box<dyn TrainPolicy>` (TinyAgent
//! behind its grammar, or Qwen3 with LoRA) and a `ChatCodec` for it, so every step (rollout →
//! batch → update → checkpoint) is the same code for both families. An engine that must not
//! see the weights move under it (async rollouts, a bf16 engine) samples from a
//! [`TrainPolicy::snapshot`] that [`TrainPolicy::copy_weights_from`] brings up to date.

use agentrl_engine::{Engine, LocalEngine};
use agentrl_model::{ConstrainedPolicy, Policy, TinyAgent};
use anyhow::{ensure, Context};
use candle_core::DType;

/// TinyAgent behind its action grammar: the tiny policy the RL recipe trains.
pub type TinyPolicy = ConstrainedPolicy<TinyAgent>;

/// A policy the RL recipe can train and sample from.
pub trait TrainPolicy: Policy + Send + Sync {
    /// A local engine over these very weights (weight sync only records the version).
    fn local_engine(&self) -> Box<dyn Engine + Send + '_>;
    /// An independent copy of the current weights, in `dtype`: an engine's own weights,
    /// which stay put while the trainer updates its own.
    fn snapshot(&self, dtype: DType) -> anyhow::Result<Box<dyn TrainPolicy>>;
    /// Total number of parameters (trainable or not).
    fn num_parameters(&self) -> usize;
    /// One line naming the model, for the run's header.
    fn describe(&self) -> String;
    /// Copies `source`'s trainable weights into this policy's, converting the dtype: the
    /// engine's copy catching up with the trainer. Refuses a source of another shape.
    fn copy_weights_from(&self, source: &dyn Policy) -> anyhow::Result<()> {
        let (to, from) = (self.trainable_vars(), source.trainable_vars());
        ensure!(
            to.len() == from.len(),
            "weight copy: {} trainable tensors here, {} in the source",
            to.len(),
            from.len()
        );
        for ((name, dst), (source_name, src)) in to.iter().zip(&from) {
            ensure!(
                name == source_name,
                "weight copy: tensor {name} here, {source_name} in the source"
            );
            let value = src.as_tensor().to_dtype(dst.dtype())?.detach();
            dst.set(&value)
                .with_context(|| format!("weight copy: tensor {name}"))?;
        }
        Ok(())
    }
}

impl TrainPolicy for TinyPolicy {
    fn local_engine(&self) -> Box<dyn Engine + Send + '_> {
        Box::new(LocalEngine::new(self))
    }

    fn snapshot(&self, dtype: DType) -> anyhow::Result<Box<dyn TrainPolicy>> {
        ensure!(
            dtype == DType::F32,
            "TinyAgent samples in f32 only (engine.dtype = \"bf16\" needs model.kind = \"qwen3\")"
        );
        let model = self.inner();
        let copy = ConstrainedPolicy::new(
            TinyAgent::new(model.config().clone(), 0, model.device())?,
            self.bias().cloned(),
        );
        copy.copy_weights_from(self)?;
        Ok(Box::new(copy))
    }

    fn num_parameters(&self) -> usize {
        self.inner().num_parameters()
    }

    fn describe(&self) -> String {
        let c = self.inner().config();
        format!(
            "TinyAgent ({} parameters, d_model {}, {} layers)",
            self.num_parameters(),
            c.d_model,
            c.n_layers
        )
    }
}
