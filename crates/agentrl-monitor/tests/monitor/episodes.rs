//! Stored episodes: group advantages, which episodes are picked and the token view's marks.

use agentrl_monitor::episodes::{
    episode_html, group_advantages, pick_episodes, StoredEpisode, StoredReward,
};

fn ep(group: u32, score: f64, hidden: (u32, u32), public: (u32, u32)) -> StoredEpisode {
    StoredEpisode {
        task_id: "t".into(),
        group_id: group,
        tokens: vec![1, 2, 3, 4],
        sources: ["prompt", "action", "action", "observation"]
            .map(String::from)
            .to_vec(),
        logprobs: vec![0.0, -0.5, -0.1, 0.0],
        token_text: ["<bos>", "<call>", "submit", "OK"]
            .map(String::from)
            .to_vec(),
        actions: vec![serde_json::json!({"kind":"call","name":"submit","arguments":{}})],
        reward: StoredReward {
            score,
            hidden_passed: hidden.0,
            hidden_total: hidden.1,
            public_passed: public.0,
            public_total: public.1,
            ..StoredReward::default()
        },
        turns: 1,
        ..StoredEpisode::default()
    }
}

#[test]
fn group_advantages_are_z_scores_within_groups() {
    let eps = [
        ep(0, 1.0, (2, 2), (1, 1)),
        ep(0, 0.0, (0, 2), (0, 1)),
        ep(1, 0.0, (0, 2), (1, 1)),
        ep(1, 0.0, (0, 2), (0, 1)),
    ];
    assert_eq!(group_advantages(&eps), [1.0, -1.0, 0.0, 0.0]);
    // One of each kind: solved, hacked, failed; informative groups first.
    assert_eq!(pick_episodes(&eps, 3), [0, 2, 1]);
}

#[test]
fn the_view_marks_calls_results_and_the_loss_mask() {
    let html = episode_html(&ep(0, 1.0, (2, 2), (1, 1)), 1.0, "e0");
    assert!(html.contains("▶ call 1: submit"));
    assert!(html.contains("◀ tool result"));
    assert_eq!(html.matches("class=\"tok\"").count(), 4);
    assert_eq!(html.matches("loss mask 1").count(), 2);
    assert!(html.contains("not recorded by this run"));
    let mut with_trainer = ep(0, 1.0, (2, 2), (1, 1));
    with_trainer.trainer_logprobs = Some(vec![0.0, -0.45, -0.1, 0.0]);
    let html = episode_html(&with_trainer, 1.0, "e1");
    assert!(html.contains("|Δ log p| 0.050"), "{html}");
    let gaps = with_trainer.action_mismatch().unwrap();
    assert_eq!(gaps.len(), 2);
    assert!((gaps[0] - 0.05).abs() < 1e-12 && gaps[1] == 0.0, "{gaps:?}");
    // A length that does not match the tokens is not a record of them.
    with_trainer.trainer_logprobs = Some(vec![0.0]);
    assert!(!with_trainer.records_trainer_logprobs());
    assert!(with_trainer.action_mismatch().is_none());
}
