//! `agentrl experiment NAME`: a phenomenon of large RL runs, reproduced on TinyAgent in a few
//! minutes of CPU, over several seeds, ending in one checked line `verdict: …`.
//!
//! Where it sits: on top of the whole stack. An experiment trains several arms (configs that
//! differ in the one thing under study) on the same seeds through the real trainer
//! ([`agentrl_train::session`]), reads their `metrics.jsonl`, and writes into its folder
//! `result.md` (a table with the spread over seeds, the figures, the verdict) and PNG figures
//! of the curves (every seed a thin line, the arm's mean a thick one). The verdict checks the
//! direction the literature reports (ALGORITHMS.md); a result against it is reported as such.
//!
//! Runs use `train.threads = 1`, so the same seeds give the same numbers on any machine
//! (the project's determinism rule: same seed and thread count, same run), and
//! `experiments/<name>.md` holds each experiment's recorded output, which
//! `tests/cli/experiment_cli.rs` compares (verdict and rounded numbers) for the fast ones.

mod algorithms;
mod credit_assignment;
mod entropy_collapse;
mod format_learning;
mod length_effects;
mod mismatch;
mod post_training;
mod qwen3_format;
mod reward_hacking;
mod smollm2_learning;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::Args;

use agentrl_monitor::plot::{Chart, LegendEntry, Line, Scale};
use agentrl_rollout::EvalReport;
use agentrl_run::metrics::{read_metrics, MetricLine};
use agentrl_train::config::load_config;
use agentrl_train::recipes::rl::run_rl_session;
use agentrl_train::session::{Progress, SessionOptions, SessionOutcome};
use agentrl_train::trainer::Trainer;

#[derive(Debug, Args)]
pub struct ExperimentArgs {
    /// The experiment: reward-hacking, mismatch, entropy-collapse, algorithms, length-effects,
    /// format-learning, credit-assignment, post-training, qwen3-format, smollm2-learning (or
    /// `list`).
    #[arg(
        value_name = "NAME",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub name: Option<String>,
    /// Run every experiment, one after another, each into `<--out>/<name>` (default
    /// `runs/experiments/<name>`); docs/experiments.md lists how long each takes (hours in all).
    #[arg(long)]
    pub all: bool,
    /// Seeds (comma-separated); at least 3 for a verdict.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub seeds: Vec<u64>,
    /// Folder of the experiment's runs, figures and result (must not exist yet); default
    /// `runs/experiments/<name>`.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Judge the runs an earlier call left in `--out` again, without training: rewrites its
    /// figures and result.md (after a change to the judge or the figures). Not for
    /// experiments that evaluate before and after training (their evaluations are not kept).
    #[arg(long, conflicts_with = "all")]
    pub rejudge: bool,
    /// Continue an experiment that was cut off, in its `--out` folder: the stages it finished
    /// are read back, the rest trained (smollm2-learning, whose stages take tens of minutes).
    #[arg(long, conflicts_with_all = ["all", "rejudge"])]
    pub resume: bool,
}

/// One experiment: its arms and how to judge them.
pub(crate) struct Experiment {
    pub name: &'static str,
    pub question: &'static str,
    /// Settings every arm shares (the budget).
    pub common: &'static [&'static str],
    pub arms: &'static [Arm],
    /// Reads the trained arms and writes the result's body and verdict.
    pub judge: fn(&[ArmRuns]) -> Judgement,
    /// Figures: (file stem, title, y label, metric).
    pub figures: &'static [(&'static str, &'static str, &'static str, &'static str)],
    /// Evaluate every split before and after training (pass@k at `eval.samples`).
    pub evals: bool,
}

/// One configuration under study.
pub(crate) struct Arm {
    pub name: &'static str,
    pub sets: &'static [&'static str],
}

