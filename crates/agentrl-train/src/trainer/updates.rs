//! The optimizer steps a recipe takes on episodes it brings: one supervised step (SFT, RFT,
//! a format warm-up), one DPO step on pairs, one distillation step against a teacher, the
//! policy's own samples for them, and the bookkeeping that ends a recipe's training step.
//!
//! Where it sits: a recipe (`crate::recipes`) → here → the losses of `crate::update` and the
//! trainer's optimizer. Part of the trainer core: it knows no recipe.

use std::time::Instant;

use agentrl_rollout::{Batch, Episode};
use rand_chacha::ChaCha8Rng;

use super::Trainer;
use crate::sampler::MAX_LIVE_EPISODES;
use crate::update::{
    distill_update, dpo_update, sequence_log_probs_of, supervised_update, token_log_probs_of,
    DistillMetrics, DpoMetrics,
};

impl Trainer {
    /// One supervised step on `episodes` (negative log-likelihood of their action tokens, the
    /// batch's loss mask) at `lr`; advances the step counter and the episode count. Returns
    /// the loss.
    pub(crate) fn supervised_step(&mut self, episodes: &[Episode], lr: f64) -> anyhow::Result<f64> {
        let started = Instant::now();
        let loss = self.supervised_update(episodes, lr)?;
        self.finish_step(episodes.len(), started.elapsed().as_secs_f64());
        Ok(loss)
    }

    /// One supervised optimizer step on `episodes` at `lr`, within the current training step
    /// (the step counter stays: a recipe may take several, then [`Self::finish_step`]).
    pub(crate) fn supervised_update(
        &mut self,
        episodes: &[Episode],
        lr: f64,
    ) -> anyhow::Result<f64> {
        anyhow::ensure!(!episodes.is_empty(), "a supervised step needs episodes");
        // Micro-batches as the RL update's (`algorithm.minibatches` of the step's episodes,
        // what `agentrl plan` budgets), so a warm-up on long demonstrations fits as RL does.
        let minibatches = self
            .config
            .algorithm
            .knobs
            .minibatches
            .clamp(1, episodes.len());
        let micro_batches = episodes
            .chunks(episodes.len().div_ceil(minibatches))
            .map(|chunk| Batch::from_episodes(chunk, self.codec.pad_id(), &self.device))
            .collect::<Result<Vec<_>, _>>()?;
        let loss = supervised_update(
            self.policy.as_ref(),
            &mut self.optimizer,
            &self.vars,
            &micro_batches,
            lr,
            self.config.optim.grad_clip,
        )?;
        self.state.optimizer_steps = self.optimizer.steps_taken();
        Ok(loss)
    }

    /// Ends a recipe's training step: the step counter, the episodes it sampled or read, its
    /// seconds.
    pub(crate) fn finish_step(&mut self, episodes: usize, seconds: f64) {
        self.state.step += 1;
        self.state.optimizer_steps = self.optimizer.steps_taken();
        self.state.episodes_seen += episodes as u64;
        self.state.train_seconds += seconds;
    }

    /// `per_task` episodes of each of `task_ids`, sampled by the current policy as an RL
    /// step samples them (the run's sampling parameters, candidate shuffling, engine weights
    /// synced to this step).
    #[doc(hidden)]
    pub fn sample_policy_episodes(
        &mut self,
        task_ids: &[String],
        per_task: usize,
        rng: &mut ChaCha8Rng,
    ) -> anyhow::Result<Vec<Episode>> {
        self.sync_engine_for(self.state.step as u64)?;
        let sampling = self.config.sampling.clone();
        self.sampler().sample(
            task_ids,
            per_task,
            &sampling,
            self.config.rollout.shuffle_candidates,
            rng,
        )
    }

    /// Summed action-token log-probs of each of `episodes` under the current policy (no
    /// gradient kept), in chunks of `MAX_LIVE_EPISODES`.
    #[doc(hidden)]
    pub fn sequence_log_probs(&self, episodes: &[Episode]) -> anyhow::Result<Vec<f32>> {
        let mut out = Vec::with_capacity(episodes.len());
        for chunk in episodes.chunks(MAX_LIVE_EPISODES) {
            let batch = Batch::from_episodes(chunk, self.codec.pad_id(), &self.device)?;
            let logp = sequence_log_probs_of(self.policy.as_ref(), &batch)?;
            out.extend(
                logp.detach()
                    .to_dtype(candle_core::DType::F32)?
                    .to_vec1::<f32>()?,
            );
        }
        Ok(out)
    }

    /// One DPO optimizer step ([`dpo_update`]) on `chosen[i]` against
    /// `rejected[i]`, with the reference's summed log-probs `reference` (chosen then rejected)
    /// at `lr`; `dry_run` only measures. The step counter stays.
    #[doc(hidden)]
    pub fn dpo_update(
        &mut self,
        chosen: &[Episode],
        rejected: &[Episode],
        reference: &[f32],
        lr: f64,
        dry_run: bool,
    ) -> anyhow::Result<DpoMetrics> {
        anyhow::ensure!(
            !chosen.is_empty() && chosen.len() == rejected.len(),
            "a DPO step needs as many chosen as rejected episodes (got {} and {})",
            chosen.len(),
            rejected.len()
        );
        let rows: Vec<Episode> = chosen.iter().chain(rejected).cloned().collect();
        let batch = Batch::from_episodes(&rows, self.codec.pad_id(), &self.device)?;
        let metrics = dpo_update(
            self.policy.as_ref(),
            &mut self.optimizer,
            &self.vars,
            &batch,
            reference,
            self.config.dpo.beta,
            lr,
            self.config.optim.grad_clip,
            dry_run,
        )?;
        self.state.optimizer_steps = self.optimizer.steps_taken();
        Ok(metrics)
    }

    /// One on-policy distillation step ([`distill_update`]) on the student's
    /// own `episodes`, the `teacher` scoring every sampled action token, at `lr` with the
    /// advantage coefficient `coef`; `dry_run` only measures. The step counter stays.
    #[doc(hidden)]
    pub fn distill_update(
        &mut self,
        teacher: &Trainer,
        episodes: &[Episode],
        coef: f64,
        lr: f64,
        dry_run: bool,
    ) -> anyhow::Result<DistillMetrics> {
        anyhow::ensure!(!episodes.is_empty(), "a distillation step needs episodes");
        let batch = Batch::from_episodes(episodes, self.codec.pad_id(), &self.device)?;
        let teacher_batch =
            Batch::from_episodes(episodes, teacher.codec.pad_id(), &teacher.device)?;
        let teacher_logp = token_log_probs_of(teacher.policy.as_ref(), &teacher_batch)?
            .detach()
            .to_device(&self.device)?;
        let metrics = distill_update(
            self.policy.as_ref(),
            &mut self.optimizer,
            &self.vars,
            &batch,
            &teacher_logp,
            coef,
            lr,
            self.config.optim.grad_clip,
            dry_run,
        )?;
        self.state.optimizer_steps = self.optimizer.steps_taken();
        Ok(metrics)
    }
}
