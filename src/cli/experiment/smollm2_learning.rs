//! `agentrl experiment smollm2-learning`: a real pretrained chat model (SmolLM2-135M-Instruct,
//! the GGUF file `scripts/fetch_smollm2.sh` fetches) learns the BugFix gym on the CPU, with the
//! recipe of `configs/smollm2.toml` (embedded): LoRA, SFT on the gym expert's episodes, GRPO.
//!
//! Stages of each seed, one run folder each (`out/<stage>-<seed>`), every stage's policy
//! evaluated on `train`, `heldout` and `heldout-family` (the config's `eval.tasks_per_split`,
//! the same tasks and evaluation seed for every stage):
//!
//! ```text
//! untrained ─► sft (6 SFT steps) ─► sft-grpo (8 GRPO steps)     "SFT + GRPO"
//!                                └► sft-more (8 more SFT steps)  "SFT alone", equal samples
//! untrained ─► grpo (14 GRPO steps)                              "GRPO alone", equal samples
//! ```
//!
//! A step is `rollout.tasks_per_step × rollout.group_size` episodes, sampled (GRPO) or
//! demonstrated by the expert (SFT), so the three 14-step arms use equal samples. The GRPO
//! stages' metrics give the book's real-model phenomena: the retokenization drift rate of the
//! sampled turns, the engine/trainer log-prob gap, entropy and action length over training,
//! the public-vs-hidden hacking rate, and the doctor's findings.
//!
//! The expected effect (issue 41's goal; ALGORITHMS.md §14, SFT then RL): hidden solve on
//! `train` up by ≥ 0.3 from the untrained model after SFT + GRPO, GRPO adding ≥ 0.1 over SFT
//! alone at equal samples. A stage takes tens of minutes on 2 cores, so the experiment resumes:
//! `--resume` reads back every stage whose folder holds its `stage.json` and trains the rest (a
//! stage that was cut off is moved aside, never overwritten).
//!
//! Where it sits: a [`DrivenExperiment`] (its arms chain through `--init`-style starts), on
//! the recipes' sessions ([`run_sft_session`], [`run_rl_session`]) and the framework's run
//! settings, figures and result writing.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use agentrl_gym::Split;
use agentrl_monitor::{diagnose, DoctorConfig};
use agentrl_rollout::EvalReport;
use agentrl_run::metrics::{names, read_metrics, MetricLine};
use agentrl_train::config::load_config;
use agentrl_train::recipes::rl::run_rl_session;
use agentrl_train::recipes::sft::run_sft_session;
use agentrl_train::session::{Progress, SessionOptions};
use agentrl_train::trainer::Trainer;

use super::{
    finish, run_sets, seed_chart, write_figure, Curves, DrivenExperiment, ExperimentArgs,
    OverSeeds, ResultDoc,
};

pub(crate) const EXPERIMENT: DrivenExperiment = DrivenExperiment {
    name: "smollm2-learning",
    question: "Does a real pretrained model (SmolLM2-135M-Instruct) learn the BugFix gym on the \
               CPU: hidden solve and valid tool calls on train, heldout and heldout-family, \
               untrained → SFT → GRPO against SFT alone and GRPO alone at equal samples; and \
               what do retokenization drift, the engine/trainer gap, entropy, length and \
               reward hacking look like on a real model?",
    run,
    resumable: true,
};

/// The recipe, as committed.
const CONFIG: &str = include_str!("../../../configs/smollm2.toml");

