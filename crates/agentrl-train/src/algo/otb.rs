//! The optimal token baseline, OTB, and its multi-turn form TIR-OTB (verl
//! `adv_estimator: optimal_token_baseline` / `tir_optimal_token_baseline`, `docs/algo/otb.md`;
//! R. Li, "Optimal Token Baseline", richardli.xyz/optimal-token-baseline; no ALGORITHMS.md
//! section, formulas in `agentrl_rl::optimal_token_baseline_advantages`): a baseline per
//! token position instead of per group, `B_t = Σ_g G_t W_t / Σ_g W_t`, weighting each episode's
//! reward-to-go `G_t` by its cumulative path variance `W_t = Σ_{j≤t} (1 − 2π_j + Σ_v π_v²)`,
//! the variance-minimising baseline of the score-function estimator taken per token;
//! `A_t = G_t − B_t`. Token-level PPO clip (verl's `vanilla`), `token-mean`, no KL.
//!
//! The update computes `Σ_v π_old(v)²` from the logits of its old-policy forward pass
//! (`agentrl_rl::sum_pi_squared`, verl `actor.calculate_sum_pi_squared`), which it runs for
//! these estimators even without `old_logprob_pass`; with decoupled rollout correction the IS
//! weights enter `W_t` as verl's do.
//!
//! `optimal_token_baseline` aligns episodes by token *position* in the batch row, tool-output
//! holes included; `tir_optimal_token_baseline` counts only the policy's own tokens, so the k-th
//! action token of every episode shares a baseline whatever the observations between turns —
//! the form meant for multi-turn tool use like TinyAgent's.

use super::registry::AdvEstimatorName;
use super::{Findings, Knobs, StepShape, BASE};

/// OTB by row position.
pub const PRESET_OTB: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::OptimalTokenBaseline,
    ..BASE
};

/// TIR-OTB by policy-token position.
pub const PRESET_TIR: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::TirOptimalTokenBaseline,
    ..BASE
};

/// Checks of the OTB estimators, on any preset.
pub fn check(shape: StepShape, f: &mut Findings) {
    if shape.group_size < 2 {
        f.warnings.push(
            "the optimal token baseline with rollout.group_size = 1: a group of one has \
             baseline 0"
                .into(),
        );
    }
}
