//! What the binary's test modules share: its servers (`agentrl serve`, `agentrl gym serve`) as
//! child processes, the tiny random Qwen3 the committed script makes, and the largest gap
//! between two JSON lists of log-probs.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The variable both servers read their API key from.
pub const KEY_ENV: &str = "AGENTRL_API_KEY";

/// A server process of the binary; killed when dropped.
pub struct Served {
    child: Child,
    pub url: String,
}

impl Served {
    /// Sends SIGTERM and waits at most `limit` for the process to exit (panics past it).
    pub fn terminate(&mut self, limit: std::time::Duration) -> std::process::ExitStatus {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < limit,
                "still running {limit:?} after SIGTERM"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `agentrl ARGS --port 0`, with `key` in `AGENTRL_API_KEY` (else the variable removed), once
/// it listens: its first line on stdout is `listening on URL`.
pub fn spawn_server(args: &[&str], key: Option<&str>) -> Served {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentrl"));
    command
        .args(args)
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    match key {
        Some(key) => command.env(KEY_ENV, key),
        None => command.env_remove(KEY_ENV),
    };
    let mut child = command.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{args:?}: unexpected first line {line:?}"))
        .to_string();
    Served { child, url }
}

/// A tiny random Qwen3 folder with the real tokenizer and template, made in `dir` by the
/// committed `scripts/make_tiny_qwen3.py` with `args` (its shape options).
pub fn tiny_qwen3(dir: &Path, args: &[&str]) -> PathBuf {
    let assets = agentrl_chat::qwen3_assets_for_tests().expect("the shared Qwen3 assets");
    let out = dir.join("tiny-qwen3");
    let made = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/make_tiny_qwen3.py"))
        .args(args)
        .arg("--assets")
        .arg(&assets)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "make_tiny_qwen3.py failed: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    out
}

/// The largest `|a[i] - b[i]|` between two JSON lists of numbers of the same length (the
/// log-probs of one computation on two kernels).
pub fn max_abs_gap(a: &serde_json::Value, b: &serde_json::Value) -> f64 {
    let numbers = |list: &serde_json::Value| -> Vec<f64> {
        list.as_array()
            .unwrap_or_else(|| panic!("not a list: {list}"))
            .iter()
            .map(|v| v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")))
            .collect()
    };
    let (a, b) = (numbers(a), numbers(b));
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max)
}

/// Copies a folder tree (the tests' task folders).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
