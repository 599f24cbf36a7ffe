//! The dashboard page and its PNG panels: self-contained, runs overlaid, mismatch legends,
//! text drawn with the embedded font.

use std::path::{Path, PathBuf};

use agentrl_monitor::dashboard::{
    dashboard_html, panel_chart, svg_to_png, MISMATCH_FALLBACK, MISMATCH_MIXED, MISMATCH_RECORDED,
};
use agentrl_monitor::panels::PANELS;
use agentrl_monitor::run::RunData;
use agentrl_run::metrics::{names, MetricLine};

fn fake_run(name: &str, slope: f64) -> RunData {
    RunData {
        name: name.into(),
        root: PathBuf::from(format!("/nonexistent/{name}")),
        lines: (1..=12)
            .map(|s| {
                let mut l = MetricLine::new(s);
                l.set(names::REWARD_MEAN, slope * s as f64)
                    .set(names::ENTROPY, 0.6 - 0.01 * s as f64)
                    .set(names::PPO_KL, 1e-6 * s as f64);
                l
            })
            .collect(),
    }
}

#[test]
fn the_page_is_self_contained_and_overlays_runs() -> anyhow::Result<()> {
    let html = dashboard_html(&[fake_run("a", 0.05), fake_run("b", 0.02)])?;
    for forbidden in [
        "<script",
        "src=\"http",
        "href=\"http",
        "@import",
        "url(http",
    ] {
        assert!(!html.contains(forbidden), "{forbidden}");
    }
    for panel in PANELS {
        assert!(html.contains(&format!("id=\"panel-{}\"", panel.id)));
    }
    assert!(
        html.contains(">a</text>") && html.contains(">b</text>"),
        "runs in the legends"
    );
    assert!(
        html.contains("not recorded by this run"),
        "missing metrics say so"
    );
    Ok(())
}

/// A run directory with one stored episode, with or without the trainer's log-probs.
fn run_with_episode(dir: &Path, name: &str, trainer: bool) -> anyhow::Result<RunData> {
    let root = dir.join(name);
    std::fs::create_dir_all(root.join("episodes"))?;
    let mut line = serde_json::json!({
        "task_id": "t", "group_id": 0, "tokens": [1, 2, 3],
        "sources": ["prompt", "action", "action"], "logprobs": [0.0, -0.5, -0.25],
        "token_text": ["<bos>", "<call>", "submit"], "turns": 1,
        "reward": {"score": 1.0, "hidden_passed": 1, "hidden_total": 1},
    });
    if trainer {
        line["trainer_logprobs"] = serde_json::json!([0.0, -0.25, -0.25]);
    }
    std::fs::write(root.join("episodes/step_000005.jsonl"), format!("{line}\n"))?;
    Ok(RunData {
        root,
        ..fake_run(name, 0.05)
    })
}

#[test]
fn the_mismatch_legend_says_what_the_mode_draws() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let with = run_with_episode(dir.path(), "with", true)?;
    let without = run_with_episode(dir.path(), "without", false)?;
    let html = dashboard_html(std::slice::from_ref(&with))?;
    assert!(html.contains(MISMATCH_RECORDED), "{html}");
    assert!(
        html.contains("|Δ log p| 0.250"),
        "the first action token's gap"
    );
    // An episode file from before trainer log-probs were recorded still loads; the mode
    // falls back to −log p and the legend says so.
    let html = dashboard_html(std::slice::from_ref(&without))?;
    assert!(html.contains(MISMATCH_FALLBACK), "{html}");
    assert!(html.contains("−log p 0.500"));
    let html = dashboard_html(&[with, without])?;
    assert!(html.contains(MISMATCH_MIXED));
    Ok(())
}

#[test]
fn panels_rasterise_with_the_embedded_font() -> anyhow::Result<()> {
    let chart = panel_chart(&PANELS[0], &[fake_run("a", 0.05)]);
    let png = svg_to_png(&chart.to_svg())?;
    assert_eq!(&png[1..4], b"PNG");
    // Text is drawn: a chart with a long title has more dark pixels than one without.
    let mut untitled = chart.clone();
    untitled.title.clear();
    let dark = |png: &[u8]| -> anyhow::Result<usize> {
        let pixmap = resvg::tiny_skia::Pixmap::decode_png(png)?;
        Ok(pixmap
            .pixels()
            .iter()
            .filter(|p| p.red() < 100 && p.green() < 100)
            .count())
    };
    assert!(dark(&png)? > dark(&svg_to_png(&untitled.to_svg())?)? + 50);
    Ok(())
}
