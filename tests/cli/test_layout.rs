//! The workspace's test layout: a library built with `test = false` (its tests live in the
//! integration-test binary, so `cargo test` reuses the release build) has no test left in its
//! `src/`, where `cargo test` would never compile or run it.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// Every `.rs` file under `dir` (the import-graph scan reads them too).
pub(crate) fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}

/// The lines of `text` that declare a test or test-only code, outside comments.
fn test_markers(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim_start)
        .filter(|line| !line.starts_with("//"))
        .filter(|line| {
            [
                "#[test]",
                "#[cfg(test)]",
                "proptest!",
                "#[cfg(all(test",
                "#[cfg(any(test",
            ]
            .iter()
            .any(|marker| line.contains(marker))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn libraries_built_without_tests_have_no_tests_in_their_sources() {
    let crates = workspace().join("crates");
    let mut checked = 0;
    let mut stranded = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let package = entry.unwrap().path();
        let Ok(manifest) = std::fs::read_to_string(package.join("Cargo.toml")) else {
            continue;
        };
        let manifest: toml::Table = manifest.parse().unwrap();
        let lib_tests = manifest
            .get("lib")
            .and_then(|lib| lib.get("test"))
            .and_then(toml::Value::as_bool)
            .unwrap_or(true);
        if lib_tests {
            continue;
        }
        checked += 1;
        for file in rust_files(&package.join("src")) {
            let text = std::fs::read_to_string(&file).unwrap();
            for line in test_markers(&text) {
                stranded.push(format!("{}: {line}", file.display()));
            }
        }
    }
    assert!(
        checked >= 9,
        "every library crate under crates/ is built with `[lib] test = false` ({checked} are)"
    );
    assert!(
        stranded.is_empty(),
        "tests that `cargo test` would never run (move them to the crate's tests/ binary):\n{}",
        stranded.join("\n")
    );
}

#[test]
fn the_marker_scan_finds_tests_and_skips_comments() {
    let text = "fn f() {}\n// #[test] in a comment\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\n";
    assert_eq!(test_markers(text), vec!["#[cfg(test)]", "#[test]"]);
}
