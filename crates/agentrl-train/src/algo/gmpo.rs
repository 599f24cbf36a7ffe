//! GMPO, geometric-mean policy optimisation (Zhao et al., arXiv:2507.20673; verl loss mode
//! `geo_mean`; no ALGORITHMS.md section, formula in `agentrl_rl::geo_mean_loss`): per-token
//! log-ratios clipped to `[−ε_low, ε_high]` on the side the advantage pushes, one geometric-mean
//! ratio per sequence, `ℓ_i = −Â_i·exp(mean_t clip(log r_t))`; group advantage
//! `(R − mean)/std`, no KL.
//!
//! `eps_low` / `eps_high` bound the *log*-ratio (verl reads them from `clip_ratio_low/high`).
//! The loss is a plain mean over the batch's sequences whatever `algorithm.loss_agg_mode` says (as in
//! verl); `loss_agg_mode` still aggregates the KL and entropy terms.

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Grpo,
    policy_loss: PolicyLossName::GeoMean,
    // The paper's clip range (e^−0.4, e^0.4) of the ratio, verl's GMPO example: 0.4 on the
    // log-ratio, wider than PPO's because the geometric mean damps outliers.
    eps_low: 0.4,
    eps_high: 0.4,
    loss_agg_mode: AggMode::SeqMeanTokenMean,
    ..BASE
};
