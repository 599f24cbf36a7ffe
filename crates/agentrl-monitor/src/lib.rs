//! # agentrl-monitor: reading a run the way a post-training engineer does
//!
//! Everything here reads what a run left on disk (`agentrl-run`'s run directory) and writes
//! only files of its own; it knows metric names, never tensors, so it builds in seconds and
//! runs on a live run. In data-flow order:
//!
//! - [`run`]: a run directory's metrics (`metrics.jsonl`, by the names of
//!   `agentrl_run::metrics::names`) as series per metric;
//! - [`doctor`]: failure signatures (entropy collapse, reward hacking, KL blow-up, …) named with
//!   their evidence against the run's own early baseline, and their usual remedies; offline
//!   ([`doctor::diagnose`]) or live ([`doctor::Doctor::observe`], one line per step);
//! - `panels` → `plot` → [`dashboard`]: the panels an engineer reads (outcome, policy
//!   health, length, systems) as inline SVG in one self-contained `dashboard.html`, and the
//!   key panels as PNG;
//! - [`episodes`]: one sampled episode token by token, coloured by advantage, by
//!   engine/trainer mismatch or by loss mask, tool calls and results marked;
//! - [`live`]: the doctor and the dashboard during training, one step at a time;
//! - [`eval_report`]: pass@k and pass^k with bootstrap intervals over tasks, per family, as
//!   Markdown and JSON.
//!
//! Where it sits in task → episode → batch → loss → update: after all of them, reading what
//! the updates left. A user starts from [`RunData::load`] (a run directory), [`diagnose`]
//! (offline) or a [`Doctor`] (live), and [`write_dashboard`].
//!
//! ```rust
//! use agentrl_monitor::{diagnose, DoctorConfig, Signature};
//! use agentrl_run::metrics::names;
//! use agentrl_run::MetricLine;
//!
//! // From step 11 on, the reward and the public tests pass while the hidden tests do not.
//! let lines: Vec<MetricLine> = (1..=30)
//!     .map(|step| {
//!         let gamed = if step > 10 { 0.9 } else { 0.0 };
//!         let mut line = MetricLine::new(step);
//!         line.set(names::REWARD_MEAN, gamed)
//!             .set(names::SOLVE_PUBLIC, gamed)
//!             .set(names::SOLVE_HIDDEN, 0.05)
//!             .set(names::HACKING_RATE, gamed);
//!         line
//!     })
//!     .collect();
//! let findings = diagnose(&lines, &DoctorConfig::default());
//! assert!(findings.iter().any(|f| f.signature == Signature::RewardHacking));
//! println!("{}", findings[0].render()); // the evidence and the usual remedies
//! ```
//!
//! What it is not: no training, no sampling (`agentrl replay` in the binary samples), no
//! network (the page has no script or style from elsewhere).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod dashboard;
pub mod doctor;
pub mod episodes;
pub mod eval_report;
pub mod live;
pub mod run;

// Internals, public for the integration tests (crates/agentrl-monitor/tests/) and the binary.
#[doc(hidden)]
pub mod panels;
#[doc(hidden)]
pub mod plot;

pub use dashboard::{write_dashboard, DashboardFiles};
pub use doctor::{diagnose, Doctor, DoctorConfig, Finding, Signature};
pub use live::LiveMonitor;
pub use run::RunData;