/// Settings of every stage on top of [`CONFIG`]: two compute threads (fixed, so a seed gives
/// the same run on any machine; one is twice as slow), no warm-up inside an RL stage (the SFT
/// stages are the warm-up), SFT at the warm-up's rate, episodes kept for every step, and the
/// engine/trainer log-prob gap measured every GRPO step (the engine shares the trainer's
/// weights, so nothing else scores the batch; the update is the same either way).
const COMMON: &[&str] = &[
    "train.threads=2",
    "train.format_warmup_steps=0",
    "sft.lr=3e-4",
    "train.episodes_every=1",
    "engine.measure_mismatch=true",
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Recipe {
    Untrained,
    Sft,
    Grpo,
}

/// One stage: a recipe's steps from another stage's weights.
struct Stage {
    name: &'static str,
    label: &'static str,
    recipe: Recipe,
    steps: usize,
    /// The stage whose weights it starts from (`None`: the untrained checkpoint).
    from: Option<&'static str>,
}

/// In training order: a stage another starts from comes before it.
const STAGES: &[Stage] = &[
    Stage {
        name: "untrained",
        label: "untrained",
        recipe: Recipe::Untrained,
        steps: 0,
        from: None,
    },
    Stage {
        name: "sft",
        label: "SFT (6 steps)",
        recipe: Recipe::Sft,
        steps: 6,
        from: Some("untrained"),
    },
    Stage {
        name: "sft-grpo",
        label: "SFT + GRPO (6 + 8)",
        recipe: Recipe::Grpo,
        steps: 8,
        from: Some("sft"),
    },
    Stage {
        name: "sft-more",
        label: "SFT alone (6 + 8)",
        recipe: Recipe::Sft,
        steps: 8,
        from: Some("sft"),
    },
    Stage {
        name: "grpo",
        label: "GRPO alone (14)",
        recipe: Recipe::Grpo,
        steps: 14,
        from: Some("untrained"),
    },
];

/// The evaluation stream of every stage (the same tasks and seeds for each policy).
const EVAL_TAG: u64 = 0x5e1f_e7a1;

/// What a finished stage leaves in its folder (`stage.json`), so `--resume` need not retrain.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StageResult {
    stage: String,
    seed: u64,
    /// Episodes used from the untrained model on (sampled or demonstrated), its start's
    /// included.
    samples: usize,
    /// Training seconds (rollouts and updates), its start's included.
    train_seconds: f64,
    /// The policy's evaluations, one per split with tasks.
    evals: Vec<EvalReport>,
}

impl StageResult {
    fn eval(&self, split: Split) -> Option<&EvalReport> {
        self.evals.iter().find(|e| e.split == split.as_str())
    }

    fn solve(&self, split: Split) -> f64 {
        self.eval(split).map_or(f64::NAN, |e| e.hidden_solve_rate)
    }

    /// Turns with a well-formed tool call, on the train split's evaluation.
    fn valid_calls(&self) -> f64 {
        self.eval(Split::Train)
            .map_or(f64::NAN, |e| 1.0 - e.format_error_rate)
    }
}

const STAGE_FILE: &str = "stage.json";

fn run(args: &ExperimentArgs, out: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    let config_path = out.join("smollm2.toml");
    if !config_path.exists() {
        std::fs::write(&config_path, CONFIG)
            .with_context(|| format!("writing {}", config_path.display()))?;
    }
    // results[stage][seed]
    let mut results: Vec<Vec<StageResult>> = vec![Vec::new(); STAGES.len()];
    for &seed in &args.seeds {
        for (i, stage) in STAGES.iter().enumerate() {
            let start = match stage.from {
                Some(from) => {
                    let at = STAGES
                        .iter()
                        .position(|s| s.name == from)
                        .with_context(|| format!("stage {}: no stage {from}", stage.name))?;
                    results[at].last().cloned()
                }
                None => None,
            };
            let result = stage_result(out, &config_path, stage, seed, start.as_ref())?;
            results[i].push(result);
        }
    }
    let metrics = grpo_metrics(out, &args.seeds)?;
    let (body, verdict) = judge(&results, &metrics);
    let body = format!("{}{body}", setup_line()?);
    let figures = figures(out, &metrics)?;
    let result = ResultDoc {
        name: EXPERIMENT.name,
        question: EXPERIMENT.question,
        arms: STAGES
            .iter()
            .map(|s| match s.from {
                Some(from) => format!("**{}** (`{}`, from `{from}`)", s.label, s.name),
                None => format!("**{}**", s.label),
            })
            .collect::<Vec<_>>()
            .join(", "),
        seeds: &args.seeds,
        common: COMMON,
        body,
        figures,
        verdict,
    };
    finish(
        out,
        &result,
        "took",
        started.elapsed().as_secs_f64(),
        args.seeds.len() * STAGES.len(),
    )
}

