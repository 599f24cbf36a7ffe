//! The algorithm knobs: one type, one value per preset, user overrides merged on top.
//!
//! Where it sits: `[algorithm]` in a config names a preset (`name = "dapo"`) and may override
//! any of its knobs, its advantage estimator and policy loss included (`adv_estimator`,
//! `policy_loss`, by verl's names: [`super::registry`]). [`Knobs::resolve`] starts from the preset's value (in the algorithm's own
//! file), merges the user's keys onto it, and deserialises the result, so an unknown key is
//! reported by name with the valid ones listed. The run directory stores every knob written
//! out; `agentrl train --print-config` prints the same.

use std::borrow::Cow;

use agentrl_rl::{AggMode, BypassLossType, IsLevel, KlEstimator, ThresholdSpec};
use serde::{Deserialize, Serialize};

use super::gdpo::RewardComponent;
use super::registry::{AdvEstimatorName, PolicyLossName};
use super::Algorithm;

/// Where the KL penalty to the frozen reference policy goes (ALGORITHMS.md §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KlPlacement {
    /// `r_t -= β·k_t`, detached, flowing through the advantages (PPO-RLHF, RLOO, REINFORCE++).
    InReward,
    /// `+β·k_t` differentiated with the policy loss (GRPO).
    InLoss,
}

