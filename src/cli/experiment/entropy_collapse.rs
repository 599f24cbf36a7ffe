//! `agentrl experiment entropy-collapse`: GRPO with a symmetric clip (ε = 0.2) and no entropy
//! bonus, at a high learning rate with four optimizer steps per batch (so the clip binds),
//! against the remedies the literature proposes: clip-higher (DAPO, ε_high = 0.28), an entropy
//! bonus (0.01), and the covariance-based Clip-Cov and KL-Cov (ALGORITHMS.md §6, §12). The
//! reported pattern: entropy collapses, pass@1 rises while pass@k for large k falls (the policy
//! narrows onto fewer solutions), and the remedies keep entropy up.

use agentrl_rollout::EvalReport;
use agentrl_run::metrics::names;

use super::{Arm, ArmRuns, Experiment, Judgement, OverSeeds};

pub(crate) const EXPERIMENT: Experiment = Experiment {
    name: "entropy-collapse",
    question: "Does GRPO's entropy collapse with a symmetric clip and no bonus, what does it \
               cost in pass@k, and which remedies keep it?",
    common: &[
        "train.steps=25",
        "rollout.tasks_per_step=4",
        "rollout.group_size=8",
        "train.episodes_every=0",
        "optim.lr=3e-2",
        "algorithm.minibatches=4",
        "eval.samples=8",
        // The recorded result's candidate keys: TinyAgent's pointer head pooled them by the mean
        // until the default moved to "mean-last" (configs/default.toml).
        "model.pointer_pool=\"mean\"",
    ],
    arms: &[
        Arm {
            name: "grpo-clip-0.2",
            sets: &["algorithm.entropy_coef=0", "algorithm.eps_high=0.2"],
        },
        Arm {
            name: "clip-higher",
            sets: &["algorithm.entropy_coef=0", "algorithm.eps_high=0.28"],
        },
        Arm {
            name: "entropy-bonus",
            sets: &["algorithm.entropy_coef=0.01", "algorithm.eps_high=0.2"],
        },
        Arm {
            name: "clip-cov",
            sets: &["algorithm.name=\"clip_cov\"", "algorithm.entropy_coef=0"],
        },
        Arm {
            name: "kl-cov",
            sets: &["algorithm.name=\"kl_cov\"", "algorithm.entropy_coef=0"],
        },
    ],
    judge,
    evals: true,
    figures: &[
        (
            "entropy",
            "policy entropy",
            "nats per action token",
            names::ENTROPY,
        ),
        (
            "solve_hidden",
            "hidden-test solve rate (training episodes)",
            "fraction of episodes",
            names::SOLVE_HIDDEN,
        ),
    ],
};

/// The train split's report of a list of evaluations.
fn train_split(reports: &[EvalReport]) -> Option<&EvalReport> {
    reports.iter().find(|r| r.split == "train")
}

struct ArmFigures {
    /// Entropy of the last 5 steps over that of the first 3.
    kept: OverSeeds,
    late_entropy: OverSeeds,
    pass1: (OverSeeds, OverSeeds),
    passk: (OverSeeds, OverSeeds),
    k: usize,
}

fn figures(arm: &ArmRuns) -> ArmFigures {
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let mut kept = Vec::new();
    let mut late = Vec::new();
    for (_, lines) in &arm.runs {
        let entropy: Vec<f64> = lines.iter().filter_map(|l| l.get(names::ENTROPY)).collect();
        let early = mean(&entropy[..entropy.len().min(3)]);
        let recent = mean(&entropy[entropy.len().saturating_sub(5)..]);
        kept.push(recent / early);
        late.push(recent);
    }
    let (mut p1, mut pk) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    let mut k = 0;
    for (before, after) in &arm.evals {
        if let (Some(b), Some(a)) = (train_split(before), train_split(after)) {
            p1.0.push(b.pass_at_1);
            p1.1.push(a.pass_at_1);
            pk.0.push(b.pass_at_k);
            pk.1.push(a.pass_at_k);
            k = a.k;
        }
    }
    ArmFigures {
        kept: OverSeeds::of(&kept),
        late_entropy: OverSeeds::of(&late),
        pass1: (OverSeeds::of(&p1.0), OverSeeds::of(&p1.1)),
        passk: (OverSeeds::of(&pk.0), OverSeeds::of(&pk.1)),
        k,
    }
}

fn judge(arms: &[ArmRuns]) -> Judgement {
    let all: Vec<(&str, ArmFigures)> = arms.iter().map(|a| (a.name, figures(a))).collect();
    let k = all.first().map_or(0, |(_, f)| f.k);
    let mut body = format!(
        "Entropy of the last 5 steps (and as a share of the first 3), and pass@1 / pass@{k} on \
         the train split before → after training; means over seeds, ranges over seeds:\n\n\
         | arm | late entropy | share kept | pass@1 before → after | pass@{k} before → after |\n\
         |---|---|---|---|---|\n"
    );
    for (name, f) in &all {
        body.push_str(&format!(
            "| {name} | {} | {} | {} → {} | {} → {} |\n",
            f.late_entropy.show(),
            f.kept.show(),
            f.pass1.0.show(),
            f.pass1.1.show(),
            f.passk.0.show(),
            f.passk.1.show()
        ));
    }
    let base = &all[0].1;
    let collapsed = base.kept.mean < 0.5;
    let pattern = base.pass1.1.mean > base.pass1.0.mean && base.passk.1.mean < base.passk.0.mean;
    let remedies: Vec<String> = all[1..]
        .iter()
        .filter(|(_, f)| f.kept.mean > base.kept.mean + 0.1)
        .map(|(n, f)| format!("{n} {:.2}", f.kept.mean))
        .collect();
    let verdict = format!(
        "{}; pass@1 {:.2} → {:.2} and pass@{k} {:.2} → {:.2} ({}); {} of {} remedies kept \
         more entropy{}",
        if collapsed {
            format!(
                "entropy collapsed as expected under grpo-clip-0.2 ({:.2} of its start)",
                base.kept.mean
            )
        } else {
            format!(
                "entropy did NOT collapse under grpo-clip-0.2 ({:.2} of its start)",
                base.kept.mean
            )
        },
        base.pass1.0.mean,
        base.pass1.1.mean,
        base.passk.0.mean,
        base.passk.1.mean,
        if pattern {
            "the reported pass@1-up, pass@k-down pattern"
        } else {
            "not the reported pass@1-up, pass@k-down pattern"
        },
        remedies.len(),
        all.len() - 1,
        if remedies.is_empty() {
            String::new()
        } else {
            format!(" (share kept: {})", remedies.join(", "))
        }
    );
    Judgement { body, verdict }
}
