//! OPO, on-policy RL with the optimal reward baseline (Hao et al., arXiv:2505.23585; verl
//! `adv_estimator: opo`, `docs/algo/opo.md`; no ALGORITHMS.md section, formula in
//! `agentrl_rl::opo_advantages`): the length-weighted group baseline
//! `A_i = R_i − Σ_g |o_j| R_j / Σ_g |o_j|` (`|o_j|` the episode's action tokens), no std
//! normalisation, exact on-policy training (one epoch, one minibatch, so the ratio is 1), no
//! entropy bonus, no KL; token-level PPO clip, `token-mean`.

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Findings, Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Opo,
    policy_loss: PolicyLossName::Vanilla,
    loss_agg_mode: AggMode::TokenMean,
    std_normalize: false,
    epochs: 1,
    minibatches: 1,
    entropy_coef: 0.0,
    ..BASE
};

pub fn check(knobs: &Knobs, f: &mut Findings) {
    if knobs.epochs > 1 || knobs.minibatches > 1 {
        f.warnings.push(
            "opo is exact on-policy training; epochs or minibatches > 1 make later optimizer \
             steps off-policy"
                .into(),
        );
    }
}
