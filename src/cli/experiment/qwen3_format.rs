//! `agentrl experiment qwen3-format`: a tiny random Qwen3 learns the tool-call format on the
//! CPU. The model has Qwen3's real 151,936-token vocabulary, tokenizer and chat template and
//! random weights (`scripts/make_tiny_qwen3.py`, embedded here, run with `python3`); the
//! recipe is `configs/tests/qwen3-tiny-grpo.toml` (embedded) with its warm-up switched to SFT on the
//! gym expert's chat episodes (`train.format_warmup_data = "expert"`, candidate edits), then
//! GRPO whose reward charges each format error.
//!
//! Every [`MEASURE_EVERY`] steps it samples fresh episodes of a fixed set of train tasks, as an
//! RL step samples them, and records the valid-tool-call rate (turns without a format error),
//! the mean reward, and the retokenization drift rate: the share of episodes whose conversation,
//! re-rendered through the template and tokenized again, gives other ids than the stream the
//! model sampled (what a trainer that re-tokenised the text would train on by mistake).
//!
//! The expected effect (ALGORITHMS.md §14, the SFT-then-RL pipeline; DeepSeek-R1's cold
//! start): an untrained model writes no valid call, SFT on demonstrations teaches the format,
//! and RL with a format cost raises it further.
//!
//! Where it sits: a [`DrivenExperiment`]. It drives the real [`Trainer`] step by step (the
//! framework's sessions do not sample between steps) and reuses the framework's run settings,
//! curves, figures and result writing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context as _};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use agentrl_train::config::load_config;
use agentrl_train::trainer::Trainer;

use super::{
    finish, run_sets, seed_chart, write_figure, Curves, DrivenExperiment, ExperimentArgs,
    OverSeeds, ResultDoc,
};

pub(crate) const EXPERIMENT: DrivenExperiment = DrivenExperiment {
    name: "qwen3-format",
    question: "Does a tiny random Qwen3, through the real template, learn to write valid \
               `<tool_call>`s from SFT on the expert's chat episodes, does GRPO with a format \
               cost raise the rate further, and how often would re-tokenising its episodes \
               give other tokens than it sampled?",
    run,
    resumable: false,
};

/// The recipe: the repository's tiny-Qwen3 config, as committed.
const CONFIG: &str = include_str!("../../../configs/tests/qwen3-tiny-grpo.toml");
/// The tiny model's maker, as committed (standard library only).
const MAKE_TINY_QWEN3: &str = include_str!("../../../scripts/make_tiny_qwen3.py");
/// The shape `tests/qwen3_loop.rs` trains: hidden 64, weights scaled so a random model's
/// logits are not saturated.
const MODEL_ARGS: &[&str] = &[
    "--hidden-size",
    "64",
    "--scale",
    "0.15",
    "--embed-scale",
    "0.6",
];

/// SFT steps (the warm-up) before GRPO; measured by `tests/qwen3_loop.rs`: 20 steps of
/// expert episodes leave the valid-call rate at 0, about 40 make it rise.
const SFT_STEPS: usize = 40;
const GRPO_STEPS: usize = 12;
/// What this experiment changes in [`CONFIG`]: the warm-up's data and length, and room for the
/// expert's recovery demonstrations (a wrong edit, the fix, submit: 3 turns).
fn sets() -> Vec<String> {
    vec![
        "train.format_warmup_data=\"expert\"".to_string(),
        "sft.edit_forms=[\"candidate\"]".to_string(),
        "rollout.max_turns=3".to_string(),
        format!("train.format_warmup_steps={SFT_STEPS}"),
        format!("train.steps={}", SFT_STEPS + GRPO_STEPS),
        "train.episodes_every=0".to_string(),
        // Two threads (fixed, so a seed gives the same run on any machine): one is twice as
        // slow at this vocabulary.
        "train.threads=2".to_string(),
    ]
}
const MEASURE_EVERY: usize = 8;
/// The tasks every measurement samples (the first of the train split) and episodes per task.
const MEASURED_TASKS: usize = 4;
const EPISODES_PER_TASK: usize = 8;
const ARM: &str = "expert SFT → GRPO";

/// One measurement: fresh episodes at a step.
#[derive(Debug, Clone, Copy)]
struct Point {
    step: usize,
    valid_call_rate: f64,
    reward: f64,
    drift_rate: f64,
}

