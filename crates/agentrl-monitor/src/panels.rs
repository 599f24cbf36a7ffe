//! The dashboard's panels, grouped as an engineer reads a run: outcome first, then policy
//! health, length, and systems. Each panel names its metrics (by `agentrl_run::metrics::names`),
//! its y unit, and one line of what to look for.
//!
//! Where it sits: [`crate::dashboard`] draws each panel with [`crate::plot`] for one or several
//! runs; the `png` flag marks the key panels also written as images.

use agentrl_run::metrics::names;

use crate::plot::Scale;

/// A section of the dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Outcome,
    PolicyHealth,
    Length,
    Systems,
}

impl Group {
    pub const ALL: [Group; 4] = [
        Group::Outcome,
        Group::PolicyHealth,
        Group::Length,
        Group::Systems,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Group::Outcome => "Outcome",
            Group::PolicyHealth => "Policy health",
            Group::Length => "Length",
            Group::Systems => "Systems",
        }
    }
}

/// One metric of a panel and its legend text.
#[derive(Debug, Clone, Copy)]
pub struct PanelMetric {
    pub name: &'static str,
    pub label: &'static str,
}

/// One chart of the dashboard.
#[derive(Debug, Clone, Copy)]
pub struct Panel {
    /// File-name-safe id (`dashboard/<id>.png`, HTML anchors).
    pub id: &'static str,
    pub group: Group,
    pub title: &'static str,
    pub unit: &'static str,
    pub scale: Scale,
    pub metrics: &'static [PanelMetric],
    /// Values the y range always includes (0 and 1 for shares).
    pub include: &'static [f64],
    /// One line: what a healthy and a failing run look like here.
    pub look_for: &'static str,
    /// Written as a PNG too.
    pub png: bool,
}

const fn m(name: &'static str, label: &'static str) -> PanelMetric {
    PanelMetric { name, label }
}

const SHARE: &[f64] = &[0.0, 1.0];
const ZERO: &[f64] = &[0.0];

