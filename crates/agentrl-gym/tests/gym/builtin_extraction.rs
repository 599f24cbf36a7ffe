//! The built-in tasks embedded in the library extract to the same tree as the source folder.

use std::path::Path;

use agentrl_gym::builtin::extract_into;

#[test]
fn the_embedded_tasks_extract_to_the_same_tree_as_the_source() {
    let cache = tempfile::tempdir().unwrap();
    let dir = extract_into(cache.path()).unwrap();
    assert!(dir.starts_with(cache.path()));
    // A second call reuses the folder.
    assert_eq!(extract_into(cache.path()).unwrap(), dir);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/builtin");
    let from_source = agentrl_gym::TaskSet::load_dir(&source).unwrap();
    let from_binary = agentrl_gym::TaskSet::load_dir(&dir).unwrap();
    let ids = |t: &agentrl_gym::TaskSet| -> Vec<String> {
        agentrl_gym::Split::ALL
            .into_iter()
            .flat_map(|s| t.split(s).iter().map(|x| x.id.clone()).collect::<Vec<_>>())
            .collect()
    };
    assert_eq!(ids(&from_source), ids(&from_binary));
    assert_eq!(ids(&from_binary).len(), 60);
}
