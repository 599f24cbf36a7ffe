//! A step's rollout statistics: submits, turn limits, flat groups, rewards and tokens.

use agentrl_gym::{Action, Reward, ToolCall};
use agentrl_rollout::{Episode, TokenSource};
use agentrl_train::step_record::RolloutStats;

fn episode(group: u32, score: f32, submit: bool, turns: u32) -> Episode {
    let mut e = Episode::new("t", group);
    e.push(1, TokenSource::Prompt, 0.0);
    for _ in 0..turns {
        e.push(2, TokenSource::Action, -0.1);
    }
    e.turns = turns;
    e.reward = Reward {
        score,
        ..Reward::default()
    };
    e.actions = (0..turns)
        .map(|i| {
            let name = if submit && i + 1 == turns {
                "submit"
            } else {
                "test"
            };
            Action::Call(ToolCall {
                name: name.into(),
                arguments: serde_json::json!({}),
            })
        })
        .collect();
    e
}

#[test]
fn rollout_stats_count_submits_turn_limits_and_flat_groups() {
    let episodes = [
        episode(0, 1.0, true, 2),
        episode(0, 0.0, false, 4),
        episode(1, 0.0, false, 4),
        episode(1, 0.0, true, 3),
    ];
    let s = RolloutStats::of(&episodes, 5, 4);
    assert_eq!(s.submit_rate, 0.5);
    assert_eq!(s.turn_limit_rate, 0.5);
    assert_eq!(s.zero_variance_group_rate, 0.5);
    assert_eq!(s.reward_max, 1.0);
    assert_eq!(s.reward_min, 0.0);
    assert!((s.reward_std - 0.4330127).abs() < 1e-6);
    assert_eq!(s.tool_calls, 13.0 / 4.0);
    assert_eq!(s.staleness_max, 5.0);
    assert_eq!(s.total_tokens, 17.0);
}
