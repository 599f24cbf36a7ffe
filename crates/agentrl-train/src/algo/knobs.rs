//! The algorithm knobs: one type, one value per preset, user overrides merged on top.
//!
//! Where it sits: `[algorithm]` in a config names a preset (`name = "dapo"`) and may override
//! any of its knobs. [`Knobs::resolve`] starts from the preset's value (in the algorithm's own
//! file), merges the user's keys onto it, and deserialises the result, so an unknown key is
//! reported by name with the valid ones listed. The run directory stores every knob written
//! out; `agentrl train --print-config` prints the same.

use agentrl_rl::{AggMode, KlEstimator};
use serde::{Deserialize, Serialize};

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
/// for why it chose its values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Knobs {
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
    pub kl_estimator: KlEstimator,
    pub kl_placement: KlPlacement,
    /// Target KL of the adaptive controller (§11); unset keeps β fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl_target: Option<f64>,
    /// Horizon of the adaptive KL controller, in samples (§11).
    pub kl_horizon: f64,
    /// Weight of the entropy bonus (§12).
    pub entropy_coef: f64,
    /// How per-token losses become one number (§17).
    pub agg: AggMode,
    /// Optimizer passes over each rollout batch.
    pub epochs: usize,
    pub minibatches: usize,
    /// Recompute π_old with the trainer before the update instead of trusting the engine's
    /// sampling log-probs. Needed for a meaningful trust region when `epochs > 1`.
    pub old_logprob_pass: bool,
    /// Divide group-centred rewards by the group std (GRPO yes, Dr. GRPO no).
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
}

/// Knobs shared by most presets; each preset file starts from it and names what differs.
pub const BASE: Knobs = Knobs {
    eps_low: 0.2,
    eps_high: 0.2,
    dual_clip_c: None,
    kl_coef: 0.0,
    kl_estimator: KlEstimator::K3,
    kl_placement: KlPlacement::InLoss,
    kl_target: None,
    kl_horizon: 10_000.0,
    entropy_coef: 0.0,
    agg: AggMode::TokenMean,
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
};

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
            table.insert(key.clone(), value.clone());
        }
        Knobs::deserialize(toml::Value::Table(table))
            .map_err(|e| anyhow::anyhow!("[algorithm] ({algorithm}): {e}"))
    }
}
