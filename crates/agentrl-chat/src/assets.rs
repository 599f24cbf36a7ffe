//! Where the shared Qwen3 tokenizer, template and config live for tests and benches.
//!
//! The assets are never copied into the repository. They are found through the environment
//! variable `AGENTRL_QWEN3_DIR`, or beside the workspace at `<workspace>/../shared/assets/qwen3`
//! (how CI lays out a clean clone).

use std::path::PathBuf;

/// The environment variable that points at a Qwen3 model folder.
pub const QWEN3_DIR_ENV: &str = "AGENTRL_QWEN3_DIR";

/// The Qwen3 asset folder, if one exists: `$AGENTRL_QWEN3_DIR`, else
/// `<workspace root>/../shared/assets/qwen3`. A candidate counts only if it holds
/// `tokenizer.json`.
pub fn find_qwen3_assets() -> Option<PathBuf> {
    let from_env = std::env::var_os(QWEN3_DIR_ENV).map(PathBuf::from);
    // This crate is <workspace>/crates/agentrl-chat.
    let workspace_root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..");
    let beside_workspace = workspace_root
        .join("..")
        .join("shared")
        .join("assets")
        .join("qwen3");
    from_env
        .into_iter()
        .chain(std::iter::once(beside_workspace))
        .find(|dir| dir.join("tokenizer.json").is_file())
}
