//! GMPO, geometric-mean policy optimisation (Zhao et al., arXiv:2507.20673; verl loss mode
//! `geo_mean`; no ALGORITHMS.md section, formula in `agentrl_rl::geo_mean_loss`): per-token
//! log-ratios clipped to `[−ε_low, ε_high]` on the side the advantage pushes, one geometric-mean
//! ratio per sequence, `ℓ_i = −Â_i·exp(mean_t clip(log r_t))`; group advantage
//! `(R − mean)/std`, no KL.
//!
//! `eps_low` / `eps_high` bound the *log*-ratio (verl reads them from `clip_ratio_low/high`).
//! The loss is a plain mean over the batch's sequences whatever `algorithm.agg` says (as in
//! verl); `agg` still aggregates the KL and entropy terms.

use agentrl_rl::{AdvantageEstimator, AggMode, PolicyLoss};

use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    // The paper's clip range (e^−0.4, e^0.4) of the ratio, verl's GMPO example: 0.4 on the
    // log-ratio, wider than PPO's because the geometric mean damps outliers.
    eps_low: 0.4,
    eps_high: 0.4,
    agg: AggMode::SeqMeanTokenMean,
    ..BASE
};

/// `(R − mean)/std` per group, as in GRPO.
pub fn advantage_estimator(knobs: &Knobs) -> AdvantageEstimator {
    AdvantageEstimator::Grpo {
        norm_by_std: knobs.std_normalize,
    }
}

/// Sequence-level geometric mean of the clipped token ratios.
pub fn policy_loss(knobs: &Knobs) -> PolicyLoss {
    PolicyLoss::GeoMean {
        clip_low: knobs.eps_low,
        clip_high: knobs.eps_high,
    }
}

pub fn check(knobs: &Knobs, f: &mut super::Findings) {
    if knobs.dual_clip_c.is_some() {
        f.warnings
            .push("algorithm.dual_clip_c is ignored by geo_mean".into());
    }
}
