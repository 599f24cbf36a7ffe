//! SAPO, soft adaptive policy optimisation (Gao et al., arXiv:2511.20347; no ALGORITHMS.md
//! section, formula in `agentrl_rl::sapo_loss`): the hard PPO clip is replaced by a smooth
//! gate `f(r) = σ(τ(r − 1))·4/τ`, `ℓ = −f(r)·Â`, with `τ = tau_pos` for `Â > 0` and `tau_neg`
//! otherwise; group advantage `(R − mean)/std`, no KL.
//!
//! The loss ignores `algorithm.loss_agg_mode` and always aggregates with `seq-mean-token-mean`, as verl's
//! `compute_policy_loss_sapo` does; the preset names that mode so the KL and entropy terms
//! aggregate the same way. `eps_low`, `eps_high` and `dual_clip_c` are not read.

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Findings, Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Grpo,
    policy_loss: PolicyLossName::Sapo,
    loss_agg_mode: AggMode::SeqMeanTokenMean,
    // The paper's values for Qwen3-30B-A3B-Base (verl's defaults): τ_neg > τ_pos gates
    // negative tokens harder.
    tau_pos: 1.0,
    tau_neg: 1.05,
    ..BASE
};

pub fn check(knobs: &Knobs, f: &mut Findings) {
    for (key, tau) in [("tau_pos", knobs.tau_pos), ("tau_neg", knobs.tau_neg)] {
        if !(tau.is_finite() && tau > 0.0) {
            f.errors.push(format!(
                "algorithm.{key} = {tau} must be a finite number > 0"
            ));
        }
    }
    if knobs.loss_agg_mode != AggMode::SeqMeanTokenMean {
        f.warnings.push(format!(
            "algorithm.loss_agg_mode = {:?}: sapo's loss always aggregates with seq-mean-token-mean (as \
             verl's); only the KL and entropy terms follow loss_agg_mode",
            knobs.loss_agg_mode
        ));
    }
}
