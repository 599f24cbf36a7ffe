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
