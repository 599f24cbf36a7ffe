//! The monitor of a run being trained: fed each step's metric line by the training session,
//! it runs the doctor (warning as a signature appears) and rewrites the dashboard every N
//! steps, so a live run can be watched by reloading its page.
//!
//! Where it sits: between `agentrl_train::recipes::rl::run_rl_session_observed` (which calls
//! [`LiveMonitor::on_step`] after each step's line is written) and the files of [`crate::dashboard`].

use std::path::{Path, PathBuf};

use agentrl_run::metrics::MetricLine;

use crate::dashboard::write_dashboard;
use crate::doctor::{Doctor, DoctorConfig, Finding};
use crate::run::RunData;

/// What to do live.
#[derive(Debug)]
pub struct LiveMonitor {
    doctor: Option<Doctor>,
    dashboard_every: usize,
    steps_seen: usize,
}

impl LiveMonitor {
    /// `doctor`: run the doctor on every step; `dashboard_every`: rewrite the dashboard every
    /// N steps (0 = only when [`LiveMonitor::write`] is called).
    pub fn new(doctor: bool, dashboard_every: usize) -> Self {
        Self {
            doctor: doctor.then(|| Doctor::new(DoctorConfig::default())),
            dashboard_every,
            steps_seen: 0,
        }
    }

    /// The run's dashboard page: `RUN/dashboard.html`.
    pub fn dashboard_path(run: &Path) -> PathBuf {
        run.join("dashboard.html")
    }

    /// Takes one step's line (already written to the run); returns the signatures that appeared
    /// at this step. The dashboard is rewritten when the step is a multiple of N.
    pub fn on_step(&mut self, run: &Path, line: &MetricLine) -> anyhow::Result<Vec<Finding>> {
        self.steps_seen += 1;
        let appeared = match &mut self.doctor {
            Some(doctor) => doctor.observe(line),
            None => Vec::new(),
        };
        if self.dashboard_every > 0 && line.step % self.dashboard_every == 0 {
            self.write(run)?;
        }
        Ok(appeared)
    }

    /// Writes the dashboard of `run` now; returns its path.
    pub fn write(&self, run: &Path) -> anyhow::Result<PathBuf> {
        let data = RunData::load(run)?;
        Ok(write_dashboard(&[data], &Self::dashboard_path(run))?.html)
    }
}
