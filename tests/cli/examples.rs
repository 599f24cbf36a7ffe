//! Every example under `examples/` is run and its output compared with the recorded one
//! (`examples/<name>.out`), the way a book checks its code blocks: an API change that breaks
//! an example, or changes what it shows, fails here. `cargo test` builds the examples (as it
//! always does) next to the `agentrl` binary, in `target/<profile>/examples/`.
//!
//! Re-record after an intended change: `cargo run --release --example NAME > examples/NAME.out`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The examples, each with a recorded output `examples/<name>.out`.
const EXAMPLES: &[&str] = &["train_in_code"];

fn example_binary(name: &str) -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_agentrl"));
    bin.parent()
        .expect("the binary has a folder")
        .join("examples")
        .join(name)
}

#[test]
fn every_example_prints_its_recorded_output() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed: Vec<String> = std::fs::read_dir(root.join("examples"))
        .expect("examples/")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_suffix(".rs").map(str::to_string)
        })
        .collect();
    for name in &listed {
        assert!(
            EXAMPLES.contains(&name.as_str()),
            "examples/{name}.rs has no recorded-output check: add it to EXAMPLES"
        );
    }
    for name in EXAMPLES {
        let binary = example_binary(name);
        assert!(
            binary.is_file(),
            "{} is missing: `cargo test --release --workspace` builds the examples (with `--test \
             cli` alone, first `cargo build --release --examples`)",
            binary.display()
        );
        let output = Command::new(&binary)
            .current_dir(root)
            .output()
            .expect("the example runs");
        assert!(
            output.status.success(),
            "example {name} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let printed = String::from_utf8(output.stdout).expect("UTF-8 output");
        let recorded_path = root.join("examples").join(format!("{name}.out"));
        let recorded = std::fs::read_to_string(&recorded_path)
            .unwrap_or_else(|e| panic!("{}: {e}", recorded_path.display()));
        assert_eq!(
            printed,
            recorded,
            "example {name} printed other output than {} (re-record it if the change is intended)",
            recorded_path.display()
        );
    }
}
