//! The dashboard's panel list: every group has panels and ids are unique file names.

use agentrl_monitor::panels::{Group, PANELS};

#[test]
fn every_group_has_panels_and_ids_are_unique_file_names() {
    for g in Group::ALL {
        assert!(PANELS.iter().any(|p| p.group == g), "{g:?}");
    }
    let mut ids: Vec<&str> = PANELS.iter().map(|p| p.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), PANELS.len());
    assert!(PANELS
        .iter()
        .all(|p| p.id.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
}
