//! Pass@k training (Chen et al. 2025, "Pass@k Training for Adaptively Balancing Exploration
//! and Exploitation", arXiv:2503.19595, as verl cites it; verl `adv_estimator: grpo_passk`; no
//! ALGORITHMS.md section, formula in `agentrl_rl::grpo_passk_advantages`): only the best episode
//! of each group gets an advantage, `A = (R_max − R_2nd)/(std_g R + 1e-6)`, every other one 0,
//! so the policy is rewarded for *one* of its k samples being right rather than for all of
//! them being alike; token-level PPO clip (verl's `vanilla`), `token-mean`, no KL.
//!
//! With TinyAgent's pass/fail reward a group where exactly one episode solves the task pushes
//! that episode up; a group where several solve it gets no signal (R_max = R_2nd), which is the
//! point: pass@k is already 1 there.

use super::registry::AdvEstimatorName;
use super::{Findings, Knobs, StepShape, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::GrpoPassk,
    ..BASE
};

/// Checks of the `grpo_passk` estimator, on any preset.
pub fn check(shape: StepShape, f: &mut Findings) {
    if shape.group_size < 2 {
        f.errors.push(
            "adv_estimator = grpo_passk needs rollout.group_size >= 2 (the best episode is \
             compared with the second best; verl raises too)"
                .into(),
        );
    }
}
