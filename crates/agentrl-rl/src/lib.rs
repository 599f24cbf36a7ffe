//! # agentrl-rl: the RL math core
//!
//! Pure functions over `candle_core::Tensor` (any device; f32 in tests): returns and critics,
//! group advantages, policy losses, loss aggregation, KL and entropy, off-policy correction for
//! engine/trainer mismatch, DAPO's overlong shaping, SFT/DPO/distillation losses, and the
//! evaluation estimators. Every formula lives in exactly one function whose doc comment cites
//! its section of `ALGORITHMS.md` (the project's formula reference) and the original paper.
//!
//! This crate knows nothing about models, tokenizers, the gym or the training loop: it sits
//! between the batch (`[B, T]` log-probs, rewards, loss mask, group ids) and the optimizer
//! step. Choices a trainer makes from TOML are closed enums with verl's kebab-case names
//! ([`AggMode`], [`AdvantageEstimator`], [`PolicyLoss`], [`KlEstimator`], [`KlController`],
//! [`RolloutCorrection`]).
//!
//! Conventions: per-token tensors are `[B, T]` with a 0/1 f32 `mask` (1 = policy action token;
//! prompt, padding and tool-output tokens are 0), outcome rewards are `[B]` host slices with
//! `group_ids: &[usize]`. Losses are minimised, return a differentiable scalar plus plain-f32
//! diagnostics, and give masked tokens exactly zero gradient. Bad inputs return [`RlError`].
//!
//! ## Algorithms as compositions (ALGORITHMS.md "Summary table")
//!
//! `agg(...)` is [`aggregate`]; "policy loss" is [`compute_policy_loss`] with that
//! [`PolicyLoss`]; the KL pieces are [`kl_loss`] (in loss) and [`apply_kl_to_rewards`] (in
//! reward, before advantages).
//!
//! | algorithm | composition |
//! |---|---|
//! | REINFORCE + baseline (§1) | `apply_kl_to_rewards(k1, β)` (optional) → [`discounted_returns`] − baseline → [`vanilla_pg_loss`] with `old = sg(logp)` → `seq-mean-token-sum` |
//! | PPO, RLHF (§2–3) | `apply_kl_to_rewards(k1, β` from [`KlController`]`)` → [`gae`]`(γ, λ)` → [`masked_whiten`] → [`ppo_clip_loss`]`(0.2, 0.2, dual_clip: Some(3.0) optional)` → `token-mean` (or `seq-mean-token-mean`); critic: [`value_loss`]`(ε_v = 0.5)` |
//! | GRPO (§4) | [`group_advantages`]`(GrpoStd)` → [`broadcast_to_tokens`] → [`ppo_clip_loss`]`(ε)` + [`kl_loss`]`(k3, β = 0.04)` → `seq-mean-token-mean` |
//! | Dr. GRPO (§5) | [`group_advantages`]`(MeanOnly)` → [`ppo_clip_loss`]`(0.2)` → `seq-mean-token-sum-norm` with `AggScale.max_len = L_max`; no KL |
//! | DAPO (§6) | [`soft_overlong_penalty`] added to `R` and [`overlong_filter_mask`] → [`dynamic_sampling_filter`] → [`group_advantages`]`(GrpoStd)` → [`ppo_clip_loss`]`(0.2, 0.28)` → `token-mean`; no KL |
//! | RLOO (§7) | `apply_kl_to_rewards(k1, β = 0.03–0.1)` → [`group_advantages`]`(LeaveOneOut)` → [`vanilla_pg_loss`] → `seq-mean-token-sum` |
//! | REINFORCE++ (§8) | `apply_kl_to_rewards(k1, β)` → [`reinforce_pp_advantages`]`(γ = 1)` (global whitening) → [`ppo_clip_loss`]`(0.2)` → `token-mean`; `-baseline` variant: [`reinforce_pp_baseline_advantages`] |
//! | GSPO (§9) | [`group_advantages`]`(GrpoStd)` → [`gspo_loss`]`(3e-4, 4e-4)` → `seq-mean-token-mean` (per-token advantages: [`gspo_token_loss`]) |
//! | CISPO (§10) | [`group_advantages`]`(GrpoStd)` → [`cispo_loss`]`(ε_low large, ε_high)` → `token-mean`; no KL |
//! | TIS / MIS / IcePop (§13) | [`tis_weights`]`(C = 2)` / [`mis_weights`]`(token \| sequence \| geometric)` / [`icepop_weights`] → `PolicyLossInputs.token_weights` of the base loss; log [`mismatch_metrics`] |
//! | Decoupled PPO (§13) | `token_weights = min(π_prox/π_behav, C)` via [`tis_weights`]`(train = prox, rollout = behav)` → [`ppo_clip_loss`] with `old = log π_prox` |
//! | Clip-Cov / KL-Cov (§12) | [`group_advantages`]`(GrpoStd)` → [`clip_cov_loss`]`(ε = 0.2, r = 2e-4, ω = [1, 5])` or [`kl_cov_loss`]`(k = 2e-3, β = 1)` (`PolicyLoss::ClipCov` / `KlCov`) → `token-mean`; no KL loss; monitor [`entropy_from_logits`] |
//! | DPO (§14) | [`sequence_log_probs`] for policy and reference, chosen and rejected → [`dpo_loss`]`(β = 0.1)` |
//! | RFT / RAFT / STaR (§14) | keep passing samples (e.g. [`dynamic_sampling_filter`]-style selection by reward) → [`sft_nll_loss`] → `token-mean` |
//! | GKD (§15) | mix data (share `λ = 0.5` sampled from the student) → student and teacher logits `[B, T, V]` → [`gkd_loss`]`(β = 0.5, τ = 0.9)` = [`gkd_jsd_per_token`] → `token-mean` |
//! | On-policy distillation (§15) | [`distill_advantages`]`(c = 1)` → [`vanilla_pg_loss`] (importance-sampling PG) or [`ppo_clip_loss`] → `token-mean` |
//! | MT-GRPO / GiGPO (§17) | turn-level rewards → [`group_advantages`] per turn group, added to the episode advantage → [`ppo_clip_loss`] → `token-mean` |
//! | any | + [`entropy_bonus_loss`]`(c_H)` on [`entropy_from_logits`]; evaluation: [`pass_at_k`], [`pass_hat_k`], [`bootstrap_ci`] |

