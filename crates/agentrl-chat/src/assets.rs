//! Where the shared Qwen3 tokenizer, template and config live for tests and benches.
//!
//! The assets are never copied into the repository. They are found through the environment
//! variable `AGENTRL_QWEN3_DIR`, or beside the workspace at `<workspace>/../shared/assets/qwen3`
//! (how CI lays out a clean clone: `shared/` next to the checkout).
//!
//! Tests take them through [`qwen3_assets_for_tests`], never [`find_qwen3_assets`] directly: under
//! CI (`CI` set) a missing folder fails the test instead of letting it pass vacuously.

use std::path::PathBuf;

/// The environment variable that points at a Qwen3 model folder.
pub const QWEN3_DIR_ENV: &str = "AGENTRL_QWEN3_DIR";

/// The environment variable CI services set (GitHub Actions, GitLab, `.ci/run`); when it is
/// set and not empty, tests that need the Qwen3 assets fail if the assets are missing.
pub const CI_ENV: &str = "CI";

/// The folders searched, in order: `$AGENTRL_QWEN3_DIR` (when set), then
/// `<workspace root>/../shared/assets/qwen3`.
fn candidates() -> Vec<PathBuf> {
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
        .collect()
}

/// The Qwen3 asset folder, if one exists: `$AGENTRL_QWEN3_DIR`, else
/// `<workspace root>/../shared/assets/qwen3`. A candidate counts only if it holds
/// `tokenizer.json`.
pub fn find_qwen3_assets() -> Option<PathBuf> {
    candidates()
        .into_iter()
        .find(|dir| dir.join("tokenizer.json").is_file())
}

/// The Qwen3 asset folder for a test that needs it; the one entry point every such test uses.
///
/// * Found ([`find_qwen3_assets`]): `Some(dir)`.
/// * Missing under CI (`$CI` set and not empty): panics, naming the folders it searched, so
///   the test fails rather than passing without having checked anything.
/// * Missing elsewhere: prints `SKIPPED: <test name>: …` to stderr and returns `None`; the
///   test returns early.
///
/// Meant for tests (it reads `$CI`, which library code has no business with).
pub fn qwen3_assets_for_tests() -> Option<PathBuf> {
    let in_ci = std::env::var_os(CI_ENV).is_some_and(|value| !value.is_empty());
    for_tests(find_qwen3_assets(), &candidates(), in_ci)
}

/// [`qwen3_assets_for_tests`] once the environment has been read.
// Public for the integration tests (tests/chat/assets.rs).
#[doc(hidden)]
pub fn for_tests(found: Option<PathBuf>, searched: &[PathBuf], in_ci: bool) -> Option<PathBuf> {
    if found.is_some() {
        return found;
    }
    let searched: Vec<String> = searched
        .iter()
        .map(|dir| dir.display().to_string())
        .collect();
    let why = format!(
        "Qwen3 assets not found (no tokenizer.json in: {}); set {QWEN3_DIR_ENV} to a Qwen3 \
         model folder, or put shared/assets/qwen3 beside the checkout",
        searched.join(", ")
    );
    if in_ci {
        panic!("{why}; ${CI_ENV} is set, so a test that needs them fails instead of skipping");
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    eprintln!("SKIPPED: {test}: {why}");
    None
}
