//! Algorithm presets: each RL algorithm as a named composition of `agentrl-rl` functions, one
//! file per algorithm that holds its whole recipe (CleanRL-style): its knob values, its
//! advantage estimator and policy loss, and its config checks. Knob-driven step hooks (DAPO's
//! overlong shaping and dynamic-sampling refill) live in [`dapo`] and are called for every
//! preset that turns them on.
//!
//! Where it sits: the trainer collects a rollout batch, then asks the chosen preset for
//! (1) the per-token advantages ([`Algorithm::advantage_estimator`]) and (2) the per-token
//! policy loss ([`Algorithm::policy_loss`]); KL, entropy, the value loss and aggregation are
//! shared and applied by the update with the preset's [`Knobs`]. A closed enum with an
//! exhaustive `match` plays the role of verl's string registry, with the compiler checking
//! every case. This module never imports the config: the config imports it.

use serde::{Deserialize, Serialize};

use agentrl_rl::{AdvantageEstimator, PolicyLoss};

pub mod cispo;
pub mod dapo;
pub mod dr_grpo;
pub mod grpo;
pub mod gspo;
pub mod knobs;
pub mod ppo;
pub mod reinforce_pp;
pub mod rloo;

pub use knobs::{KlPlacement, Knobs, BASE};

/// The algorithms the trainer runs, chosen by `algorithm.name` in the config.
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
}

/// Every algorithm, in the order the docs list them.
pub const ALL: [Algorithm; 8] = [
    Algorithm::Grpo,
    Algorithm::DrGrpo,
    Algorithm::Dapo,
    Algorithm::Rloo,
    Algorithm::ReinforcePp,
    Algorithm::Ppo,
    Algorithm::Gspo,
    Algorithm::Cispo,
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
        }
    }

    /// The advantage estimator of this algorithm with the resolved knobs.
    pub fn advantage_estimator(self, knobs: &Knobs) -> AdvantageEstimator {
        match self {
            Algorithm::Grpo => grpo::advantage_estimator(knobs),
            Algorithm::DrGrpo => dr_grpo::advantage_estimator(knobs),
            Algorithm::Dapo => dapo::advantage_estimator(knobs),
            Algorithm::Rloo => rloo::advantage_estimator(knobs),
            Algorithm::ReinforcePp => reinforce_pp::advantage_estimator(knobs),
            Algorithm::Ppo => ppo::advantage_estimator(knobs),
            Algorithm::Gspo => gspo::advantage_estimator(knobs),
            Algorithm::Cispo => cispo::advantage_estimator(knobs),
        }
    }

    /// The policy loss of this algorithm with the resolved knobs.
    pub fn policy_loss(self, knobs: &Knobs) -> PolicyLoss {
        match self {
            Algorithm::Grpo => grpo::policy_loss(knobs),
            Algorithm::DrGrpo => dr_grpo::policy_loss(knobs),
            Algorithm::Dapo => dapo::policy_loss(knobs),
            Algorithm::Rloo => rloo::policy_loss(knobs),
            Algorithm::ReinforcePp => reinforce_pp::policy_loss(knobs),
            Algorithm::Ppo => ppo::policy_loss(knobs),
            Algorithm::Gspo => gspo::policy_loss(knobs),
            Algorithm::Cispo => cispo::policy_loss(knobs),
        }
    }

    /// Whether the advantage baseline comes from the other episodes of the task's group.
    pub fn uses_group_baseline(self) -> bool {
        match self {
            Algorithm::Grpo
            | Algorithm::DrGrpo
            | Algorithm::Dapo
            | Algorithm::Rloo
            | Algorithm::Gspo
            | Algorithm::Cispo => true,
            Algorithm::ReinforcePp | Algorithm::Ppo => false,
        }
    }

    /// Whether the preset trains the value head (and so needs values in the batch).
    pub fn uses_critic(self) -> bool {
        matches!(self, Algorithm::Ppo)
    }

    /// Checks the knobs: the ones every algorithm shares, then the algorithm's own (in its
    /// file). `overridden` lists the keys the user set, for checks about knobs an algorithm
    /// ignores.
    pub fn check(self, knobs: &Knobs, shape: StepShape, overridden: &[String]) -> Findings {
        let mut f = common_checks(self, knobs, shape, overridden);
        match self {
            Algorithm::Gspo => gspo::check(knobs, &mut f),
            Algorithm::Rloo => rloo::check(shape, &mut f),
            Algorithm::Ppo => ppo::check(knobs, &mut f),
            Algorithm::Cispo => cispo::check(knobs, &mut f),
            Algorithm::Grpo | Algorithm::DrGrpo | Algorithm::Dapo | Algorithm::ReinforcePp => {}
        }
        if self != Algorithm::Cispo && knobs.eps_high < knobs.eps_low {
            f.errors.push(format!(
                "algorithm.eps_high ({}) < algorithm.eps_low ({}): clip-higher raises the upper \
                 bound; did you swap them?",
                knobs.eps_high, knobs.eps_low
            ));
        }
        f
    }
}

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
            f.errors
                .push(format!("algorithm.{key} = {value} must be a finite number >= 0"));
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
    if knobs.epochs > 1 && !knobs.old_logprob_pass {
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
    if knobs.value_coef != 0.0 && !algorithm.uses_critic() {
        f.errors.push(format!(
            "algorithm.value_coef is set but {name} has no critic; only ppo trains the value head"
        ));
    }
    let gae_knob_set = ["lam", "value_clip"]
        .iter()
        .any(|k| overridden.iter().any(|o| o == k));
    if gae_knob_set && !algorithm.uses_critic() {
        f.warnings.push(format!(
            "algorithm.lam / value_clip are GAE and critic knobs; {name} ignores them"
        ));
    }
    if !(0.0..=1.0).contains(&knobs.eps_low) || knobs.eps_high.is_nan() || knobs.eps_high < 0.0 {
        f.errors.push(format!(
            "algorithm.eps_low = {} must lie in [0, 1] and eps_high must be >= 0",
            knobs.eps_low
        ));
    }
    if let Some(c) = knobs.dual_clip_c {
        if c.is_nan() || c <= 1.0 {
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
        && knobs.kl_estimator == agentrl_rl::KlEstimator::K1
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
        && !algorithm.uses_critic()
    {
        f.warnings.push(
            "algorithm.old_logprob_pass with one epoch and one minibatch: the ratio is 1 \
             anyway; the pass only measures engine/trainer mismatch"
                .into(),
        );
    }
    if shape.group_size == 1 && algorithm.uses_group_baseline() {
        f.warnings.push(format!(
            "rollout.group_size = 1 with {name}: a group baseline of one episode gives zero \
             advantage"
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
