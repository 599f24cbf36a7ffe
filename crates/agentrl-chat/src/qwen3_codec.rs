//! The Qwen3 chat codec: a BugFix episode as Qwen3 reads and writes it through its own chat
//! template, token in, token out.
//!
//! Where it sits: the rollout driver holds it as a [`ChatCodec`] (task → **episode ids** →
//! batch). Data flow of one episode:
//!
//! ```text
//! task Observation ──render_text──▶ user message ─┐
//! system prompt + tool specs ─────────────────────┴─template (generation prompt)─▶ prompt ids
//! sampled ids (… <|im_end|>) ──decode──▶ ToolCallCodec::parse_text ──first span──▶ Action
//! tool result ──render_text, truncate──▶ `tool` message ──suffix of two renders──▶ observation ids
//! ```
//!
//! **Token in, token out.** The ids after an action are the template's rendering of what
//! follows the assistant turn, tokenised alone and appended to the exact sampled ids; the
//! conversation is never re-tokenised (ENGINES.md "Template traps", TRL #5224).
//!
//! **How the observation suffix is found.** Two renders of one placeholder conversation
//! `[system, user, assistant]`, A without and B with the `tool` message (and the generation
//! prompt), are compared only *after the placeholder assistant's content* (a sentinel string).
//! A's tail is the assistant turn's closing, B's tail is that closing followed by the suffix;
//! the closing's text after its last `<|im_end|>` (the `"\n"` the model never emits, verl
//! #6501) starts the suffix. Anchoring after the content keeps the diff immune to what the
//! template does before it: Qwen3 gives the placeholder an empty `<think>` block when it is the
//! last message and none when a tool message follows (NeMo-RL #2822), so a plain prefix diff of
//! A and B would fail or duplicate content. Nothing of Qwen3's wrapping is written here: for
//! Qwen3 the suffix is `"\n<|im_start|>user\n<tool_response>\n…\n</tool_response><|im_end|>\n`
//! `<|im_start|>assistant\n"` (plus `"<think>\n\n</think>\n\n"` when thinking is off), and
//! another template's comes out of the same two renders.
//!
//! **Actions.** An action is the assistant turn as sampled, ending on a stop id (`<|im_end|>`
//! or `<|endoftext|>`, which belongs to the action). A turn cut by the length cap, a turn
//! without `<tool_call>`, malformed JSON, an unknown tool and arguments that fit no form of the
//! tool's schema are [`Action::Malformed`] with a reason naming the fault; the gym answers with
//! its format-error observation. **One call per turn: the first `<tool_call>` span decides**,
//! later spans are ignored (they stay in the sampled ids and the transcript). The gym executes
//! one call per step, and rejecting a turn for extra calls would punish what Qwen3's template
//! itself invites ("You may call one or more functions").
//!
//! **Other ChatML models.** Nothing above is Qwen3's own beyond `<|im_end|>` and
//! `<|endoftext|>`: SmolLM2 (a GGUF file) runs through the same codec, its template rendering
//! the tool list and calls in the format of [`crate::template::tools_in_prompt`].
//!
//! **Tools.** The prompt offers `read`, `test`, `edit` (its four argument forms) and `submit`
//! ([`default_tool_specs`]); `exploit`, the gym's deliberate reward hack, is not offered (a call
//! to it is an unknown tool) unless [`Qwen3Codec::with_tools`] adds it.
//!
//! **Drift.** [`Qwen3Codec::drift_report`] re-renders the finished episode as messages and
//! compares ids with the exact stream ([`crate::drift`]). With `enable_thinking = false` every
//! generation prompt carries an empty `<think>` block that Qwen3's template does not render for
//! earlier assistant turns, so multi-turn episodes always drift in that mode; the stream the
//! trainer sees is the sampled one either way.

use std::path::Path;

use agentrl_gym::render::render_text;
use agentrl_gym::{Action, Observation, ToolCall};
use serde_json::{json, Value};

use crate::chat_codec::ChatCodec;
use crate::codec::{ParsedTurn, ToolCallCodec};
use crate::drift::{DriftChecker, DriftReport};
use crate::error::{ChatError, Result};
use crate::message::{assistant_message, system_message, tool_message, user_message};
use crate::qwen::{QwenTokenizer, TurnMarkers};
use crate::template::{ChatTemplate, RenderOptions};
use crate::tools::bugfix_tool_specs;

