//! TinyAgent's action space: which words the policy may emit after which.
//!
//! The tiny vocabulary holds ~190 words, but only 15 of them can ever appear in a well-formed
//! action (`<call>`, `</call>`, the five tool names, `C0..C7`); the rest are observation
//! symbols (`PASS`, `NAME`, `LINE 3`, …) that the policy reads but never needs to write. With
//! [`ActionVocab::Actions`] every other word gets a logit bias of [`MASKED_LOGIT`] both when
//! the engine samples and when the trainer scores, so the two see the same distribution and
//! on-policy ratios stay 1. The *format* is still learned: any order of these 15 words is
//! possible, and a malformed action still gets the gym's format-error observation. From a
//! uniform start, a random 15-word action is well formed about once in a thousand tries
//! instead of about once in 10⁷ over the full vocabulary, which is what makes format learning
//! take seconds rather than never on 2 cores. [`ActionVocab::Full`] samples from the whole
//! vocabulary. [`ActionVocab::Grammar`] (the default) goes further and constrains each word by
//! the word before it (`</obs>` → `<call>` → tool → `C0..C7` after `edit` → `</call>`), so
//! every action is well formed and only the choice of tool and candidate is learned.
//!
//! The result is a `[V, V]` previous-word bias table, applied by
//! `agentrl_model::ConstrainedPolicy` on both the trainer's and the engine's side.

use serde::{Deserialize, Serialize};

use super::{TinyCodec, CALL_END, CALL_START, TOOL_NAMES};

/// Logit added to words outside the action space. Finite (not −∞) so that `p · log p` is
/// exactly 0 in f32 instead of NaN, and `exp` underflows to exactly 0 on both sides.
pub const MASKED_LOGIT: f32 = -1.0e4;

/// Which words the policy may emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActionVocab {
    /// The 15 words of the tool-call format.
    Actions,
    /// Every word of the tiny vocabulary.
    Full,
    /// The action words, each allowed only where the call grammar allows it.
    Grammar,
}

/// The `[V, V]` bias table of `mode` (row = previous word; 0 = allowed, [`MASKED_LOGIT`] =
/// never sampled), row-major, or `None` for the full vocabulary.
pub fn bias_table(codec: &TinyCodec, mode: ActionVocab) -> anyhow::Result<Option<Vec<f32>>> {
    let v = codec.vocab();
    let n = v.len();
    let id = |word: &str| -> anyhow::Result<usize> {
        v.id(word)
            .map(|i| i as usize)
            .ok_or_else(|| anyhow::anyhow!("the tiny vocabulary has no action word {word:?}"))
    };
    let candidates: Vec<usize> = v.candidate_ids().into_iter().map(|i| i as usize).collect();
    let tools: Vec<usize> = TOOL_NAMES
        .iter()
        .map(|t| id(t))
        .collect::<anyhow::Result<_>>()?;
    let (call_start, call_end) = (id(CALL_START)?, id(CALL_END)?);
    let mut action_words = vec![call_start, call_end];
    action_words.extend(&tools);
    action_words.extend(&candidates);
    let allow_row = |table: &mut [f32], prev: usize, next: &[usize]| {
        for &w in next {
            table[prev * n + w] = 0.0;
        }
    };
    Ok(match mode {
        ActionVocab::Full => None,
        ActionVocab::Actions => {
            let mut table = vec![MASKED_LOGIT; n * n];
            for prev in 0..n {
                allow_row(&mut table, prev, &action_words);
            }
            Some(table)
        }
        ActionVocab::Grammar => {
            let mut table = vec![MASKED_LOGIT; n * n];
            let edit = id("edit")?;
            for prev in 0..n {
                let next: Vec<usize> = if prev == call_start {
                    tools.clone()
                } else if prev == edit {
                    candidates.clone()
                } else if tools.contains(&prev) || candidates.contains(&prev) {
                    vec![call_end]
                } else {
                    // `</obs>` (a new turn) and anything else: an action opens.
                    vec![call_start]
                };
                allow_row(&mut table, prev, &next);
            }
            Some(table)
        }
    })
}
