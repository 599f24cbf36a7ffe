//! Metric lines: the flat JSON form with NaN for non-finite values, the reader's torn-line rule and
//! which names are wall-clock.

use agentrl_run::metrics::{is_wall_clock, names, read_metrics, MetricLine};

#[test]
fn a_line_is_flat_and_non_finite_values_survive_as_nan() {
    let mut line = MetricLine::new(3);
    line.set(names::REWARD_MEAN, 0.5)
        .set(names::PPO_KL, f64::NAN);
    let text = serde_json::to_string(&line).unwrap();
    assert_eq!(
        text,
        r#"{"step":3,"actor/ppo_kl":null,"critic/rewards/mean":0.5}"#
    );
    let back: MetricLine = serde_json::from_str(&text).unwrap();
    assert_eq!(back.get(names::REWARD_MEAN), Some(0.5));
    assert!(back.get(names::PPO_KL).unwrap().is_nan());
    assert_eq!(back.eval, None);
}

#[test]
fn the_reader_skips_a_torn_last_line_only() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("metrics.jsonl");
    std::fs::write(
        &path,
        "{\"step\":1,\"a\":1}\n{\"step\":2,\"a\":2}\n{\"step\":3,\"a",
    )?;
    let lines = read_metrics(&path)?;
    assert_eq!(lines.len(), 2);
    std::fs::write(&path, "{\"step\":1,\"a\":1}\nnot json\n{\"step\":3}\n")?;
    let err = read_metrics(&path).unwrap_err();
    assert!(format!("{err:#}").contains("line 2"), "{err:#}");
    Ok(())
}

#[test]
fn wall_clock_names_are_timings_and_perf() {
    assert!(is_wall_clock(names::TIME_STEP));
    assert!(is_wall_clock(names::THROUGHPUT));
    assert!(!is_wall_clock(names::REWARD_MEAN));
    assert!(!is_wall_clock(names::STALENESS_MEAN));
}