/// An arm named `name` that sets `sets` (`key=value` overrides, as `--set` takes them).
pub(crate) const fn arm(name: &'static str, sets: &'static [&'static str]) -> Arm {
    Arm { name, sets }
}

/// An arm's runs, one per seed: (seed, metrics lines), and with [`Experiment::evals`] each
/// run's evaluations (before, after training).
pub(crate) struct ArmRuns {
    pub name: &'static str,
    pub runs: Vec<(u64, Vec<MetricLine>)>,
    pub evals: Vec<(Vec<EvalReport>, Vec<EvalReport>)>,
}

impl ArmRuns {
    /// A figure of each run (`of` its metrics lines), over the seeds.
    pub fn over_seeds(&self, of: impl Fn(&[MetricLine]) -> f64) -> OverSeeds {
        let values: Vec<f64> = self.runs.iter().map(|(_, lines)| of(lines)).collect();
        OverSeeds::of(&values)
    }
}

pub(crate) struct Judgement {
    /// Markdown: the table and what it shows.
    pub body: String,
    /// `verdict: …` without the prefix.
    pub verdict: String,
}

const EXPERIMENTS: &[&Experiment] = &[
    &reward_hacking::EXPERIMENT,
    &mismatch::EXPERIMENT,
    &entropy_collapse::EXPERIMENT,
    &algorithms::EXPERIMENT,
    &length_effects::EXPERIMENT,
    &format_learning::EXPERIMENT,
    &credit_assignment::EXPERIMENT,
];

/// An experiment with its own driver: its arms are not all RL sessions of one config each
/// (post-training chains recipes and starts arms from other arms' runs).
pub(crate) struct DrivenExperiment {
    pub name: &'static str,
    pub question: &'static str,
    /// Trains the arms into the (fresh) folder and writes the result ([`finish`]).
    pub run: fn(&ExperimentArgs, &Path) -> anyhow::Result<()>,
    /// `--resume` continues it in an existing folder (its `run` reads finished arms back).
    pub resumable: bool,
}

const DRIVEN: &[&DrivenExperiment] = &[
    &post_training::EXPERIMENT,
    &qwen3_format::EXPERIMENT,
    &smollm2_learning::EXPERIMENT,
];

pub fn experiment(args: ExperimentArgs) -> anyhow::Result<()> {
    if args.all {
        let root = args
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("runs/experiments"));
        let names = EXPERIMENTS
            .iter()
            .map(|e| e.name)
            .chain(DRIVEN.iter().map(|e| e.name));
        for name in names {
            eprintln!("experiment --all: {name}");
            experiment(ExperimentArgs {
                name: Some(name.to_string()),
                all: false,
                seeds: args.seeds.clone(),
                out: Some(root.join(name)),
                rejudge: false,
                resume: false,
            })
            .with_context(|| format!("experiment {name}"))?;
        }
        return Ok(());
    }
    let name = args.name.as_deref().unwrap_or("list");
    if name == "list" {
        for (name, question) in EXPERIMENTS
            .iter()
            .map(|e| (e.name, e.question))
            .chain(DRIVEN.iter().map(|e| (e.name, e.question)))
        {
            println!("{name:<16} {question}");
        }
        return Ok(());
    }
    if let Some(driven) = DRIVEN.iter().find(|e| e.name == name) {
        if args.rejudge {
            bail!("--rejudge is not offered by {}", driven.name);
        }
        let out = if args.resume {
            if !driven.resumable {
                bail!("--resume is not offered by {}", driven.name);
            }
            let out = out_dir(&args, driven.name);
            if !out.is_dir() {
                bail!(
                    "--resume continues an experiment in its folder; {} is none",
                    out.display()
                );
            }
            out
        } else {
            prepare_out(&args, driven.name)?
        };
        return (driven.run)(&args, &out);
    }
    if args.resume {
        bail!("--resume is offered by smollm2-learning only");
    }
    let Some(experiment) = EXPERIMENTS.iter().find(|e| e.name == name) else {
        bail!(
            "no experiment {:?}; the experiments are: {}",
            name,
            EXPERIMENTS
                .iter()
                .map(|e| e.name)
                .chain(DRIVEN.iter().map(|e| e.name))
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let out = if args.rejudge {
        let out = out_dir(&args, experiment.name);
        if experiment.evals {
            bail!(
                "--rejudge reads the runs' metrics only; {} judges evaluations that are not kept",
                experiment.name
            );
        }
        if !out.is_dir() {
            bail!(
                "--rejudge needs the folder of an earlier run; {} is none",
                out.display()
            );
        }
        out
    } else {
        prepare_out(&args, experiment.name)?
    };
    let started = Instant::now();
    let mut arms = Vec::new();
    for arm in experiment.arms {
        let (mut runs, mut evals) = (Vec::new(), Vec::new());
        for &seed in &args.seeds {
            if args.rejudge {
                runs.push((seed, read_run(&out.join(run_name(arm, seed)))?));
                continue;
            }
            eprintln!("{}: arm {} seed {seed}", experiment.name, arm.name);
            let (lines, outcome) = train_arm(&out, experiment, arm, seed)?;
            runs.push((seed, lines));
            evals.push((outcome.before, outcome.after));
        }
        arms.push(ArmRuns {
            name: arm.name,
            runs,
            evals,
        });
    }
    let judgement = (experiment.judge)(&arms);
    let mut figures = Vec::new();
    // More arms than a legend holds: one figure per set of arms (`stem-1.png`, `stem-2.png`, …).
    let parts: Vec<&[ArmRuns]> = arms.chunks(ARMS_PER_FIGURE).collect();
    for (stem, title, y_label, metric) in experiment.figures {
        for (i, part) in parts.iter().enumerate() {
            let (stem, title) = if parts.len() == 1 {
                (stem.to_string(), title.to_string())
            } else {
                (
                    format!("{stem}-{}", i + 1),
                    format!("{title} ({}/{})", i + 1, parts.len()),
                )
            };
            let svg = chart(part, &title, y_label, metric).to_svg();
            figures.push(write_figure(&out, &stem, &title, &svg)?);
        }
    }
    let result = ResultDoc {
        name: experiment.name,
        question: experiment.question,
        arms: experiment
            .arms
            .iter()
            .map(|a| format!("**{}** (`{}`)", a.name, a.sets.join(" ")))
            .collect::<Vec<_>>()
            .join(", "),
        seeds: &args.seeds,
        common: experiment.common,
        body: judgement.body,
        figures,
        verdict: judgement.verdict,
    };
    finish(
        &out,
        &result,
        if args.rejudge { "re-judged in" } else { "took" },
        started.elapsed().as_secs_f64(),
        arms.iter().map(|a| a.runs.len()).sum::<usize>(),
    )
}

/// The experiment's folder, created fresh (`--out`, default `runs/experiments/<name>`), after
/// a note when the seeds are too few for a verdict.
fn prepare_out(args: &ExperimentArgs, name: &str) -> anyhow::Result<PathBuf> {
    if args.seeds.len() < 3 {
        eprintln!(
            "note: {} seed(s); a verdict over fewer than 3 seeds is weak",
            args.seeds.len()
        );
    }
    let out = out_dir(args, name);
    if out.exists() {
        bail!(
            "{} exists; an experiment never writes over an earlier one (pass --out DIR)",
            out.display()
        );
    }
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    Ok(out)
}

/// The experiment's folder: `--out`, default `runs/experiments/<name>`.
fn out_dir(args: &ExperimentArgs, name: &str) -> PathBuf {
    args.out
        .clone()
        .unwrap_or_else(|| Path::new("runs/experiments").join(name))
}

/// What `result.md` says, in order.
pub(crate) struct ResultDoc<'a> {
    pub name: &'a str,
    pub question: &'a str,
    /// The arms, each with what sets it apart (Markdown).
    pub arms: String,
    pub seeds: &'a [u64],
    pub common: &'a [&'a str],
    pub body: String,
    /// Markdown image links ([`write_figure`]).
    pub figures: Vec<String>,
    /// `verdict: …` without the prefix.
    pub verdict: String,
}