/// What the record's numbers came from: the model file, by the sha256 that
/// `scripts/fetch_smollm2.sh` checks (the numbers hold for that file only), and the CPU that
/// ran it (the stage times hold for that CPU only; whether it has AVX-512 and AMX decides
/// which kernels ran).
fn setup_line() -> anyhow::Result<String> {
    use sha2::Digest as _;
    let path = agentrl_chat::assets::resolve_model_path(agentrl_chat::assets::SMOLLM2_ALIAS)
        .map_err(anyhow::Error::msg)?;
    let mut file =
        std::fs::File::open(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut hasher = sha2::Sha256::new();
    std::io::copy(&mut file, &mut hasher).with_context(|| format!("reading {}", path.display()))?;
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|line| Some(line.strip_prefix("model name")?.split(':').nth(1)?.trim()))
        .unwrap_or("unknown CPU");
    #[cfg(target_arch = "x86_64")]
    let avx512 = std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    let avx512 = false;
    let yes_no = |on: bool| if on { "yes" } else { "no" };
    Ok(format!(
        "Model file: `{}`, sha256 `{:x}`. CPU: {cpu} ({} threads; AVX-512 {}, AMX {}).\n\n",
        path.file_name().unwrap_or_default().to_string_lossy(),
        hasher.finalize(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        yes_no(avx512),
        // What the AMX kernels would find: the CPU's flag and the kernel's grant.
        yes_no(agentrl_model::fused::amx_matmul::amx_available()),
    ))
}

/// The stage's result: read back from its folder when it finished earlier, trained otherwise.
fn stage_result(
    out: &Path,
    config_path: &Path,
    stage: &Stage,
    seed: u64,
    start: Option<&StageResult>,
) -> anyhow::Result<StageResult> {
    let run_name = format!("{}-{seed}", stage.name);
    let run_dir = out.join(&run_name);
    let done = run_dir.join(STAGE_FILE);
    if done.exists() {
        eprintln!("smollm2-learning: {run_name} finished earlier, read back");
        let text = std::fs::read_to_string(&done)
            .with_context(|| format!("reading {}", done.display()))?;
        return serde_json::from_str(&text).with_context(|| format!("parsing {}", done.display()));
    }
    if run_dir.exists() {
        let aside = (1..)
            .map(|n| out.join(format!("{run_name}.cut-off-{n}")))
            .find(|p| !p.exists())
            .context("no free name to move a cut-off stage aside")?;
        eprintln!(
            "smollm2-learning: {} was cut off before it finished; moved to {}",
            run_dir.display(),
            aside.display()
        );
        std::fs::rename(&run_dir, &aside)
            .with_context(|| format!("moving {} aside", run_dir.display()))?;
    }
    eprintln!("smollm2-learning: {run_name}");
    let mut sets = run_sets(out, &run_name, seed)?;
    sets.extend(COMMON.iter().map(|s| s.to_string()));
    // A config wants at least one step; the untrained stage takes none.
    sets.push(format!("train.steps={}", stage.steps.max(1)));
    let (mut trainer, _) = Trainer::create(load_config(Some(config_path), &sets)?)?;
    let per_step = trainer.config.rollout.tasks_per_step * trainer.config.rollout.group_size;
    let (trained_dir, seconds) = match (stage.recipe, start) {
        (Recipe::Untrained, _) => {
            trainer.checkpoint()?;
            (run_dir.clone(), 0.0)
        }
        (recipe, Some(start)) => {
            trainer.init_weights_from(&out.join(format!("{}-{seed}", start.stage)))?;
            let options = SessionOptions {
                progress: Progress::Off,
                summary_evals: false,
                stop: None,
            };
            let outcome = if recipe == Recipe::Sft {
                run_sft_session(trainer, &options, &mut |_, _| Ok(()))?
            } else {
                run_rl_session(trainer, &options)?
            };
            (PathBuf::from(&outcome.run_dir), outcome.train_seconds)
        }
        (_, None) => anyhow::bail!("stage {} has no start", stage.name),
    };
    let trained = Trainer::open_for_eval(&trained_dir)?;
    let evals = Split::ALL
        .into_iter()
        .filter(|&s| trained.split_len(s) > 0)
        .map(|split| {
            trained
                .evaluate_for_run(split, EVAL_TAG)
                .with_context(|| format!("{run_name}: evaluating {split}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let result = StageResult {
        stage: stage.name.to_string(),
        seed,
        samples: start.map_or(0, |s| s.samples) + stage.steps * per_step,
        train_seconds: start.map_or(0.0, |s| s.train_seconds) + seconds,
        evals,
    };
    std::fs::write(&done, serde_json::to_string_pretty(&result)?)
        .with_context(|| format!("writing {}", done.display()))?;
    Ok(result)
}

/// The metrics of each GRPO stage's runs: (stage, [(seed, lines)]).
type GrpoMetrics = Vec<(&'static Stage, Vec<(u64, Vec<MetricLine>)>)>;

fn grpo_metrics(out: &Path, seeds: &[u64]) -> anyhow::Result<GrpoMetrics> {
    STAGES
        .iter()
        .filter(|s| s.recipe == Recipe::Grpo)
        .map(|stage| {
            let runs = seeds
                .iter()
                .map(|&seed| {
                    let path = out
                        .join(format!("{}-{seed}", stage.name))
                        .join("metrics.jsonl");
                    Ok((seed, read_metrics(&path)?))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok((stage, runs))
        })
        .collect()
}

/// Mean of `metric` over a run's lines that record it (NaN when none does).
fn run_mean(lines: &[MetricLine], metric: &str) -> f64 {
    let values: Vec<f64> = lines.iter().filter_map(|l| l.get(metric)).collect();
    values.iter().sum::<f64>() / values.len() as f64
}

/// `metric` at the run's first and last lines that record it.
fn first_last(lines: &[MetricLine], metric: &str) -> (f64, f64) {
    let values: Vec<f64> = lines.iter().filter_map(|l| l.get(metric)).collect();
    match (values.first(), values.last()) {
        (Some(&first), Some(&last)) => (first, last),
        _ => (f64::NAN, f64::NAN),
    }
}

fn over<T>(items: &[T], of: impl Fn(&T) -> f64) -> OverSeeds {
    OverSeeds::of(&items.iter().map(of).collect::<Vec<_>>())
}

fn stage_index(name: &str) -> usize {
    STAGES
        .iter()
        .position(|s| s.name == name)
        .unwrap_or_default()
}

fn judge(results: &[Vec<StageResult>], metrics: &GrpoMetrics) -> (String, String) {
    let mut body = String::from(
        "Hidden solve rate of each stage's policy on each split (the config's \
         `eval.tasks_per_split` tasks of each, one episode per task at the evaluation \
         temperature, the same tasks and seeds for every stage), the share of turns with a \
         well-formed tool call (train split), the episodes used from the untrained model on, \
         and the training time; means over seeds (min–max):\n\n\
         | stage | train | heldout | heldout-family | valid calls | samples | time |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for (stage, runs) in STAGES.iter().zip(results) {
        body.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.0} | {:.0} s |\n",
            stage.label,
            over(runs, |r| r.solve(Split::Train)).show(),
            over(runs, |r| r.solve(Split::Heldout)).show(),
            over(runs, |r| r.solve(Split::HeldoutFamily)).show(),
            over(runs, StageResult::valid_calls).show(),
            over(runs, |r| r.samples as f64).mean,
            over(runs, |r| r.train_seconds).mean,
        ));
    }
    body.push_str(
        "\nThe GRPO stages' training batches (means over seeds, min–max): retokenization drift \
         (share of episodes whose re-rendered conversation tokenizes differently from the \
         sampled stream; agentrl trains on the stream), the engine/trainer gap (mean |Δ \
         log-prob| of the sampled tokens between the local engine's batched KV-cached decode \
         and the trainer's forward), the policy's entropy and the mean action length at the \
         first and last step, the hacking rate (public tests pass, hidden fail), and the \
         doctor's findings per seed:\n\n\
         | stage | drift | engine/trainer gap | entropy first → last | action tokens first → last | hacking | doctor |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for (stage, runs) in metrics {
        let doctor: Vec<String> = runs
            .iter()
            .map(|(seed, lines)| {
                let findings = diagnose(lines, &DoctorConfig::default());
                let names: Vec<String> = findings
                    .iter()
                    .map(|f| format!("{:?}", f.signature))
                    .collect();
                if names.is_empty() {
                    format!("{seed}: none")
                } else {
                    format!("{seed}: {}", names.join(" "))
                }
            })
            .collect();
        let first = |metric| over(runs, |(_, l)| first_last(l, metric).0);
        let last = |metric| over(runs, |(_, l)| first_last(l, metric).1);
        body.push_str(&format!(
            "| {} | {} | {} | {} → {} | {} → {} | {} | {} |\n",
            stage.label,
            over(runs, |(_, l)| run_mean(l, names::RETOKENIZATION_DRIFT)).show(),
            gap(over(runs, |(_, l)| run_mean(l, names::MISMATCH))),
            first(names::ENTROPY).show(),
            last(names::ENTROPY).show(),
            first(names::RESPONSE_LENGTH_MEAN).show(),
            last(names::RESPONSE_LENGTH_MEAN).show(),
            over(runs, |(_, l)| run_mean(l, names::HACKING_RATE)).show(),
            doctor.join("; "),
        ));
    }

    let per_seed = |a: &str, b: &str| -> OverSeeds {
        let (a, b) = (&results[stage_index(a)], &results[stage_index(b)]);
        OverSeeds::of(
            &a.iter()
                .zip(b)
                .map(|(x, y)| x.solve(Split::Train) - y.solve(Split::Train))
                .collect::<Vec<_>>(),
        )
    };
    let gain = per_seed("sft-grpo", "untrained");
    let grpo_over_sft = per_seed("sft-grpo", "sft-more");
    let seeds = results[0].len();
    let count = |name_a: &str, name_b: &str, margin: f64| {
        results[stage_index(name_a)]
            .iter()
            .zip(&results[stage_index(name_b)])
            .filter(|(x, y)| x.solve(Split::Train) - y.solve(Split::Train) >= margin)
            .count()
    };
    let appeared = gain.mean >= 0.3 && grpo_over_sft.mean >= 0.1;
    let train_of = |name: &str| over(&results[stage_index(name)], |r| r.solve(Split::Train));
    let heldout_of = |name: &str| over(&results[stage_index(name)], |r| r.solve(Split::Heldout));
    let verdict = format!(
        "{} — train hidden solve untrained {} → SFT {} → SFT + GRPO {} (up by {}; ≥ 0.3 on \
         {}/{seeds} seeds); SFT alone at equal samples {}, GRPO alone {}; GRPO over SFT alone {} \
         (≥ 0.1 on {}/{seeds}); heldout: untrained {}, SFT + GRPO {}",
        if appeared {
            "the real model learned as expected"
        } else {
            "the expected learning effect did NOT fully appear"
        },
        train_of("untrained").show(),
        train_of("sft").show(),
        train_of("sft-grpo").show(),
        gain.show(),
        count("sft-grpo", "untrained", 0.3),
        train_of("sft-more").show(),
        train_of("grpo").show(),
        grpo_over_sft.show(),
        count("sft-grpo", "sft-more", 0.1),
        heldout_of("untrained").show(),
        heldout_of("sft-grpo").show(),
    );
    (body, verdict)
}

/// A log-prob gap in scientific notation (they are far below two decimals).
fn gap(g: OverSeeds) -> String {
    if g.mean.is_finite() {
        format!("{:.1e} ({:.1e}–{:.1e})", g.mean, g.min, g.max)
    } else {
        "—".to_string()
    }
}

fn figures(out: &Path, metrics: &GrpoMetrics) -> anyhow::Result<Vec<String>> {
    let mut figures = Vec::new();
    for (stem, title, y_label, metric) in [
        (
            "solve_hidden",
            "hidden solve rate of the GRPO stages' batches",
            "fraction of episodes",
            names::SOLVE_HIDDEN,
        ),
        (
            "entropy",
            "policy entropy (GRPO stages)",
            "nats per token",
            names::ENTROPY,
        ),
        (
            "action_length",
            "mean action length (GRPO stages)",
            "tokens",
            names::RESPONSE_LENGTH_MEAN,
        ),
        (
            "drift",
            "retokenization drift rate (GRPO stages)",
            "fraction of episodes",
            names::RETOKENIZATION_DRIFT,
        ),
    ] {
        let curves: Vec<Curves> = metrics
            .iter()
            .map(|(stage, runs)| Curves {
                name: stage.label.to_string(),
                runs: runs
                    .iter()
                    .map(|(_, lines)| {
                        lines
                            .iter()
                            .filter_map(|l| l.get(metric).map(|v| (l.step as f64, v)))
                            .collect()
                    })
                    .collect(),
            })
            .collect();
        let svg = seed_chart(&curves, title, y_label).to_svg();
        figures.push(write_figure(out, stem, title, &svg)?);
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_start_from_stages_before_them_and_arms_use_equal_samples() {
        for (i, stage) in STAGES.iter().enumerate() {
            if let Some(from) = stage.from {
                let at = STAGES.iter().position(|s| s.name == from);
                assert!(at.is_some_and(|at| at < i), "{} from {from}", stage.name);
            }
        }
        let total = |name: &str| -> usize {
            let mut stage = &STAGES[stage_index(name)];
            let mut steps = stage.steps;
            while let Some(from) = stage.from {
                stage = &STAGES[stage_index(from)];
                steps += stage.steps;
            }
            steps
        };
        assert_eq!(total("sft-grpo"), total("sft-more"));
        assert_eq!(total("sft-grpo"), total("grpo"));
    }

    #[test]
    fn the_embedded_recipe_loads_with_the_experiments_settings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("smollm2.toml");
        std::fs::write(&path, CONFIG).unwrap();
        let mut sets: Vec<String> = COMMON.iter().map(|s| s.to_string()).collect();
        sets.push("train.steps=8".to_string());
        let config = load_config(Some(&path), &sets).unwrap();
        config.validated().unwrap();
        assert_eq!(config.train.format_warmup_steps, 0);
        assert_eq!(config.sft.lr, config.train.format_warmup_lr);
    }

    #[test]
    fn the_record_names_the_model_files_sha256_and_the_cpu() {
        let Some(_) = agentrl_chat::assets::smollm2_gguf_for_tests() else {
            return;
        };
        let line = setup_line().unwrap();
        // The sha256 `scripts/fetch_smollm2.sh` checks the file against.
        let script = include_str!("../../../scripts/fetch_smollm2.sh");
        let expected = script
            .lines()
            .find_map(|l| l.strip_prefix("GGUF_SHA256=\""))
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap();
        assert!(line.contains(&format!("sha256 `{expected}`")), "{line}");
        assert!(line.contains("CPU: ") && line.contains("AVX-512"), "{line}");
    }
}
