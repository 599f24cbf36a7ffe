//! The train crate's rooms, checked from its source: the files' `crate::` and `super::`
//! paths (outside comments) form no circle, no file outside `recipes/` names a recipe, no
//! recipe names another, and the algorithm presets never name the config.
//!
//! Why a source scan and not a tool: `cargo modules` is not installed by the README's two
//! commands, and the rule is about the files a reader opens, which is what this reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The module path of every `.rs` file under `src/` (`lib.rs` is the crate root, `x/mod.rs`
/// is `x`), by file.
fn modules(src: &Path) -> BTreeMap<PathBuf, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            out.insert(path, parts);
        }
    }
    out
}

/// Every path a line of code starts at `crate::` or `super::`, as module segments resolved
/// to the crate root: `super::` from the file's own module, or from the file itself inside
/// an inline module (`mod tests { use super::*; }`, found as rustfmt lays it out: `mod` at
/// the line's start, its `}` alone at the start of a line).
fn referenced_paths(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut inline = false;
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        if !inline
            && (line.starts_with("mod ") || line.starts_with("pub mod "))
            && line.ends_with('{')
        {
            inline = true;
        } else if inline && line == "}" {
            inline = false;
        }
        for start in ["crate::", "super::"] {
            let mut rest = code;
            while let Some(at) = rest.find(start) {
                let before = rest[..at].chars().last();
                let tail = &rest[at + start.len()..];
                rest = tail;
                // `$crate::` is a macro's crate path; a word character before it makes it
                // part of another name.
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let segments = tail.split("::").map(|s| {
                    s.chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect::<String>()
                });
                let mut path = if start == "super::" {
                    let mut parent = module.to_vec();
                    if !inline {
                        parent.pop();
                    }
                    parent
                } else {
                    Vec::new()
                };
                path.extend(segments.take_while(|s| !s.is_empty()));
                out.push(path);
            }
        }
    }
    out
}

/// Edges file → file: the longest module prefix of each referenced path that is a file.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = modules(src);
    let by_module: BTreeMap<Vec<String>, String> =
        files.values().map(|m| (m.clone(), m.join("::"))).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, module) in &files {
        let name = module.join("::");
        let text = std::fs::read_to_string(path).unwrap();
        let targets = edges.entry(name.clone()).or_default();
        for referenced in referenced_paths(&text, module) {
            let target = (0..=referenced.len())
                .rev()
                .find_map(|n| by_module.get(&referenced[..n]));
            if let Some(target) = target {
                if *target != name && !target.is_empty() {
                    targets.insert(target.clone());
                }
            }
        }
    }
    edges
}

/// A circle through the graph, if there is one (as the files along it).
fn find_circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|n| n == node).unwrap();
                let mut circle = path[from..].to_vec();
                circle.push(node.to_string());
                return Some(circle);
            }
            None => {}
        }
        marks.insert(node.to_string(), Mark::Open);
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, marks, path) {
                return Some(circle);
            }
        }
        path.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in edges.keys() {
        if let Some(circle) = visit(node, edges, &mut marks, &mut Vec::new()) {
            return Some(circle);
        }
    }
    None
}

fn train_crate_graph() -> BTreeMap<String, BTreeSet<String>> {
    graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

#[test]
fn the_train_crates_files_import_each_other_in_no_circle() {
    let edges = train_crate_graph();
    assert!(edges.contains_key("trainer") && edges.contains_key("recipes::rl"));
    assert!(
        edges["recipes::rl"].contains("trainer"),
        "the scan must see the RL recipe's imports: {:?}",
        edges["recipes::rl"]
    );
    if let Some(circle) = find_circle(&edges) {
        panic!("the train crate's files import each other in a circle: {circle:?}");
    }
}

#[test]
fn recipes_stand_on_the_core_and_never_on_each_other() {
    let edges = train_crate_graph();
    for (file, targets) in &edges {
        for target in targets {
            if !target.starts_with("recipes::") {
                continue;
            }
            assert!(
                file.starts_with("recipes::") || file == "recipes",
                "{file} imports the recipe {target}: the core knows no recipe"
            );
            assert!(
                file == "recipes",
                "the recipe {file} imports the recipe {target}: a piece two recipes share \
                 belongs in the core"
            );
        }
    }
    for (file, targets) in &edges {
        if file == "algo" || file.starts_with("algo::") {
            assert!(
                !targets
                    .iter()
                    .any(|t| t == "config" || t.starts_with("config::")),
                "{file} imports the config: presets never do"
            );
        }
    }
}

#[test]
fn the_scan_finds_a_planted_circle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("core")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod core;\n").unwrap();
    std::fs::write(
        src.join("a.rs"),
        "// crate::core::b in a comment is not an import\nuse crate::core::Thing;\n",
    )
    .unwrap();
    std::fs::write(src.join("core/mod.rs"), "mod b;\npub struct Thing;\n").unwrap();
    std::fs::write(
        src.join("core/b.rs"),
        "use super::Thing;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
    )
    .unwrap();
    let edges = graph(src);
    assert_eq!(edges["a"], BTreeSet::from(["core".to_string()]));
    assert_eq!(edges["core::b"], BTreeSet::from(["core".to_string()]));
    assert!(find_circle(&edges).is_none());
    std::fs::write(src.join("core/mod.rs"), "use crate::a::X;\n").unwrap();
    let circle = find_circle(&graph(src)).expect("a → core → a");
    assert!(circle.contains(&"a".to_string()) && circle.contains(&"core".to_string()));
}
