//! The evaluation report of `agentrl eval`: pass@k and pass^k for k in {1, 5, 10} with
//! bootstrap 95% intervals over tasks, a per-family table, the public-vs-hidden gap, and the
//! samples per task and temperature stated, as JSON and Markdown under the run's `eval/`.
//!
//! Where it sits: after evaluation. The binary samples `n` episodes per task of each split
//! (`agentrl_rollout::evaluate_split`) and hands the per-task counts here; nothing here samples.
//!
//! Estimators (unbiased, as prime-rl and ALGORITHMS.md §16; shared/MONITOR.md on why not
//! verl's `best@N`): for a task with `c` correct of `n` samples,
//! `pass@k = 1 − C(n−c, k) / C(n, k)` (at least one of k draws without replacement solves it)
//! and `pass^k = C(c, k) / C(n, k)` (all k solve it: reliability), each averaged over tasks.
//! `agentrl_rl::pass_at_k` is the trainer's copy of the first; this crate cannot depend on the
//! tensor stack, so the two are tested against the same closed form. Intervals: the
//! percentile bootstrap over tasks (tasks resampled with replacement, 1000 times, from a fixed
//! seed), since tasks, not samples, are what a benchmark draws.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The k reported when the samples allow.
pub const KS: [usize; 3] = [1, 5, 10];
/// Bootstrap resamples.
pub const RESAMPLES: usize = 1000;
/// Seed of the bootstrap's resampling (a report is reproducible).
pub const BOOTSTRAP_SEED: u64 = 0x626f_6f74;

/// `1 − C(n−c, k)/C(n, k)`, as the product `1 − Π_{i=n−c+1}^{n} (1 − k/i)` (no overflow).
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    if k > n || c > n {
        return f64::NAN;
    }
    if n - c < k {
        return 1.0;
    }
    1.0 - ((n - c + 1)..=n)
        .map(|i| 1.0 - k as f64 / i as f64)
        .product::<f64>()
}

/// `C(c, k)/C(n, k)` = `Π_{i=0}^{k−1} (c−i)/(n−i)`.
pub fn pass_hat_k(n: usize, c: usize, k: usize) -> f64 {
    if k > n || c > n {
        return f64::NAN;
    }
    if c < k {
        return 0.0;
    }
    (0..k).map(|i| (c - i) as f64 / (n - i) as f64).product()
}

/// One task's evaluation: its family, samples and how many solved the hidden tests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskCounts {
    pub task: String,
    pub family: String,
    pub samples: usize,
    pub solved: usize,
}

/// What the report needs of one split besides the per-task counts (episode shares).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitInput {
    pub split: String,
    pub tasks: Vec<TaskCounts>,
    pub hidden_solve_rate: f64,
    pub public_solve_rate: f64,
    pub hacking_rate: f64,
    pub format_error_rate: f64,
}

/// A mean over tasks with its bootstrap 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

impl Estimate {
    fn percent(&self) -> String {
        format!(
            "{:.1}% [{:.1}, {:.1}]",
            100.0 * self.value,
            100.0 * self.low,
            100.0 * self.high
        )
    }
}

