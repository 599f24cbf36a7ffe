//! TinyAgent's own chat format: a closed word-level vocabulary, the observation renderer, and
//! the tiny tool-call codec.
//!
//! Data flow: the gym's symbol renderer turns an [`Observation`] into words such as
//! `C3 if NAME == NUM : return NUM` or `FAIL 2 ZeroDivisionError LINE 4`; [`TinyCodec`] maps
//! them to ids wrapped in `<obs> … </obs>` for the policy. The policy answers with ids that
//! [`TinyCodec::parse_action`] turns into an [`Action`]:
//!
//! ```text
//! <call> edit C3 </call>   → edit   {"candidate": 3}
//! <call> read </call>      → read   {"path": <the task's main module>}
//! <call> test </call>      → test   {}
//! <call> submit </call>    → submit {}
//! <call> exploit </call>   → exploit {}
//! ```
//!
//! Anything else (no `</call>`, an unknown tool, a missing or extra argument, the action-length
//! cap reached) becomes [`Action::Malformed`] so that the gym answers with its format-error
//! observation and the episode goes on. Ids are never re-tokenised: the engine keeps the
//! sampled ids, and decoding here is only for parsing and display.

use std::collections::HashMap;

pub mod grammar;

use agentrl_gym::{Action, Observation, ToolCall};
use serde_json::json;

pub const PAD: &str = "<pad>";
pub const BOS: &str = "<bos>";
pub const EOS: &str = "<eos>";
pub const OBS_START: &str = "<obs>";
pub const OBS_END: &str = "</obs>";
pub const CALL_START: &str = "<call>";
pub const CALL_END: &str = "</call>";
pub const UNK: &str = "<unk>";

/// Special tokens, in id order (`<pad>` is id 0).
pub const SPECIAL_TOKENS: [&str; 8] =
    [PAD, BOS, EOS, OBS_START, OBS_END, CALL_START, CALL_END, UNK];

/// Tools TinyAgent can call.
pub const TOOL_NAMES: [&str; 5] = agentrl_gym::Tool::NAMES;

/// Number of candidate-edit arguments `C0..C{N-1}` in the vocabulary.
pub const MAX_CANDIDATES: usize = 8;

/// A closed word-level vocabulary: special tokens, tool names, candidate arguments, then the
/// gym's symbols (duplicates dropped, first occurrence wins).
#[derive(Debug, Clone, PartialEq)]
pub struct TinyVocab {
    words: Vec<String>,
    index: HashMap<String, u32>,
}