pub mod advantages;
pub mod aggregation;
pub mod beyond;
mod checks;
pub mod entropy;
pub mod error;
pub mod eval;
pub mod kl;
pub mod offpolicy;
pub mod overlong;
pub mod policy_loss;
pub mod returns;

pub use advantages::{
    broadcast_to_tokens, compute_advantages, dynamic_sampling_filter, group_advantages,
    reinforce_pp_advantages, reinforce_pp_baseline_advantages, sequence_rewards,
    AdvantageEstimator, AdvantageInputs, AdvantageOutput, DynamicSamplingFilter, GroupAdvantages,
    GroupBaseline,
};
pub use aggregation::{aggregate, masked_mean_value, step_scale, AggMode, AggScale};
pub use beyond::{
    distill_advantages, dpo_loss, gkd_jsd_per_token, gkd_loss, reverse_kl_per_token,
    sequence_log_probs, sft_nll_loss, DpoOutput,
};
pub use entropy::{entropy_bonus_loss, entropy_from_logits, token_log_probs};
pub use error::{Result, RlError};
pub use eval::{
    bootstrap_ci, mean_pass_at_k, mean_pass_hat_k, pass_at_k, pass_hat_k, ConfidenceInterval,
};
pub use kl::{
    apply_kl_to_rewards, kl_estimate, kl_loss, AdaptiveKlController, KlController, KlEstimator,
};
pub use offpolicy::{
    icepop_weights, mis_weights, mismatch_metrics, rollout_correction_weights, tis_weights,
    CorrectionWeights, MisLevel, MismatchMetrics, RolloutCorrection,
};
pub use overlong::{overlong_filter_mask, soft_overlong_penalties, soft_overlong_penalty};
pub use policy_loss::{
    cispo_loss, clip_cov_loss, compute_policy_loss, gspo_loss, gspo_token_loss, kl_cov_loss,
    ppo_clip_loss, token_ratio, vanilla_pg_loss, ClipCovParams, PolicyLoss, PolicyLossDiagnostics,
    PolicyLossInputs, PolicyLossOutput,
};
pub use returns::{discounted_returns, gae, masked_whiten, value_loss, GaeOutput, ValueLossOutput};
