//! `agentrl experiment length-effects`: two ways the length of an episode is shaped by the
//! loss and the reward rather than by the task.
//!
//! (a) Aggregation (ALGORITHMS.md §0, §5). GRPO averages each episode's token losses over its
//! own length (`seq-mean-token-mean`), so a long failed episode is penalised less per token
//! than a short one; the Dr. GRPO paper reports that failed responses grow longer under it and
//! that Dr. GRPO (`Σ_t / L_max`, no std) removes the drift. `token-mean` (DAPO's) weighs every
//! token alike. The arms measure the action tokens and turns of failed and of solved episodes
//! step by step, from the episodes each step writes (`train.episodes_every = 1`).
//!
//! (b) Submitting. The turn limit scores the workspace exactly as `submit` would, so the
//! policy loses nothing by never submitting and more edits give it more chances: it learns to
//! spend every turn. The arms price that: a per-turn cost (`reward.turn_cost`) and a submit
//! requirement (`reward.require_submit`, no verdict at the turn limit).
//!
//! Where it sits: [`add_episode_lengths`] runs on every experiment run (mod.rs), turning a
//! run's `episodes/step_N.jsonl` into per-step metrics beside `metrics.jsonl`'s, so the
//! framework's figures and [`late_mean`] read them like any other metric.

use std::path::Path;

use agentrl_monitor::episodes::{read_episodes, StoredEpisode};
use agentrl_run::metrics::{names, MetricLine};

use super::{arm, early_mean, late_mean, ArmRuns, Experiment, Judgement, OverSeeds};

/// Per-step means over the step's failed (hidden tests not all passing) and solved episodes.
const FAILED_TOKENS: &str = "experiment/failed/action_tokens";
const SOLVED_TOKENS: &str = "experiment/solved/action_tokens";
const FAILED_TURNS: &str = "experiment/failed/turns";
const SOLVED_TURNS: &str = "experiment/solved/turns";

/// Steps averaged at the start and at the end of a run.
const WINDOW: usize = 5;

pub(crate) const EXPERIMENT: Experiment = Experiment {
    name: "length-effects",
    question: "Does GRPO's per-episode length normalisation make failed episodes longer (and \
               do Dr. GRPO and token-mean not), and does a policy stop submitting when the turn \
               limit pays the same?",
    common: &[
        "train.steps=25",
        "rollout.tasks_per_step=4",
        "rollout.group_size=8",
        "train.episodes_every=1",
        "optim.lr=3e-3",
        "algorithm.entropy_coef=0",
        // The recorded result's candidate keys: TinyAgent's pointer head pooled them by the mean
        // until the default moved to "mean-last" (configs/default.toml).
        "model.pointer_pool=\"mean\"",
    ],
    arms: &[
        arm("grpo", &["algorithm.name=\"grpo\""]),
        arm("dr_grpo", &["algorithm.name=\"dr_grpo\""]),
        arm(
            "token-mean",
            &[
                "algorithm.name=\"grpo\"",
                "algorithm.loss_agg_mode=\"token-mean\"",
            ],
        ),
        arm(
            "turn-cost",
            &["algorithm.name=\"grpo\"", "reward.turn_cost=0.05"],
        ),
        arm(
            "require-submit",
            &["algorithm.name=\"grpo\"", "reward.require_submit=true"],
        ),
    ],
    judge,
    evals: false,
    figures: &[
        (
            "failed_tokens",
            "action tokens of failed episodes",
            "tokens per episode",
            FAILED_TOKENS,
        ),
        (
            "solved_tokens",
            "action tokens of solved episodes",
            "tokens per episode",
            SOLVED_TOKENS,
        ),
        (
            "submit_rate",
            "episodes that called submit",
            "fraction of episodes",
            names::SUBMIT_RATE,
        ),
        (
            "solve_hidden",
            "hidden-test solve rate (training episodes)",
            "fraction of episodes",
            names::SOLVE_HIDDEN,
        ),
    ],
};

/// Adds to each line of `lines` whose step wrote `run_dir/episodes/step_N.jsonl` the mean
/// action tokens and turns of its failed and of its solved episodes (a kind with no episode
/// that step is left unset). A run that wrote no episodes is left as it is.
pub(crate) fn add_episode_lengths(run_dir: &Path, lines: &mut [MetricLine]) -> anyhow::Result<()> {
    let dir = run_dir.join("episodes");
    if !dir.is_dir() {
        return Ok(());
    }
    for line in lines.iter_mut() {
        let path = dir.join(format!("step_{:06}.jsonl", line.step));
        if !path.is_file() {
            continue;
        }
        let episodes = read_episodes(&path)?;
        for (solved, tokens, turns) in [
            (false, FAILED_TOKENS, FAILED_TURNS),
            (true, SOLVED_TOKENS, SOLVED_TURNS),
        ] {
            let kind: Vec<&StoredEpisode> = episodes
                .iter()
                .filter(|e| e.reward.solved() == solved)
                .collect();
            if kind.is_empty() {
                continue;
            }
            let n = kind.len() as f64;
            let action_tokens =
                |e: &StoredEpisode| e.sources.iter().filter(|s| *s == "action").count();
            line.set(
                tokens,
                kind.iter().map(|e| action_tokens(e) as f64).sum::<f64>() / n,
            );
            line.set(
                turns,
                kind.iter().map(|e| f64::from(e.turns)).sum::<f64>() / n,
            );
        }
    }
    Ok(())
}

