//! The symbolic rendering: candidate edits lex to closed tokens and every rendered symbol is in
//! the vocabulary.

use agentrl_gym::render::{candidate_tokens, lex, render_symbols, symbol_vocabulary};
use agentrl_gym::types::{CandidateEdit, FailureInfo};
use agentrl_gym::{ErrorKind, Observation, Reward, TestReport};

#[test]
fn special_case_decoy_lexes_to_closed_tokens() {
    assert_eq!(
        candidate_tokens(
            "    total = 0\n",
            "    if x == 3:\n        return 7\n    total = 0\n"
        ),
        ["V0", "=", "NUM", "->", "if", "V1", "==", "NUM", ":", "return", "NUM"]
    );
    // Which variable an edit touches survives: guard the divisor vs the numerator.
    assert_eq!(
        candidate_tokens("ratio = done / total\n", "if total == 0:\n    return 0.0\n"),
        ["V0", "=", "V1", "/", "V2", "->", "if", "V2", "==", "NUM", ":", "return", "NUM"]
    );
    assert_eq!(
        candidate_tokens("ratio = done / total\n", "if done == 0:\n    return 0.0\n")[7],
        "V1"
    );
    assert_eq!(
        lex("s = 'a' + f\"b\" # c"),
        ["NAME", "=", "STR", "+", "STR"]
    );
    assert_eq!(lex("a //= b ** 2.5"), ["NAME", "//=", "NAME", "**", "NUM"]);
}

#[test]
fn every_rendered_symbol_is_in_the_vocabulary() {
    let vocab = symbol_vocabulary();
    assert!(vocab.len() < 300, "vocabulary has {} symbols", vocab.len());
    let mut unique = vocab.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), vocab.len(), "duplicate symbols");
    let observations = [
        Observation::Task {
            task_id: "t".into(),
            prompt: "p".into(),
            files: vec![],
            candidates: vec![
                CandidateEdit {
                    path: "m.py".into(),
                    old: "a\n".into(),
                    new: "if x == 'q' and y[0] != 1.5: return None  # c\n".into()
                };
                10
            ],
        },
        Observation::Tests(TestReport {
            passed: vec!["a".into(); 50],
            failed: vec!["b".into()],
            first_failure: Some(FailureInfo {
                test: "b".into(),
                exception: "WeirdError".into(),
                message: "m".into(),
                line: Some(7),
                file: None,
            }),
            crashed: Some("x".into()),
        }),
        Observation::Edited {
            path: "m.py".into(),
            candidate: Some(3),
            summary: String::new(),
        },
        Observation::Edited {
            path: "m.py".into(),
            candidate: None,
            summary: String::new(),
        },
        Observation::Error {
            error: ErrorKind::BadPath,
            message: String::new(),
        },
        Observation::Submitted(Reward {
            tampered: true,
            ..Reward::default()
        }),
    ];
    for obs in &observations {
        for symbol in render_symbols(obs) {
            assert!(vocab.contains(&symbol), "{symbol} not in the vocabulary");
        }
    }
    let tests = render_symbols(&observations[1]);
    assert_eq!(
        tests,
        ["TESTS", "PASS", "N40+", "FAIL", "N1", "CRASH", "EXC", "LINE", "N7"]
    );
}
