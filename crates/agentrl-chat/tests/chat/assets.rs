//! The Qwen3 asset lookup for tests: missing assets fail a test under CI, skip it
//! elsewhere, and found ones are returned.

use std::path::PathBuf;

use agentrl_chat::assets::for_tests;

#[test]
#[should_panic(expected = "Qwen3 assets not found (no tokenizer.json in: /nowhere/qwen3)")]
fn missing_assets_fail_a_test_under_ci() {
    for_tests(None, &[PathBuf::from("/nowhere/qwen3")], true);
}

#[test]
fn missing_assets_skip_a_test_elsewhere_and_found_ones_are_returned() {
    assert_eq!(for_tests(None, &[PathBuf::from("/nowhere")], false), None);
    for in_ci in [false, true] {
        let found = Some(PathBuf::from("/assets"));
        assert_eq!(for_tests(found.clone(), &[], in_ci), found);
    }
}