/// The system message: how to work with the tools. The template appends the tool schemas and
/// the `<tool_call>` format after it.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You fix a bug in a small Python project. Work in \
    turns: read files, run the public tests, edit the code, and call `submit` when the fix is \
    done; hidden tests decide the reward. Make exactly one tool call per turn; its result comes \
    back as a tool response.";

/// The BugFix tools the prompt offers by default, in the order of [`bugfix_tool_specs`].
pub const DEFAULT_TOOLS: [&str; 4] = ["read", "test", "edit", "submit"];

/// The smallest `max_observation_tokens` accepted: room for the truncation marker and some
/// head and tail around it.
pub const MIN_OBSERVATION_TOKENS: usize = 32;

/// Content of the placeholder assistant turn the observation suffix is derived from; found
/// again in the renders to anchor the diff after it.
const ASSISTANT_SENTINEL: &str = "AGENTRL_PLACEHOLDER_ASSISTANT_CONTENT";
/// Content of the placeholder user turn in derivation renders.
const PLACEHOLDER_TASK: &str = "AGENTRL_PLACEHOLDER_TASK";
/// The text of the token that closes an assistant turn (and that the engine stops on).
const IM_END: &str = "<|im_end|>";

/// The line that replaces the middle of a long tool output.
pub fn truncation_marker(removed_chars: usize) -> String {
    format!("[... {removed_chars} characters truncated ...]")
}

/// [`bugfix_tool_specs`] restricted to [`DEFAULT_TOOLS`].
pub fn default_tool_specs() -> Vec<Value> {
    bugfix_tool_specs()
        .into_iter()
        .filter(|spec| {
            spec["function"]["name"]
                .as_str()
                .is_some_and(|name| DEFAULT_TOOLS.contains(&name))
        })
        .collect()
}

/// The knobs of a [`Qwen3Codec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qwen3CodecOptions {
    /// Longest assistant turn in tokens, the stop token included.
    pub max_action_tokens: usize,
    /// Longest tool output in tokens (the text inside the `tool` message, before the
    /// template's wrapping). Longer output keeps its head and tail around
    /// [`truncation_marker`].
    pub max_observation_tokens: usize,
    /// The Qwen3 template's `enable_thinking` flag. Off, every generation prompt ends with an
    /// empty `<think>\n\n</think>\n\n` block and the model answers directly.
    pub enable_thinking: bool,
}

impl Default for Qwen3CodecOptions {
    /// 1024 action tokens, 2048 observation tokens, thinking on (the template's own default).
    fn default() -> Self {
        Self {
            max_action_tokens: 1024,
            max_observation_tokens: 2048,
            enable_thinking: true,
        }
    }
}

impl Qwen3CodecOptions {
    fn validate(&self) -> Result<()> {
        if self.max_action_tokens == 0 {
            return Err(ChatError::InvalidOption {
                option: "max_action_tokens",
                message: "must be at least 1 (the stop token)".into(),
            });
        }
        if self.max_observation_tokens < MIN_OBSERVATION_TOKENS {
            return Err(ChatError::InvalidOption {
                option: "max_observation_tokens",
                message: format!(
                    "{} is below {MIN_OBSERVATION_TOKENS}, too little for the truncation marker \
                     and any tool output",
                    self.max_observation_tokens
                ),
            });
        }
        Ok(())
    }
}

/// Qwen3's tokenizer and chat template, the offered tools and the system prompt: a
/// [`ChatCodec`] for chat episodes.
#[derive(Debug)]
pub struct Qwen3Codec {
    tokenizer: QwenTokenizer,
    template: ChatTemplate,
    special: TurnMarkers,
    calls: ToolCallCodec,
    tools: Vec<Value>,
    system_prompt: String,
    options: Qwen3CodecOptions,
}

impl Qwen3Codec {
    /// Loads `dir/tokenizer.json` and the chat template (`chat_template.jinja`, else
    /// `tokenizer_config.json`'s `chat_template`) of a Qwen3 model folder, and checks that the
    /// template's assistant turn ends on `<|im_end|>` so observation suffixes can be derived.
    /// `dir` may also be a GGUF file (SmolLM2's), whose metadata holds both; a template that
    /// knows no tools gets them in the system prompt ([`crate::template::tools_in_prompt`]).
    /// Errors name the file at fault.
    pub fn from_dir(dir: impl AsRef<Path>, options: Qwen3CodecOptions) -> Result<Self> {
        options.validate()?;
        let dir = dir.as_ref();
        let tokenizer = QwenTokenizer::from_dir(dir)?;
        let special =
            TurnMarkers::from_tokenizer(&tokenizer).map_err(|err| ChatError::BadField {
                path: tokenizer.path().to_path_buf(),
                field: "added_tokens".into(),
                message: err.to_string(),
            })?;
        let template = ChatTemplate::from_model_dir(dir)?;
        let tools = default_tool_specs();
        let codec = Self {
            calls: ToolCallCodec::new(&tools)?,
            tokenizer,
            template,
            special,
            tools,
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_string(),
            options,
        };
        codec.check_template()?;
        Ok(codec)
    }