fn run(args: &ExperimentArgs, out: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    let model = make_tiny_qwen3(out)?;
    let config_path = out.join("qwen3-tiny-grpo.toml");
    std::fs::write(&config_path, CONFIG)
        .with_context(|| format!("writing {}", config_path.display()))?;
    let sets_of_experiment = sets();
    let mut runs: Vec<(u64, Vec<Point>)> = Vec::new();
    for &seed in &args.seeds {
        eprintln!("qwen3-format: seed {seed}");
        let mut sets = run_sets(out, &format!("expert-sft-grpo-{seed}"), seed)?;
        sets.push(format!(
            "model.dir={}",
            serde_json::to_string(&model.to_string_lossy())?
        ));
        sets.extend(sets_of_experiment.iter().cloned());
        let config = load_config(Some(&config_path), &sets)?;
        let (mut trainer, _) = Trainer::create(config)?;
        let tasks: Vec<String> = trainer
            .train_task_ids()
            .iter()
            .take(MEASURED_TASKS)
            .cloned()
            .collect();
        let mut points = vec![measure(&mut trainer, &tasks, seed)?];
        while trainer.state.step < trainer.config.train.steps {
            let record = trainer.step()?;
            trainer.log(&record)?;
            let step = trainer.state.step;
            if step % MEASURE_EVERY == 0 || step == SFT_STEPS || step == trainer.config.train.steps
            {
                let point = measure(&mut trainer, &tasks, seed)?;
                eprintln!(
                    "qwen3-format: seed {seed} step {step}: valid-call rate {:.3}, reward {:.3}, \
                     drift rate {:.3}",
                    point.valid_call_rate, point.reward, point.drift_rate
                );
                points.push(point);
            }
        }
        runs.push((seed, points));
    }
    let (body, verdict) = judge(&runs);
    let curves = |name: &str, of: fn(&Point) -> f64| Curves {
        name: name.to_string(),
        runs: runs
            .iter()
            .map(|(_, points)| points.iter().map(|p| (p.step as f64, of(p))).collect())
            .collect(),
    };
    let title = format!("valid-call and drift rates (SFT steps 0–{SFT_STEPS}, then GRPO)");
    let rates = seed_chart(
        &[
            curves("valid-call rate", |p| p.valid_call_rate),
            curves("drift rate", |p| p.drift_rate),
        ],
        &title,
        "fraction",
    )
    .to_svg();
    let reward_title = format!("reward (SFT steps 0–{SFT_STEPS}, then GRPO)");
    let reward = seed_chart(&[curves(ARM, |p| p.reward)], &reward_title, "mean reward").to_svg();
    let figures = vec![
        write_figure(out, "rates", &title, &rates)?,
        write_figure(out, "reward", &reward_title, &reward)?,
    ];
    let common: Vec<&str> = std::iter::once("configs/tests/qwen3-tiny-grpo.toml with")
        .chain(sets_of_experiment.iter().map(String::as_str))
        .collect();
    let result = ResultDoc {
        name: EXPERIMENT.name,
        question: EXPERIMENT.question,
        arms: format!(
            "**{ARM}** ({SFT_STEPS} SFT steps on the expert's chat episodes, then {GRPO_STEPS} \
             GRPO steps; a tiny random Qwen3 `{}`)",
            MODEL_ARGS.join(" ")
        ),
        seeds: &args.seeds,
        common: &common,
        body,
        figures,
        verdict,
    };
    finish(
        out,
        &result,
        "took",
        started.elapsed().as_secs_f64(),
        args.seeds.len(),
    )
}

