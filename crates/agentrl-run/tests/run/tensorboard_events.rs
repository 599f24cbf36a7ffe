//! Reads the TensorBoard event files a run writes with an independent reader
//! (`tests/support/tfrecord_reader.rs`, written from the format documentation, sharing no code
//! with the writer).

use std::collections::BTreeMap;

use agentrl_run::{MetricLine, RunDir};

use crate::tfrecord_reader::{crc32c_bitwise, read_events};

#[test]
fn the_independent_crc_matches_the_documented_vector() {
    assert_eq!(crc32c_bitwise(b"Hello world!"), 0x7B98_E751);
}

#[test]
fn a_runs_event_file_reads_back_as_tensorboard_reads_it() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let run = RunDir::create(tmp.path(), Some("tb"))?;
    run.write_config("a = 1")?;
    for step in 1..=3usize {
        let mut line = MetricLine::new(step);
        line.set("critic/rewards/mean", step as f64 / 4.0)
            .set("actor/entropy", 1.5 - step as f64 * 0.25)
            .set("actor/ppo_kl", if step == 3 { f64::NAN } else { 1e-3 });
        run.log_metrics(&line)?;
    }
    let files = run.event_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    let parts: Vec<&str> = name.split('.').collect();
    assert_eq!(&parts[..3], ["events", "out", "tfevents"], "{name}");
    assert!(
        parts[3].parse::<u64>()? > 1_600_000_000,
        "{name}: unix seconds"
    );
    assert!(!parts[4].is_empty(), "{name}: host");

    let events = read_events(&files[0]);
    assert_eq!(events[0].file_version.as_deref(), Some("brain.Event:2"));
    assert!(events[0].scalars.is_empty());
    let mut by_tag: BTreeMap<String, Vec<(i64, f32)>> = BTreeMap::new();
    for e in &events[1..] {
        assert!(e.wall_time >= events[0].wall_time);
        for (tag, v) in &e.scalars {
            by_tag.entry(tag.clone()).or_default().push((e.step, *v));
        }
    }
    assert_eq!(
        by_tag["critic/rewards/mean"],
        [(1, 0.25), (2, 0.5), (3, 0.75)]
    );
    assert_eq!(by_tag["actor/entropy"], [(1, 1.25), (2, 1.0), (3, 0.75)]);
    let kl = &by_tag["actor/ppo_kl"];
    assert_eq!(kl[0], (1, 1e-3));
    assert!(
        kl[2].1.is_nan(),
        "a diverged value stays NaN in TensorBoard"
    );

    // The same scalars are in metrics.jsonl.
    let lines = agentrl_run::read_metrics(&run.metrics_path())?;
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1].get("actor/entropy"), Some(1.0));
    Ok(())
}
