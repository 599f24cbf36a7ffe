//! Algorithm presets: each RL algorithm of the issue as a named composition of `agentrl-rl`
//! functions, one small file per algorithm that reads top to bottom (CleanRL-style).
//!
//! Where it sits: the trainer collects a rollout batch, then asks the chosen preset for
//! (1) the per-token advantages ([`Algorithm::advantages`]) and (2) the per-token policy loss
//! ([`Algorithm::policy_loss`]); KL, entropy, the value loss and aggregation are shared and
//! applied by the trainer with the preset's knobs. A closed enum with an exhaustive `match`
//! plays the role of verl's string registry, with the compiler checking every case.

use serde::{Deserialize, Serialize};

use agentrl_rl::{AdvantageEstimator, AggMode, KlEstimator, PolicyLoss};

use crate::train::config::{KlPlacement, RatioLevel, ResolvedAlgorithm};

pub mod cispo;
pub mod dapo;
pub mod dr_grpo;
pub mod grpo;
pub mod gspo;
pub mod ppo;
pub mod reinforce_pp;
pub mod rloo;

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

/// The default knobs of one algorithm: what `[algorithm]` resolves to when a key is unset.
/// Values follow ALGORITHMS.md's defaults where they transfer to a tiny policy; where the
/// paper's value is for billion-parameter models (β, learning rates), the preset file says
/// what it chose instead.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset {
    pub clip_eps: f64,
    pub eps_low: f64,
    pub eps_high: f64,
    pub dual_clip_c: Option<f64>,
    pub ratio_level: RatioLevel,
    pub kl_coef: f64,
    pub kl_estimator: KlEstimator,
    pub kl_placement: KlPlacement,
    pub entropy_coef: f64,
    pub agg: AggMode,
    pub epochs: usize,
    pub minibatches: usize,
    pub old_logprob_pass: bool,
    pub std_normalize: bool,
    pub dynamic_sampling: bool,
    pub overlong_cache: Option<usize>,
    pub gamma: f64,
    pub lam: f64,
    pub value_coef: f64,
    pub value_clip: f64,
}

/// Knobs shared by most presets; each preset file starts from it and names what differs.
pub const BASE: Preset = Preset {
    clip_eps: 0.2,
    eps_low: 0.2,
    eps_high: 0.2,
    dual_clip_c: None,
    ratio_level: RatioLevel::Token,
    kl_coef: 0.0,
    kl_estimator: KlEstimator::K3,
    kl_placement: KlPlacement::InLoss,
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
};

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

    pub fn preset(self) -> Preset {
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
    pub fn advantage_estimator(self, knobs: &ResolvedAlgorithm) -> AdvantageEstimator {
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
    pub fn policy_loss(self, knobs: &ResolvedAlgorithm) -> PolicyLoss {
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
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
