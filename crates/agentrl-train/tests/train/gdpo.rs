//! GDPO's reward components: each read from the verifier's verdict, one row per component.

use agentrl_gym::Reward;
use agentrl_train::algo::gdpo::{reward_components, RewardComponent, PRESET};
use agentrl_train::algo::BASE;

#[test]
fn components_read_the_verdict() {
    let r = Reward {
        score: 0.0,
        public_passed: 3,
        public_total: 3,
        hidden_passed: 1,
        hidden_total: 4,
        tampered: true,
        format_errors: 2,
        verdict_reruns: 0,
    };
    let values: Vec<f32> = [
        RewardComponent::HiddenSolved,
        RewardComponent::HiddenFraction,
        RewardComponent::PublicPassed,
        RewardComponent::Format,
    ]
    .iter()
    .map(|c| c.value(&r))
    .collect();
    assert_eq!(values, vec![0.0, 0.25, 1.0, -2.0]);
    let rows = reward_components(&PRESET, [&r, &Reward::default()].into_iter()).unwrap();
    assert_eq!(rows, vec![vec![0.0, 0.0], vec![0.25, 0.0], vec![-2.0, 0.0]]);
    assert!(reward_components(&BASE, [&r].into_iter()).is_none());
}
