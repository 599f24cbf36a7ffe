//! `dashboard.html`: one self-contained page per run (or per comparison of runs), with the
//! panels of [`crate::panels`] as inline SVG, the doctor's findings on top, and sampled
//! episodes token by token; plus PNG images of the key panels in `dashboard/`.
//!
//! Where it sits: the last reader of a run. `agentrl dashboard RUN [RUN…]` writes it once;
//! `agentrl train` rewrites it every `train.dashboard_every` steps, so a live run can be
//! watched by reloading the page.
//!
//! `dashboard.html#panel-<id>` shows that one panel alone at the top left (CSS `:target`),
//! for a link to one chart and for the browser check (`scripts/browser_check.sh`).
//!
//! Self-contained: no script and no network. The one font (a subset of DejaVu Sans, see
//! `scripts/subset_font.sh`) is inlined as a data URL and also given to `resvg` for the PNGs,
//! so the page and the images draw the same glyphs on any machine, with no system font.

use std::path::{Path, PathBuf};

use anyhow::Context;
use base64::Engine as _;

use crate::doctor::{diagnose, DoctorConfig};
use crate::episodes::{
    episode_html, group_advantages, latest_episodes_file, pick_episodes, read_episodes,
};
use crate::panels::{Group, Panel, PANELS};
use crate::plot::{escape, Chart, LegendEntry, Line};
use crate::run::RunData;

/// The embedded font (DejaVu Sans, ASCII and a few symbols; license beside it in `assets/`).
pub const FONT: &[u8] = include_bytes!("../assets/DejaVuSans-subset.ttf");

/// Run colours, in legend order (colour-blind-safe Tableau order).
const RUN_COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
];
/// Dash patterns of a panel's metrics (when colour stands for the run).
const DASHES: [&str; 4] = ["", "6 3", "2 2", "9 3 2 3"];

/// What [`write_dashboard`] wrote.
#[derive(Debug, Clone)]
pub struct DashboardFiles {
    pub html: PathBuf,
    pub pngs: Vec<PathBuf>,
}

/// The chart of `panel` for `runs`: one run → a colour per metric; several → a colour per
/// run and a dash pattern per metric.
pub fn panel_chart(panel: &Panel, runs: &[RunData]) -> Chart {
    let mut lines = Vec::new();
    let mut legend = Vec::new();
    let single = runs.len() == 1;
    for (r, run) in runs.iter().enumerate() {
        for (k, metric) in panel.metrics.iter().enumerate() {
            let points = run.series(metric.name);
            if points.is_empty() {
                continue;
            }
            let (color, dash) = if single {
                (RUN_COLORS[k % RUN_COLORS.len()], "")
            } else {
                (RUN_COLORS[r % RUN_COLORS.len()], DASHES[k % DASHES.len()])
            };
            let label = if single {
                metric.label.to_string()
            } else {
                format!("{} · {}", run.name, metric.label)
            };
            lines.push(Line {
                label,
                color: color.to_string(),
                dash: dash.to_string(),
                points,
            });
        }
    }
    if !single {
        // Several runs: the dash says which metric, the colour which run.
        for (k, metric) in panel.metrics.iter().enumerate() {
            if runs
                .iter()
                .any(|r| r.lines.iter().any(|l| l.get(metric.name).is_some()))
            {
                legend.push(LegendEntry {
                    label: metric.label.to_string(),
                    color: "#555".into(),
                    dash: DASHES[k % DASHES.len()].into(),
                });
            }
        }
        for (r, run) in runs.iter().enumerate() {
            legend.push(LegendEntry {
                label: run.name.clone(),
                color: RUN_COLORS[r % RUN_COLORS.len()].into(),
                dash: String::new(),
            });
        }
    }
    Chart {
        title: panel.title.to_string(),
        y_label: panel.unit.to_string(),
        scale: panel.scale,
        lines,
        y_include: panel.include.to_vec(),
        legend,
    }
}

/// Rasterises one SVG (at 2× for sharp text) with the embedded font only.
pub fn svg_to_png(svg: &str) -> anyhow::Result<Vec<u8>> {
    use resvg::{tiny_skia, usvg};
    let mut options = usvg::Options {
        font_family: crate::plot::FONT_FAMILY.to_string(),
        ..usvg::Options::default()
    };
    options.fontdb_mut().load_font_data(FONT.to_vec());
    let tree = usvg::Tree::from_str(svg, &options).context("parsing a panel's SVG")?;
    let size = tree.size().to_int_size();
    let scale = 2.0;
    let (w, h) = (
        (size.width() as f32 * scale) as u32,
        (size.height() as f32 * scale) as u32,
    );
    let mut pixmap =
        tiny_skia::Pixmap::new(w, h).with_context(|| format!("a {w}x{h} image for a panel"))?;
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().context("encoding a panel as PNG")
}