struct ArmFigures {
    name: &'static str,
    failed_tokens: (OverSeeds, OverSeeds),
    solved_tokens: OverSeeds,
    failed_turns: OverSeeds,
    submit: (OverSeeds, OverSeeds),
    turns: OverSeeds,
    solve: OverSeeds,
}

fn figures(arm: &ArmRuns) -> ArmFigures {
    let late = |metric: &'static str| arm.over_seeds(|lines| late_mean(lines, metric, WINDOW));
    let early = |metric: &'static str| arm.over_seeds(|lines| early_mean(lines, metric, WINDOW));
    ArmFigures {
        name: arm.name,
        failed_tokens: (early(FAILED_TOKENS), late(FAILED_TOKENS)),
        solved_tokens: late(SOLVED_TOKENS),
        failed_turns: late(FAILED_TURNS),
        submit: (early(names::SUBMIT_RATE), late(names::SUBMIT_RATE)),
        turns: late(names::NUM_TURNS),
        solve: late(names::SOLVE_HIDDEN),
    }
}

/// What the failed episodes' lengths `(first, last)` under GRPO, Dr. GRPO and token-mean say
/// of the reported direction: failed episodes end longer, and grow more, under GRPO's
/// per-episode normalisation than under Dr. GRPO's constant, and token-mean (no per-episode
/// normalisation either) must not grow as GRPO does, or the growth is not the normalisation's.
/// Half a token is the smallest difference read as one.
fn reading_of_lengths(grpo: (f64, f64), dr: (f64, f64), token: (f64, f64)) -> &'static str {
    let growth = |(first, last): (f64, f64)| last - first;
    let beyond_dr = grpo.1 > dr.1 + 0.5 && growth(grpo) > growth(dr) + 0.5;
    let beyond_token = grpo.1 > token.1 + 0.5 && growth(grpo) > growth(token) + 0.5;
    match (beyond_dr, beyond_token) {
        (true, true) => {
            "(a) per-episode normalisation made failed episodes longer, as the Dr. GRPO paper \
             reports"
        }
        (true, false) => {
            "(a) failed episodes grew longer under grpo than under dr_grpo, but as much under \
             token-mean, which has no per-episode normalisation: the normalisation is NOT what \
             lengthened them"
        }
        _ => "(a) per-episode normalisation did NOT make failed episodes longer than Dr. GRPO did",
    }
}

/// Table rows: each arm's name, then its `cells`.
fn rows<const N: usize>(
    arms: &[&ArmFigures],
    cells: impl Fn(&ArmFigures) -> [String; N],
) -> String {
    arms.iter()
        .map(|f| format!("| {} | {} |\n", f.name, cells(f).join(" | ")))
        .collect()
}

