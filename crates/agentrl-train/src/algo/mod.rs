//! Algorithm presets: each RL algorithm as a named composition of `agentrl-rl` functions, one
//! file per algorithm that holds its whole recipe (CleanRL-style): its knob values (its
//! advantage estimator and policy loss among them, by verl's names), why it chose them, and
//! the checks of what it brings. Knob-driven step hooks (DAPO's overlong shaping and
//! dynamic-sampling refill, GDPO's reward components) live in [`dapo`] and [`gdpo`] and are
//! called for every preset that turns them on.
//!
//! Where it sits: the trainer collects a rollout batch, then asks the resolved [`Knobs`] for
//! (1) the per-token advantages ([`Knobs::advantage_estimator`]) and (2) the per-token policy
//! loss ([`Knobs::policy_loss`]), both built by [`registry`] from the names `adv_estimator` and
//! `policy_loss`, so any estimator and any loss run on any preset: a preset only sets their
//! defaults. KL, entropy, the value loss, aggregation and rollout correction are shared and
//! applied by the update with the same knobs. Closed enums with exhaustive `match`es play the
//! role of verl's string registries, with the compiler checking every case. This module never
//! imports the config: the config imports it.
//!
//! GKD (ALGORITHMS.md §15, `agentrl_rl::gkd_loss`) has no preset: its loss is a divergence to a
//! teacher's full-vocabulary logits, with no reward or advantage, so it belongs to the
//! distillation recipe with a teacher model (issue 15), not to this RL trainer.

use serde::{Deserialize, Serialize};

pub mod bypass;
pub mod cispo;
pub mod clip_cov;
pub mod dapo;
pub mod dppo;
pub mod dr_grpo;
pub mod dro;
pub mod gdpo;
pub mod gmpo;
pub mod gpg;
pub mod grpo;
pub mod grpo_passk;
pub mod gspo;
pub mod kl_cov;
pub mod knobs;
pub mod opo;
pub mod otb;
pub mod ppo;
pub mod registry;
pub mod reinforce_pp;
pub mod remax;
pub mod rloo;
pub mod sapo;

pub use gdpo::RewardComponent;
pub use knobs::{KlPlacement, Knobs, BASE};
pub use registry::{AdvEstimatorName, PolicyLossName};

/// The algorithm presets, chosen by `algorithm.name` in the config (verl's name where verl has
/// one: its loss mode, advantage estimator or rollout-correction preset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    Grpo,
    DrGrpo,
    Dapo,
    Rloo,
    ReinforcePp,
    Ppo,
    Gspo,
    Cispo,
    Sapo,
    /// GMPO, verl's `geo_mean` loss mode.
    #[serde(rename = "geo_mean", alias = "gmpo")]
    Gmpo,
    Gpg,
    #[serde(alias = "dppo")]
    DppoTv,
    DppoKl,
    Remax,
    Opo,
    #[serde(alias = "clip-cov")]
    ClipCov,
    #[serde(alias = "kl-cov")]
    KlCov,
    Dro,
    Gdpo,
    GrpoPassk,
    /// OTB, verl's `optimal_token_baseline` estimator.
    #[serde(rename = "optimal_token_baseline", alias = "otb")]
    Otb,
    /// TIR-OTB, verl's `tir_optimal_token_baseline` estimator.
    #[serde(rename = "tir_optimal_token_baseline", alias = "tir_otb")]
    TirOtb,
    /// verl's `RolloutCorrectionConfig.bypass_ppo_clip_k3_rs()`.
    BypassPpoClipK3Rs,
    /// verl's `RolloutCorrectionConfig.bypass_pg_is()`.
    BypassPgIs,
}

/// Every algorithm, in the order the docs list them.
pub const ALL: [Algorithm; 24] = [
    Algorithm::Grpo,
    Algorithm::DrGrpo,
    Algorithm::Dapo,
    Algorithm::Rloo,
    Algorithm::ReinforcePp,
    Algorithm::Ppo,
    Algorithm::Gspo,
    Algorithm::Cispo,
    Algorithm::Sapo,
    Algorithm::Gmpo,
    Algorithm::Gpg,
    Algorithm::DppoTv,
    Algorithm::DppoKl,
    Algorithm::Remax,
    Algorithm::Opo,
    Algorithm::ClipCov,
    Algorithm::KlCov,
    Algorithm::Dro,
    Algorithm::Gdpo,
    Algorithm::GrpoPassk,
    Algorithm::Otb,
    Algorithm::TirOtb,
    Algorithm::BypassPpoClipK3Rs,
    Algorithm::BypassPgIs,
];