/// pass@k and pass^k of a set of tasks, for every reported k.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    pub tasks: usize,
    /// `pass@k` by k.
    pub pass_at: BTreeMap<usize, Estimate>,
    /// `pass^k` by k.
    pub pass_hat: BTreeMap<usize, Estimate>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FamilyScores {
    pub family: String,
    #[serde(flatten)]
    pub scores: Scores,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitReport {
    pub split: String,
    #[serde(flatten)]
    pub scores: Scores,
    pub hidden_solve_rate: f64,
    pub public_solve_rate: f64,
    /// `public − hidden`: what the public tests claim beyond the truth.
    pub public_hidden_gap: f64,
    pub hacking_rate: f64,
    pub format_error_rate: f64,
    pub families: Vec<FamilyScores>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReportDoc {
    pub run: String,
    pub step: usize,
    pub samples_per_task: usize,
    pub temperature: f64,
    /// The k reported (those of [`KS`] the samples allow).
    pub ks: Vec<usize>,
    /// The k of [`KS`] left out for want of samples.
    pub ks_skipped: Vec<usize>,
    pub bootstrap_resamples: usize,
    pub bootstrap_seed: u64,
    pub splits: Vec<SplitReport>,
}

/// Mean of `f(task)` over `tasks` and its percentile-bootstrap 95% interval.
fn bootstrap(
    tasks: &[TaskCounts],
    f: &dyn Fn(&TaskCounts) -> f64,
    rng: &mut ChaCha8Rng,
) -> Estimate {
    let values: Vec<f64> = tasks.iter().map(f).collect();
    let n = values.len();
    let value = values.iter().sum::<f64>() / n as f64;
    let mut means: Vec<f64> = (0..RESAMPLES)
        .map(|_| (0..n).map(|_| values[rng.random_range(0..n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * (RESAMPLES - 1) as f64).round() as usize).min(RESAMPLES - 1)];
    Estimate {
        value,
        low: at(0.025),
        high: at(0.975),
    }
}

fn scores(tasks: &[TaskCounts], ks: &[usize], rng: &mut ChaCha8Rng) -> Scores {
    let mut pass_at = BTreeMap::new();
    let mut pass_hat = BTreeMap::new();
    for &k in ks {
        pass_at.insert(
            k,
            bootstrap(tasks, &|t| pass_at_k(t.samples, t.solved, k), rng),
        );
        pass_hat.insert(
            k,
            bootstrap(tasks, &|t| pass_hat_k(t.samples, t.solved, k), rng),
        );
    }
    Scores {
        tasks: tasks.len(),
        pass_at,
        pass_hat,
    }
}

/// Builds the report. Every task must have the same number of samples `n ≥ 1`.
pub fn build_report(
    run: &str,
    step: usize,
    temperature: f64,
    splits: &[SplitInput],
) -> anyhow::Result<EvalReportDoc> {
    let n = splits
        .iter()
        .flat_map(|s| s.tasks.iter())
        .map(|t| t.samples)
        .next()
        .ok_or_else(|| anyhow::anyhow!("evaluation report of {run}: no tasks evaluated"))?;
    for s in splits {
        anyhow::ensure!(
            !s.tasks.is_empty(),
            "evaluation report: split {} has no tasks",
            s.split
        );
        if let Some(t) = s
            .tasks
            .iter()
            .find(|t| t.samples != n || t.solved > t.samples)
        {
            anyhow::bail!(
                "evaluation report: task {} of split {} has {} solved of {} samples; every \
                 task needs {n} samples",
                t.task,
                s.split,
                t.solved,
                t.samples
            );
        }
    }
    let (ks, ks_skipped): (Vec<usize>, Vec<usize>) = KS.iter().partition(|&&k| k <= n);
    let mut rng = ChaCha8Rng::seed_from_u64(BOOTSTRAP_SEED);
    let mut reports = Vec::new();
    for s in splits {
        let mut by_family: BTreeMap<&str, Vec<TaskCounts>> = BTreeMap::new();
        for t in &s.tasks {
            by_family
                .entry(t.family.as_str())
                .or_default()
                .push(t.clone());
        }
        let families = by_family
            .iter()
            .map(|(family, tasks)| FamilyScores {
                family: family.to_string(),
                scores: scores(tasks, &ks, &mut rng),
            })
            .collect();
        reports.push(SplitReport {
            split: s.split.clone(),
            scores: scores(&s.tasks, &ks, &mut rng),
            hidden_solve_rate: s.hidden_solve_rate,
            public_solve_rate: s.public_solve_rate,
            public_hidden_gap: s.public_solve_rate - s.hidden_solve_rate,
            hacking_rate: s.hacking_rate,
            format_error_rate: s.format_error_rate,
            families,
        });
    }
    Ok(EvalReportDoc {
        run: run.to_string(),
        step,
        samples_per_task: n,
        temperature,
        ks,
        ks_skipped,
        bootstrap_resamples: RESAMPLES,
        bootstrap_seed: BOOTSTRAP_SEED,
        splits: reports,
    })
}

impl EvalReportDoc {
    /// The report as Markdown: the setup, one table of splits, then one table of families
    /// per split.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# Evaluation of {} at step {}\n", self.run, self.step);
        let _ = writeln!(
            md,
            "- **{} samples per task** at **temperature {}** (0 = greedy); correct = every hidden test passes.",
            self.samples_per_task, self.temperature
        );
        let _ = writeln!(
            md,
            "- pass@k = 1 − C(n−c,k)/C(n,k) (at least one of k solves), pass^k = C(c,k)/C(n,k) (all k solve): unbiased, averaged over tasks."
        );
        let _ = writeln!(
            md,
            "- [low, high]: 95% percentile bootstrap over tasks ({} resamples, seed {:#x}).",
            self.bootstrap_resamples, self.bootstrap_seed
        );
        if !self.ks_skipped.is_empty() {
            let _ = writeln!(
                md,
                "- Not reported: {} (k must be ≤ the {} samples per task; `agentrl eval --k 10` draws 10).",
                self.ks_skipped
                    .iter()
                    .map(|k| format!("pass@{k}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                self.samples_per_task
            );
        }
        let header = |first: &str| -> String {
            let mut h = format!("| {first} | tasks |");
            let mut rule = String::from("|---|---:|");
            for k in &self.ks {
                let _ = write!(h, " pass@{k} |");
                rule.push_str("---:|");
            }
            for k in &self.ks {
                let _ = write!(h, " pass^{k} |");
                rule.push_str("---:|");
            }
            format!("{h}\n{rule}")
        };
        let row = |name: &str, s: &Scores| -> String {
            let mut r = format!("| {name} | {} |", s.tasks);
            for k in &self.ks {
                let _ = write!(r, " {} |", s.pass_at[k].percent());
            }
            for k in &self.ks {
                let _ = write!(r, " {} |", s.pass_hat[k].percent());
            }
            r
        };
        let _ = writeln!(md, "\n## Splits\n\n{}", header("split"));
        for s in &self.splits {
            let _ = writeln!(md, "{}", row(&s.split, &s.scores));
        }
        let _ = writeln!(
            md,
            "\n## Public vs hidden tests\n\n| split | hidden solve | public solve | gap (public − hidden) | hacking | format errors |\n|---|---:|---:|---:|---:|---:|"
        );
        for s in &self.splits {
            let _ = writeln!(
                md,
                "| {} | {:.1}% | {:.1}% | {:+.1} pts | {:.1}% | {:.1}% |",
                s.split,
                100.0 * s.hidden_solve_rate,
                100.0 * s.public_solve_rate,
                100.0 * s.public_hidden_gap,
                100.0 * s.hacking_rate,
                100.0 * s.format_error_rate
            );
        }
        for s in &self.splits {
            let _ = writeln!(md, "\n## Families of {}\n\n{}", s.split, header("family"));
            for f in &s.families {
                let _ = writeln!(md, "{}", row(&f.family, &f.scores));
            }
        }
        md
    }
}
