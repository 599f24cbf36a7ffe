//! The Landlock read-only rules: paths resolved, missing ones dropped, only the outermost kept.

use agentrl_gym::sandbox::host::beneath_rules;

#[test]
fn beneath_rules_keep_only_the_outermost_existing_paths() {
    let root = tempfile::tempdir().unwrap();
    let usr = root.path().join("usr");
    std::fs::create_dir_all(usr.join("lib/python3")).unwrap();
    std::os::unix::fs::symlink("usr/lib", root.path().join("lib")).unwrap();
    std::fs::write(root.path().join("ld.so.cache"), "").unwrap();
    let rules = beneath_rules(vec![
        usr.join("lib/python3"),
        root.path().join("lib"),
        usr.clone(),
        root.path().join("missing"),
        root.path().join("ld.so.cache"),
        usr.clone(),
    ]);
    let root = root.path().canonicalize().unwrap();
    assert_eq!(rules, vec![root.join("ld.so.cache"), root.join("usr")]);
}
