//! DAPO (arXiv:2503.14476; ALGORITHMS.md §6): clip-higher (ε_low 0.2, ε_high 0.28), dynamic
//! sampling (groups with all-equal rewards dropped and the batch refilled), token-level loss
//! (`token-mean`), soft overlong punishment added to the reward, no KL.
//!
//! The two step hooks of the recipe, [`shape_rewards`] and [`keep_informative_groups`], are
//! driven by the knobs `overlong_cache` and `dynamic_sampling`, so any preset that turns them
//! on gets them; the trainer calls them for every step.

use agentrl_rl::{dynamic_sampling_filter, soft_overlong_penalties, AggMode};

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Grpo,
    policy_loss: PolicyLossName::Vanilla,
    eps_low: 0.2,
    eps_high: 0.28,
    loss_agg_mode: AggMode::TokenMean,
    std_normalize: true,
    dynamic_sampling: true,
    // The paper's L_cache is 4096 of a 20480-token budget; TinyAgent's budget is tens of
    // action tokens, so the cache is a few tokens.
    overlong_cache: Some(4),
    ..BASE
};

/// Extra sampling rounds dynamic sampling may take to refill a batch.
pub const DYNAMIC_SAMPLING_ROUNDS: usize = 3;

/// Sampling rounds of one step: 1, or 1 plus the refill rounds with dynamic sampling.
pub fn sampling_rounds(knobs: &Knobs) -> usize {
    if knobs.dynamic_sampling {
        1 + DYNAMIC_SAMPLING_ROUNDS
    } else {
        1
    }
}

/// Adds the soft overlong punishment (§6) to each reward when `overlong_cache` is set;
/// `action_tokens[i]` is episode `i`'s action length and `budget` its L_max.
pub fn shape_rewards(
    knobs: &Knobs,
    rewards: &mut [f32],
    action_tokens: &[usize],
    budget: usize,
) -> anyhow::Result<()> {
    if let Some(cache) = knobs.overlong_cache {
        let penalties = soft_overlong_penalties(action_tokens, budget, cache)?;
        for (r, p) in rewards.iter_mut().zip(penalties) {
            *r += p;
        }
    }
    Ok(())
}

/// The episodes to train on and the number of groups dropped: with `dynamic_sampling`, the
/// groups whose rewards are all equal go (they carry no signal); otherwise everything stays.
pub fn keep_informative_groups(
    knobs: &Knobs,
    rewards: &[f32],
    groups: &[usize],
) -> anyhow::Result<(Vec<usize>, usize)> {
    if knobs.dynamic_sampling {
        let filter = dynamic_sampling_filter(rewards, groups)?;
        Ok((filter.kept_indices, filter.dropped_groups))
    } else {
        Ok(((0..rewards.len()).collect(), 0))
    }
}
