//! `agentrl bench gym`: sandboxed test executions per second, fresh process vs warm pool.

use crate::cli::TasksDirArg;

pub fn run(_json: bool, _tasks: &TasksDirArg) -> anyhow::Result<()> {
    anyhow::bail!("bench gym is not built yet")
}
