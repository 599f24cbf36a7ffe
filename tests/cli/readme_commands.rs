//! Every command block of README.md runs, as a new user would run it: from a directory
//! outside the checkout, with the built binary first on PATH. The README's convention: a
//! ```` ```sh ```` block is commands to run (each must exit 0), a ```` ```text ```` block is
//! shown, not run. The first block's `cargo` lines (build and test this checkout) are skipped,
//! and so is `cargo install`; `cargo run --release --` is the binary.
//!
//! Long runs are shortened the way a user would: `agentrl` on PATH is a wrapper that adds
//! `--set train.steps=2` to `train`, `sft`, `rft`, `dpo` and `distill` (on `--resume`, a
//! `train.steps` the line sets becomes 4: two more steps). Everything else runs as written.
//! The blocks run in order in one folder, so a block may use the runs of the blocks above.

use std::path::Path;
use std::process::Command;

/// The README's fenced blocks: `(language, first line number, lines)`.
fn blocks(readme: &str) -> Vec<(String, usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut open: Option<(String, usize, Vec<String>)> = None;
    for (i, line) in readme.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (fence, open.take()) {
            (Some(_), Some(block)) => out.push(block),
            (Some(lang), None) => open = Some((lang.trim().to_string(), i + 1, Vec::new())),
            (None, Some(mut block)) => {
                block.2.push(line.to_string());
                open = Some(block);
            }
            (None, None) => {}
        }
    }
    out
}

/// Seconds a block may run before it is stopped (see the guard below).
const BLOCK_LIMIT_S: &str = "1200";

/// The `agentrl` of PATH: the binary, with the training commands shortened.
const WRAPPER: &str = r#"#!/usr/bin/env bash
real="__BIN__"
case "${1:-}" in
  train|sft|rft|dpo|distill) ;;
  *) exec "$real" "$@" ;;
esac
resume=0
for a in "$@"; do [ "$a" = "--resume" ] && resume=1; done
args=()
steps=0
for a in "$@"; do
  case "$a" in
    train.steps=*) steps=1; if [ $resume = 1 ]; then a=train.steps=4; else a=train.steps=2; fi ;;
  esac
  args+=("$a")
done
if [ $steps = 0 ] && [ $resume = 0 ]; then args+=(--set train.steps=2); fi
exec "$real" "${args[@]}"
"#;

/// A block as a bash script: `cargo` lines of the first block and `cargo install` dropped,
/// `cargo run --release --` as `agentrl`; stops at the first command that fails and names it.
fn script(lines: &[String], first: bool) -> String {
    let mut out = String::from(
        "set -eo pipefail\ntrap 'echo \"README command failed (exit $?): $BASH_COMMAND\" >&2' ERR\n",
    );
    for line in lines {
        let trimmed = line.trim_start();
        if (first && trimmed.starts_with("cargo ")) || trimmed.starts_with("cargo install") {
            continue;
        }
        out.push_str(&line.replace("cargo run --release -- ", "agentrl "));
        out.push('\n');
    }
    out
}

#[test]
fn every_sh_block_of_the_readme_runs_from_outside_the_checkout() {
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(checkout.join("README.md")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let bin_dir = tmp.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    let wrapper = bin_dir.join("agentrl");
    std::fs::write(
        &wrapper,
        WRAPPER.replace("__BIN__", env!("CARGO_BIN_EXE_agentrl")),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let mut failures = Vec::new();
    let mut ran = 0;
    let all = blocks(&readme);
    for (i, (lang, at, lines)) in all.iter().enumerate() {
        if lang != "sh" {
            continue;
        }
        let body = script(lines, i == 0);
        ran += 1;
        // A guard, not a measurement: a block that serves forever (`gym serve`, `serve`)
        // belongs in a ```text block, and fails here instead of hanging the suite.
        let out = Command::new("timeout")
            .args(["-k", "10", BLOCK_LIMIT_S, "bash", "-c"])
            .arg(&body)
            .current_dir(&work)
            .env("PATH", &path)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        if out.status.code() == Some(124) || out.status.code().is_none() {
            failures.push(format!(
                "README.md:{at} (```sh block): still running after {BLOCK_LIMIT_S} s (a server? \
                 show it in a ```text block)"
            ));
        } else if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(6).collect();
            failures.push(format!(
                "README.md:{at} (```sh block): {}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n    ")
            ));
        }
    }
    assert!(ran > 0, "README.md has no ```sh block");
    assert!(
        failures.is_empty(),
        "{} of {ran} ```sh blocks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_block_reader_runs_sh_and_shows_text() {
    let readme = "x\n```sh\ncargo test\nagentrl gym list\n```\n```text\nstep 1\n```\n";
    let found = blocks(readme);
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].0, "sh");
    assert_eq!(found[1].0, "text");
    let body = script(&found[0].2, true);
    assert!(body.contains("agentrl gym list") && !body.contains("cargo test"));
    let body = script(&["cargo run --release -- train".to_string()], false);
    assert!(body.contains("\nagentrl train\n"), "{body}");
}
