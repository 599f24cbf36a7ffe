//! `agentrl dashboard RUN [RUN…]`: writes one self-contained `dashboard.html` (and PNGs of
//! the key panels) for one run, or for several overlaid (`agentrl_monitor::dashboard`).

use std::path::PathBuf;

use agentrl_monitor::{write_dashboard, LiveMonitor, RunData};
use clap::Args;

#[derive(Debug, Args)]
pub struct DashboardArgs {
    /// Run directories; several are overlaid, one colour each.
    #[arg(value_name = "RUN", required = true)]
    pub runs: Vec<PathBuf>,
    /// Where to write the page (default: RUN/dashboard.html for one run, ./dashboard.html for
    /// several); the PNGs go to a folder named like the page, beside it.
    #[arg(long, value_name = "FILE.html")]
    pub out: Option<PathBuf>,
}

pub fn dashboard(args: DashboardArgs) -> anyhow::Result<()> {
    let runs = args
        .runs
        .iter()
        .map(|r| RunData::load(r))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let out = match (&args.out, args.runs.as_slice()) {
        (Some(out), _) => out.clone(),
        (None, [one]) => LiveMonitor::dashboard_path(one),
        (None, _) => PathBuf::from("dashboard.html"),
    };
    let files = write_dashboard(&runs, &out)?;
    println!("dashboard: {}", files.html.display());
    for png in &files.pngs {
        println!("panel: {}", png.display());
    }
    Ok(())
}
