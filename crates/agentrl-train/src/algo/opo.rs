//! OPO, on-policy RL with the optimal reward baseline (Hao et al., arXiv:2505.23585; verl
//! `adv_estimator: opo`, `docs/algo/opo.md`; no ALGORITHMS.md section, formula in
//! `agentrl_rl::opo_advantages`): the length-weighted group baseline
//! `A_i = R_i − Σ_g |o_j| R_j / Σ_g |o_j|` (`|o_j|` the episode's action tokens), no std
//! normalisation, exact on-policy training (one epoch, one minibatch, so the ratio is 1), no
//! entropy bonus, no KL; token-level PPO clip, `token-mean`.

use agentrl_rl::{AdvantageEstimator, AggMode, PolicyLoss};

use super::{Findings, Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    agg: AggMode::TokenMean,
    std_normalize: false,
    epochs: 1,
    minibatches: 1,
    entropy_coef: 0.0,
    ..BASE
};

/// The length-weighted group baseline; the lengths are the loss mask's row sums.
pub fn advantage_estimator(_knobs: &Knobs) -> AdvantageEstimator {
    AdvantageEstimator::Opo
}

/// Token-level PPO clip (the ratio is 1 on-policy, so it is the policy gradient).
pub fn policy_loss(knobs: &Knobs) -> PolicyLoss {
    super::grpo::ppo_clip(knobs)
}

pub fn check(knobs: &Knobs, f: &mut Findings) {
    if knobs.epochs > 1 || knobs.minibatches > 1 {
        f.warnings.push(
            "opo is exact on-policy training; epochs or minibatches > 1 make later optimizer \
             steps off-policy"
                .into(),
        );
    }
}