/// Every panel, in page order.
pub const PANELS: &[Panel] = &[
    Panel {
        id: "reward",
        group: Group::Outcome,
        title: "Reward",
        unit: "reward per episode",
        scale: Scale::Linear,
        metrics: &[
            m(names::REWARD_MEAN, "mean"),
            m(names::REWARD_STD, "std"),
        ],
        include: ZERO,
        look_for: "Mean rises, then flattens near the ceiling; flat from the start means no learning signal (see zero-variance groups). Std near 0 at a low mean: the groups all agree.",
        png: true,
    },
    Panel {
        id: "solve",
        group: Group::Outcome,
        title: "Hidden vs public solve",
        unit: "share of episodes",
        scale: Scale::Linear,
        metrics: &[
            m(names::SOLVE_HIDDEN, "hidden"),
            m(names::SOLVE_PUBLIC, "public"),
            m(names::SOLVE_GAP, "gap"),
        ],
        include: SHARE,
        look_for: "Hidden follows public up and the gap closes. Public rising while hidden stays flat (gap widening) is reward hacking.",
        png: true,
    },
    Panel {
        id: "hacking",
        group: Group::Outcome,
        title: "Hacking, tampering, format errors",
        unit: "share",
        scale: Scale::Linear,
        metrics: &[
            m(names::HACKING_RATE, "hacked"),
            m(names::TAMPER_RATE, "tampered"),
            m(names::FORMAT_ERROR_RATE, "format err"),
        ],
        include: SHARE,
        look_for: "All fall as the policy learns the real fix. A rising tamper rate means the policy found the test harness; rising format errors, that it drifted off the call format.",
        png: false,
    },
    Panel {
        id: "entropy",
        group: Group::PolicyHealth,
        title: "Entropy",
        unit: "nats / action token",
        scale: Scale::Linear,
        metrics: &[m(names::ENTROPY, "entropy")],
        include: ZERO,
        look_for: "Falls gradually as the solve rate climbs. A drop to near 0 while hidden solve is still low is entropy collapse: the policy stopped exploring.",
        png: true,
    },
    Panel {
        id: "kl",
        group: Group::PolicyHealth,
        title: "KL",
        unit: "nats / token (log)",
        scale: Scale::Log,
        metrics: &[
            m(names::KL_REF, "to reference"),
            m(names::PPO_KL, "ppo_kl (old‖new)"),
        ],
        include: &[],
        look_for: "KL to the reference grows slowly and levels off; ppo_kl stays small (about 1e-2 or less). Decades of growth in a few steps is a KL blow-up.",
        png: true,
    },
    Panel {
        id: "clip",
        group: Group::PolicyHealth,
        title: "Clip fractions",
        unit: "share of action tokens",
        scale: Scale::Linear,
        metrics: &[
            m(names::PG_CLIPFRAC, "pg_clipfrac"),
            m(names::CLIP_HIGH, "high"),
            m(names::CLIP_LOW, "low"),
            m(names::PG_CLIPFRAC_LOWER, "dual"),
        ],
        include: ZERO,
        look_for: "Near 0 on-policy, a few % with several minibatches or epochs. A spike means one update moved the policy too far (LR, epochs, stale data).",
        png: false,
    },
    Panel {
        id: "ratio",
        group: Group::PolicyHealth,
        title: "Importance ratio",
        unit: "π_θ / π_old",
        scale: Scale::Linear,
        metrics: &[
            m(names::RATIO_MEAN, "mean"),
            m(names::RATIO_MAX, "max"),
        ],
        include: &[1.0],
        look_for: "Mean stays at 1; max a little above. A max far above 1 + ε is a policy moving faster than clipping holds.",
        png: false,
    },
    Panel {
        id: "grad",
        group: Group::PolicyHealth,
        title: "Gradient norm and advantages",
        unit: "norm (log)",
        scale: Scale::Log,
        metrics: &[
            m(names::GRAD_NORM, "grad norm"),
            m(names::ADVANTAGE_ABS_MEAN, "|advantage|"),
            m(names::LR, "lr"),
        ],
        include: &[],
        look_for: "Grad norm steady within a decade. Jumps by orders of magnitude point to mismatched or never-synced weights; |advantage| near 0 means no signal.",
        png: false,
    },
    Panel {
        id: "groups",
        group: Group::PolicyHealth,
        title: "Groups without signal",
        unit: "share of groups / count",
        scale: Scale::Linear,
        metrics: &[
            m(names::ZERO_VARIANCE_GROUPS, "equal rewards"),
            m(names::GROUPS_DROPPED, "dropped (DAPO)"),
        ],
        include: SHARE,
        look_for: "High at the start (all fail) and at the end (all solve) is normal; high in the middle, with reward flat, starves the gradient.",
        png: false,
    },
    Panel {
        id: "length",
        group: Group::Length,
        title: "Response length",
        unit: "action tokens / episode",
        scale: Scale::Linear,
        metrics: &[
            m(names::RESPONSE_LENGTH_MEAN, "mean"),
            m(names::RESPONSE_LENGTH_MAX, "max"),
            m(names::RESPONSE_LENGTH_MIN, "min"),
        ],
        include: ZERO,
        look_for: "Moves with the strategy (reading before editing adds tokens). Doubling with a rising clip ratio is length explosion; halving while the outcome is flat, length collapse.",
        png: true,
    },
    Panel {
        id: "turns",
        group: Group::Length,
        title: "Turns and tool calls",
        unit: "per episode",
        scale: Scale::Linear,
        metrics: &[
            m(names::NUM_TURNS, "turns"),
            m(names::TOOL_CALLS, "tool calls"),
        ],
        include: ZERO,
        look_for: "Tool calls track turns (malformed actions make the gap). Turns pinned at the limit with a flat outcome: the agent never decides.",
        png: false,
    },
    Panel {
        id: "submit",
        group: Group::Length,
        title: "Submit vs turn limit",
        unit: "share of episodes",
        scale: Scale::Linear,
        metrics: &[
            m(names::SUBMIT_RATE, "submitted"),
            m(names::TURN_LIMIT_RATE, "turn limit"),
            m(names::RESPONSE_CLIP_RATIO, "truncated"),
        ],
        include: SHARE,
        look_for: "An agent that fixes the bug submits. The turn limit every time, while hidden solve is flat, is an agent that never submits.",
        png: false,
    },
    Panel {
        id: "timing",
        group: Group::Systems,
        title: "Step time",
        unit: "seconds",
        scale: Scale::Linear,
        metrics: &[
            m(names::TIME_STEP, "step"),
            m(names::TIME_GEN, "rollout (gen + env)"),
            m(names::TIME_ENV, "env (of rollout)"),
            m(names::TIME_SYNC, "weight sync"),
            m(names::TIME_UPDATE, "update"),
        ],
        include: ZERO,
        look_for: "Rollout and update add up to the step. A growing rollout share follows longer episodes; steps slowing at a constant length point to the machine.",
        png: true,
    },
    Panel {
        id: "throughput",
        group: Group::Systems,
        title: "Throughput",
        unit: "episode tokens / s",
        scale: Scale::Linear,
        metrics: &[m(names::THROUGHPUT, "tokens/s")],
        include: ZERO,
        look_for: "Steady. A drop with constant length means contention or memory pressure.",
        png: false,
    },
    Panel {
        id: "memory",
        group: Group::Systems,
        title: "Peak memory",
        unit: "GB (resident)",
        scale: Scale::Linear,
        metrics: &[m(names::PEAK_MEMORY_GB, "peak RSS")],
        include: ZERO,
        look_for: "Flat after the first steps. Climbing step after step is a leak (kept episodes, caches).",
        png: false,
    },
    Panel {
        id: "mismatch",
        group: Group::Systems,
        title: "Engine/trainer mismatch and staleness",
        unit: "nats / token · versions",
        scale: Scale::Linear,
        metrics: &[
            m(names::MISMATCH, "|Δ log p|"),
            m(names::STALENESS_MEAN, "staleness mean"),
            m(names::STALENESS_MAX, "staleness max"),
        ],
        include: ZERO,
        look_for: "|Δ log p| tiny and flat (about 1e-7 for the local f32 engine); staleness at 0 on-policy. Either climbing step after step: mismatch growing or weights never synced.",
        png: false,
    },
];
