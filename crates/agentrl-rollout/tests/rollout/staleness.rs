//! The staleness bound of asynchronous rollouts: which weight versions a step may use.

use agentrl_rollout::StalenessBound;

#[test]
fn a_bound_of_zero_allows_only_current_weights_and_no_overlap() {
    let sync = StalenessBound::new(0);
    assert!(sync.allows(5, 5));
    assert!(!sync.allows(5, 4));
    assert!(!sync.allows_overlap());
}

#[test]
fn a_bound_of_two_allows_weights_two_versions_old() {
    let bound = StalenessBound::new(2);
    assert!(bound.allows(7, 5));
    assert!(!bound.allows(7, 4));
    assert!(bound.allows_overlap());
    // Weights newer than the step (a version counter reset by a resume) are fresh.
    assert!(bound.allows(3, 9));
}
