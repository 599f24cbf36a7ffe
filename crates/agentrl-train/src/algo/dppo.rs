//! DPPO, divergence proximal policy optimisation (Qi et al., "Rethinking the Trust Region in
//! LLM Reinforcement Learning", arXiv:2602.04879; verl loss modes `dppo_tv` and `dppo_kl`; no
//! ALGORITHMS.md section, formula in `agentrl_rl::dppo_loss`): a token keeps its gradient only
//! while the divergence between π_θ and π_old *on the sampled token* stays within δ on the side
//! its advantage pushes, and the PG term `−Â·sg(min(r, c))·log π_θ` uses a detached, truncated
//! IS ratio instead of PPO's clip; group advantage `(R − mean)/std`, `token-mean`, no KL.
//!
//! Two presets, one per divergence: `dppo_tv` (the binary total variation `π_θ − π_old`) and
//! `dppo_kl` (the binary KL of the sampled token's Bernoulli). As in verl, δ_low / δ_high are
//! `eps_low` / `eps_high` (verl's `clip_ratio_low/high`) and `c` is `dual_clip_c` (verl's
//! `clip_ratio_c`).

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Findings, Knobs, BASE};

/// DPPO-Binary-TV.
pub const PRESET_TV: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Grpo,
    policy_loss: PolicyLossName::DppoTv,
    // δ = 0.2 on `π_θ − π_old`: verl's `clip_ratio` default, which verl reads as the TV
    // threshold under `dppo_tv`.
    eps_low: 0.2,
    eps_high: 0.2,
    // c = 20: the fallback inside verl's DPPO functions (verl's actor config passes its
    // global `clip_ratio_c = 3` instead); the paper (§5.4) recommends a large truncation,
    // since a small one biases the gradient.
    dual_clip_c: Some(20.0),
    loss_agg_mode: AggMode::TokenMean,
    ..BASE
};

/// DPPO-Binary-KL: as [`PRESET_TV`], with δ read as a binary-KL threshold.
pub const PRESET_KL: Knobs = Knobs {
    policy_loss: PolicyLossName::DppoKl,
    ..PRESET_TV
};

pub fn check(knobs: &Knobs, f: &mut Findings) {
    if knobs.dual_clip_c.is_none() {
        f.errors.push(
            "policy_loss = dppo_tv / dppo_kl needs algorithm.dual_clip_c, the truncation c of its IS ratio (verl \
             clip_ratio_c; the preset's 20)"
                .into(),
        );
    }
}