    /// The same codec offering other tools (OpenAI function format): the prompt lists them and
    /// calls are checked against them.
    pub fn with_tools(mut self, tools: Vec<Value>) -> Result<Self> {
        self.calls = ToolCallCodec::new(&tools)?;
        self.tools = tools;
        self.check_template()?;
        Ok(self)
    }

    /// The same codec with another system message.
    pub fn with_system_prompt(mut self, system_prompt: impl Into<String>) -> Result<Self> {
        self.system_prompt = system_prompt.into();
        self.check_template()?;
        Ok(self)
    }

    /// Derives a suffix and a demonstration once, so a template they do not work with fails
    /// at load rather than mid-rollout.
    fn check_template(&self) -> Result<()> {
        self.observation_suffix_text("")?;
        self.demonstration_text(&placeholder_call())?;
        Ok(())
    }

    pub fn tokenizer(&self) -> &QwenTokenizer {
        &self.tokenizer
    }

    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    pub fn special_tokens(&self) -> TurnMarkers {
        self.special
    }

    /// The tool schemas the prompt offers (OpenAI function format).
    pub fn tool_specs(&self) -> &[Value] {
        &self.tools
    }

    /// The `<tool_call>` parser over [`Self::tool_specs`].
    pub fn tool_codec(&self) -> &ToolCallCodec {
        &self.calls
    }

    pub fn system_prompt(&self) -> &str {
        &self.system_prompt
    }

    pub fn options(&self) -> Qwen3CodecOptions {
        self.options
    }

    fn render(&self, messages: &[Value], add_generation_prompt: bool) -> Result<String> {
        self.template.render(
            messages,
            Some(&self.tools),
            RenderOptions {
                add_generation_prompt,
                enable_thinking: self.options.enable_thinking,
            },
        )
    }

    /// `[system, user]`: the system prompt and the task rendered as text.
    pub fn prompt_messages(&self, first: &Observation) -> Vec<Value> {
        vec![
            system_message(&self.system_prompt),
            user_message(&render_text(first)),
        ]
    }

    /// The prompt as the template renders it, ending where the first sampled token goes.
    pub fn prompt_text(&self, first: &Observation) -> Result<String> {
        self.render(&self.prompt_messages(first), true)
    }

    /// The content of the `tool` message for an observation: its text, truncated to
    /// `max_observation_tokens`.
    pub fn observation_content(&self, observation: &Observation) -> Result<String> {
        self.truncate_tool_output(&render_text(observation))
    }

    /// The text whose ids follow a sampled action: the rest of the assistant turn the model
    /// does not emit, the `tool` message, and the next generation prompt.
    pub fn observation_text(&self, observation: &Observation) -> Result<String> {
        self.observation_suffix_text(&self.observation_content(observation)?)
    }

    /// What the template renders after a placeholder assistant turn's `<|im_end|>` when a
    /// `tool` message with `content` follows (see the module doc).
    fn observation_suffix_text(&self, content: &str) -> Result<String> {
        let mut conversation = vec![
            system_message(&self.system_prompt),
            user_message(PLACEHOLDER_TASK),
            assistant_message(ASSISTANT_SENTINEL, None, &[placeholder_call()]),
        ];
        let without = self.render(&conversation, false)?;
        conversation.push(tool_message(content));
        let with = self.render(&conversation, true)?;
        let closing = self.after_sentinel(&without)?;
        let continued = self.after_sentinel(&with)?;
        let added = continued.strip_prefix(closing).ok_or_else(|| {
            self.suffix_error(format!(
                "the assistant turn renders as {closing:?} when it is last but not as a prefix \
                 of {continued:?} when a tool message follows"
            ))
        })?;
        let stop = closing.rfind(IM_END).ok_or_else(|| {
            self.suffix_error(format!(
                "the assistant turn's closing {closing:?} has no {IM_END}"
            ))
        })?;
        Ok(format!("{}{added}", &closing[stop + IM_END.len()..]))
    }

