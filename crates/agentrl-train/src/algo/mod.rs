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
//!
//! GKD (ALGORITHMS.md §15, `agentrl_rl::gkd_loss`) has no preset: its loss is a divergence to a
//! teacher's full-vocabulary logits, with no reward or advantage, so it belongs to a
//! distillation recipe with a teacher model, not to this RL trainer.

use serde::{Deserialize, Serialize};

use agentrl_rl::{AdvantageEstimator, PolicyLoss};

pub mod cispo;
pub mod clip_cov;
pub mod dapo;
pub mod dppo;
pub mod dr_grpo;
pub mod dro;
pub mod gmpo;
pub mod gpg;
pub mod grpo;
pub mod gspo;
pub mod kl_cov;
pub mod knobs;
pub mod opo;
pub mod ppo;
pub mod reinforce_pp;
pub mod remax;
pub mod rloo;
pub mod sapo;

pub use knobs::{KlPlacement, Knobs, BASE};

/// The algorithms the trainer runs, chosen by `algorithm.name` in the config (verl's name
/// where verl has one: its loss mode or advantage estimator).
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
}

/// Every algorithm, in the order the docs list them.
pub const ALL: [Algorithm; 18] = [
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
            Algorithm::Sapo => sapo::advantage_estimator(knobs),
            Algorithm::Gmpo => gmpo::advantage_estimator(knobs),
            Algorithm::Gpg => gpg::advantage_estimator(knobs),
            Algorithm::DppoTv | Algorithm::DppoKl => dppo::advantage_estimator(knobs),
            Algorithm::Remax => remax::advantage_estimator(knobs),
            Algorithm::Opo => opo::advantage_estimator(knobs),
            Algorithm::ClipCov => clip_cov::advantage_estimator(knobs),
            Algorithm::KlCov => kl_cov::advantage_estimator(knobs),
            Algorithm::Dro => dro::advantage_estimator(knobs),
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
            Algorithm::Sapo => sapo::policy_loss(knobs),
            Algorithm::Gmpo => gmpo::policy_loss(knobs),
            Algorithm::Gpg => gpg::policy_loss(knobs),
            Algorithm::DppoTv => dppo::policy_loss(knobs, false),
            Algorithm::DppoKl => dppo::policy_loss(knobs, true),
            Algorithm::Remax => remax::policy_loss(knobs),
            Algorithm::Opo => opo::policy_loss(knobs),
            Algorithm::ClipCov => clip_cov::policy_loss(knobs),
            Algorithm::KlCov => kl_cov::policy_loss(knobs),
            Algorithm::Dro => dro::policy_loss(knobs),
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
            | Algorithm::Cispo
            | Algorithm::Sapo
            | Algorithm::Gmpo
            | Algorithm::Gpg
            | Algorithm::DppoTv
            | Algorithm::DppoKl
            | Algorithm::Opo
            | Algorithm::ClipCov
            | Algorithm::KlCov
            | Algorithm::Dro => true,
            Algorithm::ReinforcePp | Algorithm::Ppo | Algorithm::Remax => false,
        }
    }

    /// Whether the preset trains the value head (and so needs values in the batch).
    pub fn uses_critic(self) -> bool {
        matches!(self, Algorithm::Ppo)
    }

    /// Whether the advantage baseline is the reward of a greedy (temperature 0) episode of
    /// each task, which the trainer samples besides the group (ReMax).
    pub fn needs_greedy_baseline(self) -> bool {
        matches!(self, Algorithm::Remax)
    }

    /// Whether `eps_low` / `eps_high` bound a ratio (or log-ratio) from both sides, so that
    /// `eps_high < eps_low` is probably a swap. CISPO's bounds are on a weight with a large
    /// `eps_low`, DPPO's are divergence thresholds, and SAPO, GPG, KL-Cov and DRO read neither.
    fn clips_the_ratio(self) -> bool {
        !matches!(
            self,
            Algorithm::Cispo
                | Algorithm::DppoTv
                | Algorithm::DppoKl
                | Algorithm::Sapo
                | Algorithm::Gpg
                | Algorithm::KlCov
                | Algorithm::Dro
        )
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
            Algorithm::Sapo => sapo::check(knobs, &mut f),
            Algorithm::Gmpo => gmpo::check(knobs, &mut f),
            Algorithm::Gpg => gpg::check(knobs, &mut f),
            Algorithm::DppoTv | Algorithm::DppoKl => dppo::check(knobs, &mut f),
            Algorithm::Opo => opo::check(knobs, &mut f),
            Algorithm::ClipCov => clip_cov::check(knobs, &mut f),
            Algorithm::KlCov => kl_cov::check(knobs, &mut f),
            Algorithm::Dro => dro::check(knobs, &mut f),
            Algorithm::Grpo
            | Algorithm::DrGrpo
            | Algorithm::Dapo
            | Algorithm::ReinforcePp
            | Algorithm::Remax => {}
        }
        if self.clips_the_ratio() && knobs.eps_high < knobs.eps_low {
            f.errors.push(format!(
                "algorithm.eps_high ({}) < algorithm.eps_low ({}): clip-higher raises the upper \
                 bound; did you swap them?",
                knobs.eps_high, knobs.eps_low
            ));
        }
        f
    }
}