/// Every knob of an RL algorithm. A preset is a value of this type; see each algorithm's file
/// for why it chose its values. Which verl option each knob is: [`super::registry`].
///
/// The few list and string knobs are `Cow<'static, _>` so that presets stay `const`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Knobs {
    /// The advantage estimator, by verl's name (verl `algorithm.adv_estimator`).
    pub adv_estimator: AdvEstimatorName,
    /// The policy loss, by verl's name (verl `actor.policy_loss.loss_mode`); replaced by
    /// bypass mode's loss when `bypass_mode` is on.
    pub policy_loss: PolicyLossName,
    /// Lower clip ε of the ratio, `1 − eps_low` (ALGORITHMS.md §3).
    pub eps_low: f64,
    /// Upper clip ε, `1 + eps_high`; above `eps_low` is DAPO's clip-higher (§6).
    pub eps_high: f64,
    /// Dual-clip constant c > 1 (§3); unset disables dual clip. verl's `clip_ratio_c`, which
    /// DPPO reads as the truncation `c` of its detached IS ratio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dual_clip_c: Option<f64>,
    /// β of the KL penalty to the reference policy (§11); 0 skips the reference forward.
    pub kl_coef: f64,
    /// The KL estimator, by verl's name (verl `actor.kl_loss_type`, or `algorithm.kl_penalty`
    /// when `kl_placement = "in-reward"`): `k1`/`kl`, `k2`/`mse`, `k3`/`low_var_kl`, `abs`,
    /// and the straight-through `k1+`, `k2+`, `k3+`, `abs+` (also `kl+`, `mse+`,
    /// `low_var_kl+`).
    pub kl_loss_type: KlEstimator,
    pub kl_placement: KlPlacement,
    /// Target KL of the adaptive controller (§11); unset keeps β fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl_target: Option<f64>,
    /// Horizon of the adaptive KL controller, in samples (§11).
    pub kl_horizon: f64,
    /// Weight of the entropy bonus (§12).
    pub entropy_coef: f64,
    /// How per-token losses become one number (§17), by verl's name (verl
    /// `actor.loss_agg_mode`): `token-mean`, `token-sum`, `seq-mean-token-sum`,
    /// `seq-mean-token-mean`, `seq-mean-token-sum-norm`.
    pub loss_agg_mode: AggMode,
    /// Optimizer passes over each rollout batch.
    pub epochs: usize,
    pub minibatches: usize,
    /// Recompute π_old with the trainer before the update instead of trusting the engine's
    /// sampling log-probs. Needed for a meaningful trust region when `epochs > 1`.
    pub old_logprob_pass: bool,
    /// Divide group-centred rewards by the group std (GRPO yes, Dr. GRPO no; verl
    /// `norm_adv_by_std_in_grpo`, read by `grpo`, `grpo_passk` and `gdpo`).
    pub std_normalize: bool,
    /// DAPO: drop groups whose rewards are all equal and refill the batch (§6).
    pub dynamic_sampling: bool,
    /// DAPO soft overlong punishment: the cache length L_cache in action tokens (§6); unset
    /// disables it. L_max is the episode's action budget (`max_turns · max_action_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlong_cache: Option<usize>,
    /// Discount γ (GAE, REINFORCE++).
    pub gamma: f64,
    /// GAE λ (PPO).
    pub lam: f64,
    /// Value-loss weight (PPO's critic; 0 for critic-free algorithms).
    pub value_coef: f64,
    /// Value clip ε_v (PPO).
    pub value_clip: f64,
    /// SAPO gate temperature for tokens with `Â > 0` (verl `actor.tau_pos`).
    pub tau_pos: f64,
    /// SAPO gate temperature for tokens with `Â ≤ 0` (verl `actor.tau_neg`); above `tau_pos`,
    /// negative tokens far off-policy lose their gradient faster.
    pub tau_neg: f64,
    /// Clip-Cov r: share of valid tokens whose PG term is dropped (verl
    /// `policy_loss.clip_cov_ratio`; ALGORITHMS.md §12).
    pub clip_cov_ratio: f64,
    /// Clip-Cov ω_low: lower bound of the token covariance of droppable tokens (verl
    /// `policy_loss.clip_cov_lb`).
    pub clip_cov_lb: f64,
    /// Clip-Cov ω_high: upper bound of that covariance (verl `policy_loss.clip_cov_ub`).
    pub clip_cov_ub: f64,
    /// KL-Cov k: share of valid tokens, the largest by covariance, that get the
    /// `|log π_θ − log π_old|` penalty (verl `policy_loss.kl_cov_ratio`; ALGORITHMS.md §12).
    pub kl_cov_ratio: f64,
    /// KL-Cov β: weight of that penalty (verl `policy_loss.ppo_kl_coef`).
    pub ppo_kl_coef: f64,
    /// DRO β > 0: weight of the `½β(log π_θ − log π_old)²` penalty (verl
    /// `policy_loss.dro_beta`, which has no default).
    pub dro_beta: f64,
    /// GDPO's reward components (verl `algorithm.gdpo_reward_keys`): which parts of the gym's
    /// verdict are normalised per group on their own ([`RewardComponent`]).
    pub gdpo_reward_keys: Cow<'static, [RewardComponent]>,
    /// One weight per GDPO component (verl `algorithm.gdpo_reward_weights`); unset = equal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gdpo_reward_weights: Option<Cow<'static, [f64]>>,
    /// IS weight level, `token` or `sequence` (verl `rollout_correction.rollout_is`); unset =
    /// no IS weights. Decoupled mode (the default) weighs π_old/π_rollout, which needs
    /// `old_logprob_pass`; bypass mode weighs π_θ/π_rollout inside the loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_is: Option<IsLevel>,
    /// A number C (truncate the IS weight at C) or `"lo_hi"` (IcePop: zero outside
    /// `[lo, hi]`), on `ρ = π_train/π_rollout` (verl `rollout_is_threshold`, default 2.0).
    pub rollout_is_threshold: ThresholdSpec,
    /// Divide the IS weights by their batch mean (verl `rollout_is_batch_normalize`).
    pub rollout_is_batch_normalize: bool,
    /// Rejection filters, comma-separated, e.g. `"token_k1,seq_mean_k3"` (verl
    /// `rollout_rs`): `token_k1..3`, `seq_sum_k1..3`, `seq_mean_k1..3`, `seq_max_k2/3`.
    /// Rejected tokens leave the loss mask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_rs: Option<Cow<'static, str>>,
    /// One threshold for every `rollout_rs` option or one per option, comma-separated, e.g.
    /// `"0.5_2.0,0.01"` (verl `rollout_rs_threshold`). k1 options take `"lo_hi"` bounds on
    /// `π_rollout/π_train` (verl's orientation, the reciprocal of ρ) or one number u meaning
    /// `"1/u_u"`; k2/k3 options take an upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_rs_threshold: Option<ThresholdSpec>,
    /// verl's bypass mode (`rollout_correction.bypass_mode`): π_old is the engine's
    /// π_rollout (no old-log-prob pass) and the loss is `loss_type` with the correction inside.
    pub bypass_mode: bool,
    /// Bypass mode's loss (verl `rollout_correction.loss_type`): `ppo_clip` (the ratio is the
    /// IS correction; IS weights are only measured) or `reinforce` (`−Â·sg(w)·log π_θ`).
    pub loss_type: BypassLossType,
}

