//! GPG, group policy gradient (Chu et al., arXiv:2504.02546; verl `adv_estimator: gpg` with
//! `loss_mode: gpg`; no ALGORITHMS.md section, formulas in `agentrl_rl::gpg_advantages` and
//! `agentrl_rl::gpg_loss`): plain REINFORCE `ℓ = −Â·log π_θ` (no ratio, no clip, no KL, no
//! critic) on the group-centred reward scaled by `α = B / #{R ≠ 0}`, the paper's correction for
//! the share of samples that carry a gradient; `token-mean`.
//!
//! `eps_low`, `eps_high`, `dual_clip_c` and `std_normalize` are not read. `f_norm` is 1, as
//! verl's trainer calls it (verl exposes no knob for it).

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Gpg,
    policy_loss: PolicyLossName::Gpg,
    loss_agg_mode: AggMode::TokenMean,
    ..BASE
};

pub fn check(knobs: &Knobs, f: &mut super::Findings) {
    if knobs.epochs > 1 {
        f.warnings.push(
            "gpg has no ratio and no trust region: later epochs take plain policy-gradient \
             steps on samples of an older policy"
                .into(),
        );
    }
}