/// Makes the tiny random Qwen3 under `out/tiny-qwen3` with the shared Qwen3 tokenizer and
/// template (`$AGENTRL_QWEN3_DIR`, or `shared/assets/qwen3` beside the checkout).
fn make_tiny_qwen3(out: &Path) -> anyhow::Result<PathBuf> {
    let Some(assets) = agentrl_chat::find_qwen3_assets() else {
        bail!(
            "qwen3-format needs the Qwen3 tokenizer and template: set {} to a Qwen3 model folder \
             (tokenizer.json, chat template, config.json)",
            agentrl_chat::assets::QWEN3_DIR_ENV
        );
    };
    let script = out.join("make_tiny_qwen3.py");
    std::fs::write(&script, MAKE_TINY_QWEN3)
        .with_context(|| format!("writing {}", script.display()))?;
    let model = out.join("tiny-qwen3");
    let python = std::env::var("AGENTRL_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let output = Command::new(&python)
        .arg(&script)
        .args(MODEL_ARGS)
        .arg("--assets")
        .arg(&assets)
        .arg("--out")
        .arg(&model)
        .output()
        .with_context(|| format!("running {python} {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "{python} {} failed ({}): {}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(model)
}

/// Fresh episodes of `tasks`, sampled as an RL step samples them, from a stream of their own
/// (seeded by the run's seed and the step, so a measurement never moves the training streams).
fn measure(trainer: &mut Trainer, tasks: &[String], seed: u64) -> anyhow::Result<Point> {
    let step = trainer.state.step;
    let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(1_000_003) ^ step as u64);
    let episodes = trainer.sample_policy_episodes(tasks, EPISODES_PER_TASK, &mut rng)?;
    let n = episodes.len().max(1) as f64;
    let turns: u32 = episodes.iter().map(|e| e.turns).sum();
    let errors: u32 = episodes.iter().map(|e| e.format_errors).sum();
    Ok(Point {
        step,
        valid_call_rate: 1.0 - errors as f64 / turns.max(1) as f64,
        reward: episodes.iter().map(|e| e.reward.score as f64).sum::<f64>() / n,
        drift_rate: episodes.iter().filter(|e| e.drifted == Some(true)).count() as f64 / n,
    })
}

/// The point of `points` at `step` (the last one before it, if none is exactly there).
fn at(points: &[Point], step: usize) -> Point {
    points
        .iter()
        .rev()
        .find(|p| p.step <= step)
        .or(points.first())
        .copied()
        .unwrap_or(Point {
            step,
            valid_call_rate: f64::NAN,
            reward: f64::NAN,
            drift_rate: f64::NAN,
        })
}

fn judge(runs: &[(u64, Vec<Point>)]) -> (String, String) {
    let stage = |step: usize| -> Vec<Point> { runs.iter().map(|(_, p)| at(p, step)).collect() };
    let (untrained, after_sft, after_grpo) =
        (stage(0), stage(SFT_STEPS), stage(SFT_STEPS + GRPO_STEPS));
    let over = |points: &[Point], of: fn(&Point) -> f64| {
        OverSeeds::of(&points.iter().map(of).collect::<Vec<_>>())
    };
    let valid = |p: &Point| p.valid_call_rate;
    let reward = |p: &Point| p.reward;
    let drift = |p: &Point| p.drift_rate;
    let mut body =
        String::from("| point | valid-call rate | reward | drift rate |\n|---|---|---|---|\n");
    for (label, points) in [
        ("untrained", &untrained),
        ("after SFT", &after_sft),
        ("after GRPO", &after_grpo),
    ] {
        body.push_str(&format!(
            "| {label} | {} | {} | {} |\n",
            over(points, valid).show(),
            over(points, reward).show(),
            over(points, drift).show()
        ));
    }
    body.push_str(&format!(
        "\nEach cell: mean over seeds (min–max), from {} fresh episodes ({EPISODES_PER_TASK} of \
         each of the first {MEASURED_TASKS} train tasks) sampled at Qwen3's recommended \
         non-thinking settings. The drift rate counts episodes whose re-rendered conversation \
         tokenizes differently from the sampled stream; agentrl trains on the stream, so drift \
         costs it nothing, but a trainer that re-tokenised the text would train on other \
         tokens than the policy sampled.\n",
        EPISODES_PER_TASK * MEASURED_TASKS
    ));
    let sft_raised = untrained
        .iter()
        .zip(&after_sft)
        .filter(|(u, s)| s.valid_call_rate > u.valid_call_rate + 0.1)
        .count();
    let grpo_raised = after_sft
        .iter()
        .zip(&after_grpo)
        .filter(|(s, g)| g.valid_call_rate > s.valid_call_rate)
        .count();
    let seeds = runs.len();
    let held = sft_raised == seeds && grpo_raised * 2 > seeds;
    let verdict = format!(
        "{}: valid-call rate {} untrained → {} after SFT (raised by > 0.1 on {sft_raised} of \
         {seeds} seeds) → {} after GRPO (higher than after SFT on {grpo_raised} of {seeds}); \
         reward {} → {} → {}; drift rate after GRPO {}",
        if held {
            "expected effect appeared"
        } else {
            "expected effect did NOT fully appear"
        },
        over(&untrained, valid).show(),
        over(&after_sft, valid).show(),
        over(&after_grpo, valid).show(),
        over(&untrained, reward).show(),
        over(&after_sft, reward).show(),
        over(&after_grpo, reward).show(),
        over(&after_grpo, drift).show(),
    );
    (body, verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(step: usize, valid_call_rate: f64) -> Point {
        Point {
            step,
            valid_call_rate,
            reward: -1.0 + valid_call_rate,
            drift_rate: 0.5,
        }
    }

    #[test]
    fn the_verdict_holds_only_when_sft_raises_every_seed() {
        let rising = vec![
            point(0, 0.0),
            point(SFT_STEPS, 0.4),
            point(SFT_STEPS + GRPO_STEPS, 0.6),
        ];
        let flat = vec![
            point(0, 0.0),
            point(SFT_STEPS, 0.05),
            point(SFT_STEPS + GRPO_STEPS, 0.5),
        ];
        let (_, verdict) = judge(&[
            (1, rising.clone()),
            (2, rising.clone()),
            (3, rising.clone()),
        ]);
        assert!(verdict.starts_with("expected effect appeared"), "{verdict}");
        let (_, verdict) = judge(&[(1, rising.clone()), (2, flat), (3, rising)]);
        assert!(verdict.starts_with("expected effect did NOT"), "{verdict}");
        assert!(verdict.contains("on 2 of 3 seeds"), "{verdict}");
    }

    #[test]
    fn a_stage_reads_the_last_measurement_at_or_before_it() {
        let points = vec![point(0, 0.0), point(8, 0.2), point(16, 0.3)];
        assert_eq!(at(&points, 12).step, 8);
        assert_eq!(at(&points, 16).step, 16);
        assert_eq!(at(&points, 0).step, 0);
    }

    #[test]
    fn the_embedded_recipe_parses_with_the_experiments_settings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, CONFIG).unwrap();
        let config = load_config(Some(&path), &sets()).unwrap();
        assert_eq!(config.train.format_warmup_steps, SFT_STEPS);
        assert_eq!(config.train.steps, SFT_STEPS + GRPO_STEPS);
    }
}
