//! `agentrl experiment format-learning`: with the whole vocabulary open
//! (`model.action_vocab = "full"`), the policy must learn the tool-call format itself. An
//! untrained TinyAgent almost never writes a well-formed call; the question is what takes the
//! valid-call rate (1 − the format-error rate, per turn) to near 100% on every seed, not on one
//! lucky one.
//!
//! The arms differ only in what RL does after the same SFT warm-up on the gym expert's
//! episodes (`train.format_warmup_data = "expert"`, 40 steps at the default
//! `train.format_warmup_lr`), then 30 RL steps: RL alone from scratch (30 steps, no warm-up);
//! RL with malformed turns free (they are no-ops); with a per-error cost
//! (`reward.format_penalty`); with that cost and a KL term to the warmed-up policy
//! (`train.format_warmup_kl_anchor`: without it the KL reference is the initial, untrained
//! policy); and with the cost after a gentler warm-up (half the learning rate). What one
//! expects from the literature (SFT before RL; a KL anchor to the SFT model as in InstructGPT):
//! the warm-up teaches the format, and RL forgets it unless something holds it there, because a
//! failed episode's negative advantage pushes probability off its well-formed tokens onto the
//! rest of the vocabulary; a cost per malformed turn alone pays most for the shortest episode,
//! so where little is solved it teaches submitting at once.
//!
//! Where it sits: [`add_valid_call_rate`] runs on every experiment run (mod.rs) and adds the
//! per-step valid-call rate beside `metrics.jsonl`'s format-error rate (warm-up steps sample
//! no episodes and get none), so the framework's figures read it like any other metric.

use agentrl_run::metrics::{names, MetricLine};

use super::{arm, early_mean, late_mean, ArmRuns, Experiment, Judgement, OverSeeds};

/// 1 − `env/format_error_rate`: the share of a step's turns that were well-formed calls.
pub(crate) const VALID_CALL_RATE: &str = "experiment/valid_call_rate";

/// The valid-call rate (mean of the last [`WINDOW`] steps) that counts as "near 100%".
const NEAR_ALL: f64 = 0.95;
/// Steps averaged at the start of RL and at the end of a run.
const WINDOW: usize = 5;
/// An arm whose last steps submit this often and solve less than [`COLLAPSED_SOLVE`] has
/// collapsed to submitting at once.
const COLLAPSED_SUBMIT: f64 = 0.9;
const COLLAPSED_SOLVE: f64 = 0.1;

/// The arm with the KL anchor to the warmed-up policy (`train.format_warmup_kl_anchor`).
const ANCHOR: &str = "kl-to-warm-up";
/// The arm whose warm-up runs at half the default `train.format_warmup_lr`.
const GENTLE: &str = "gentle-warm-up";

pub(crate) const EXPERIMENT: Experiment = Experiment {
    name: "format-learning",
    question: "With the whole vocabulary open, does the valid-tool-call rate rise from ~0% to \
               near 100% on every seed, and what keeps RL from losing the format a warm-up \
               taught?",
    common: &[
        "model.action_vocab=\"full\"",
        "train.steps=70",
        "rollout.tasks_per_step=4",
        "rollout.group_size=8",
        "train.episodes_every=0",
        "train.format_warmup_data=\"expert\"",
        // An entropy bonus over the whole vocabulary pulls towards malformed words.
        "algorithm.entropy_coef=0",
        // The recorded result's rate: the default was 1e-3 until TinyAgent's default run
        // moved to 5e-4 (configs/default.toml); pinned so the recorded verdict still holds.
        "optim.lr=1e-3",
        // The recorded result's candidate keys: TinyAgent's pointer head pooled them by the mean
        // until the default moved to "mean-last" (configs/default.toml).
        "model.pointer_pool=\"mean\"",
    ],
    arms: &[
        // As many RL steps as the others have after their warm-up.
        arm("rl-only", &["train.steps=30", "reward.format_penalty=0.1"]),
        arm("warm-up", &["train.format_warmup_steps=40"]),
        arm(
            "penalty",
            &["train.format_warmup_steps=40", "reward.format_penalty=0.1"],
        ),
        arm(
            ANCHOR,
            &[
                "train.format_warmup_steps=40",
                "reward.format_penalty=0.1",
                "algorithm.kl_coef=0.1",
                "train.format_warmup_kl_anchor=true",
            ],
        ),
        arm(
            GENTLE,
            &[
                "train.format_warmup_steps=40",
                "reward.format_penalty=0.1",
                "train.format_warmup_lr=5e-3",
            ],
        ),
    ],
    judge,
    evals: false,
    figures: &[
        (
            "valid_calls",
            "well-formed tool calls (training turns)",
            "fraction of turns",
            VALID_CALL_RATE,
        ),
        (
            "solve_hidden",
            "hidden-test solve rate (training episodes)",
            "fraction of episodes",
            names::SOLVE_HIDDEN,
        ),
    ],
};

/// Sets [`VALID_CALL_RATE`] on every line that has a format-error rate (the RL steps).
pub(crate) fn add_valid_call_rate(lines: &mut [MetricLine]) {
    for line in lines.iter_mut() {
        if let Some(errors) = line.get(names::FORMAT_ERROR_RATE) {
            line.set(VALID_CALL_RATE, 1.0 - errors);
        }
    }
}

struct ArmFigures {
    name: &'static str,
    valid_start: OverSeeds,
    valid_end: OverSeeds,
    solve: OverSeeds,
    submit: OverSeeds,
    turns: OverSeeds,
    /// Seeds whose valid-call rate ended at [`NEAR_ALL`] or above.
    near_all: usize,
    /// Seeds that collapsed to submitting at once.
    collapsed: usize,
    seeds: usize,
}

