//! `tasks/generate.py` still reproduces `tasks/builtin/` byte for byte: the committed tasks are
//! what the committed generator makes, so a change to one without the other fails CI.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).expect("readable folder") {
            let path = entry.expect("folder entry").path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n == "__pycache__") {
                    continue;
                }
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).expect("inside root");
                out.insert(
                    rel.display().to_string(),
                    std::fs::read(&path).expect("readable file"),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn generate_py_reproduces_the_builtin_tasks() {
    let tasks = Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks");
    let out = tempfile::tempdir().expect("temp dir");
    let target = out.path().join("builtin");
    let run = Command::new("python3")
        .arg(tasks.join("generate.py"))
        .arg("--out")
        .arg(&target)
        .output()
        .expect("python3 runs");
    assert!(
        run.status.success(),
        "generate.py failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let made = tree(&target);
    let committed = tree(&tasks.join("builtin"));
    let only_made: Vec<&String> = made
        .keys()
        .filter(|k| !committed.contains_key(*k))
        .collect();
    let only_committed: Vec<&String> = committed
        .keys()
        .filter(|k| !made.contains_key(*k))
        .collect();
    assert!(
        only_made.is_empty() && only_committed.is_empty(),
        "generated but not committed: {only_made:?}; committed but not generated: {only_committed:?}"
    );
    let differ: Vec<&String> = made
        .iter()
        .filter(|(k, v)| committed.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .collect();
    assert!(
        differ.is_empty(),
        "tasks/builtin differs from what generate.py makes: {differ:?}"
    );
    assert_eq!(made.keys().filter(|k| k.ends_with("task.toml")).count(), 60);
}
