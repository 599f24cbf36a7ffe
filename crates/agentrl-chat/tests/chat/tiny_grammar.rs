//! The action-vocabulary bias tables: how many next words each space (full, actions,
//! grammar) allows after a given word.

use agentrl_chat::tiny::grammar::{bias_table, ActionVocab};
use agentrl_chat::tiny::TinyCodec;

fn allowed_after(table: &Option<Vec<f32>>, n: usize, prev: u32) -> Option<usize> {
    table.as_ref().map(|t| {
        t[prev as usize * n..(prev as usize + 1) * n]
            .iter()
            .filter(|&&x| x == 0.0)
            .count()
    })
}

#[test]
fn action_and_grammar_spaces() -> anyhow::Result<()> {
    let codec = TinyCodec::for_gym();
    let v = codec.vocab();
    let n = v.len();
    let id = |w: &str| v.id(w).unwrap();
    let full = bias_table(&codec, ActionVocab::Full)?;
    assert_eq!(allowed_after(&full, n, id("</obs>")), None);
    let actions = bias_table(&codec, ActionVocab::Actions)?;
    assert_eq!(allowed_after(&actions, n, id("</obs>")), Some(15));
    assert_eq!(allowed_after(&actions, n, id("edit")), Some(15));
    let grammar = bias_table(&codec, ActionVocab::Grammar)?;
    assert_eq!(allowed_after(&grammar, n, id("</obs>")), Some(1));
    assert_eq!(allowed_after(&grammar, n, id("<call>")), Some(5));
    assert_eq!(allowed_after(&grammar, n, id("edit")), Some(8));
    assert_eq!(allowed_after(&grammar, n, id("C3")), Some(1));
    assert_eq!(allowed_after(&grammar, n, id("submit")), Some(1));
    assert_eq!(grammar.map(|t| t.len()), Some(n * n));
    Ok(())
}