impl ResultDoc<'_> {
    fn render(&self) -> String {
        let seeds: Vec<String> = self.seeds.iter().map(u64::to_string).collect();
        format!(
            "# experiment {}\n\n{}\n\nArms: {}. Seeds: {}. Shared settings: `{}`.\n\n{}\n{}\n\nverdict: {}\n",
            self.name,
            self.question,
            self.arms,
            seeds.join(", "),
            self.common.join(" "),
            self.body,
            self.figures.join("\n"),
            self.verdict
        )
    }
}

/// Writes `out/result.md`, prints it, and how long the experiment took (`took`, or
/// `re-judged in`) over how many runs.
pub(crate) fn finish(
    out: &Path,
    result: &ResultDoc<'_>,
    took: &str,
    seconds: f64,
    runs: usize,
) -> anyhow::Result<()> {
    let text = result.render();
    std::fs::write(out.join("result.md"), &text)
        .with_context(|| format!("writing {}", out.join("result.md").display()))?;
    print!("{text}");
    println!(
        "{took} {seconds:.0} s ({runs} runs); written to {}",
        out.display()
    );
    Ok(())
}

/// Writes a chart's SVG as `out/<stem>.png`; returns its Markdown image link.
pub(crate) fn write_figure(
    out: &Path,
    stem: &str,
    title: &str,
    svg: &str,
) -> anyhow::Result<String> {
    let png = out.join(format!("{stem}.png"));
    std::fs::write(&png, agentrl_monitor::dashboard::svg_to_png(svg)?)
        .with_context(|| format!("writing {}", png.display()))?;
    Ok(format!("![{title}]({stem}.png)"))
}