/// What the checks of a preset see besides its knobs: the shape of a rollout step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepShape {
    pub group_size: usize,
    pub tasks_per_step: usize,
}

/// Problems found by a check: errors stop the run, warnings are printed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Findings {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Grpo => "grpo",
            Algorithm::DrGrpo => "dr_grpo",
            Algorithm::Dapo => "dapo",
            Algorithm::Rloo => "rloo",
            Algorithm::ReinforcePp => "reinforce_pp",
            Algorithm::Ppo => "ppo",
            Algorithm::Gspo => "gspo",
            Algorithm::Cispo => "cispo",
            Algorithm::Sapo => "sapo",
            Algorithm::Gmpo => "geo_mean",
            Algorithm::Gpg => "gpg",
            Algorithm::DppoTv => "dppo_tv",
            Algorithm::DppoKl => "dppo_kl",
            Algorithm::Remax => "remax",
            Algorithm::Opo => "opo",
            Algorithm::ClipCov => "clip_cov",
            Algorithm::KlCov => "kl_cov",
            Algorithm::Dro => "dro",
            Algorithm::Gdpo => "gdpo",
            Algorithm::GrpoPassk => "grpo_passk",
            Algorithm::Otb => "optimal_token_baseline",
            Algorithm::TirOtb => "tir_optimal_token_baseline",
            Algorithm::BypassPpoClipK3Rs => "bypass_ppo_clip_k3_rs",
            Algorithm::BypassPgIs => "bypass_pg_is",
        }
    }

    /// The preset's knobs: what `[algorithm]` resolves to when a key is unset.
    pub fn preset(self) -> Knobs {
        match self {
            Algorithm::Grpo => grpo::PRESET,
            Algorithm::DrGrpo => dr_grpo::PRESET,
            Algorithm::Dapo => dapo::PRESET,
            Algorithm::Rloo => rloo::PRESET,
            Algorithm::ReinforcePp => reinforce_pp::PRESET,
            Algorithm::Ppo => ppo::PRESET,
            Algorithm::Gspo => gspo::PRESET,
            Algorithm::Cispo => cispo::PRESET,
            Algorithm::Sapo => sapo::PRESET,
            Algorithm::Gmpo => gmpo::PRESET,
            Algorithm::Gpg => gpg::PRESET,
            Algorithm::DppoTv => dppo::PRESET_TV,
            Algorithm::DppoKl => dppo::PRESET_KL,
            Algorithm::Remax => remax::PRESET,
            Algorithm::Opo => opo::PRESET,
            Algorithm::ClipCov => clip_cov::PRESET,
            Algorithm::KlCov => kl_cov::PRESET,
            Algorithm::Dro => dro::PRESET,
            Algorithm::Gdpo => gdpo::PRESET,
            Algorithm::GrpoPassk => grpo_passk::PRESET,
            Algorithm::Otb => otb::PRESET_OTB,
            Algorithm::TirOtb => otb::PRESET_TIR,
            Algorithm::BypassPpoClipK3Rs => bypass::PRESET_PPO_CLIP_K3_RS,
            Algorithm::BypassPgIs => bypass::PRESET_PG_IS,
        }
    }

    /// Checks the knobs: the ones every configuration shares, then those of the estimator and
    /// the loss the knobs name (each in its algorithm's file) and of the rollout correction.
    /// `overridden` lists the keys the user set, for checks about knobs nothing reads.
    pub fn check(self, knobs: &Knobs, shape: StepShape, overridden: &[String]) -> Findings {
        let mut f = common_checks(self, knobs, shape, overridden);
        match knobs.adv_estimator {
            AdvEstimatorName::Gae => ppo::check(knobs, &mut f),
            AdvEstimatorName::Rloo => rloo::check(shape, &mut f),
            AdvEstimatorName::Opo => opo::check(knobs, &mut f),
            AdvEstimatorName::Gdpo => gdpo::check(knobs, shape, &mut f),
            AdvEstimatorName::GrpoPassk => grpo_passk::check(shape, &mut f),
            AdvEstimatorName::OptimalTokenBaseline | AdvEstimatorName::TirOptimalTokenBaseline => {
                otb::check(shape, &mut f)
            }
            AdvEstimatorName::Grpo
            | AdvEstimatorName::ReinforcePlusPlus
            | AdvEstimatorName::ReinforcePlusPlusBaseline
            | AdvEstimatorName::Remax
            | AdvEstimatorName::Gpg => {}
        }
        if !knobs.bypass_mode {
            match knobs.policy_loss {
                PolicyLossName::Sapo => sapo::check(knobs, &mut f),
                PolicyLossName::Gpg => gpg::check(knobs, &mut f),
                PolicyLossName::DppoTv | PolicyLossName::DppoKl => dppo::check(knobs, &mut f),
                PolicyLossName::ClipCov => clip_cov::check(knobs, &mut f),
                PolicyLossName::KlCov => kl_cov::check(knobs, &mut f),
                PolicyLossName::Dro => dro::check(knobs, &mut f),
                PolicyLossName::Vanilla
                | PolicyLossName::Gspo
                | PolicyLossName::GspoSequence
                | PolicyLossName::GeoMean
                | PolicyLossName::Cispo
                | PolicyLossName::VanillaPg => {}
            }
        }
        bypass::check(knobs, overridden, &mut f);
        if knobs.clips_the_ratio() && knobs.eps_high < knobs.eps_low {
            f.errors.push(format!(
                "algorithm.eps_high ({}) < algorithm.eps_low ({}): clip-higher raises the upper \
                 bound; did you swap them?",
                knobs.eps_high, knobs.eps_low
            ));
        }
        f
    }
}

