//! The policy a run trains, seen from the RL recipe: the trainer's side ([`Policy`]: scored,
//! updated, checkpointed) and how a local engine samples from it ([`TrainPolicy`]).
//!
//! Where it sits: [`crate::trainer::Trainer`] holds one `Box<dyn TrainPolicy>` (TinyAgent
//! behind its grammar, or Qwen3 with LoRA) and a `ChatCodec` for it, so every step (rollout →
//! batch → update → checkpoint) is the same code for both families. An engine that must not
//! see the weights move under it (async rollouts, a bf16 engine) samples from a
//! [`TrainPolicy::replica`] that [`EngineReplica::refresh`] brings up to date.

use std::any::Any;

use agentrl_engine::{Engine, LocalEngine, LogprobKind, Qwen3Replica};
use agentrl_model::qwen3::Qwen3;
use agentrl_model::{ConstrainedPolicy, Policy, TinyAgent};
use anyhow::{ensure, Context};
use candle_core::DType;

/// TinyAgent behind its action grammar: the tiny policy the RL recipe trains.
pub type TinyPolicy = ConstrainedPolicy<TinyAgent>;

/// A policy the RL recipe can train and sample from.
pub trait TrainPolicy: Policy + Send + Sync {
    /// A local engine over these very weights (weight sync only records the version),
    /// reporting log-probs of `kind`.
    fn local_engine(&self, kind: LogprobKind) -> Box<dyn Engine + Send + '_>;
    /// An independent copy of the current weights in `dtype`, for an engine: its weights
    /// stay put while the trainer updates its own, until [`EngineReplica::refresh`].
    fn replica(&self, dtype: DType) -> anyhow::Result<Box<dyn EngineReplica>>;
    /// Total number of parameters (trainable or not).
    fn num_parameters(&self) -> usize;
    /// One line naming the model, for the run's header.
    fn describe(&self) -> String;
    /// The concrete policy, for a replica of the same family to copy from.
    fn as_any(&self) -> &dyn Any;
}

/// An engine's own copy of a policy's weights.
pub trait EngineReplica: Send + Sync {
    /// A local engine over the replica, at weight version `version`.
    fn engine(
        &self,
        kind: LogprobKind,
        version: u64,
    ) -> anyhow::Result<Box<dyn Engine + Send + '_>>;
    /// Copies the trainer's current weights in (converting the dtype, keeping the AMX
    /// packing).
    fn refresh(&mut self, trainer: &dyn TrainPolicy) -> anyhow::Result<()>;
    /// Packs the replica's frozen weights for the CPU's AMX unit (`engine.cpu_matmul`), kept
    /// across [`Self::refresh`]; whether anything was packed. Only Qwen3 has the path.
    fn pack_for_amx(&mut self) -> anyhow::Result<bool> {
        Ok(false)
    }
    /// Whether the replica is packed for the AMX unit now.
    fn packed_for_amx(&self) -> bool {
        false
    }
}

/// Copies `source`'s trainable weights into `target`'s, converting the dtype. Refuses a
/// source of another shape.
fn copy_trainable(target: &dyn Policy, source: &dyn Policy) -> anyhow::Result<()> {
    let (to, from) = (target.trainable_vars(), source.trainable_vars());
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

impl TrainPolicy for TinyPolicy {
    fn local_engine(&self, kind: LogprobKind) -> Box<dyn Engine + Send + '_> {
        Box::new(LocalEngine::new(self).with_logprob_kind(kind))
    }

    fn replica(&self, dtype: DType) -> anyhow::Result<Box<dyn EngineReplica>> {
        ensure!(
            dtype == DType::F32,
            "TinyAgent samples in f32 only (engine.dtype = \"bf16\" needs model.kind = \"qwen3\")"
        );
        let model = self.inner();
        let copy = ConstrainedPolicy::new(
            TinyAgent::new(model.config().clone(), 0, model.device())?,
            self.bias().cloned(),
        );
        copy_trainable(&copy, self)?;
        Ok(Box::new(TinyReplica(copy)))
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

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A TinyAgent of its own (TinyAgent's weights are all trainable, so a copy is a policy).
struct TinyReplica(TinyPolicy);

impl EngineReplica for TinyReplica {
    fn engine(
        &self,
        kind: LogprobKind,
        version: u64,
    ) -> anyhow::Result<Box<dyn Engine + Send + '_>> {
        let mut engine = LocalEngine::new(&self.0).with_logprob_kind(kind);
        engine.sync_weights(&agentrl_engine::WeightSync::Shared { version })?;
        Ok(Box::new(engine))
    }

    fn refresh(&mut self, trainer: &dyn TrainPolicy) -> anyhow::Result<()> {
        copy_trainable(&self.0, trainer)
    }
}

impl TrainPolicy for Qwen3 {
    fn local_engine(&self, kind: LogprobKind) -> Box<dyn Engine + Send + '_> {
        Box::new(LocalEngine::new(self).with_logprob_kind(kind))
    }

    fn replica(&self, dtype: DType) -> anyhow::Result<Box<dyn EngineReplica>> {
        Ok(Box::new(Qwen3Replica::new(self, dtype, self.device())?))
    }

    fn num_parameters(&self) -> usize {
        self.named_weights()
            .iter()
            .map(|(_, t)| t.elem_count())
            .sum()
    }

    fn describe(&self) -> String {
        let c = self.config();
        let trainable: usize = Policy::trainable_vars(self)
            .iter()
            .map(|(_, v)| v.elem_count())
            .sum();
        format!(
            "{:?} ({} parameters, {} trainable; hidden {}, {} layers, {:?})",
            c.architecture,
            self.num_parameters(),
            trainable,
            c.hidden_size,
            c.num_hidden_layers,
            self.dtype()
        )
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl EngineReplica for Qwen3Replica {
    fn engine(
        &self,
        kind: LogprobKind,
        version: u64,
    ) -> anyhow::Result<Box<dyn Engine + Send + '_>> {
        let mut engine = LocalEngine::new(self).with_logprob_kind(kind);
        // The replica's weights are current; only the version is recorded.
        engine.update_decoder(version, |_| Ok(()))?;
        Ok(Box::new(engine))
    }

    fn refresh(&mut self, trainer: &dyn TrainPolicy) -> anyhow::Result<()> {
        let trainer = trainer
            .as_any()
            .downcast_ref::<Qwen3>()
            .context("a Qwen3 engine replica can only copy a Qwen3 trainer's weights")?;
        Qwen3Replica::refresh(self, trainer)
    }

    fn pack_for_amx(&mut self) -> anyhow::Result<bool> {
        Qwen3Replica::pack_for_amx(self)
    }

    fn packed_for_amx(&self) -> bool {
        self.model().packed_for_amx()
    }
}
