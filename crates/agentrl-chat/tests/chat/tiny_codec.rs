//! TinyAgent's closed vocabulary and codec: observation and prompt rendering, the short
//! call format and its parse errors.

use agentrl_chat::tiny::{TaskContext, TinyCodec, MAX_CANDIDATES, PAD};
use agentrl_gym::CandidateEdit;
use agentrl_gym::{Action, Observation, ToolCall};
use serde_json::json;

fn render(obs: &Observation) -> Vec<String> {
    match obs {
        Observation::Task { candidates, .. } => candidates
            .iter()
            .enumerate()
            .flat_map(|(k, c)| vec![format!("C{k}"), c.new.clone()])
            .collect(),
        Observation::Error { .. } => vec!["ERR".into()],
        _ => vec!["PASS".into(), "strange-symbol".into()],
    }
}

#[test]
fn gym_codec_covers_every_gym_symbol() {
    let c = TinyCodec::for_gym();
    let symbols = agentrl_gym::render::symbol_vocabulary();
    for s in &symbols {
        assert!(c.vocab().id(s).is_some(), "{s} missing");
    }
    assert!(
        c.vocab().len() < 300,
        "vocabulary has {} words",
        c.vocab().len()
    );
    let obs = c.observation_ids(&task());
    assert!(
        !obs.contains(&c.vocab().unk_id()),
        "{}",
        c.vocab().decode(&obs)
    );
}

fn codec() -> TinyCodec {
    TinyCodec::new(&["PASS", "FAIL", "ERR", "NUM", "C3"], render, 6)
}

fn task() -> Observation {
    Observation::Task {
        task_id: "t".into(),
        prompt: "fix".into(),
        files: vec!["tests/test_mod.py".into(), "mod.py".into()],
        candidates: vec![
            CandidateEdit {
                path: "mod.py".into(),
                old: "a".into(),
                new: "NUM".into(),
            };
            4
        ],
    }
}

fn ids(c: &TinyCodec, text: &str) -> Vec<u32> {
    c.vocab()
        .encode(&text.split_whitespace().collect::<Vec<_>>())
}

#[test]
fn vocabulary_is_closed_ordered_and_deduplicated() {
    let c = codec();
    let v = c.vocab();
    assert_eq!(v.pad_id(), 0);
    assert_eq!(v.word(0), Some(PAD));
    // 8 specials + 5 tools + 8 candidates + PASS FAIL ERR NUM (C3 is a duplicate).
    assert_eq!(v.len(), 8 + 5 + 8 + 4);
    assert_eq!(v.encode(&["nope"]), vec![v.unk_id()]);
    assert_eq!(v.decode(&[v.call_start_id(), 999]), "<call> <id:999>");
}

#[test]
fn renders_observations_and_prompt() {
    let c = codec();
    let prompt = c.prompt_ids(&task());
    assert_eq!(
        c.vocab().decode(&prompt),
        "<bos> <obs> C0 NUM C1 NUM C2 NUM C3 NUM </obs>"
    );
    let obs = c.observation_ids(&Observation::Exploited {
        summary: "x".into(),
    });
    assert_eq!(c.vocab().decode(&obs), "<obs> PASS <unk> </obs>");
}

#[test]
fn parses_every_well_formed_call() {
    let c = codec();
    let ctx = TaskContext::from_observation(&task());
    assert_eq!(ctx.main_file.as_deref(), Some("mod.py"));
    let call = |text: &str| match c.parse_action(&ids(&c, text), &ctx) {
        Action::Call(call) => call,
        other => panic!("{text}: {other:?}"),
    };
    assert_eq!(
        call("<call> edit C3 </call>").arguments,
        json!({"candidate": 3})
    );
    assert_eq!(
        call("<call> read </call>").arguments,
        json!({"path": "mod.py"})
    );
    for tool in ["test", "submit", "exploit"] {
        let parsed = call(&format!("<call> {tool} </call>"));
        assert_eq!(parsed.name, tool);
        assert_eq!(parsed.arguments, json!({}));
    }
}

#[test]
fn encode_call_round_trips_through_parse() {
    let c = codec();
    let ctx = TaskContext::from_observation(&task());
    for k in 0..MAX_CANDIDATES {
        let call = ToolCall {
            name: "edit".into(),
            arguments: json!({ "candidate": k }),
        };
        let encoded = c.encode_call(&call).unwrap();
        assert_eq!(c.parse_action(&encoded, &ctx), Action::Call(call));
    }
    let bad = ToolCall {
        name: "edit".into(),
        arguments: json!({ "candidate": 8 }),
    };
    assert!(c.encode_call(&bad).is_none());
}

#[test]
fn malformed_actions_say_why() {
    let c = codec();
    let ctx = TaskContext::from_observation(&task());
    let reason = |text: &str| match c.parse_action(&ids(&c, text), &ctx) {
        Action::Malformed { reason, raw } => {
            assert_eq!(raw, c.vocab().decode(&ids(&c, text)));
            reason
        }
        other => panic!("{text} parsed as {other:?}"),
    };
    assert!(reason("<call> edit C3").contains("without </call>"));
    assert!(reason("<call> edit C3 C3 C3 C3").contains("action limit of 6"));
    assert!(reason("<call> PASS </call>").contains("unknown tool PASS"));
    assert!(reason("<call> edit </call>").contains("needs a candidate"));
    assert!(reason("<call> edit C1 C2 </call>").contains("exactly one"));
    assert!(reason("<call> edit read </call>").contains("got read"));
    assert!(reason("<call> test C1 </call>").contains("takes no arguments"));
    assert!(reason("edit C1 </call>").contains("must start"));
    assert!(reason("<call> </call>").contains("empty call"));
    assert!(reason("<eos>").contains("without </call>"));
    assert!(reason("<call> test </call> PASS").contains("after </call>"));
    // `read` without a known file is malformed too.
    let empty = TaskContext::default();
    assert!(matches!(
        c.parse_action(&ids(&c, "<call> read </call>"), &empty),
        Action::Malformed { .. }
    ));
    assert!(c.is_stop(c.vocab().call_end_id()) && c.is_stop(c.vocab().eos_id()));
}
