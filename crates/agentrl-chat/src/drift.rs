//! The retokenization drift check: do the ids the policy sampled survive a re-render?
//!
//! The trainer must see exactly the tokens that were sampled ("token in, token out"). A
//! pipeline that instead stores messages and re-renders them with the template gets different
//! ids whenever rendering is not the inverse of sampling: the template drops `<think>` blocks of
//! turns before the last user query, re-serializes tool-call JSON with its own spacing, and the
//! BPE re-merges a non-canonical split ("he" + "llo" becomes "hello"). This module measures that:
//! it compares the sampled id stream with the ids of the re-rendered conversation and reports
//! the first index where they part, the two id runs from there, and their decoded text.

use serde::Serialize;
use serde_json::Value;

use crate::codec::ToolCallCodec;
use crate::error::Result;
use crate::qwen::QwenTokenizer;
use crate::template::{ChatTemplate, RenderOptions};

/// How many ids from the first difference a report shows from each side.
pub const DEFAULT_WINDOW: usize = 12;

/// Where two id streams part, if they do. Printable and serializable as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftReport {
    pub drifted: bool,
    /// Index of the first differing id (or of the first id one side lacks).
    pub first_difference: Option<usize>,
    /// Up to `window` ids from `first_difference` in the sampled stream, and their text.
    pub sampled_run: Vec<u32>,
    pub sampled_text: String,
    /// The same span of the re-rendered stream, and its text.
    pub rerendered_run: Vec<u32>,
    pub rerendered_text: String,
    /// Lengths of the compared streams (the re-rendered one may go on past the sampled one).
    pub sampled_len: usize,
    pub rerendered_len: usize,
}

/// Compares a sampled id stream with a re-rendered one. Only the sampled stream's length is
/// compared: the re-render may legitimately continue (e.g. the `\n` after `<|im_end|>`).
pub fn compare_ids(
    tokenizer: &QwenTokenizer,
    sampled: &[u32],
    rerendered: &[u32],
    window: usize,
) -> Result<DriftReport> {
    let first_difference = sampled
        .iter()
        .zip(rerendered)
        .position(|(a, b)| a != b)
        .or((rerendered.len() < sampled.len()).then_some(rerendered.len()));
    let (sampled_run, rerendered_run) = match first_difference {
        Some(at) => (
            sampled[at..(at + window).min(sampled.len())].to_vec(),
            rerendered[at.min(rerendered.len())..(at + window).min(rerendered.len())].to_vec(),
        ),
        None => (Vec::new(), Vec::new()),
    };
    Ok(DriftReport {
        drifted: first_difference.is_some(),
        first_difference,
        sampled_text: tokenizer.decode(&sampled_run, false)?,
        rerendered_text: tokenizer.decode(&rerendered_run, false)?,
        sampled_run,
        rerendered_run,
        sampled_len: sampled.len(),
        rerendered_len: rerendered.len(),
    })
}

/// The outcome of checking one sampled assistant turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnDrift {
    /// The assistant message the sampled reply was parsed into and re-rendered from.
    pub message: Value,
    /// Length of the rendered prompt (history plus generation prompt) in ids; indices in the
    /// report count from the start of the prompt.
    pub prompt_len: usize,
    pub report: DriftReport,
}

/// Re-renders conversations with one model's template and tokenizer and compares ids.
pub struct DriftChecker<'a> {
    pub tokenizer: &'a QwenTokenizer,
    pub template: &'a ChatTemplate,
    pub codec: &'a ToolCallCodec,
    pub window: usize,
}

impl<'a> DriftChecker<'a> {
    pub fn new(
        tokenizer: &'a QwenTokenizer,
        template: &'a ChatTemplate,
        codec: &'a ToolCallCodec,
    ) -> Self {
        Self {
            tokenizer,
            template,
            codec,
            window: DEFAULT_WINDOW,
        }
    }

    /// One assistant turn: `history` is the conversation before it, `sampled` the exact ids the
    /// engine produced after the generation prompt (ending with `<|im_end|>` if it stopped
    /// there). The reply is parsed into an assistant message, appended, re-rendered without a
    /// generation prompt and re-tokenized; the result must begin with prompt + `sampled`.
    pub fn check_turn(
        &self,
        history: &[Value],
        tools: Option<&[Value]>,
        sampled: &[u32],
        enable_thinking: bool,
    ) -> Result<TurnDrift> {
        let prompt =
            self.template
                .render(history, tools, RenderOptions::generation(enable_thinking))?;
        let prompt_ids = self.tokenizer.encode(&prompt, false)?;
        let message = self.codec.parse_ids(self.tokenizer, sampled)?.to_message();
        let mut conversation = history.to_vec();
        conversation.push(message.clone());
        let mut stream = prompt_ids.clone();
        stream.extend_from_slice(sampled);
        let report = self.check_conversation(&stream, &conversation, tools, enable_thinking)?;
        Ok(TurnDrift {
            message,
            prompt_len: prompt_ids.len(),
            report,
        })
    }

    /// A whole episode: `stream` is the id sequence as the rollout produced it (prompt, sampled
    /// turns, observation turns), `messages` the conversation it corresponds to. Re-renders the
    /// messages (no generation prompt) and compares.
    pub fn check_conversation(
        &self,
        stream: &[u32],
        messages: &[Value],
        tools: Option<&[Value]>,
        enable_thinking: bool,
    ) -> Result<DriftReport> {
        let options = RenderOptions {
            add_generation_prompt: false,
            enable_thinking,
        };
        self.check_rendered(stream, messages, tools, options)
    }

    /// [`Self::check_conversation`] with the render options given, for a stream that ends on
    /// a generation prompt (an episode whose last tool result was appended).
    pub fn check_rendered(
        &self,
        stream: &[u32],
        messages: &[Value],
        tools: Option<&[Value]>,
        options: RenderOptions,
    ) -> Result<DriftReport> {
        let text = self.template.render(messages, tools, options)?;
        let rerendered = self.tokenizer.encode(&text, false)?;
        compare_ids(self.tokenizer, stream, &rerendered, self.window)
    }
}
