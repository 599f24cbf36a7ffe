//! `agentrl score --model DIR --input FILE.jsonl`: per-token log-probs of a Qwen3 model folder
//! on given inputs, one JSON line out per JSON line in.
//!
//! Each input line is `{"text": "..."}` (tokenized with no special tokens added) or
//! `{"messages": [...], "tools": [...]}` (rendered with the folder's own chat template, no
//! generation prompt, then tokenized). The output line is `{"ids": [...], "logprobs": [...]}`
//! where `logprobs[i] = log p(ids[i+1] | ids[..=i])`, so it has `len(ids) - 1` entries. The model
//! runs in its inference mode (no gradients). `--tokenizer DIR` takes the tokenizer and chat
//! template from another folder. `--cpu-matmul amx` (or `auto`) scores on the CPU's AMX unit
//! (`Qwen3::pack_for_amx`, what `agentrl bench qwen3` times beside f32). To try it offline, `scripts/make_tiny_qwen3.py --out DIR` makes
//! a tiny random Qwen3 folder with the real tokenizer.

use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;

use agentrl_chat::qwen::QwenTokenizer;
use agentrl_chat::template::{ChatTemplate, RenderOptions};
use anyhow::{bail, Context, Result};
use clap::Args;

#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// HF model folder: config.json, safetensors (single or sharded), tokenizer files.
    #[arg(long)]
    pub model: String,
    /// JSONL file: one `{"text": ...}` or `{"messages": [...], "tools": [...]}` per line.
    #[arg(long)]
    pub input: PathBuf,
    /// Compute dtype: f32 or bf16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// The kernel for the model's f32 weights on the CPU (as `agentrl serve --cpu-matmul`):
    /// f32 = the f32 GEMM; amx = bf16x3 on the CPU's AMX unit (~1.65x faster scoring on the
    /// 0.6B shape, log-probs ~1e-4 off f32; an error without AMX or with --dtype bf16);
    /// auto = AMX where the CPU has it.
    #[arg(long, value_enum, default_value = "f32")]
    pub cpu_matmul: super::serve::CpuMatmulArg,
    /// Folder with tokenizer.json (and the chat template for `messages` lines) when the
    /// model folder has none (default: the model folder).
    #[arg(long, value_name = "DIR")]
    pub tokenizer: Option<PathBuf>,
}

/// How one input line becomes token ids.
struct Encoder {
    tokenizer: QwenTokenizer,
    /// Loaded on first use, so text-only inputs need no chat template in the folder.
    template: Option<ChatTemplate>,
    model_dir: PathBuf,
}

impl Encoder {
    fn encode(&mut self, line: &serde_json::Value) -> Result<Vec<u32>> {
        if let Some(text) = line.get("text") {
            let text = text.as_str().context("`text` must be a string")?;
            return Ok(self.tokenizer.encode(text, false)?);
        }
        let Some(messages) = line.get("messages") else {
            bail!("expected an object with `text` or `messages`");
        };
        let messages = messages.as_array().context("`messages` must be a list")?;
        let tools = match line.get("tools") {
            None | Some(serde_json::Value::Null) => None,
            Some(tools) => Some(tools.as_array().context("`tools` must be a list")?),
        };
        if self.template.is_none() {
            self.template = Some(ChatTemplate::from_model_dir(&self.model_dir)?);
        }
        let template = self.template.as_ref().context("chat template not loaded")?;
        let text = template.render(
            messages,
            tools.map(|t| t.as_slice()),
            RenderOptions {
                add_generation_prompt: false,
                enable_thinking: true,
            },
        )?;
        Ok(self.tokenizer.encode(&text, false)?)
    }
}

pub fn score(args: ScoreArgs) -> Result<()> {
    let model_dir = super::chat::resolve_model_dir(&args.model)?;
    let (model, _amx) = super::serve::load_for_inference(&model_dir, &args.dtype, args.cpu_matmul)?;
    let tokenizer_dir = args.tokenizer.clone().unwrap_or(model_dir);
    let mut encoder = Encoder {
        tokenizer: QwenTokenizer::from_dir(&tokenizer_dir)
            .with_context(|| format!("loading the tokenizer from {}", tokenizer_dir.display()))?,
        template: None,
        model_dir: tokenizer_dir,
    };
    let file = std::fs::File::open(&args.input)
        .with_context(|| format!("opening {}", args.input.display()))?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for (index, line) in std::io::BufReader::new(file).lines().enumerate() {
        let at = format!("{}:{}", args.input.display(), index + 1);
        let line = line.with_context(|| format!("reading {at}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("{at}: not JSON"))?;
        let ids = encoder.encode(&value).with_context(|| at.clone())?;
        let logprobs = model
            .score_sequence(&ids)
            .with_context(|| format!("{at}: scoring"))?;
        let record = serde_json::json!({ "ids": ids, "logprobs": logprobs });
        writeln!(out, "{record}")?;
        out.flush()?;
    }
    Ok(())
}
