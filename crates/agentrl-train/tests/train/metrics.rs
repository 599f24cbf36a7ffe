//! The metric line of a step: the policy figures appear only for steps that updated.

use agentrl_run::metrics::names;
use agentrl_train::metrics::metric_line;
use agentrl_train::step_record::StepRecord;
use agentrl_train::update::UpdateMetrics;

#[test]
fn a_step_without_an_update_records_no_policy_figures() {
    let record = StepRecord {
        step: 1,
        ..StepRecord::default()
    };
    let line = metric_line(&record);
    assert!(line.get(names::REWARD_MEAN).is_some());
    assert!(line.get(names::ENTROPY).is_none());
    let record = StepRecord {
        update: UpdateMetrics {
            optimizer_steps: 1,
            entropy: 0.5,
            ..UpdateMetrics::default()
        },
        ..record
    };
    assert_eq!(metric_line(&record).get(names::ENTROPY), Some(0.5));
}
