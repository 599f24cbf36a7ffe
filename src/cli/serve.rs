//! `agentrl serve --model DIR`: a Qwen3 model folder behind vLLM's and SGLang's HTTP routes
//! (`/v1/completions`, `/v1/models`, LoRA load/unload, `/generate`, `/update_weights_from_disk`;
//! see `agentrl_engine::serve`), so the remote engine and anything written against vLLM's API
//! can run against a local model over loopback, with no GPU.
//!
//! Where it sits: the binding of the engine crate's generic server to Qwen3 —
//! `Qwen3::load` → `LocalServed<Qwen3>` (a `LocalEngine<Qwen3>` per adapter) →
//! `agentrl_engine::serve::start`. Omitted sampling parameters are filled from the folder's
//! `generation_config.json` as vLLM's `--generation-config auto` does (`--generation-config
//! vllm` ignores the file). `--force-temperature T` is a fault injection for testing the
//! mismatch preflight: every request is sampled and reported at `T`. `--cpu-matmul amx` (or
//! `auto`) packs the model's f32 weights for the CPU's AMX unit (the run config's
//! `engine.cpu_matmul`); adapters share the packed base and full-weight loads are packed
//! again. The first line on stdout
//! is `listening on http://HOST:PORT` (with `--port 0`, the port the system picked). Bound
//! anywhere but loopback it needs an API key, and with one it refuses requests without it
//! (`agentrl_gym::service::access`, the rule of `agentrl gym serve` too).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentrl_chat::qwen::QwenTokenizer;
use agentrl_engine::serve::{self, GenerationDefaults, LocalServed, ServeOptions, TextCodec};
use agentrl_engine::LogprobKind;
use agentrl_gym::service::{access, AccessRule};
use agentrl_model::fused::amx_matmul::CpuMatmul;
use agentrl_model::qwen3::{LoadOptions, Qwen3};
use anyhow::{bail, Context, Result};
use candle_core::DType;
use clap::{Args, ValueEnum};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// HF model folder: config.json and safetensors (single or sharded). Its
    /// generation_config.json fills omitted sampling parameters; a tokenizer.json enables text
    /// prompts and the `text` of responses.
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// Address to listen on. Anything but loopback needs an API key (AGENTRL_API_KEY or
    /// --api-key-file), as `agentrl gym serve`.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 = any free port, printed on the first line).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// The name requests must give as `model` (default: the --model argument, as vLLM).
    #[arg(long, value_name = "NAME")]
    pub served_model_name: Option<String>,
    /// Which log-probs responses carry (vLLM's --logprobs-mode): raw = log softmax(z), vLLM's
    /// default; temperature-scaled = log softmax(z/T), SGLang's default; processed = after
    /// top-k/top-p truncation, renormalised.
    #[arg(long, value_enum, default_value = "raw")]
    pub logprobs_mode: LogprobsMode,
    /// Where omitted sampling parameters come from: `auto` = the folder's
    /// generation_config.json, then vLLM's defaults; `vllm` = vLLM's defaults only.
    #[arg(long, value_enum, default_value = "auto")]
    pub generation_config: GenerationConfigSource,
    /// Fault injection for testing the mismatch preflight: sample and report every request at
    /// temperature T, whatever it asks for.
    #[arg(long, value_name = "T")]
    pub force_temperature: Option<f64>,
    /// Compute dtype: f32 or bf16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// The kernel for the model's f32 weights on the CPU (the run config's
    /// engine.cpu_matmul): f32 = the f32 GEMM; amx = bf16x3 on the CPU's AMX unit (~1.65x
    /// faster prefill and batched decoding, log-probs ~1e-4 off f32; an error without AMX or
    /// with --dtype bf16); auto = AMX where the CPU has it.
    #[arg(long, value_enum, default_value = "f32")]
    pub cpu_matmul: CpuMatmulArg,
    /// HTTP threads parsing requests (the model runs on one thread of its own).
    #[arg(long, default_value_t = 8)]
    pub http_threads: usize,
    #[command(flatten)]
    pub http: agentrl_gym::cli::HttpArgs,
    /// A file holding the API key clients must send as `Authorization: Bearer KEY` (vLLM's
    /// --api-key; instead of the AGENTRL_API_KEY variable).
    #[arg(long, value_name = "FILE")]
    pub api_key_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogprobsMode {
    Raw,
    TemperatureScaled,
    Processed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CpuMatmulArg {
    F32,
    Amx,
    Auto,
}

impl From<CpuMatmulArg> for CpuMatmul {
    fn from(arg: CpuMatmulArg) -> Self {
        match arg {
            CpuMatmulArg::F32 => Self::F32,
            CpuMatmulArg::Amx => Self::Amx,
            CpuMatmulArg::Auto => Self::Auto,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GenerationConfigSource {
    Auto,
    Vllm,
}

/// A Qwen3 folder loaded for inference, for `agentrl serve` and `agentrl score`: `--dtype`
/// ("f32" or "bf16") parsed, and the f32 weights packed for the CPU's AMX unit where
/// `--cpu-matmul` asks for it (refused, naming the flag, where it cannot apply). Returns the
/// model and whether it runs on AMX.
pub(super) fn load_for_inference(
    dir: &Path,
    dtype: &str,
    cpu_matmul: CpuMatmulArg,
) -> Result<(Qwen3, bool)> {
    let dtype = match dtype {
        "f32" => DType::F32,
        "bf16" => DType::BF16,
        other => bail!("--dtype must be f32 or bf16, got {other:?}"),
    };
    let cpu_matmul = CpuMatmul::from(cpu_matmul);
    if cpu_matmul == CpuMatmul::Amx && dtype != DType::F32 {
        bail!("--cpu-matmul amx multiplies f32 weights (bf16x3): it needs --dtype f32");
    }
    let amx = dtype == DType::F32 && cpu_matmul.wants_amx("--cpu-matmul")?;
    let options = LoadOptions {
        dtype,
        ..LoadOptions::default()
    };
    let mut model = Qwen3::load(dir, &options)
        .with_context(|| format!("loading the model from {}", dir.display()))?;
    if amx && !model.pack_for_amx()? {
        bail!(
            "--cpu-matmul {cpu_matmul}: no weight of this model could be packed for AMX (each \
             needs a whole number of 32 x 32 blocks); use --cpu-matmul f32"
        );
    }
    Ok((model, amx))
}

/// The folder's tokenizer as the server's text codec (special tokens kept both ways, as with
/// `skip_special_tokens: false`).
struct QwenText(QwenTokenizer);

impl TextCodec for QwenText {
    fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.0.encode(text, false)?)
    }

    fn decode(&self, ids: &[u32]) -> Result<String> {
        Ok(self.0.decode(ids, false)?)
    }
}

/// A GGUF file has no `generation_config.json`; its end-of-text id
/// (`tokenizer.ggml.eos_token_id`) is the stop token, as llama.cpp's server takes it.
fn gguf_generation_defaults(path: &std::path::Path) -> Result<GenerationDefaults> {
    let meta = agentrl_chat::gguf::GgufMetadata::read(path)?;
    let eos = meta.optional_u64("tokenizer.ggml.eos_token_id")?;
    Ok(GenerationDefaults {
        eos_token_ids: eos.map(|id| id as u32).into_iter().collect(),
        ..GenerationDefaults::default()
    })
}

pub fn serve(args: ServeArgs) -> Result<()> {
    let access = AccessRule::for_bind(&args.host, access::key_from(args.api_key_file.as_deref())?)?;
    let model_arg = args.model.to_str().with_context(|| {
        format!(
            "--model {}: the path is not valid UTF-8",
            args.model.display()
        )
    })?;
    let model_path = agentrl_chat::resolve_model_path(model_arg).map_err(anyhow::Error::msg)?;
    let gguf = agentrl_chat::gguf::is_gguf_file(&model_path);
    if !model_path.is_dir() && !gguf {
        bail!(
            "--model {}: no such folder or GGUF file",
            args.model.display()
        );
    }
    let args = ServeArgs {
        model: model_path,
        ..args
    };
    // Adapters loaded later share the packed base; full weights loaded later are packed again
    // (`agentrl_engine::serve::LocalServed`).
    let (model, amx) = load_for_inference(&args.model, &args.dtype, args.cpu_matmul)?;
    let defaults = match args.generation_config {
        GenerationConfigSource::Auto if gguf => gguf_generation_defaults(&args.model)?,
        GenerationConfigSource::Auto => GenerationDefaults::from_model_dir(&args.model)?,
        GenerationConfigSource::Vllm => GenerationDefaults::default(),
    };
    let text: Option<Arc<dyn TextCodec>> = if gguf || args.model.join("tokenizer.json").exists() {
        let tokenizer = QwenTokenizer::from_dir(&args.model)
            .with_context(|| format!("loading the tokenizer from {}", args.model.display()))?;
        Some(Arc::new(QwenText(tokenizer)))
    } else {
        None
    };
    let name = args
        .served_model_name
        .clone()
        .unwrap_or_else(|| args.model.display().to_string());
    let path = std::path::absolute(&args.model)
        .unwrap_or_else(|_| args.model.clone())
        .display()
        .to_string();
    let logprobs_mode = match args.logprobs_mode {
        LogprobsMode::Raw => LogprobKind::Raw,
        LogprobsMode::TemperatureScaled => LogprobKind::TemperatureScaled,
        LogprobsMode::Processed => LogprobKind::Processed,
    };
    let server_options = ServeOptions {
        logprobs_mode,
        force_temperature: args.force_temperature,
        defaults,
        text,
        http_threads: args.http_threads,
        http: args.http.limits()?,
        access,
        ..ServeOptions::default()
    };
    let served = LocalServed::new(model, name.clone(), path);
    let server = serve::start(
        served,
        server_options,
        &format!("{}:{}", args.host, args.port),
    )?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on {}", server.url())?;
    stdout.flush()?;
    let forced = args
        .force_temperature
        .map(|t| format!(", FAULT INJECTION: every request sampled at temperature {t}"))
        .unwrap_or_default();
    let matmul = if amx { "AMX (bf16x3)" } else { "f32" };
    eprintln!(
        "agentrl serve: model {name:?} on {} (log-probs {:?}, matmul {matmul}{forced})",
        server.url(),
        logprobs_mode
    );
    server.wait_for_signal()
}