    fn after_sentinel<'t>(&self, rendered: &'t str) -> Result<&'t str> {
        rendered
            .find(ASSISTANT_SENTINEL)
            .map(|at| &rendered[at + ASSISTANT_SENTINEL.len()..])
            .ok_or_else(|| {
                self.suffix_error("the template does not render assistant content".into())
            })
    }

    fn suffix_error(&self, message: String) -> ChatError {
        ChatError::Template {
            stage: "observation suffix",
            message: format!("{}: {message}", self.template.source_path().display()),
        }
    }

    /// Keeps tool output within `max_observation_tokens`: the head and the tail of the text
    /// (cut at token boundaries) around a [`truncation_marker`] line that counts the
    /// characters removed.
    pub fn truncate_tool_output(&self, text: &str) -> Result<String> {
        let max = self.options.max_observation_tokens;
        let encoding = self
            .tokenizer
            .inner()
            .encode_char_offsets(text, false)
            .map_err(|err| ChatError::Tokenizer {
                call: "encode_char_offsets",
                message: err.to_string(),
            })?;
        let total = encoding.len();
        if total <= max {
            return Ok(text.to_string());
        }
        let offsets = encoding.get_offsets();
        // Byte index of each char, and of the end.
        let char_starts: Vec<usize> = text
            .char_indices()
            .map(|(byte, _)| byte)
            .chain(std::iter::once(text.len()))
            .collect();
        let n_chars = char_starts.len() - 1;
        let byte_at =
            |char_index: usize| char_starts.get(char_index).copied().unwrap_or(text.len());
        let marker_tokens = self
            .tokenizer
            .encode(&format!("\n{}\n", truncation_marker(n_chars)), false)?
            .len();
        let mut keep = max.saturating_sub(marker_tokens);
        loop {
            let (head, tail) = (keep.div_ceil(2), keep / 2);
            let head_end = match head {
                0 => 0,
                _ => offsets.get(head - 1).map_or(0, |o| o.1),
            }
            .min(n_chars);
            let tail_start = match tail {
                0 => n_chars,
                _ => offsets.get(total - tail).map_or(n_chars, |o| o.0),
            }
            .clamp(head_end, n_chars);
            let shortened = format!(
                "{}\n{}\n{}",
                &text[..byte_at(head_end)],
                truncation_marker(tail_start - head_end),
                &text[byte_at(tail_start)..]
            );
            // Tokens may merge differently at the two seams; shrink until it fits.
            let count = self.tokenizer.encode(&shortened, false)?.len();
            if count <= max || keep == 0 {
                return Ok(shortened);
            }
            keep = keep.saturating_sub(count - max);
        }
    }

    /// The text of a well-formed assistant turn that makes `call`, as the template renders an
    /// assistant tool call after the generation prompt, through `<|im_end|>` (with thinking on,
    /// Qwen3 puts an empty `<think>` block first).
    pub fn demonstration_text(&self, call: &ToolCall) -> Result<String> {
        let mut conversation = vec![
            system_message(&self.system_prompt),
            user_message(PLACEHOLDER_TASK),
        ];
        let prompt = self.render(&conversation, true)?;
        conversation.push(assistant_message("", None, std::slice::from_ref(call)));
        let full = self.render(&conversation, false)?;
        let demonstration_error = |message: String| ChatError::Template {
            stage: "demonstration",
            message: format!("{}: {message}", self.template.source_path().display()),
        };
        let turn = full.strip_prefix(&prompt).ok_or_else(|| {
            demonstration_error(format!(
                "the conversation with an assistant turn does not start with the generation \
                 prompt {prompt:?}"
            ))
        })?;
        let end = turn.rfind(IM_END).ok_or_else(|| {
            demonstration_error(format!("the assistant turn {turn:?} has no {IM_END}"))
        })?;
        Ok(turn[..end + IM_END.len()].to_string())
    }

    /// The ids of [`Self::demonstration_text`]: what a policy should sample to make `call`
    /// (for supervised warm-up on well-formed tool calls).
    pub fn demonstration_ids(&self, call: &ToolCall) -> Result<Vec<u32>> {
        self.tokenizer
            .encode(&self.demonstration_text(call)?, false)
    }

    /// Sampled ids decoded (special tokens kept) and split into reasoning, content and calls.
    pub fn parse_turn(&self, ids: &[u32]) -> Result<ParsedTurn> {
        self.calls.parse_ids(&self.tokenizer, ids)
    }

    /// Re-renders a finished episode as messages (`[system, user]`, then per turn the parsed
    /// assistant message and the `tool` message of its result, ending with the generation
    /// prompt when the last result was appended) and compares the ids with the episode's exact
    /// stream. `turns` as in [`ChatCodec::retokenization_drift`].
    pub fn drift_report(
        &self,
        first: &Observation,
        turns: &[(&[u32], Option<&Observation>)],
    ) -> Result<DriftReport> {
        let mut stream = self.tokenizer.encode(&self.prompt_text(first)?, false)?;
        let mut messages = self.prompt_messages(first);
        let mut ends_with_generation_prompt = true;
        for &(sampled, observation) in turns {
            stream.extend_from_slice(sampled);
            messages.push(self.parse_turn(sampled)?.to_message());
            ends_with_generation_prompt = false;
            if let Some(observation) = observation {
                let content = self.observation_content(observation)?;
                let suffix = self.observation_suffix_text(&content)?;
                stream.extend(self.tokenizer.encode(&suffix, false)?);
                messages.push(tool_message(&content));
                ends_with_generation_prompt = true;
            }
        }
        DriftChecker::new(&self.tokenizer, &self.template, &self.calls).check_rendered(
            &stream,
            &messages,
            Some(&self.tools),
            RenderOptions {
                add_generation_prompt: ends_with_generation_prompt,
                enable_thinking: self.options.enable_thinking,
            },
        )
    }
}

