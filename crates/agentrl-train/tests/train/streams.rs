//! The run's random streams: each epoch of a fixed set visits every item once.

use agentrl_train::streams::{epoch_slice, STREAM_DATA_ORDER, STREAM_TASKS};

#[test]
fn each_epoch_visits_every_item_once() {
    let n = 7;
    let picks: Vec<usize> = (0..7)
        .flat_map(|step| epoch_slice(n, 3, step, 5, STREAM_DATA_ORDER))
        .collect();
    for epoch in picks.chunks(n) {
        let mut seen = epoch.to_vec();
        seen.sort_unstable();
        assert_eq!(seen, (0..n).collect::<Vec<_>>());
    }
    assert_eq!(
        epoch_slice(n, 3, 2, 5, STREAM_DATA_ORDER),
        epoch_slice(n, 3, 2, 5, STREAM_DATA_ORDER)
    );
    assert_ne!(
        epoch_slice(n, 7, 0, 5, STREAM_DATA_ORDER),
        epoch_slice(n, 7, 0, 5, STREAM_TASKS)
    );
}
