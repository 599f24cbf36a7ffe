//! The env clock: busy time of overlapping env intervals counted once, gaps not at all.

use std::time::Instant;

use agentrl_rollout::EnvClock;
use std::time::Duration;

#[test]
fn overlapping_intervals_count_once_and_gaps_not_at_all() {
    let clock = EnvClock::default();
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    clock.record(at(0), at(100));
    clock.record(at(50), at(150)); // overlaps the first
    clock.record(at(300), at(400)); // after a gap
    let busy = clock.take_busy_seconds();
    assert!((busy - 0.25).abs() < 1e-9, "{busy}");
    assert_eq!(clock.take_busy_seconds(), 0.0, "taking the time forgets it");
}
