//! Helpers shared by the trainer's integration tests: small task folders copied from the
//! built-in tasks.

use std::path::Path;

use agentrl_gym::{Split, TaskSet};

/// Copies the first `per_split[i]` built-in tasks of each split (train, heldout,
/// heldout-family) into `dir`.
pub fn task_dir(dir: &Path, per_split: [usize; 3]) -> anyhow::Result<()> {
    let tasks = TaskSet::builtin()?;
    for (split, n) in Split::ALL.into_iter().zip(per_split) {
        for task in tasks.split(split).iter().take(n) {
            copy_dir(&task.dir, &dir.join(&task.id))?;
        }
    }
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