/// Knobs that only one policy loss reads, and that loss (a user's override of one under
/// another loss is reported).
const LOSS_ONLY_KNOBS: [(&[&str], PolicyLossName); 4] = [
    (&["tau_pos", "tau_neg"], PolicyLossName::Sapo),
    (
        &["clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"],
        PolicyLossName::ClipCov,
    ),
    (&["kl_cov_ratio", "ppo_kl_coef"], PolicyLossName::KlCov),
    (&["dro_beta"], PolicyLossName::Dro),
];

/// Checks that hold for every preset.
fn common_checks(
    algorithm: Algorithm,
    knobs: &Knobs,
    shape: StepShape,
    overridden: &[String],
) -> Findings {
    let mut f = Findings::default();
    let name = algorithm.as_str();
    let finite_nonneg = |x: f64| x.is_finite() && x >= 0.0;
    for (key, value) in [
        ("kl_coef", knobs.kl_coef),
        ("entropy_coef", knobs.entropy_coef),
        ("value_coef", knobs.value_coef),
        ("value_clip", knobs.value_clip),
        ("gamma", knobs.gamma),
        ("lam", knobs.lam),
    ] {
        if !finite_nonneg(value) {
            f.errors.push(format!(
                "algorithm.{key} = {value} must be a finite number >= 0"
            ));
        }
    }
    if !(knobs.kl_horizon.is_finite() && knobs.kl_horizon > 0.0) {
        f.errors.push(format!(
            "algorithm.kl_horizon = {} must be a positive number",
            knobs.kl_horizon
        ));
    }
    if knobs.gamma > 1.0 || knobs.lam > 1.0 {
        f.errors
            .push("algorithm.gamma and algorithm.lam must lie in [0, 1]".to_string());
    }
    if knobs.epochs > 1 && !knobs.old_logprob_pass && !knobs.bypass_mode {
        f.errors.push(format!(
            "algorithm.epochs = {} without algorithm.old_logprob_pass = true: later epochs \
             would take their ratio against the engine's sampling log-probs, not the policy \
             before the update; set old_logprob_pass = true",
            knobs.epochs
        ));
    }
    if knobs.dynamic_sampling && shape.group_size < 2 {
        f.errors.push(format!(
            "algorithm.dynamic_sampling with rollout.group_size = {}: every group of one has \
             all-equal rewards, so every group would be dropped",
            shape.group_size
        ));
    }
    let estimator = knobs.adv_estimator;
    let loss = if knobs.bypass_mode {
        "bypass_mode"
    } else {
        knobs.policy_loss.as_str()
    };
    if knobs.value_coef != 0.0 && !knobs.uses_critic() {
        f.errors.push(format!(
            "algorithm.value_coef is set but {name} uses adv_estimator = {estimator}, which has \
             no critic; only adv_estimator = gae trains the value head"
        ));
    }
    let set = |key: &str| overridden.iter().any(|o| o == key);
    for (keys, reader) in LOSS_ONLY_KNOBS {
        if knobs.bypass_mode || knobs.policy_loss != reader {
            for key in keys.iter().filter(|k| set(k)) {
                f.warnings.push(format!(
                    "algorithm.{key} is only read by policy_loss = {reader}, not by {loss}"
                ));
            }
        }
    }
    if !knobs.needs_reward_components() && (set("gdpo_reward_keys") || set("gdpo_reward_weights")) {
        f.warnings.push(format!(
            "algorithm.gdpo_reward_keys / gdpo_reward_weights are only read by adv_estimator = \
             gdpo, not by {estimator}"
        ));
    }
    if (set("lam") || set("value_clip")) && !knobs.uses_critic() {
        f.warnings.push(format!(
            "algorithm.lam / value_clip are GAE and critic knobs; adv_estimator = {estimator} \
             ignores them"
        ));
    }
    if knobs.dual_clip_c.is_some() && !knobs.reads_dual_clip() {
        f.warnings
            .push(format!("algorithm.dual_clip_c is ignored by {loss}"));
    }
    if !(0.0..=1.0).contains(&knobs.eps_low) || !finite_nonneg(knobs.eps_high) {
        f.errors.push(format!(
            "algorithm.eps_low = {} must lie in [0, 1] and eps_high must be >= 0",
            knobs.eps_low
        ));
    }
    if let Some(c) = knobs.dual_clip_c {
        if !(c.is_finite() && c > 1.0) {
            f.errors
                .push(format!("algorithm.dual_clip_c = {c} must be > 1 (§3)"));
        }
    }
    if let Some(target) = knobs.kl_target {
        if !(target.is_finite() && target > 0.0) {
            f.errors
                .push(format!("algorithm.kl_target = {target} must be > 0"));
        }
        if knobs.kl_coef == 0.0 {
            f.warnings.push(
                "algorithm.kl_target set with kl_coef = 0: the adaptive controller scales β \
                 multiplicatively and cannot move it away from 0"
                    .into(),
            );
        }
    }
    if knobs.kl_placement == KlPlacement::InLoss
        && knobs.kl_loss_type == agentrl_rl::KlEstimator::K1
        && knobs.kl_coef > 0.0
    {
        f.warnings.push(
            "KL k1 in the loss has a zero-mean gradient on-policy and does not regularise \
             (ALGORITHMS.md §11); k3 or k2 is what you probably want"
                .into(),
        );
    }
    if knobs.minibatches == 0 || knobs.epochs == 0 {
        f.errors
            .push("algorithm.epochs and algorithm.minibatches must be >= 1".into());
    }
    let episodes = shape.tasks_per_step * shape.group_size;
    if knobs.minibatches > episodes.max(1) {
        f.errors.push(format!(
            "algorithm.minibatches = {} exceeds the {episodes} episodes of a step",
            knobs.minibatches
        ));
    }
    if knobs.epochs == 1
        && knobs.minibatches == 1
        && knobs.old_logprob_pass
        && !knobs.uses_critic()
        && !knobs.corrects_rollouts()
    {
        f.warnings.push(
            "algorithm.old_logprob_pass with one epoch and one minibatch: the ratio is 1 \
             anyway; the pass only measures engine/trainer mismatch"
                .into(),
        );
    }
    if shape.group_size == 1 && knobs.uses_group_baseline() {
        f.warnings.push(format!(
            "rollout.group_size = 1 with adv_estimator = {estimator}: a group baseline of one \
             episode gives zero advantage"
        ));
    }
    if let Some(cache) = knobs.overlong_cache {
        if cache == 0 {
            f.errors
                .push("algorithm.overlong_cache must be >= 1 (or unset to disable)".into());
        }
    }
    f
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
