//! The built-in tasks embedded in the binary, and their one-time extraction to disk.
//!
//! Why extract: a task is a folder that the gym copies into sandbox workspaces and that
//! `validate` and `--tasks-dir` users treat as files, so the embedded tree is written out once
//! to `$XDG_CACHE_HOME/agentrl/` (else `~/.cache/agentrl/`, else the temp dir) under a name
//! that carries a digest of its contents. A new binary with other tasks gets another folder;
//! the same binary reuses its folder. The tree is written to a temporary sibling and renamed
//! into place, so a concurrent or interrupted extraction never leaves a half-written folder.

use std::path::{Path, PathBuf};

use include_dir::{include_dir, Dir};

/// A path the extraction could not create or write, and why. The task loader reports it as
/// its own I/O error on the same path; this module knows nothing of tasks, so that the task
/// loader can stand on it.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {path}: {source}")]
pub struct ExtractError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

static BUILTIN: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/tasks/builtin");

/// FNV-1a over every embedded path and content: a stable name for this set of tasks. (A
/// 64-bit non-cryptographic digest is enough: it only tells apart task sets of different
/// builds, which are never adversarial.)
fn digest() -> u64 {
    fn feed(hash: &mut u64, bytes: &[u8]) {
        for &b in bytes {
            *hash ^= u64::from(b);
            *hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn walk(dir: &Dir<'_>, hash: &mut u64) {
        let mut files: Vec<_> = dir.files().collect();
        files.sort_by_key(|f| f.path());
        for f in files {
            feed(hash, f.path().to_string_lossy().as_bytes());
            feed(hash, &[0]);
            feed(hash, f.contents());
        }
        let mut dirs: Vec<_> = dir.dirs().collect();
        dirs.sort_by_key(|d| d.path());
        for d in dirs {
            walk(d, hash);
        }
    }
    let mut hash = 0xcbf2_9ce4_8422_2325;
    walk(&BUILTIN, &mut hash);
    hash
}

fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("agentrl");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".cache/agentrl");
    }
    std::env::temp_dir().join("agentrl")
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ExtractError + '_ {
    move |source| ExtractError {
        path: path.to_path_buf(),
        source,
    }
}

/// The folder holding the embedded tasks, written out on first use.
pub(crate) fn extracted() -> Result<PathBuf, ExtractError> {
    extract_into(&cache_root())
}

/// The embedded tasks under `root`, written out unless this build's copy is already there.
// Public for the integration tests (tests/gym/builtin_extraction.rs).
#[doc(hidden)]
pub fn extract_into(root: &Path) -> Result<PathBuf, ExtractError> {
    let root = root.to_path_buf();
    let target = root.join(format!("tasks-builtin-{:016x}", digest()));
    if target.is_dir() {
        return Ok(target);
    }
    std::fs::create_dir_all(&root).map_err(io(&root))?;
    let staging = tempfile::Builder::new()
        .prefix(".tasks-builtin-")
        .tempdir_in(&root)
        .map_err(io(&root))?;
    write_tree(&BUILTIN, staging.path())?;
    let staged = staging.keep();
    match std::fs::rename(&staged, &target) {
        Ok(()) => Ok(target),
        // Another process finished first: use its copy.
        Err(_) if target.is_dir() => {
            let _ = std::fs::remove_dir_all(&staged);
            Ok(target)
        }
        Err(e) => Err(io(&target)(e)),
    }
}

fn write_tree(dir: &Dir<'_>, root: &Path) -> Result<(), ExtractError> {
    for file in dir.files() {
        let path = root.join(file.path());
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, file.contents()).map_err(io(&path))?;
    }
    for sub in dir.dirs() {
        let path = root.join(sub.path());
        std::fs::create_dir_all(&path).map_err(io(&path))?;
        write_tree(sub, root)?;
    }
    Ok(())
}