fn figures(arm: &ArmRuns) -> ArmFigures {
    let late = |metric: &'static str| arm.over_seeds(|lines| late_mean(lines, metric, WINDOW));
    let count = |hit: &dyn Fn(&[MetricLine]) -> bool| {
        arm.runs.iter().filter(|(_, lines)| hit(lines)).count()
    };
    ArmFigures {
        name: arm.name,
        valid_start: arm.over_seeds(|lines| early_mean(lines, VALID_CALL_RATE, WINDOW)),
        valid_end: late(VALID_CALL_RATE),
        solve: late(names::SOLVE_HIDDEN),
        submit: late(names::SUBMIT_RATE),
        turns: late(names::NUM_TURNS),
        near_all: count(&|lines| late_mean(lines, VALID_CALL_RATE, WINDOW) >= NEAR_ALL),
        collapsed: count(&|lines| {
            late_mean(lines, names::SUBMIT_RATE, WINDOW) >= COLLAPSED_SUBMIT
                && late_mean(lines, names::SOLVE_HIDDEN, WINDOW) < COLLAPSED_SOLVE
        }),
        seeds: arm.runs.len(),
    }
}

fn judge(arms: &[ArmRuns]) -> Judgement {
    let all: Vec<ArmFigures> = arms.iter().map(figures).collect();
    let mut body = format!(
        "Means over seeds, ranges over seeds. Valid calls: the share of turns that were \
         well-formed tool calls, over the first {WINDOW} RL steps (for rl-only, the untrained \
         policy; for the others, just after the 40 warm-up steps) and the last {WINDOW}; \
         hidden solve, submit rate and turns over the last {WINDOW}. \"Near all\": seeds whose \
         valid-call rate ended at {NEAR_ALL} or above; \"collapsed\": seeds that ended \
         submitting at once (submit rate ≥ {COLLAPSED_SUBMIT}, hidden solve < \
         {COLLAPSED_SOLVE}; a submit is a well-formed call, so such a seed can count as near \
         all too):\n\n\
         | arm | valid calls, first → last | hidden solve, last | submit rate | turns | near all | collapsed |\n\
         |---|---|---|---|---|---|---|\n"
    );
    for f in &all {
        body.push_str(&format!(
            "| {} | {} → {} | {} | {} | {} | {}/{} | {}/{} |\n",
            f.name,
            f.valid_start.show(),
            f.valid_end.show(),
            f.solve.show(),
            f.submit.show(),
            f.turns.show(),
            f.near_all,
            f.seeds,
            f.collapsed,
            f.seeds
        ));
    }
    let untrained = all
        .iter()
        .find(|f| f.name == "rl-only")
        .map_or(f64::NAN, |f| f.valid_start.mean);
    let Some(anchor) = all.iter().find(|f| f.name == ANCHOR) else {
        return Judgement {
            body,
            verdict: format!("no arm {ANCHOR} to judge"),
        };
    };
    let holds = |f: &ArmFigures| f.seeds > 0 && f.near_all == f.seeds && f.collapsed == 0;
    let held: Vec<&str> = all.iter().filter(|f| holds(f)).map(|f| f.name).collect();
    let arms: Vec<String> = all
        .iter()
        .map(|f| {
            format!(
                "{} {}/{} ({:.2}, solve {:.2}{})",
                f.name,
                f.near_all,
                f.seeds,
                f.valid_end.mean,
                f.solve.mean,
                if f.collapsed > 0 {
                    format!(", {} collapsed to submitting", f.collapsed)
                } else {
                    String::new()
                }
            )
        })
        .collect();
    let verdict = format!(
        "{}; the KL anchor to the warmed-up policy {} — from {untrained:.2} valid calls \
         untrained; seeds at or above {NEAR_ALL} (final valid-call rate, hidden solve): {}",
        if held.is_empty() || untrained.is_nan() || untrained >= 0.1 {
            "the valid-call rate did NOT rise to near 100% on every seed in any arm".to_string()
        } else {
            format!(
                "the valid-call rate rose from ~0 to near 100% on every seed, without \
                 collapsing to submitting, in {}",
                held.join(", ")
            )
        },
        if holds(anchor) {
            "held it on every seed"
        } else {
            "did NOT hold it on every seed"
        },
        arms.join("; ")
    );
    Judgement { body, verdict }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(errors: &[Option<f64>]) -> Vec<MetricLine> {
        errors
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let mut line = MetricLine::new(i + 1);
                if let Some(e) = e {
                    line.set(names::FORMAT_ERROR_RATE, *e);
                }
                line
            })
            .collect()
    }

    #[test]
    fn the_valid_call_rate_is_set_on_rl_steps_only() {
        let mut lines = run(&[None, None, Some(0.25), Some(0.0)]);
        add_valid_call_rate(&mut lines);
        let valid: Vec<Option<f64>> = lines.iter().map(|l| l.get(VALID_CALL_RATE)).collect();
        assert_eq!(valid, vec![None, None, Some(0.75), Some(1.0)]);
        // The start of RL is the first steps that have a rate, not the warm-up's.
        assert_eq!(early_mean(&lines, VALID_CALL_RATE, 1), 0.75);
    }

    #[test]
    fn only_the_anchor_arm_sets_the_anchor() {
        let anchored: Vec<&str> = EXPERIMENT
            .arms
            .iter()
            .filter(|a| a.sets.contains(&"train.format_warmup_kl_anchor=true"))
            .map(|a| a.name)
            .collect();
        assert_eq!(anchored, vec![ANCHOR]);
    }
}
