//! Scratch run directories' names (owner pid namespace, pid and start time) and the check that a
//! directory is reachable by the job uids.

use std::os::unix::fs::PermissionsExt;

use agentrl_gym::sandbox::scratch::{
    parse_run_dir_name, reachable_by_others, run_dir_name, start_time,
};

#[test]
fn run_dir_names_round_trip_and_reject_others() {
    let owner = (4026531836, 1234, 987654);
    assert_eq!(parse_run_dir_name(&run_dir_name(owner)), Some(owner));
    assert_eq!(parse_run_dir_name("agentrl-run-1-2"), None);
    assert_eq!(parse_run_dir_name("agentrl-run-1-2-3-4"), None);
    assert_eq!(parse_run_dir_name("agentrl-ws-abc"), None);
}

#[test]
fn our_start_time_is_readable() {
    assert!(start_time(std::process::id()).is_some());
    assert_eq!(start_time(u32::MAX), None);
}

#[test]
fn a_0700_directory_blocks_and_is_named() {
    let outer = tempfile::tempdir().unwrap();
    std::fs::set_permissions(outer.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let inner = outer.path().join("tmp");
    std::fs::create_dir(&inner).unwrap();
    let error = reachable_by_others(&inner).unwrap_err();
    assert!(
        error.contains(&outer.path().canonicalize().unwrap().display().to_string())
            && error.contains("0700"),
        "{error}"
    );
    std::fs::set_permissions(outer.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    reachable_by_others(&inner).unwrap();
}
