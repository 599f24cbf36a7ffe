//! Every crate's rooms, checked from its source: in each crate of the workspace (and the
//! binary's own `src/`), the files' `crate::` and `super::` paths (outside comments) form no
//! circle, so a circle added anywhere fails here. The train crate keeps two more rules: no
//! file outside `recipes/` names a recipe, no recipe names another, and the algorithm presets
//! never name the config.
//!
//! Why a source scan and not a tool: `cargo modules` is not installed by the README's two
//! commands, and the rule is about the files a reader opens, which is what this reads. One
//! scan for every crate, here where the workspace is tested as a whole, rather than a copy in
//! each crate's tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::test_layout::rust_files;

/// The module path of every `.rs` file under `src/` (`lib.rs` or `main.rs` is the crate root,
/// `x/mod.rs` is `x`), by file.
fn modules(src: &Path) -> BTreeMap<PathBuf, Vec<String>> {
    let mut out = BTreeMap::new();
    for path in rust_files(src) {
        let relative = path.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let root = parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main");
        if root || parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        out.insert(path, parts);
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

/// The names the crate root re-exports from its modules (`pub use a::b::{C, d};` or
/// `pub use a::C;`), each with the module path it names: `crate::C` in a file is then an
/// import of `a::b`, not of the root. Globs (`pub use a::*`) are not followed.
fn root_reexports(root: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let code: String = root
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    for statement in code.split(';') {
        let Some(at) = statement.find("pub use ") else {
            continue;
        };
        let path = statement[at + "pub use ".len()..].trim();
        let path = path.strip_prefix("crate::").unwrap_or(path);
        let (module, names) = match path.split_once("::{") {
            Some((module, names)) => (module, names.trim_end_matches('}')),
            None => match path.rsplit_once("::") {
                Some((module, name)) => (module, name),
                None => continue,
            },
        };
        let module: Vec<String> = module.split("::").map(|s| s.trim().to_string()).collect();
        for name in names.split(',') {
            let name = name.split(" as ").last().unwrap_or("").trim();
            if !name.is_empty() && name != "*" && name != "self" {
                out.insert(name.to_string(), module.clone());
            }
        }
    }
    out
}

/// Edges file → file: the longest module prefix of each referenced path that is a file
/// (after replacing a name the root re-exports by the module it comes from).
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = modules(src);
    let by_module: BTreeMap<Vec<String>, String> =
        files.values().map(|m| (m.clone(), m.join("::"))).collect();
    let reexports = files
        .iter()
        .find(|(_, module)| module.is_empty())
        .map(|(path, _)| root_reexports(&std::fs::read_to_string(path).unwrap()))
        .unwrap_or_default();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, module) in &files {
        let name = module.join("::");
        let text = std::fs::read_to_string(path).unwrap();
        let targets = edges.entry(name.clone()).or_default();
        for mut referenced in referenced_paths(&text, module) {
            if let Some(from) = referenced.first().and_then(|first| reexports.get(first)) {
                referenced.splice(0..1, from.iter().cloned());
            }
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

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The `src/` folder of every crate: each member under `crates/`, and the binary's own.
fn crate_sources() -> Vec<PathBuf> {
    let mut sources: Vec<PathBuf> = std::fs::read_dir(workspace().join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    sources.sort();
    sources.push(workspace().join("src"));
    sources
}

fn train_crate_graph() -> BTreeMap<String, BTreeSet<String>> {
    graph(&workspace().join("crates/agentrl-train/src"))
}

#[test]
fn no_crates_files_import_each_other_in_a_circle() {
    let sources = crate_sources();
    assert!(
        sources.len() >= 10,
        "the nine crates and the binary: {sources:?}"
    );
    let mut circles = Vec::new();
    for src in &sources {
        let edges = graph(src);
        assert!(!edges.is_empty(), "no source files in {}", src.display());
        if let Some(circle) = find_circle(&edges) {
            circles.push(format!("{}: {circle:?}", src.display()));
        }
    }
    assert!(
        circles.is_empty(),
        "files import each other in a circle (a shared piece belongs below both):\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_scan_sees_each_crates_imports() {
    let edges = train_crate_graph();
    assert!(edges.contains_key("trainer") && edges.contains_key("recipes::rl"));
    assert!(
        edges["recipes::rl"].contains("trainer"),
        "the scan must see the RL recipe's imports: {:?}",
        edges["recipes::rl"]
    );
    let binary = graph(&workspace().join("src"));
    assert!(
        binary.contains_key("") && binary.contains_key("cli"),
        "main.rs is the binary's root: {:?}",
        binary.keys().collect::<Vec<_>>()
    );
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
    // A name the root re-exports leads to the file that defines it.
    std::fs::write(
        src.join("lib.rs"),
        "pub mod a;\npub mod core;\npub use a::{X, Y as Z};\n",
    )
    .unwrap();
    std::fs::write(src.join("core/mod.rs"), "fn f() -> crate::Z { todo!() }\n").unwrap();
    let edges = graph(src);
    assert_eq!(edges["core"], BTreeSet::from(["a".to_string()]));
    assert!(
        find_circle(&edges).is_some(),
        "a → core → a through the root"
    );
}