const STYLE: &str = r#"
body{font-family:"DejaVu Sans",sans-serif;margin:16px 24px;color:#222;background:#f3f3f3}
h1{font-size:20px;margin:4px 0}h2{font-size:16px;margin:18px 0 6px;border-bottom:1px solid #ccc}
.legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:22px;height:4px;vertical-align:middle;margin-right:4px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(470px,1fr));gap:10px}
figure.panel{margin:0;background:#fff;border:1px solid #ddd;padding:4px}figure.panel svg{display:block}
figcaption{font-size:12px;color:#444;padding:2px 4px 4px}figcaption b{color:#222}
.finding{background:#fff4e5;border-left:4px solid #e8590c;padding:6px 10px;margin:6px 0;font-size:13px}
.healthy{background:#ebfbee;border-left:4px solid #2b8a3e;padding:6px 10px;font-size:13px}
.finding ul{margin:4px 0 0 0}
.episode{background:#fff;border:1px solid #ddd;padding:8px;margin:8px 0}.ep-head{margin:0 0 2px}.ep-note{margin:0 0 6px;font-size:12px;color:#555}
.tokens{font-family:"DejaVu Sans",monospace;font-size:12px;line-height:2.1}
.tok{padding:1px 2px;margin:0 1px;border-radius:2px;background:var(--adv)}
.call,.result,.prompt{display:inline;padding:2px 0}.prompt .tok{color:#777}
.call{border-bottom:2px solid #1f77b4}.result{border-bottom:2px dotted #888}.result .tok{color:#555}
.mark{font-size:10px;font-weight:bold;margin:0 4px 0 10px;color:#1f77b4}.result .mark{color:#666}
#mode-mis:checked~.episodes .tok{background:var(--mis)}#mode-mask:checked~.episodes .tok{background:var(--mask)}
.modes label{margin-right:12px;font-size:13px}.mis-legend{font-size:11px;color:#666}
body:has(.panel:target)>:not(.grid):not(style){display:none}body:has(.panel:target) .grid{display:block}
body:has(.panel:target) .panel:not(:target){display:none}body:has(.panel:target){margin:0}
"#;

// What the mismatch mode draws, by whether the episodes shown carry trainer log-probs.
/// The mismatch mode's legend when every episode shown records the trainer's log-probs.
pub const MISMATCH_RECORDED: &str =
    "|log π_engine − log π_trainer| per action token: white 0 → orange ≥ 0.1 nats";
/// The mismatch mode's legend when no episode shown records the trainer's log-probs.
pub const MISMATCH_FALLBACK: &str = "trainer log-probs not recorded by this run: shows the sampling surprise −log p instead, white 0 → orange ≥ 3 nats";
/// The mismatch mode's legend when some episodes shown record the trainer's log-probs.
pub const MISMATCH_MIXED: &str = "|log π_engine − log π_trainer|, white 0 → orange ≥ 0.1 nats; episodes without trainer log-probs show −log p instead and say so";

/// The page for `runs` (first run first in the legend).
pub fn dashboard_html(runs: &[RunData]) -> anyhow::Result<String> {
    let font = base64::engine::general_purpose::STANDARD.encode(FONT);
    let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    let mut html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>agentrl dashboard: {}</title><style>@font-face{{font-family:\"DejaVu Sans\";src:url(data:font/ttf;base64,{font}) format(\"truetype\")}}{STYLE}</style></head><body>",
        escape(&names.join(", "))
    );
    html.push_str(&format!(
        "<h1>agentrl dashboard: {}</h1><p class=\"legend\">",
        escape(&names.join(" vs "))
    ));
    for (i, run) in runs.iter().enumerate() {
        html.push_str(&format!(
            "<span><i class=\"sw\" style=\"background:{}\"></i>{} ({} steps, {})</span>",
            RUN_COLORS[i % RUN_COLORS.len()],
            escape(&run.name),
            run.last_step(),
            escape(&run.root.display().to_string())
        ));
    }
    html.push_str("</p>");
    if runs.len() > 1 {
        html.push_str("<p style=\"font-size:12px;color:#555\">Colour = run; within a panel, solid / dashed / dotted = its first / second / third metric.</p>");
    }

    html.push_str("<h2 id=\"doctor\">Doctor</h2>");
    for run in runs {
        let findings = diagnose(&run.lines, &DoctorConfig::default());
        if findings.is_empty() {
            html.push_str(&format!(
                "<div class=\"healthy\">{}: no failure signature found.</div>",
                escape(&run.name)
            ));
        }
        for f in findings {
            html.push_str(&format!(
                "<div class=\"finding\"><b>{}: {}</b>, steps {}–{} ({})<br>{}<ul>",
                escape(&run.name),
                escape(f.signature.title()),
                f.first_step,
                f.last_step,
                escape(&f.windows()),
                escape(&f.evidence).replace('\n', "<br>")
            ));
            for r in &f.remedies {
                html.push_str(&format!("<li>{}</li>", escape(r)));
            }
            html.push_str("</ul></div>");
        }
    }

    for group in Group::ALL {
        html.push_str(&format!(
            "<h2 id=\"{}\">{}</h2><div class=\"grid\">",
            group.title().to_lowercase().replace(' ', "-"),
            group.title()
        ));
        for panel in PANELS.iter().filter(|p| p.group == group) {
            let chart = panel_chart(panel, runs);
            html.push_str(&format!(
                "<figure class=\"panel\" id=\"panel-{}\" data-panel=\"{}\">{}<figcaption><b>Look for:</b> {}</figcaption></figure>",
                panel.id,
                panel.id,
                chart.to_svg(),
                escape(panel.look_for)
            ));
        }
        html.push_str("</div>");
    }

    html.push_str("<h2 id=\"episodes\">Episodes</h2>");
    let mut shown = String::new();
    // Whether every episode shown carries the trainer's log-probs (the mismatch legend says
    // what that mode draws where one does not).
    let (mut recorded, mut unrecorded) = (0, 0);
    for run in runs {
        match latest_episodes_file(&run.root) {
            None => shown.push_str(&format!(
                "<p>{}: no sampled episodes stored yet (train.episodes_every).</p>",
                escape(&run.name)
            )),
            Some((step, path)) => {
                let episodes = read_episodes(&path)?;
                let advantages = group_advantages(&episodes);
                shown.push_str(&format!(
                    "<p><b>{}</b>, step {step}: {} episodes stored; showing a solved, a hacked and a failed one where there are.</p>",
                    escape(&run.name),
                    episodes.len()
                ));
                for (k, i) in pick_episodes(&episodes, 3).into_iter().enumerate() {
                    if episodes[i].records_trainer_logprobs() {
                        recorded += 1;
                    } else {
                        unrecorded += 1;
                    }
                    shown.push_str(&episode_html(
                        &episodes[i],
                        advantages[i],
                        &format!("ep-{}-{k}", escape(&run.name)),
                    ));
                }
            }
        }
    }
    let mismatch_legend = match (recorded, unrecorded) {
        (_, 0) => MISMATCH_RECORDED,
        (0, _) => MISMATCH_FALLBACK,
        _ => MISMATCH_MIXED,
    };
    html.push_str(&format!("<input type=\"radio\" name=\"mode\" id=\"mode-adv\" checked><label for=\"mode-adv\"> advantage (green +, red −)</label> <input type=\"radio\" name=\"mode\" id=\"mode-mis\"><label for=\"mode-mis\"> engine/trainer mismatch <span class=\"mis-legend\">({mismatch_legend})</span></label> <input type=\"radio\" name=\"mode\" id=\"mode-mask\"><label for=\"mode-mask\"> loss mask (blue = trained on)</label><div class=\"episodes\">"));
    html.push_str(&shown);
    html.push_str("</div></body></html>\n");
    Ok(html)
}

/// Writes the page to `html_path` and the key panels as `<stem>/<panel>.png` beside it, each
/// atomically (a reader reloading a live page never sees half a file).
pub fn write_dashboard(runs: &[RunData], html_path: &Path) -> anyhow::Result<DashboardFiles> {
    anyhow::ensure!(!runs.is_empty(), "a dashboard needs at least one run");
    let html = dashboard_html(runs)?;
    if let Some(dir) = html_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    agentrl_run::write_atomic(html_path, html.as_bytes())?;
    let stem = html_path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "dashboard".into());
    let png_dir = html_path.with_file_name(stem);
    std::fs::create_dir_all(&png_dir).with_context(|| format!("creating {}", png_dir.display()))?;
    let mut pngs = Vec::new();
    for panel in PANELS.iter().filter(|p| p.png) {
        let png = svg_to_png(&panel_chart(panel, runs).to_svg())
            .with_context(|| format!("drawing the {} panel", panel.id))?;
        let path = png_dir.join(format!("{}.png", panel.id));
        agentrl_run::write_atomic(&path, &png)?;
        pngs.push(path);
    }
    Ok(DashboardFiles {
        html: html_path.to_path_buf(),
        pngs,
    })
}