/// The settings of every experiment run: its folder `out/<run_name>`, its seed, one compute
/// thread (reproducible numbers) and no checkpoints but the last.
pub(crate) fn run_sets(out: &Path, run_name: &str, seed: u64) -> anyhow::Result<Vec<String>> {
    Ok(vec![
        format!(
            "train.runs_root={}",
            serde_json::to_string(&out.to_string_lossy())?
        ),
        format!("train.run_name={}", serde_json::to_string(run_name)?),
        format!("train.seed={seed}"),
        "train.threads=1".to_string(),
        "train.checkpoint_every=0".to_string(),
    ])
}

/// Trains one arm on one seed under `out/<arm>-<seed>`; returns its metrics and session.
fn train_arm(
    out: &Path,
    experiment: &Experiment,
    arm: &Arm,
    seed: u64,
) -> anyhow::Result<(Vec<MetricLine>, SessionOutcome)> {
    let mut sets = run_sets(out, &run_name(arm, seed), seed)?;
    sets.extend(experiment.common.iter().map(|s| s.to_string()));
    sets.extend(arm.sets.iter().map(|s| s.to_string()));
    let config = load_config(None, &sets)?;
    let (trainer, _) = Trainer::create(config)?;
    let options = SessionOptions {
        progress: Progress::Off,
        summary_evals: experiment.evals,
        stop: None,
    };
    let outcome = run_rl_session(trainer, &options)?;
    let lines = read_run(Path::new(&outcome.run_dir))?;
    Ok((lines, outcome))
}

/// The folder name of an arm's run on one seed, under the experiment's folder.
fn run_name(arm: &Arm, seed: u64) -> String {
    format!("{}-{seed}", arm.name)
}

/// A run's metrics lines, with the episode lengths its episodes files give.
fn read_run(run_dir: &Path) -> anyhow::Result<Vec<MetricLine>> {
    let mut lines = read_metrics(&run_dir.join("metrics.jsonl"))?;
    length_effects::add_episode_lengths(run_dir, &mut lines)?;
    format_learning::add_valid_call_rate(&mut lines);
    credit_assignment::add_test_first(run_dir, &mut lines)?;
    Ok(lines)
}

/// Arms a figure shows at most: the legend's two rows hold five of the longest preset names.
const ARMS_PER_FIGURE: usize = 5;

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// Every seed's curve of `metric` (thin, dashed) and the arm's mean over seeds (solid).
fn chart(arms: &[ArmRuns], title: &str, y_label: &str, metric: &str) -> Chart {
    let curves: Vec<Curves> = arms
        .iter()
        .map(|arm| Curves {
            name: arm.name.to_string(),
            runs: arm
                .runs
                .iter()
                .map(|(_, run)| series(run, metric))
                .collect(),
        })
        .collect();
    seed_chart(&curves, title, y_label)
}

/// One arm's curves, one `(x, y)` series per seed.
pub(crate) struct Curves {
    pub name: String,
    pub runs: Vec<Vec<(f64, f64)>>,
}

/// Every seed's curve (thin, dashed) and the arm's mean over seeds (solid), of each arm.
pub(crate) fn seed_chart(arms: &[Curves], title: &str, y_label: &str) -> Chart {
    let mut lines = Vec::new();
    let mut legend = Vec::new();
    for (i, arm) in arms.iter().enumerate() {
        let color = COLORS[i % COLORS.len()].to_string();
        for run in &arm.runs {
            lines.push(Line {
                label: arm.name.clone(),
                color: color.clone(),
                dash: "2 3".to_string(),
                points: run.clone(),
            });
        }
        lines.push(Line {
            label: arm.name.clone(),
            color: color.clone(),
            dash: String::new(),
            points: mean_curve(&arm.runs),
        });
        legend.push(LegendEntry {
            label: arm.name.clone(),
            color,
            dash: String::new(),
        });
    }
    // One entry for the line styles keeps the arms' entries short enough to fit.
    legend.push(LegendEntry {
        label: "dashed: each seed, solid: mean".to_string(),
        color: "#777777".to_string(),
        dash: "2 3".to_string(),
    });
    Chart {
        title: title.to_string(),
        y_label: y_label.to_string(),
        scale: Scale::Linear,
        lines,
        y_include: vec![0.0],
        legend,
    }
}