/// Knobs shared by most presets; each preset file starts from it and names what differs.
pub const BASE: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Grpo,
    policy_loss: PolicyLossName::Vanilla,
    eps_low: 0.2,
    eps_high: 0.2,
    dual_clip_c: None,
    kl_coef: 0.0,
    kl_loss_type: KlEstimator::K3,
    kl_placement: KlPlacement::InLoss,
    kl_target: None,
    kl_horizon: 10_000.0,
    entropy_coef: 0.0,
    loss_agg_mode: AggMode::TokenMean,
    epochs: 1,
    minibatches: 1,
    old_logprob_pass: false,
    std_normalize: true,
    dynamic_sampling: false,
    overlong_cache: None,
    gamma: 1.0,
    lam: 1.0,
    value_coef: 0.0,
    value_clip: 0.5,
    // SAPO, Clip-Cov and KL-Cov knobs: verl 0.9.1's config defaults (`actor.yaml`); only the
    // presets that read them (sapo, clip_cov, kl_cov, dro) change them. verl's dro_beta has no
    // default; the value here is the dro preset's.
    tau_pos: 1.0,
    tau_neg: 1.05,
    clip_cov_ratio: 2e-4,
    clip_cov_lb: 1.0,
    clip_cov_ub: 5.0,
    kl_cov_ratio: 2e-4,
    ppo_kl_coef: 0.1,
    dro_beta: 1.0,
    // The gdpo preset's components (verl has no default: its keys must be set), with verl's
    // equal weights.
    gdpo_reward_keys: Cow::Borrowed(super::gdpo::COMPONENTS),
    gdpo_reward_weights: None,
    // verl's `rollout_correction` defaults: no IS weights, no rejection, decoupled mode.
    rollout_is: None,
    rollout_is_threshold: ThresholdSpec::Number(2.0),
    rollout_is_batch_normalize: false,
    rollout_rs: None,
    rollout_rs_threshold: None,
    bypass_mode: false,
    loss_type: BypassLossType::PpoClip,
};

/// Knobs renamed to verl's names, `(old, new)`: run directories written before the rename
/// store the old key, and still load.
const LEGACY_NAMES: [(&str, &str); 2] =
    [("agg", "loss_agg_mode"), ("kl_estimator", "kl_loss_type")];

impl Knobs {
    /// The knobs of `algorithm`'s preset with `overrides` (the `[algorithm]` table without its
    /// `name`) merged on top. Errors name the unknown or mistyped key.
    pub fn resolve(algorithm: Algorithm, overrides: &toml::Table) -> anyhow::Result<Self> {
        let preset = algorithm.preset();
        let mut table = match toml::Value::try_from(&preset)? {
            toml::Value::Table(t) => t,
            other => anyhow::bail!("algorithm preset serialised as {other:?}, not a table"),
        };
        for (key, value) in overrides {
            let key = match LEGACY_NAMES.iter().find(|(old, _)| old == key) {
                Some((old, new)) => {
                    anyhow::ensure!(
                        !overrides.contains_key(*new),
                        "[algorithm] ({algorithm}): algorithm.{old} and algorithm.{new} are the \
                         same knob (`{old}` is its name before verl's); set only {new}"
                    );
                    (*new).to_string()
                }
                None => key.clone(),
            };
            table.insert(key, value.clone());
        }
        Knobs::deserialize(toml::Value::Table(table)).map_err(|e| {
            // A value deserialiser's error does not say which key it was reading: find the
            // first override that fails on its own and name it.
            let culprit = overrides.iter().find(|(key, value)| {
                let mut alone = match toml::Value::try_from(&preset) {
                    Ok(toml::Value::Table(t)) => t,
                    _ => return false,
                };
                alone.insert((*key).clone(), (*value).clone());
                Knobs::deserialize(toml::Value::Table(alone)).is_err()
            });
            match culprit {
                Some((key, value)) if !e.to_string().contains(&format!("algorithm.{key}")) => {
                    anyhow::anyhow!("[algorithm] ({algorithm}): algorithm.{key} = {value}: {e}")
                }
                _ => anyhow::anyhow!("[algorithm] ({algorithm}): {e}"),
            }
        })
    }
}
