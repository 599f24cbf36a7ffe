//! The Qwen3 tokenizer: HF `tokenizers` loaded from a model folder's `tokenizer.json`.
//!
//! Text becomes ids here before the model sees it, and sampled ids become text here before the
//! tool-call codec reads them. Nothing is hand-rolled: byte-level BPE, the NFC normalizer, the
//! split regex and the added tokens all come from the file. Decoding honours each added token's
//! `special` flag, so with `skip_special = true` `<|im_end|>` disappears while `<tool_call>` and
//! `<think>` (which Qwen marks `special: false`) survive. Any HF `tokenizer.json` loads the same
//! way; only [`QwenSpecialTokens`] is Qwen-specific.

use std::path::{Path, PathBuf};

use crate::error::{ChatError, Result};
use crate::gguf::{is_gguf_file, GgufMetadata};
use crate::gguf_tokenizer::tokenizer_json;

/// A `tokenizer.json` tokenizer together with the path it came from (for error messages).
#[derive(Clone)]
pub struct QwenTokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl std::fmt::Debug for QwenTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QwenTokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

impl QwenTokenizer {
    /// Loads `dir/tokenizer.json`, or, when `dir` is a GGUF file, the tokenizer in its metadata
    /// ([`Self::from_gguf`]).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        if is_gguf_file(dir) {
            return Self::from_gguf(dir);
        }
        Self::from_file(dir.join("tokenizer.json"))
    }

    /// The tokenizer a GGUF file carries in its metadata (see [`crate::gguf_tokenizer`]).
    pub fn from_gguf(path: impl AsRef<Path>) -> Result<Self> {
        let meta = GgufMetadata::read(path.as_ref())?;
        Self::from_gguf_metadata(&meta)
    }

    /// [`Self::from_gguf`] from metadata already read.
    pub fn from_gguf_metadata(meta: &GgufMetadata) -> Result<Self> {
        let document = tokenizer_json(meta)?;
        let inner: tokenizers::Tokenizer =
            serde_json::from_value(document).map_err(|err| ChatError::TokenizerLoad {
                path: meta.path().to_path_buf(),
                message: err.to_string(),
            })?;
        Ok(Self {
            inner,
            path: meta.path().to_path_buf(),
        })
    }

    /// Loads one `tokenizer.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if !path.is_file() {
            return Err(ChatError::Io {
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
                path,
            });
        }
        let inner =
            tokenizers::Tokenizer::from_file(&path).map_err(|err| ChatError::TokenizerLoad {
                path: path.clone(),
                message: err.to_string(),
            })?;
        Ok(Self { inner, path })
    }

    /// Token ids of `text`. `add_special` applies the file's post-processor (Qwen3 adds
    /// nothing; chat text already carries its `<|im_start|>` markers as text).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let encoding =
            self.inner
                .encode(text, add_special)
                .map_err(|err| ChatError::Tokenizer {
                    call: "encode",
                    message: err.to_string(),
                })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Text of `ids`. `skip_special` drops the tokens the file marks `special: true`.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|err| ChatError::Tokenizer {
                call: "decode",
                message: err.to_string(),
            })
    }

    /// The id of one token given by its exact text (added tokens included).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Like [`Self::token_id`], but a missing token is an error naming it.
    pub fn require_token_id(&self, token: &str) -> Result<u32> {
        self.token_id(token).ok_or_else(|| ChatError::MissingToken {
            token: token.to_string(),
        })
    }

    /// The text of one token id, as stored in the vocabulary (byte-level form for BPE pieces).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Vocabulary size including added tokens (151,669 for Qwen3; the embedding is padded
    /// further, to `config.json`'s `vocab_size`).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The `tokenizer.json` (or GGUF file) this was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The underlying HF tokenizer, for anything this wrapper does not cover.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// The two ChatML markers a chat codec needs: `<|im_end|>` closes a turn, `<|endoftext|>`
/// ends the text and pads. Every ChatML model has them (Qwen, SmolLM2), whether or not its
/// vocabulary has tool-call tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnMarkers {
    pub endoftext: u32,
    pub im_end: u32,
}

impl TurnMarkers {
    pub fn from_tokenizer(tokenizer: &QwenTokenizer) -> Result<Self> {
        Ok(Self {
            endoftext: tokenizer.require_token_id("<|endoftext|>")?,
            im_end: tokenizer.require_token_id("<|im_end|>")?,
        })
    }

    /// Tokens that end an assistant turn when sampling (`<|im_end|>`, `<|endoftext|>`), as in
    /// Qwen3's (and SmolLM2's) `generation_config.json`.
    pub fn stop_ids(&self) -> [u32; 2] {
        [self.im_end, self.endoftext]
    }
}

/// The ids of the Qwen chat markers, looked up by text so a different vocabulary fails loudly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QwenSpecialTokens {
    pub endoftext: u32,
    pub im_start: u32,
    pub im_end: u32,
    pub tool_call: u32,
    pub tool_call_end: u32,
    pub tool_response: u32,
    pub tool_response_end: u32,
    pub think: u32,
    pub think_end: u32,
}

impl QwenSpecialTokens {
    pub fn from_tokenizer(tokenizer: &QwenTokenizer) -> Result<Self> {
        Ok(Self {
            endoftext: tokenizer.require_token_id("<|endoftext|>")?,
            im_start: tokenizer.require_token_id("<|im_start|>")?,
            im_end: tokenizer.require_token_id("<|im_end|>")?,
            tool_call: tokenizer.require_token_id("<tool_call>")?,
            tool_call_end: tokenizer.require_token_id("</tool_call>")?,
            tool_response: tokenizer.require_token_id("<tool_response>")?,
            tool_response_end: tokenizer.require_token_id("</tool_response>")?,
            think: tokenizer.require_token_id("<think>")?,
            think_end: tokenizer.require_token_id("</think>")?,
        })
    }

    /// Tokens that end an assistant turn when sampling (`<|im_end|>`, `<|endoftext|>`), as in
    /// Qwen3's `generation_config.json`.
    pub fn stop_ids(&self) -> [u32; 2] {
        [self.im_end, self.endoftext]
    }
}
