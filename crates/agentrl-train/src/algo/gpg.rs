//! GPG, group policy gradient (Chu et al., arXiv:2504.02546; verl `adv_estimator: gpg` with
//! `loss_mode: gpg`; no ALGORITHMS.md section, formulas in `agentrl_rl::gpg_advantages` and
//! `agentrl_rl::gpg_loss`): plain REINFORCE `ℓ = −Â·log π_θ` (no ratio, no clip, no KL, no
//! critic) on the group-centred reward scaled by `α = B / #{R ≠ 0}`, the paper's correction for
//! the share of samples that carry a gradient; `token-mean`.
//!
//! `eps_low`, `eps_high`, `dual_clip_c` and `std_normalize` are not read. `f_norm` is 1, as
//! verl's trainer calls it (verl exposes no knob for it).

use agentrl_rl::{AdvantageEstimator, AggMode, PolicyLoss};

use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    agg: AggMode::TokenMean,
    ..BASE
};

/// `A_i = α (R_i − mean_g R)`, `α = B / #{R ≠ 0}`.
pub fn advantage_estimator(_knobs: &Knobs) -> AdvantageEstimator {
    AdvantageEstimator::Gpg { f_norm: 1.0 }
}

/// `−Â·log π_θ`.
pub fn policy_loss(_knobs: &Knobs) -> PolicyLoss {
    PolicyLoss::Gpg
}

pub fn check(knobs: &Knobs, f: &mut super::Findings) {
    if knobs.epochs > 1 {
        f.warnings.push(
            "gpg has no ratio and no trust region: later epochs take plain policy-gradient \
             steps on samples of an older policy"
                .into(),
        );
    }
}