/// The tool call of the placeholder assistant turn in derivation renders (never executed).
fn placeholder_call() -> ToolCall {
    ToolCall {
        name: "placeholder".into(),
        arguments: json!({}),
    }
}

impl ChatCodec for Qwen3Codec {
    fn prompt_ids(&self, first: &Observation) -> anyhow::Result<Vec<u32>> {
        Ok(self.tokenizer.encode(&self.prompt_text(first)?, false)?)
    }

    fn observation_ids(&self, observation: &Observation) -> anyhow::Result<Vec<u32>> {
        Ok(self
            .tokenizer
            .encode(&self.observation_text(observation)?, false)?)
    }

    /// `<|im_end|>` and `<|endoftext|>`, as Qwen3's `generation_config.json` lists them.
    fn stop_ids(&self) -> Vec<u32> {
        self.special.stop_ids().to_vec()
    }

    fn max_action_tokens(&self) -> usize {
        self.options.max_action_tokens
    }

    /// The first `<tool_call>` span of a turn that ended on a stop id, or why there is none.
    fn parse_action(&self, ids: &[u32], _task: &Observation) -> Action {
        let text = match self.tokenizer.decode(ids, false) {
            Ok(text) => text,
            Err(err) => {
                return Action::Malformed {
                    raw: format!("{ids:?}"),
                    reason: format!("the sampled ids do not decode: {err}"),
                }
            }
        };
        let stopped = ids
            .last()
            .is_some_and(|id| self.special.stop_ids().contains(id));
        if !stopped {
            return Action::Malformed {
                raw: text,
                reason: format!(
                    "the turn ended after {} tokens without {IM_END} (action limit {})",
                    ids.len(),
                    self.options.max_action_tokens
                ),
            };
        }
        self.calls.parse_text(&text).first_action()
    }

    /// `<|endoftext|>`, Qwen3's pad token.
    fn pad_id(&self) -> u32 {
        self.special.endoftext
    }

    /// Special tokens kept, so transcripts show `<tool_call>` and `<|im_end|>`.
    fn decode(&self, ids: &[u32]) -> String {
        self.tokenizer
            .decode(ids, false)
            .unwrap_or_else(|err| format!("<ids {ids:?} do not decode: {err}>"))
    }

    fn close_cut_action_ids(&self) -> Vec<u32> {
        vec![self.special.im_end]
    }

    fn encode_call(&self, call: &ToolCall) -> anyhow::Result<Vec<u32>> {
        Ok(self.demonstration_ids(call)?)
    }

    fn retokenization_drift(
        &self,
        first: &Observation,
        turns: &[(&[u32], Option<&Observation>)],
    ) -> anyhow::Result<Option<bool>> {
        Ok(Some(self.drift_report(first, turns)?.drifted))
    }
}