impl TinyVocab {
    /// Builds the vocabulary from the renderer's symbol list.
    pub fn new<S: AsRef<str>>(symbols: &[S]) -> Self {
        let mut vocab = Self {
            words: Vec::new(),
            index: HashMap::new(),
        };
        let fixed = SPECIAL_TOKENS
            .iter()
            .chain(TOOL_NAMES.iter())
            .map(|s| s.to_string());
        let candidates = (0..MAX_CANDIDATES).map(candidate_word);
        for word in fixed
            .chain(candidates)
            .chain(symbols.iter().map(|s| s.as_ref().to_string()))
        {
            if !vocab.index.contains_key(&word) {
                vocab.index.insert(word.clone(), vocab.words.len() as u32);
                vocab.words.push(word);
            }
        }
        vocab
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Id of a word, if it is in the vocabulary.
    pub fn id(&self, word: &str) -> Option<u32> {
        self.index.get(word).copied()
    }

    /// Word of an id, if the id is in range.
    pub fn word(&self, id: u32) -> Option<&str> {
        self.words.get(id as usize).map(String::as_str)
    }

    /// All words in id order.
    pub fn words(&self) -> &[String] {
        &self.words
    }

    fn special(&self, word: &str) -> u32 {
        // Special tokens and candidate words are always inserted by `new`.
        self.index[word]
    }

    /// Ids of the candidate arguments `C0, C1, …` (always in the vocabulary: `new` adds them).
    pub fn candidate_ids(&self) -> Vec<u32> {
        (0..MAX_CANDIDATES)
            .map(|k| self.special(&candidate_word(k)))
            .collect()
    }

    pub fn pad_id(&self) -> u32 {
        self.special(PAD)
    }
    pub fn bos_id(&self) -> u32 {
        self.special(BOS)
    }
    pub fn eos_id(&self) -> u32 {
        self.special(EOS)
    }
    pub fn obs_start_id(&self) -> u32 {
        self.special(OBS_START)
    }
    pub fn obs_end_id(&self) -> u32 {
        self.special(OBS_END)
    }
    pub fn call_start_id(&self) -> u32 {
        self.special(CALL_START)
    }
    pub fn call_end_id(&self) -> u32 {
        self.special(CALL_END)
    }
    pub fn unk_id(&self) -> u32 {
        self.special(UNK)
    }

    /// Ids of words; words outside the vocabulary become `<unk>`.
    pub fn encode<S: AsRef<str>>(&self, words: &[S]) -> Vec<u32> {
        words
            .iter()
            .map(|w| self.id(w.as_ref()).unwrap_or_else(|| self.unk_id()))
            .collect()
    }

    /// Space-joined words of `ids` (out-of-range ids show as `<id:N>`), for display and logs.
    pub fn decode(&self, ids: &[u32]) -> String {
        ids.iter()
            .map(|&id| match self.word(id) {
                Some(w) => w.to_string(),
                None => format!("<id:{id}>"),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The vocabulary word of candidate argument `k` (`C{k}`).
pub fn candidate_word(k: usize) -> String {
    format!("C{k}")
}

/// What the codec needs to know about the current task to turn short calls into full ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskContext {
    /// The module `read` shows: the first listed file that is not a test file.
    pub main_file: Option<String>,
    pub num_candidates: usize,
}

impl TaskContext {
    /// Reads the context from an episode's first observation; other observations give an
    /// empty context (then `read` is malformed: there is nothing known to read).
    pub fn from_observation(obs: &Observation) -> Self {
        match obs {
            Observation::Task {
                files, candidates, ..
            } => {
                let is_test = |f: &String| {
                    let name = f.rsplit('/').next().unwrap_or(f);
                    name.starts_with("test") || name.ends_with("_test.py")
                };
                let main_file = files
                    .iter()
                    .find(|f| !is_test(f))
                    .or(files.first())
                    .cloned();
                Self {
                    main_file,
                    num_candidates: candidates.len(),
                }
            }
            _ => Self::default(),
        }
    }
}

/// A function turning an observation into the gym's symbols (the gym's `render_symbols`).
pub type SymbolRenderer = fn(&Observation) -> Vec<String>;

/// TinyAgent's tokenizer + renderer + tool-call codec.
#[derive(Debug, Clone)]
pub struct TinyCodec {
    vocab: TinyVocab,
    render: SymbolRenderer,
    /// Longest action (in tokens, `</call>` included) the policy may emit per turn.
    pub max_action_tokens: usize,
}

/// Default cap on action length: `<call> edit C3 </call>` is 4 tokens.
pub const DEFAULT_MAX_ACTION_TOKENS: usize = 6;

impl TinyCodec {
    /// A codec over the given symbol vocabulary and renderer.
    pub fn new<S: AsRef<str>>(
        symbols: &[S],
        render: SymbolRenderer,
        max_action_tokens: usize,
    ) -> Self {
        Self {
            vocab: TinyVocab::new(symbols),
            render,
            max_action_tokens,
        }
    }

    /// The codec for the BugFix gym: its symbol vocabulary and renderer
    /// (`agentrl_gym::render`), with the default action cap.
    pub fn for_gym() -> Self {
        Self::new(
            &agentrl_gym::render::symbol_vocabulary(),
            agentrl_gym::render::render_symbols,
            DEFAULT_MAX_ACTION_TOKENS,
        )
    }

    pub fn vocab(&self) -> &TinyVocab {
        &self.vocab
    }

    /// Ids of one observation: `<obs> symbols… </obs>`.
    pub fn observation_ids(&self, obs: &Observation) -> Vec<u32> {
        let symbols = (self.render)(obs);
        let mut ids = Vec::with_capacity(symbols.len() + 2);
        ids.push(self.vocab.obs_start_id());
        ids.extend(self.vocab.encode(&symbols));
        ids.push(self.vocab.obs_end_id());
        ids
    }

    /// Ids of an episode's prompt: `<bos>` then the first observation.
    pub fn prompt_ids(&self, first: &Observation) -> Vec<u32> {
        let mut ids = vec![self.vocab.bos_id()];
        ids.extend(self.observation_ids(first));
        ids
    }

    /// Tokens that end an action when sampled: `</call>` and `<eos>`.
    pub fn is_stop(&self, id: u32) -> bool {
        id == self.vocab.call_end_id() || id == self.vocab.eos_id()
    }

    /// The ids of a well-formed call (for demonstrations and tests), or `None` if the call is
    /// not expressible in the tiny format.
    pub fn encode_call(&self, call: &ToolCall) -> Option<Vec<u32>> {
        let mut words = vec![CALL_START.to_string(), call.name.clone()];
        match call.name.as_str() {
            "edit" => {
                let k = call.arguments.get("candidate")?.as_u64()? as usize;
                if k >= MAX_CANDIDATES {
                    return None;
                }
                words.push(candidate_word(k));
            }
            "read" | "test" | "submit" | "exploit" => {}
            _ => return None,
        }
        words.push(CALL_END.to_string());
        Some(self.vocab.encode(&words))
    }

    /// Parses the ids of one action into a call, or a malformed action saying why.
    pub fn parse_action(&self, ids: &[u32], ctx: &TaskContext) -> Action {
        let raw = self.vocab.decode(ids);
        let malformed = |reason: String| Action::Malformed {
            raw: raw.clone(),
            reason,
        };
        let words: Vec<&str> = ids
            .iter()
            .map(|&id| self.vocab.word(id).unwrap_or(UNK))
            .collect();
        let Some(end) = words.iter().position(|w| *w == CALL_END) else {
            return malformed(if ids.len() >= self.max_action_tokens {
                format!(
                    "no {CALL_END} within the action limit of {} tokens",
                    self.max_action_tokens
                )
            } else {
                format!("the action ended without {CALL_END}")
            });
        };
        if end + 1 != words.len() {
            return malformed(format!("tokens after {CALL_END}"));
        }
        if words.first() != Some(&CALL_START) {
            return malformed(format!("an action must start with {CALL_START}"));
        }
        let inner = &words[1..end];
        let Some((&name, args)) = inner.split_first() else {
            return malformed("empty call: no tool name".to_string());
        };
        let arguments = match name {
            "edit" => match args {
                [arg] => match arg.strip_prefix('C').and_then(|k| k.parse::<usize>().ok()) {
                    Some(k) => json!({ "candidate": k }),
                    None => return malformed(format!("edit takes a candidate C0..C7, got {arg}")),
                },
                [] => return malformed("edit needs a candidate argument C0..C7".to_string()),
                _ => return malformed("edit takes exactly one argument".to_string()),
            },
            "read" | "test" | "submit" | "exploit" if !args.is_empty() => {
                return malformed(format!("{name} takes no arguments"));
            }
            "read" => match &ctx.main_file {
                Some(path) => json!({ "path": path }),
                None => return malformed("read: the task lists no file to read".to_string()),
            },
            "test" | "submit" | "exploit" => json!({}),
            other => return malformed(format!("unknown tool {other}")),
        };
        Action::Call(ToolCall {
            name: name.to_string(),
            arguments,
        })
    }
}

impl crate::ChatCodec for TinyCodec {
    fn prompt_ids(&self, first: &Observation) -> anyhow::Result<Vec<u32>> {
        Ok(TinyCodec::prompt_ids(self, first))
    }

    fn observation_ids(&self, observation: &Observation) -> anyhow::Result<Vec<u32>> {
        Ok(TinyCodec::observation_ids(self, observation))
    }

    fn stop_ids(&self) -> Vec<u32> {
        vec![self.vocab.call_end_id(), self.vocab.eos_id()]
    }

    fn max_action_tokens(&self) -> usize {
        self.max_action_tokens
    }

    fn parse_action(&self, ids: &[u32], task: &Observation) -> Action {
        TinyCodec::parse_action(self, ids, &TaskContext::from_observation(task))
    }

    fn pad_id(&self) -> u32 {
        self.vocab.pad_id()
    }

    fn decode(&self, ids: &[u32]) -> String {
        self.vocab.decode(ids)
    }

    fn encode_call(&self, call: &ToolCall) -> anyhow::Result<Vec<u32>> {
        TinyCodec::encode_call(self, call)
            .ok_or_else(|| anyhow::anyhow!("the tiny call format cannot express {call:?}"))
    }
}
