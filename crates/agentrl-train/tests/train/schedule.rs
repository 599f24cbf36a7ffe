//! The learning-rate schedules: warm-up, and linear and cosine decay to the floor.

use agentrl_train::config::{OptimConfig, ScheduleKind};
use agentrl_train::schedule::learning_rate;

fn optim(schedule: ScheduleKind, warmup: usize) -> OptimConfig {
    OptimConfig {
        lr: 1.0,
        schedule,
        warmup_steps: warmup,
        min_lr_ratio: 0.1,
        ..agentrl_train::config::Config::builtin().unwrap().optim
    }
}

#[test]
fn constant_with_warmup() {
    let o = optim(ScheduleKind::Constant, 4);
    let rates: Vec<f64> = (0..6).map(|s| learning_rate(&o, s, 10)).collect();
    assert_eq!(rates, vec![0.25, 0.5, 0.75, 1.0, 1.0, 1.0]);
}

#[test]
fn linear_and_cosine_end_at_the_floor() {
    for kind in [ScheduleKind::Linear, ScheduleKind::Cosine] {
        let o = optim(kind, 0);
        assert!((learning_rate(&o, 0, 11) - 1.0).abs() < 1e-12);
        assert!((learning_rate(&o, 10, 11) - 0.1).abs() < 1e-12, "{kind:?}");
        let mid = learning_rate(&o, 5, 11);
        assert!(mid < 1.0 && mid > 0.1);
    }
    let cos = optim(ScheduleKind::Cosine, 0);
    // Halfway through, cosine sits at the midpoint of peak and floor.
    assert!((learning_rate(&cos, 5, 11) - 0.55).abs() < 1e-12);
}
