//! TinyAgent's action space: the output vocabulary the policy samples actions from.
//!
//! The tiny vocabulary holds ~190 words, but only 15 of them can ever appear in a well-formed
//! action (`<call>`, `</call>`, the five tool names, `C0..C7`); the rest are observation
//! symbols (`PASS`, `NAME`, `LINE 3`, …) that the policy reads but never needs to write. With
//! `model.action_vocab = "actions"` every other word gets a logit bias of
//! [`MASKED_LOGIT`] both when the engine samples and when the trainer scores, so the two see
//! the same distribution and on-policy ratios stay 1. The *format* is still learned: any order
//! of these 15 words is possible, and a malformed action still gets the gym's format-error
//! observation. From a uniform start, a random 15-word action is well formed about once in
//! a thousand tries instead of about once in 10⁷ over the full vocabulary, which is what makes
//! format learning take seconds rather than never on 2 cores. `"full"` samples from the whole
//! vocabulary. `"grammar"` (the default) goes further and constrains each word by the word before it
//! (`</obs>` → `<call>` → tool → `C0..C7` after `edit` → `</call>`), so every action is well
//! formed and only the choice of tool and candidate is learned.
//!
//! The bias is a `[V, V]` table indexed by the input word: row `w` is the bias of the next word
//! after `w`. The engine adds row `last fed word` to the step logits; the trainer adds
//! `table[ids]` (an embedding lookup) to the logits of every position.

use agentrl_chat::tiny::{TinyCodec, CALL_END, CALL_START, TOOL_NAMES};
use agentrl_model::TinyAgent;
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::engine::StepPolicy;

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

/// A `[V, V]` logit-bias table (row = previous word; 0 = allowed, [`MASKED_LOGIT`] = never
/// sampled), or none for the full vocabulary.
#[derive(Debug, Clone)]
pub struct ActionSpace {
    vocab_size: usize,
    table: Option<Vec<f32>>,
}

impl ActionSpace {
    pub fn new(codec: &TinyCodec, mode: ActionVocab) -> anyhow::Result<Self> {
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
        let table = match mode {
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
        };
        Ok(Self {
            vocab_size: n,
            table,
        })
    }

    /// Number of words the policy can emit after `prev` (`None` = the whole vocabulary).
    pub fn allowed_after(&self, prev: u32) -> Option<usize> {
        let n = self.vocab_size;
        self.table.as_ref().map(|t| {
            t[prev as usize * n..(prev as usize + 1) * n]
                .iter()
                .filter(|&&x| x == 0.0)
                .count()
        })
    }

    /// The table as a `[V, V]` tensor for the trainer (`table[ids]` is the bias of each
    /// position's logits), or `None`.
    pub fn bias_table(&self, device: &Device) -> anyhow::Result<Option<Tensor>> {
        Ok(match &self.table {
            Some(t) => Some(Tensor::from_slice(
                t,
                (self.vocab_size, self.vocab_size),
                device,
            )?),
            None => None,
        })
    }

    /// The policy as the engine sees it: TinyAgent with the bias applied to its logits.
    pub fn policy<'a>(&'a self, model: &'a TinyAgent) -> MaskedPolicy<'a> {
        MaskedPolicy { model, space: self }
    }
}

/// TinyAgent whose step logits carry the action-space bias.
pub struct MaskedPolicy<'a> {
    model: &'a TinyAgent,
    space: &'a ActionSpace,
}

impl StepPolicy for MaskedPolicy<'_> {
    type Cache = <TinyAgent as StepPolicy>::Cache;

    fn new_cache(&self, rows: usize) -> Self::Cache {
        StepPolicy::new_cache(self.model, rows)
    }

    fn step(
        &self,
        rows: &[&[u32]],
        cache: &mut Self::Cache,
    ) -> anyhow::Result<Vec<Option<Vec<f32>>>> {
        let mut out = StepPolicy::step(self.model, rows, cache)?;
        if let Some(table) = &self.space.table {
            let n = self.space.vocab_size;
            for (row, logits) in rows.iter().zip(out.iter_mut()) {
                let (Some(&prev), Some(logits)) = (row.last(), logits.as_mut()) else {
                    continue;
                };
                let bias = &table[prev as usize * n..(prev as usize + 1) * n];
                for (x, b) in logits.iter_mut().zip(bias) {
                    *x += b;
                }
            }
        }
        Ok(out)
    }

    fn retain_rows(&self, cache: &mut Self::Cache, keep: &[usize]) -> anyhow::Result<()> {
        StepPolicy::retain_rows(self.model, cache, keep)
    }

    fn max_seq(&self) -> usize {
        StepPolicy::max_seq(self.model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::trainer::tiny_codec;

    #[test]
    fn action_and_grammar_spaces() -> anyhow::Result<()> {
        let codec = tiny_codec(6);
        let v = codec.vocab();
        let id = |w: &str| v.id(w).unwrap();
        let full = ActionSpace::new(&codec, ActionVocab::Full)?;
        assert_eq!(full.allowed_after(id("</obs>")), None);
        let actions = ActionSpace::new(&codec, ActionVocab::Actions)?;
        assert_eq!(actions.allowed_after(id("</obs>")), Some(15));
        assert_eq!(actions.allowed_after(id("edit")), Some(15));
        let grammar = ActionSpace::new(&codec, ActionVocab::Grammar)?;
        assert_eq!(grammar.allowed_after(id("</obs>")), Some(1));
        assert_eq!(grammar.allowed_after(id("<call>")), Some(5));
        assert_eq!(grammar.allowed_after(id("edit")), Some(8));
        assert_eq!(grammar.allowed_after(id("C3")), Some(1));
        assert_eq!(grammar.allowed_after(id("submit")), Some(1));
        let table = grammar.bias_table(&Device::Cpu)?.unwrap();
        assert_eq!(table.dims(), &[v.len(), v.len()]);
        Ok(())
    }
}