/// `(step, value)` of one metric over a run.
pub(crate) fn series(lines: &[MetricLine], metric: &str) -> Vec<(f64, f64)> {
    lines
        .iter()
        .map(|l| (l.step as f64, l.get(metric).unwrap_or(f64::NAN)))
        .collect()
}

/// The mean over seeds of curves, point by point (as far as the shortest goes): the mean x
/// and the mean of the finite y values (NaN, a gap in the line, where none is: a step no seed
/// measured, such as a format warm-up step).
fn mean_curve(runs: &[Vec<(f64, f64)>]) -> Vec<(f64, f64)> {
    let points = runs.iter().map(Vec::len).min().unwrap_or(0);
    (0..points)
        .map(|i| {
            let x = runs.iter().map(|r| r[i].0).sum::<f64>() / runs.len() as f64;
            let ys: Vec<f64> = runs
                .iter()
                .map(|r| r[i].1)
                .filter(|y| y.is_finite())
                .collect();
            if ys.is_empty() {
                return (x, f64::NAN);
            }
            (x, ys.iter().sum::<f64>() / ys.len() as f64)
        })
        .collect()
}

/// Mean of `values`; NaN where there are none (a figure the run did not record).
fn mean_or_nan(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, count) = values.fold((0.0, 0usize), |(sum, count), v| (sum + v, count + 1));
    if count == 0 {
        return f64::NAN;
    }
    sum / count as f64
}

/// Mean of a metric over `lines`, of those that recorded it; NaN where none did.
pub(crate) fn mean_of(lines: &[MetricLine], metric: &str) -> f64 {
    mean_or_nan(lines.iter().filter_map(|l| l.get(metric)))
}

/// Mean of a metric over a run's last `n` steps; NaN where the run did not record it.
pub(crate) fn late_mean(lines: &[MetricLine], metric: &str, n: usize) -> f64 {
    mean_of(&lines[lines.len().saturating_sub(n)..], metric)
}

/// Mean of a metric over the first `n` steps that recorded it (e.g. the start of RL, after a
/// warm-up that records none); NaN where none did.
pub(crate) fn early_mean(lines: &[MetricLine], metric: &str, n: usize) -> f64 {
    mean_or_nan(lines.iter().filter_map(|l| l.get(metric)).take(n))
}

/// The first step at which the mean of `metric` over `window` consecutive recorded steps
/// reached `target` (the step ending that window).
pub(crate) fn first_step_reaching(
    lines: &[MetricLine],
    metric: &str,
    target: f64,
    window: usize,
) -> Option<usize> {
    let values: Vec<(usize, f64)> = lines
        .iter()
        .filter_map(|l| Some((l.step, l.get(metric)?)))
        .collect();
    values.windows(window).find_map(|w| {
        let mean = w.iter().map(|(_, v)| v).sum::<f64>() / w.len() as f64;
        (mean >= target).then(|| w[w.len() - 1].0)
    })
}

/// Mean and spread (min–max) over seeds of a per-run figure.
pub(crate) struct OverSeeds {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

impl OverSeeds {
    pub fn of(values: &[f64]) -> Self {
        Self {
            mean: values.iter().sum::<f64>() / values.len().max(1) as f64,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }

    /// `0.42 (0.30–0.55)`, two decimals; `—` for a figure the runs did not record.
    pub fn show(&self) -> String {
        if !self.mean.is_finite() {
            return "—".to_string();
        }
        format!("{:.2} ({:.2}–{:.2})", self.mean, self.min, self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_no_run_recorded_shows_as_a_dash() {
        assert_eq!(OverSeeds::of(&[f64::NAN, f64::NAN]).show(), "—");
        assert_eq!(OverSeeds::of(&[0.25, 0.5]).show(), "0.38 (0.25–0.50)");
    }
}
