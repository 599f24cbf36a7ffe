//! `agentrl chat render`: real-model chat formats on the command line (`agentrl score` is in
//! `score.rs`).
//!
//! `chat render` is the command-line face of `agentrl_chat`: it loads a model folder's tokenizer
//! and chat template, renders a conversation exactly as transformers' `apply_chat_template`
//! would, and prints `{"text": ..., "ids": [...]}`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, Subcommand};

use agentrl_chat::qwen::QwenTokenizer;
use agentrl_chat::template::{ChatTemplate, RenderOptions};

#[derive(Debug, Args)]
pub struct ChatArgs {
    #[command(subcommand)]
    pub command: ChatCommand,
}

#[derive(Debug, Subcommand)]
pub enum ChatCommand {
    /// Render a conversation with the model's chat template; print {"text", "ids"} as JSON.
    Render(RenderArgs),
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// HF-style model folder (tokenizer.json, tokenizer_config.json / chat_template.jinja).
    /// With the `hub` feature, a Hub id such as `Qwen/Qwen3-0.6B` also works when online.
    #[arg(long)]
    pub model: String,
    /// JSON file: a list of messages, or an object {"messages": [...], "tools": [...]}.
    #[arg(long)]
    pub messages: PathBuf,
    /// JSON file with a list of tool schemas (OpenAI function format).
    #[arg(long)]
    pub tools: Option<PathBuf>,
    /// End with the opening of an assistant turn.
    #[arg(long)]
    pub add_generation_prompt: bool,
    /// Pass enable_thinking=false to the template (Qwen3 then writes an empty think block).
    #[arg(long)]
    pub no_thinking: bool,
}

pub fn chat(args: ChatArgs) -> anyhow::Result<()> {
    match args.command {
        ChatCommand::Render(args) => render(args),
    }
}

fn render(args: RenderArgs) -> anyhow::Result<()> {
    // The conversation first: its errors are the user's, and cheap to find.
    let (messages, mut tools) = read_conversation(&args.messages)?;
    let dir = resolve_model_dir(&args.model)?;
    let tokenizer = QwenTokenizer::from_dir(&dir)?;
    let template = ChatTemplate::from_model_dir(&dir)?;
    if let Some(path) = &args.tools {
        tools = Some(read_json_list(&read_json(path)?, path, "tools")?);
    }
    let options = RenderOptions {
        add_generation_prompt: args.add_generation_prompt,
        enable_thinking: !args.no_thinking,
    };
    let text = template.render(&messages, tools.as_deref(), options)?;
    let ids = tokenizer.encode(&text, false)?;
    let output = serde_json::json!({"text": text, "ids": ids});
    println!("{}", serde_json::to_string(&output)?);
    Ok(())
}

/// Messages (and tools, if the file has them) from a conversation file: either a JSON list of
/// messages or an object with `messages` and optional `tools`.
pub(crate) fn read_conversation(
    path: &Path,
) -> anyhow::Result<(Vec<serde_json::Value>, Option<Vec<serde_json::Value>>)> {
    let value = read_json(path)?;
    if value.is_array() {
        let messages = read_json_list(&value, path, "the message list")?;
        check_roles(&messages, path)?;
        return Ok((messages, None));
    }
    let messages = value.get("messages").with_context(|| {
        format!(
            "{}: expected a list or an object with `messages`",
            path.display()
        )
    })?;
    let messages = read_json_list(messages, path, "messages")?;
    check_roles(&messages, path)?;
    let tools = match value.get("tools") {
        None | Some(serde_json::Value::Null) => None,
        Some(tools) => Some(read_json_list(tools, path, "tools")?),
    };
    Ok((messages, tools))
}

/// The roles a chat template renders. Any other role would render as nothing at all (the
/// template has no branch for it), so it is an error naming the message.
const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

fn check_roles(messages: &[serde_json::Value], path: &Path) -> anyhow::Result<()> {
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(|r| r.as_str());
        match role {
            Some(r) if ROLES.contains(&r) => {}
            Some(r) => anyhow::bail!(
                "{}: message {i} has role {r:?}; the roles are {}",
                path.display(),
                ROLES.join(", ")
            ),
            None => anyhow::bail!(
                "{}: message {i} has no string `role` (one of {})",
                path.display(),
                ROLES.join(", ")
            ),
        }
    }
    Ok(())
}

fn read_json(path: &Path) -> anyhow::Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))
}

fn read_json_list(
    value: &serde_json::Value,
    path: &Path,
    what: &str,
) -> anyhow::Result<Vec<serde_json::Value>> {
    value
        .as_array()
        .cloned()
        .with_context(|| format!("{}: {what} must be a JSON list", path.display()))
}

/// A model from a `--model` argument: an existing folder or GGUF file as is; `smollm2`, the
/// fetched SmolLM2 GGUF file ([`agentrl_chat::resolve_model_path`]); otherwise, with the `hub`
/// feature, a Hub id whose tokenizer, template and config files are fetched (or taken from the
/// local Hub cache) with hf-hub.
pub(crate) fn resolve_model_dir(model: &str) -> anyhow::Result<PathBuf> {
    let path = agentrl_chat::resolve_model_path(model).map_err(anyhow::Error::msg)?;
    if path.is_dir() || agentrl_chat::gguf::is_gguf_file(&path) {
        return Ok(path);
    }
    resolve_hub_id(model)
}

#[cfg(feature = "hub")]
fn resolve_hub_id(model: &str) -> anyhow::Result<PathBuf> {
    let api = hf_hub::api::sync::Api::new().context("cannot start the Hugging Face Hub client")?;
    let repo = api.model(model.to_string());
    let tokenizer = repo.get("tokenizer.json").with_context(|| {
        format!("{model}: no local folder, and fetching tokenizer.json from the Hub failed")
    })?;
    // Optional files: a model may keep its template in either place, and weights-free uses
    // need no config.
    for optional in [
        "tokenizer_config.json",
        "chat_template.jinja",
        "config.json",
    ] {
        let _ = repo.get(optional);
    }
    tokenizer
        .parent()
        .map(Path::to_path_buf)
        .with_context(|| format!("{model}: the Hub cache path has no parent folder"))
}

#[cfg(not(feature = "hub"))]
fn resolve_hub_id(model: &str) -> anyhow::Result<PathBuf> {
    anyhow::bail!(
        "model folder {model} does not exist (to use a Hugging Face Hub id, build with `--features hub`)"
    )
}
