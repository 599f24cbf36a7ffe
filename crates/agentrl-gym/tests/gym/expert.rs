//! The expert's plans: free-form edits reach the target, every built-in task has every variant in
//! both forms within the turn limits, and candidate edits follow the view order.

use agentrl_gym::expert::{edit_between, in_view, plan, EditForm, Variant};
use agentrl_gym::{TaskSet, ToolCall};

fn apply(text: &str, edit: &ToolCall) -> String {
    let args = &edit.arguments;
    if let Some(t) = args.get("text") {
        return t.as_str().unwrap().to_string();
    }
    let old = args["old"].as_str().unwrap();
    assert_eq!(text.matches(old).count(), 1, "old must be unique");
    text.replacen(old, args["new"].as_str().unwrap(), 1)
}

#[test]
fn a_free_form_edit_turns_the_text_into_the_target() {
    let cases = [
        ("a\nb\nc\n", "a\nB\nc\n"),
        ("a\nb\nc\n", "a\nb\nc\nd\n"),
        ("x\nx\nx\n", "x\nx\ny\nx\n"),
        ("a\nb\n", "a\n"),
        ("same\nsame\n", "same\n"),
        ("one", "two"),
    ];
    for (current, target) in cases {
        let edit = edit_between("m.py", current, target).unwrap();
        assert_eq!(apply(current, &edit), target, "{current:?} -> {target:?}");
    }
    assert!(edit_between("m.py", "a\n", "a\n").is_none());
}

#[test]
fn every_builtin_task_has_every_variant_in_both_forms_within_the_turn_limits() {
    let tasks = TaskSet::builtin().unwrap();
    for task in tasks.tasks() {
        for form in [EditForm::Candidate, EditForm::FreeForm] {
            for variant in [
                Variant::Gold,
                Variant::Recovery { decoy: 1 },
                Variant::Brief,
            ] {
                let calls = plan(task, variant, form, 10).unwrap();
                assert_eq!(calls.last().unwrap().name, "submit");
                let short = plan(task, variant, form, 4).unwrap();
                assert!(short.len() <= 4 && short.last().unwrap().name == "submit");
            }
            let free = plan(task, Variant::Gold, EditForm::FreeForm, 5).unwrap();
            let module = free[0].arguments["path"].as_str().unwrap();
            let fixed = apply(&task.visible[module], &free[2]);
            assert_eq!(fixed, task.reference[module], "{}", task.id);
        }
    }
    let task = &tasks.tasks()[0];
    let err = plan(task, Variant::Recovery { decoy: 0 }, EditForm::Candidate, 2).unwrap_err();
    assert!(err.to_string().contains(&task.id), "{err}");
}

#[test]
fn candidate_edits_follow_the_view_order() {
    let tasks = TaskSet::builtin().unwrap();
    let task = &tasks.tasks()[0];
    let calls = plan(task, Variant::Gold, EditForm::Candidate, 5).unwrap();
    let mut shown = task.candidate_edits();
    shown.reverse();
    let viewed = in_view(task, &calls, &shown).unwrap();
    let fix = task.fix_candidate().unwrap();
    assert_eq!(
        viewed[2].arguments["candidate"].as_u64().unwrap() as usize,
        shown.len() - 1 - fix
    );
    assert_eq!(viewed[0], calls[0]);
}
