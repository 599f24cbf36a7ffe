//! Learning-rate schedules: constant, linear decay and cosine decay, each with an optional
//! linear warm-up. A pure function of the step, so a resumed run gets the same rates.

use crate::config::{OptimConfig, ScheduleKind};

/// The learning rate for optimizer step `step` (0-based) of a run of `total_steps` steps.
///
/// Warm-up ramps linearly from `lr/warmup` to `lr` over `warmup_steps`; afterwards linear and
/// cosine decay from `lr` to `lr·min_lr_ratio` at the last step.
pub fn learning_rate(optim: &OptimConfig, step: usize, total_steps: usize) -> f64 {
    let peak = optim.lr;
    if step < optim.warmup_steps {
        return peak * (step + 1) as f64 / optim.warmup_steps as f64;
    }
    let floor = peak * optim.min_lr_ratio;
    // The last step (total_steps - 1) lands exactly on the floor.
    let decay_steps = total_steps
        .saturating_sub(optim.warmup_steps)
        .saturating_sub(1)
        .max(1);
    let progress = ((step - optim.warmup_steps) as f64 / decay_steps as f64).min(1.0);
    match optim.schedule {
        ScheduleKind::Constant => peak,
        ScheduleKind::Linear => peak + (floor - peak) * progress,
        ScheduleKind::Cosine => {
            floor + (peak - floor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn optim(schedule: ScheduleKind, warmup: usize) -> OptimConfig {
        OptimConfig {
            lr: 1.0,
            schedule,
            warmup_steps: warmup,
            min_lr_ratio: 0.1,
            ..crate::config::Config::builtin().unwrap().optim
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
}
