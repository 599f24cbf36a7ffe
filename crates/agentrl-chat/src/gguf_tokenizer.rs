//! A GGUF file's tokenizer as an HF `tokenizers` tokenizer: byte-level BPE built from the
//! file's tokens and merges, the pre-tokenizer its `tokenizer.ggml.pre` names, and its control
//! and user-defined tokens as added tokens.
//!
//! Where it sits: [`crate::gguf::GgufMetadata`] → [`tokenizer_json`] (the same document an HF
//! `tokenizer.json` is) → `tokenizers::Tokenizer` inside [`crate::qwen::QwenTokenizer`]. Nothing
//! of BPE is hand-rolled; this file only translates llama.cpp's names into HF's.
//!
//! **Pre-tokenizers.** llama.cpp selects its split regex by `tokenizer.ggml.pre`; each name
//! supported here maps to the HF pre-tokenizer of the model family it stands for:
//!
//! | `tokenizer.ggml.pre` | HF pre-tokenizer | families |
//! |---|---|---|
//! | `smollm`, `starcoder`, `refact`, `codeshell` | `Digits(individual)` then `ByteLevel` (GPT-2 regex) | SmolLM, StarCoder |
//! | `gpt-2`, `default` (or absent) | `ByteLevel` (GPT-2 regex) | GPT-2 |
//! | `qwen2` | `Split(Qwen2 regex)` then `ByteLevel` without regex, NFC normalizer | Qwen2, Qwen3 |
//! | `llama-bpe` | `Split(Llama 3 regex)` then `ByteLevel` without regex | Llama 3 |
//!
//! Other names are refused with the list above rather than tokenised differently.
//!
//! **SmolLM's digits.** `smollm` splits every digit into its own token (llama.cpp's `\p{N}`
//! rule, and HF's `tokenizer.json` for SmolLM2: `Digits(individual_digits=true)`). transformers'
//! GGUF conversion (`GGUFGPTConverter`) drops that rule and merges digit runs ("2024" is one
//! piece there, four here); the model was trained with the split, so this tokenizer keeps it.
//! `tests/chat/smollm2.rs` checks both sides against recorded ids.

use serde_json::{json, Map, Value};

use crate::error::Result;
use crate::gguf::GgufMetadata;

/// llama.cpp's `llama_token_type`: a control token (`<|im_start|>`, …), special when decoding.
const TOKEN_TYPE_CONTROL: u64 = 3;
/// llama.cpp's `llama_token_type`: a user-defined added token (matched whole in text).
const TOKEN_TYPE_USER_DEFINED: u64 = 4;

/// Qwen2's (and Qwen3's) split regex, as their `tokenizer.json` and llama.cpp's `qwen2` hold it.
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's split regex (llama.cpp's `llama-bpe`): digits in runs of up to three.
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizer names this file maps (see the module doc).
pub const SUPPORTED_PRE: &[&str] = &[
    "smollm",
    "starcoder",
    "refact",
    "codeshell",
    "gpt-2",
    "default",
    "qwen2",
    "llama-bpe",
];

/// The `tokenizer.json` document of a GGUF file's tokenizer. Errors name the metadata key.
pub fn tokenizer_json(meta: &GgufMetadata) -> Result<Value> {
    let model = meta.require_str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(meta.field_error(
            "tokenizer.ggml.model",
            &format!(
                "{model:?} is not supported: only byte-level BPE (\"gpt2\") tokenizers are read \
                 from GGUF files"
            ),
        ));
    }
    let tokens = meta.require_strings("tokenizer.ggml.tokens")?;
    let merges = meta.require_strings("tokenizer.ggml.merges")?;
    let token_types = match meta.get("tokenizer.ggml.token_type") {
        None => vec![1; tokens.len()],
        Some(value) => {
            let types = value
                .as_array()
                .ok_or_else(|| meta.field_error("tokenizer.ggml.token_type", "not an array"))?;
            if types.len() != tokens.len() {
                return Err(meta.field_error(
                    "tokenizer.ggml.token_type",
                    &format!("{} entries for {} tokens", types.len(), tokens.len()),
                ));
            }
            types.iter().map(|t| t.as_u64().unwrap_or(1)).collect()
        }
    };

    let mut vocab = Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (id, (token, &kind)) in tokens.iter().zip(&token_types).enumerate() {
        vocab.insert(token.to_string(), json!(id));
        if kind == TOKEN_TYPE_CONTROL || kind == TOKEN_TYPE_USER_DEFINED {
            added.push(json!({
                "id": id,
                "content": token,
                "single_word": false,
                "lstrip": false,
                "rstrip": false,
                "normalized": false,
                "special": kind == TOKEN_TYPE_CONTROL,
            }));
        }
    }
    let merges: Vec<Value> = merges
        .iter()
        .enumerate()
        .map(|(index, merge)| {
            // A merge is "left right"; llama.cpp splits at the first space after the first
            // character, as a byte-level piece never contains a literal space.
            let split = merge
                .char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(at, _)| at)
                .ok_or_else(|| {
                    meta.field_error(
                        "tokenizer.ggml.merges",
                        &format!("merge {index} ({merge:?}) has no space between its two parts"),
                    )
                })?;
            Ok(json!([&merge[..split], &merge[split + 1..]]))
        })
        .collect::<Result<_>>()?;

    let pre = match meta.get("tokenizer.ggml.pre") {
        None => "default",
        Some(_) => meta.require_str("tokenizer.ggml.pre")?,
    };
    let byte_level = |use_regex: bool| {
        json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
               "use_regex": use_regex})
    };
    let split = |regex: &str| {
        json!({"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated",
               "invert": false})
    };
    let (normalizer, pre_tokenizer) = match pre {
        "smollm" | "starcoder" | "refact" | "codeshell" => (
            Value::Null,
            json!({"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": true}, byte_level(true)]}),
        ),
        "gpt-2" | "default" => (Value::Null, byte_level(true)),
        "qwen2" => (
            json!({"type": "NFC"}),
            json!({"type": "Sequence", "pretokenizers": [split(QWEN2_REGEX), byte_level(false)]}),
        ),
        "llama-bpe" => (
            Value::Null,
            json!({"type": "Sequence", "pretokenizers": [split(LLAMA3_REGEX), byte_level(false)]}),
        ),
        other => {
            return Err(meta.field_error(
                "tokenizer.ggml.pre",
                &format!(
                    "pre-tokenizer {other:?} is not supported (supported: {})",
                    SUPPORTED_PRE.join(", ")
                ),
            ))
        }
    };
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
                           "use_regex": true},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                    "use_regex": true},
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": false,
            "vocab": vocab,
            "merges": merges,
        },
    }))
}

/// The text of a special token named by an id key (`tokenizer.ggml.bos_token_id`, …), if the
/// file names one.
pub fn special_token_text(meta: &GgufMetadata, id_key: &str) -> Result<Option<String>> {
    let Some(id) = meta.optional_u64(id_key)? else {
        return Ok(None);
    };
    let tokens = meta.require_strings("tokenizer.ggml.tokens")?;
    let index = usize::try_from(id).ok().filter(|&i| i < tokens.len());
    match index {
        Some(index) => Ok(Some(tokens[index].to_string())),
        None => Err(meta.field_error(
            id_key,
            &format!(
                "token id {id} is outside the vocabulary of {}",
                tokens.len()
            ),
        )),
    }
}