/// Knobs that only some presets read, and those presets (a user's override of one elsewhere
/// is reported).
const PRESET_ONLY_KNOBS: [(&[&str], &[Algorithm]); 4] = [
    (&["tau_pos", "tau_neg"], &[Algorithm::Sapo]),
    (
        &["clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"],
        &[Algorithm::ClipCov],
    ),
    (&["kl_cov_ratio", "ppo_kl_coef"], &[Algorithm::KlCov]),
    (&["dro_beta"], &[Algorithm::Dro]),
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
    for (keys, readers) in PRESET_ONLY_KNOBS {
        if !readers.contains(&algorithm) {
            for key in keys
                .iter()
                .filter(|k| overridden.iter().any(|o| o.as_str() == **k))
            {
                f.warnings
                    .push(format!("algorithm.{key} is not read by {name}"));
            }
        }
    }
    let gae_knob_set = ["lam", "value_clip"]
        .iter()
        .any(|k| overridden.iter().any(|o| o == k));
    if gae_knob_set && !algorithm.uses_critic() {
        f.warnings.push(format!(
            "algorithm.lam / value_clip are GAE and critic knobs; {name} ignores them"
        ));
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

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: StepShape = StepShape {
        group_size: 8,
        tasks_per_step: 8,
    };

    fn named(name: &str) -> Algorithm {
        Algorithm::deserialize(toml::Value::String(name.into()))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    #[test]
    fn every_name_reads_back_and_verl_spellings_are_accepted() {
        for algorithm in ALL {
            assert_eq!(named(algorithm.as_str()), algorithm);
        }
        for (alias, algorithm) in [
            ("gmpo", Algorithm::Gmpo),
            ("dppo", Algorithm::DppoTv),
            ("clip-cov", Algorithm::ClipCov),
            ("kl-cov", Algorithm::KlCov),
        ] {
            assert_eq!(named(alias), algorithm);
        }
    }

    #[test]
    fn every_preset_passes_its_own_checks() {
        for algorithm in ALL {
            let f = algorithm.check(&algorithm.preset(), SHAPE, &[]);
            assert!(f.errors.is_empty(), "{algorithm}: {:?}", f.errors);
        }
    }

    #[test]
    fn the_new_knobs_are_checked() {
        let errors =
            |algorithm: Algorithm, knobs: Knobs| algorithm.check(&knobs, SHAPE, &[]).errors;
        let sapo = Knobs {
            tau_neg: 0.0,
            ..sapo::PRESET
        };
        assert!(errors(Algorithm::Sapo, sapo)[0].contains("tau_neg"));
        let clip_cov = Knobs {
            clip_cov_lb: 6.0,
            ..clip_cov::PRESET
        };
        assert!(errors(Algorithm::ClipCov, clip_cov)[0].contains("clip_cov_lb"));
        // DPPO's bounds are divergence thresholds: an asymmetric pair is no swap.
        let dppo = Knobs {
            eps_low: 0.3,
            ..dppo::PRESET_TV
        };
        assert!(errors(Algorithm::DppoTv, dppo).is_empty());
        // A knob only another preset reads is reported.
        let f = Algorithm::Grpo.check(&grpo::PRESET, SHAPE, &["tau_pos".to_string()]);
        assert!(
            f.warnings.iter().any(|w| w.contains("tau_pos")),
            "{:?}",
            f.warnings
        );
    }

    #[test]
    fn only_remax_samples_a_greedy_baseline_and_it_has_no_group_baseline() {
        for algorithm in ALL {
            let greedy = algorithm.needs_greedy_baseline();
            assert_eq!(greedy, algorithm == Algorithm::Remax, "{algorithm}");
            assert!(!(greedy && algorithm.uses_group_baseline()), "{algorithm}");
        }
    }
}
