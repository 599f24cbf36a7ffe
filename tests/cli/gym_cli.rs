//! `agentrl gym` as a person meets it: a listed header with aligned columns, the candidates
//! `edit K` needs in `gym show`, and an input prompt in `gym play`.

use std::io::Write;
use std::process::{Command, Stdio};

fn agentrl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agentrl"))
}

#[test]
fn gym_list_has_a_header_and_aligned_columns() {
    let out = agentrl()
        .args(["gym", "list", "--split", "heldout"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("id") && lines[0].contains("family") && lines[0].contains("split")
    );
    assert_eq!(lines.len(), 1 + 16, "header + the 16 heldout tasks");
    // Every row's prompt starts in the header's `prompt` column.
    let column = lines[0].find("prompt").unwrap();
    for row in &lines[1..] {
        assert_eq!(&row[column - 2..column], "  ", "misaligned: {row}");
    }
}

#[test]
fn gym_show_lists_the_candidates_for_edit_k() {
    let out = agentrl()
        .args(["gym", "show", "offbyone-000"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("candidates (`edit K`"), "{text}");
    assert!(
        text.contains("  0: in ") && text.contains("  4: in "),
        "{text}"
    );
}

#[test]
fn gym_play_prompts_for_input() {
    let mut child = agentrl()
        .args(["gym", "play", "offbyone-000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"submit\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\n> "), "{text}");
}