fn judge(arms: &[ArmRuns]) -> Judgement {
    let all: Vec<ArmFigures> = arms.iter().map(figures).collect();
    let get = |name: &str| all.iter().find(|f| f.name == name);
    let (Some(grpo), Some(dr), Some(token), Some(cost), Some(strict)) = (
        get("grpo"),
        get("dr_grpo"),
        get("token-mean"),
        get("turn-cost"),
        get("require-submit"),
    ) else {
        return Judgement {
            body: String::new(),
            verdict: "an arm is missing; nothing to judge".to_string(),
        };
    };
    let mut body = format!(
        "Means over seeds, ranges over seeds; \"first\" and \"last\" are the first and last \
         {WINDOW} steps. Failed: the hidden tests do not all pass. Every arm runs GRPO's \
         advantage with no entropy bonus unless it says otherwise; the limit is \
         `rollout.max_turns = 4` turns of at most `rollout.max_action_tokens = 6` tokens.\n\n\
         (a) Length of failed and solved episodes under each aggregation:\n\n\
         | arm | failed tokens, first → last | solved tokens, last | failed turns, last | hidden solve, last |\n\
         |---|---|---|---|---|\n"
    );
    body.push_str(&rows(&[grpo, dr, token], |f| {
        [
            format!(
                "{} → {}",
                f.failed_tokens.0.show(),
                f.failed_tokens.1.show()
            ),
            f.solved_tokens.show(),
            f.failed_turns.show(),
            f.solve.show(),
        ]
    }));
    body.push_str(
        "\n(b) Submitting, with and without a price on the episode's length:\n\n\
         | arm | submit rate, first → last | turns, last | hidden solve, last |\n\
         |---|---|---|---|\n",
    );
    body.push_str(&rows(&[grpo, cost, strict], |f| {
        [
            format!("{} → {}", f.submit.0.show(), f.submit.1.show()),
            f.turns.show(),
            f.solve.show(),
        ]
    }));
    let failed = |f: &ArmFigures| (f.failed_tokens.0.mean, f.failed_tokens.1.mean);
    let aggregation = format!(
        "{} (failed episodes, action tokens first → last: grpo {:.2} → {:.2}, dr_grpo {:.2} → \
         {:.2}, token-mean {:.2} → {:.2}; solved episodes last: grpo {:.2})",
        reading_of_lengths(failed(grpo), failed(dr), failed(token)),
        grpo.failed_tokens.0.mean,
        grpo.failed_tokens.1.mean,
        dr.failed_tokens.0.mean,
        dr.failed_tokens.1.mean,
        token.failed_tokens.0.mean,
        token.failed_tokens.1.mean,
        grpo.solved_tokens.mean,
    );
    let stopped = grpo.submit.1.mean < grpo.submit.0.mean - 0.1;
    let remedies = [cost, strict];
    let submit_more = remedies
        .iter()
        .filter(|f| f.submit.1.mean > grpo.submit.1.mean + 0.1)
        .count();
    // A price that makes the policy submit without fixing anything is no remedy.
    let and_solve = remedies
        .iter()
        .filter(|f| f.submit.1.mean > grpo.submit.1.mean + 0.1)
        .filter(|f| f.solve.mean >= grpo.solve.mean - 0.1)
        .count();
    let submitting = format!(
        "{}; {submit_more} of 2 prices on length kept it higher, {and_solve} of them without \
         losing more than 0.1 hidden solve (submit rate first → last: grpo {:.2} → {:.2} with \
         {:.2} turns; turn-cost {:.2} with {:.2} turns; require-submit {:.2} with {:.2} turns; \
         hidden solve {:.2}, {:.2}, {:.2})",
        if stopped {
            "(b) without a price on turns the policy stopped submitting"
        } else {
            "(b) the policy did NOT stop submitting without a price on turns"
        },
        grpo.submit.0.mean,
        grpo.submit.1.mean,
        grpo.turns.mean,
        cost.submit.1.mean,
        cost.turns.mean,
        strict.submit.1.mean,
        strict.turns.mean,
        grpo.solve.mean,
        cost.solve.mean,
        strict.solve.mean,
    );
    Judgement {
        body,
        verdict: format!("{aggregation}; {submitting}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn episode_lengths_split_failed_from_solved_per_step() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let episodes = tmp.path().join("episodes");
        std::fs::create_dir_all(&episodes)?;
        let episode = |actions: usize, turns: u32, solved: bool| {
            let mut sources = vec!["prompt"];
            sources.extend(std::iter::repeat_n("action", actions));
            sources.push("observation");
            serde_json::json!({
                "sources": sources,
                "turns": turns,
                "reward": {"hidden_passed": u32::from(solved), "hidden_total": 1},
            })
            .to_string()
        };
        let step_2 = [
            episode(3, 1, true),
            episode(8, 4, false),
            episode(6, 2, false),
        ];
        std::fs::write(episodes.join("step_000002.jsonl"), step_2.join("\n"))?;
        let mut lines = vec![MetricLine::new(1), MetricLine::new(2)];
        add_episode_lengths(tmp.path(), &mut lines)?;
        assert_eq!(
            lines[0].get(FAILED_TOKENS),
            None,
            "step 1 wrote no episodes"
        );
        assert_eq!(lines[1].get(FAILED_TOKENS), Some(7.0));
        assert_eq!(lines[1].get(FAILED_TURNS), Some(3.0));
        assert_eq!(lines[1].get(SOLVED_TOKENS), Some(3.0));
        assert_eq!(lines[1].get(SOLVED_TURNS), Some(1.0));
        Ok(())
    }

    #[test]
    fn a_length_drift_counts_as_the_normalisations_only_if_token_mean_has_none() {
        let dr = (10.0, 11.0);
        assert!(reading_of_lengths((10.0, 14.0), dr, (10.0, 11.0)).contains("as the Dr. GRPO"));
        assert!(reading_of_lengths((10.0, 14.0), dr, (10.0, 14.0)).contains("is NOT what"));
        assert!(reading_of_lengths((10.0, 11.2), dr, (10.0, 11.0)).contains("did NOT"));
    }

    #[test]
    fn early_mean_reads_the_first_steps_that_recorded_the_metric() {
        let lines: Vec<MetricLine> = (1..=4)
            .map(|step| {
                let mut line = MetricLine::new(step);
                if step > 1 {
                    line.set(FAILED_TOKENS, step as f64);
                }
                line
            })
            .collect();
        assert_eq!(early_mean(&lines, FAILED_TOKENS, 2), 2.5);
        assert!(early_mean(&lines, SOLVED_TOKENS, 2).is_nan());
    }
}
