//! The remote engine against `agentrl serve`'s server over loopback, in process: a tiny random
//! Qwen3 behind both protocols' routes, compared with the local engine on the same model and
//! seeds; load balancing with a dead endpoint; a server that always fails; the startup model
//! check; LoRA and full-weight sync; `generation_config.json` defaults and the forced
//! temperature; prompt scoring.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use agentrl_engine::remote::Balance;
use agentrl_engine::serve::{self, GenerationDefaults, LocalServed, ServeOptions, ServedModel};
use agentrl_engine::{
    Completion, Engine, FinishReason, GenerateParams, GenerateRequest, LocalEngine, LogprobKind,
    Protocol, RemoteConfig, RemoteEngine, SamplingParams, WeightSync,
};
use agentrl_model::lora::LoraConfig;
use agentrl_model::qwen3::{Architecture, LoadOptions, Qwen3, Qwen3Config};
use candle_core::{Device, Tensor};

const NAME: &str = "tiny-qwen3";

fn tiny(seed: u64) -> Qwen3 {
    let config = Qwen3Config {
        vocab_size: 48,
        hidden_size: 32,
        intermediate_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 8,
        rms_norm_eps: 1e-6,
        rope_theta: 10_000.0,
        tie_word_embeddings: true,
        max_position_embeddings: 96,
        architecture: Architecture::Qwen3,
        rope_scaling: None,
    };
    Qwen3::random(config, seed, 0.3, &LoadOptions::default()).unwrap()
}

fn options(mode: LogprobKind) -> ServeOptions {
    ServeOptions {
        logprobs_mode: mode,
        http_threads: 4,
        ..ServeOptions::default()
    }
}

fn start(model: &Qwen3, options: ServeOptions) -> serve::Server {
    serve::start(
        LocalServed::new(model.clone(), NAME, "/models/tiny"),
        options,
        "127.0.0.1:0",
    )
    .unwrap()
}

fn config(protocol: Protocol, endpoints: Vec<String>, kind: LogprobKind) -> RemoteConfig {
    RemoteConfig {
        logprob_kind: Some(kind),
        backoff_s: 0.01,
        request_timeout_s: 60.0,
        ..RemoteConfig::new(protocol, endpoints, NAME)
    }
}

fn requests(seed: u64) -> Vec<GenerateRequest> {
    [vec![1, 2, 3], vec![4, 5, 6, 7, 8], vec![9], vec![10, 11]]
        .into_iter()
        .enumerate()
        .map(|(i, prompt)| GenerateRequest {
            prompt,
            seed: seed + i as u64,
            session: None,
        })
        .collect()
}

fn params(temperature: f64, stop: &[u32]) -> GenerateParams {
    GenerateParams {
        sampling: SamplingParams {
            temperature,
            top_p: 1.0,
            top_k: 0,
        },
        max_tokens: 12,
        stop: stop.to_vec(),
    }
}

fn local(model: &Qwen3, reqs: &[GenerateRequest], p: &GenerateParams) -> Vec<Completion> {
    LocalEngine::new(model.clone()).generate(reqs, p).unwrap()
}

fn assert_same_samples(remote: &[Completion], local: &[Completion]) {
    assert_eq!(remote.len(), local.len());
    for (i, (r, l)) in remote.iter().zip(local).enumerate() {
        assert_eq!(r.tokens, l.tokens, "row {i}");
        assert_eq!(r.finish, l.finish, "row {i}");
        for (a, b) in r.logprobs.iter().zip(&l.logprobs) {
            assert!((a - b).abs() < 1e-5, "row {i}: {a} vs {b}");
        }
    }
}

/// Raw log-probs of `ids[1..]` from the model's own full forward pass.
fn raw_scores(model: &Qwen3, ids: &[u32]) -> Vec<f32> {
    model.score_sequence(ids).unwrap()
}

#[test]
fn loopback_samples_equal_the_local_engine_on_both_protocols() {
    let model = tiny(0);
    let server = start(&model, options(LogprobKind::TemperatureScaled));
    let stop = [1, 2, 3, 4, 5, 6];
    let p = params(0.9, &stop);
    let reqs = requests(11);
    let want = local(&model, &reqs, &p);
    // The stop token is part of the completion, and some row hits it.
    assert!(want.iter().any(|c| c.finish == FinishReason::Stop));
    for c in want.iter().filter(|c| c.finish == FinishReason::Stop) {
        assert!(stop.contains(c.tokens.last().unwrap()));
    }
    for protocol in [Protocol::Vllm, Protocol::Sglang] {
        let mut remote = RemoteEngine::connect(config(
            protocol,
            vec![server.url()],
            LogprobKind::TemperatureScaled,
        ))
        .unwrap();
        assert_eq!(remote.max_seq(), 96);
        assert!(remote.servers()[0].version.starts_with("agentrl-serve"));
        let got = remote.generate(&reqs, &p).unwrap();
        assert_same_samples(&got, &want);
        for c in &got {
            assert_eq!(c.logprob_kind, LogprobKind::TemperatureScaled);
            assert_eq!(c.weight_version, 0);
        }
    }
}

#[test]
fn raw_mode_and_prompt_scoring_match_the_full_forward_pass() {
    let model = tiny(1);
    let server = start(&model, options(LogprobKind::Raw));
    let p = params(0.7, &[]);
    let reqs = requests(3);
    let want = local(&model, &reqs, &p);
    for protocol in [Protocol::Vllm, Protocol::Sglang] {
        let mut remote = RemoteEngine::connect(RemoteConfig {
            logprob_kind: None,
            ..config(protocol, vec![server.url()], LogprobKind::Raw)
        })
        .unwrap();
        let got = remote.generate(&reqs, &p).unwrap();
        for ((g, w), r) in got.iter().zip(&want).zip(&reqs) {
            // Same samples; raw (not temperature-scaled) log-probs.
            assert_eq!(g.tokens, w.tokens);
            let mut seq = r.prompt.clone();
            seq.extend(&g.tokens);
            let raw = raw_scores(&model, &seq);
            for (k, lp) in g.logprobs.iter().enumerate() {
                let want_lp = raw[r.prompt.len() - 1 + k];
                assert!(
                    (lp - want_lp).abs() < 1e-4,
                    "{protocol:?} {lp} vs {want_lp}"
                );
            }
            assert!(g
                .logprobs
                .iter()
                .zip(&w.logprobs)
                .any(|(a, b)| (a - b).abs() > 1e-3));
        }
        let expected_kind = match protocol {
            Protocol::Vllm => LogprobKind::Raw,
            Protocol::Sglang => LogprobKind::TemperatureScaled,
        };
        assert_eq!(got[0].logprob_kind, expected_kind, "the protocol default");
        let ids = [3, 1, 4, 1, 5, 9, 2, 6];
        let scored = remote.score_prompt(&ids).unwrap();
        let want = raw_scores(&model, &ids);
        assert_eq!(scored.len(), ids.len() - 1);
        for (a, b) in scored.iter().zip(&want) {
            assert!(
                (a - b).abs() < 1e-4,
                "{protocol:?} prompt log-prob {a} vs {b}"
            );
        }
    }
}

/// A served model that counts the rows it generated.
struct Counting {
    inner: LocalServed<Qwen3>,
    rows: Arc<AtomicUsize>,
}

impl ServedModel for Counting {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn model_path(&self) -> String {
        self.inner.model_path()
    }
    fn max_seq(&self) -> usize {
        self.inner.max_seq()
    }
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }
    fn generate(
        &mut self,
        adapter: Option<&str>,
        requests: &[GenerateRequest],
        params: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>> {
        self.rows.fetch_add(requests.len(), Ordering::SeqCst);
        self.inner.generate(adapter, requests, params)
    }
    fn position_logits(
        &mut self,
        adapter: Option<&str>,
        ids: &[u32],
        positions: Range<usize>,
    ) -> anyhow::Result<Vec<Vec<f32>>> {
        self.inner.position_logits(adapter, ids, positions)
    }
    fn adapters(&self) -> Vec<(String, String)> {
        self.inner.adapters()
    }
    fn load_lora(&mut self, name: &str, dir: &Path) -> anyhow::Result<()> {
        self.inner.load_lora(name, dir)
    }
    fn unload_lora(&mut self, name: &str) -> anyhow::Result<()> {
        self.inner.unload_lora(name)
    }
    fn load_full_weights(&mut self, dir: &Path) -> anyhow::Result<()> {
        self.inner.load_full_weights(dir)
    }
}

/// A server that answers vLLM's startup checks for `NAME` and then stops listening: an
/// endpoint that died after the engine connected. Each answer closes its connection, so no
/// kept-alive connection outlives it.
fn dies_after_startup() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for _ in 0..2 {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).unwrap();
                if header.trim().is_empty() {
                    break;
                }
            }
            let body = if path == "/version" {
                r#"{"version": "0.11.0"}"#.to_string()
            } else {
                format!(
                    r#"{{"object": "list", "data": [{{"id": "{NAME}", "max_model_len": 96}}]}}"#
                )
            };
            let mut stream = stream;
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let _ = stream.flush();
        }
        // The listener drops here: connections are refused from now on.
    });
    url
}

#[test]
fn several_endpoints_share_the_load_and_a_dead_one_is_retried_elsewhere() {
    let model = tiny(2);
    let counts = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
    let servers: Vec<serve::Server> = counts
        .iter()
        .map(|rows| {
            serve::start(
                Counting {
                    inner: LocalServed::new(model.clone(), NAME, "/models/tiny"),
                    rows: Arc::clone(rows),
                },
                options(LogprobKind::TemperatureScaled),
                "127.0.0.1:0",
            )
            .unwrap()
        })
        .collect();
    let dead = dies_after_startup();
    let mut remote = RemoteEngine::connect(RemoteConfig {
        balance: Balance::RoundRobin,
        max_in_flight: 2,
        ..config(
            Protocol::Vllm,
            vec![servers[0].url(), dead, servers[1].url()],
            LogprobKind::TemperatureScaled,
        )
    })
    .unwrap();
    let p = params(1.0, &[]);
    let reqs: Vec<GenerateRequest> = (0..3).flat_map(|k| requests(100 * k)).collect();
    let got = remote.generate(&reqs, &p).unwrap();
    assert_same_samples(&got, &local(&model, &reqs, &p));
    let served: Vec<usize> = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    assert_eq!(served.iter().sum::<usize>(), reqs.len(), "{served:?}");
    assert!(
        served.iter().all(|&n| n > 0),
        "both live servers served: {served:?}"
    );
}

/// A model whose every generation fails (the server answers 500).
struct AlwaysFails;

impl ServedModel for AlwaysFails {
    fn name(&self) -> &str {
        NAME
    }
    fn model_path(&self) -> String {
        "/nowhere".into()
    }
    fn max_seq(&self) -> usize {
        64
    }
    fn vocab_size(&self) -> usize {
        48
    }
    fn generate(
        &mut self,
        _: Option<&str>,
        _: &[GenerateRequest],
        _: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>> {
        anyhow::bail!("injected failure")
    }
    fn position_logits(
        &mut self,
        _: Option<&str>,
        _: &[u32],
        _: Range<usize>,
    ) -> anyhow::Result<Vec<Vec<f32>>> {
        anyhow::bail!("injected failure")
    }
    fn adapters(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    fn load_lora(&mut self, _: &str, _: &Path) -> anyhow::Result<()> {
        anyhow::bail!("injected failure")
    }
    fn unload_lora(&mut self, _: &str) -> anyhow::Result<()> {
        anyhow::bail!("injected failure")
    }
    fn load_full_weights(&mut self, _: &Path) -> anyhow::Result<()> {
        anyhow::bail!("injected failure")
    }
}

#[test]
fn a_server_that_always_fails_is_an_error_naming_it_not_a_dropped_result() {
    let server = serve::start(AlwaysFails, options(LogprobKind::Raw), "127.0.0.1:0").unwrap();
    for protocol in [Protocol::Vllm, Protocol::Sglang] {
        let mut remote = RemoteEngine::connect(RemoteConfig {
            retries: 2,
            ..config(protocol, vec![server.url()], LogprobKind::Raw)
        })
        .unwrap();
        let err = remote
            .generate(&requests(0), &params(1.0, &[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&server.url()), "{err}");
        // Whichever request used up its attempts first is named (the others are cancelled).
        assert!(
            (0..4).any(|i| err.contains(&format!("request {i} of 4")))
                && !err.contains("cancelled"),
            "{err}"
        );
        assert!(err.contains("3 attempts"), "{err}");
        assert!(
            err.contains("HTTP 500") && err.contains("injected failure"),
            "{err}"
        );
    }
}

#[test]
fn a_wrong_model_name_or_a_dead_endpoint_is_refused_at_start() {
    let model = tiny(3);
    let server = start(&model, options(LogprobKind::Raw));
    for protocol in [Protocol::Vllm, Protocol::Sglang] {
        let err = RemoteEngine::connect(RemoteConfig::new(
            protocol,
            vec![server.url()],
            "Qwen/Qwen3-0.6B",
        ))
        .unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains(&server.url()), "{text}");
        assert!(
            text.contains("not the configured model \"Qwen/Qwen3-0.6B\""),
            "{text}"
        );
        assert!(text.contains(NAME), "{text}");
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = format!("http://127.0.0.1:{port}");
    let err = RemoteEngine::connect(RemoteConfig::new(Protocol::Vllm, vec![dead.clone()], NAME))
        .unwrap_err();
    assert!(format!("{err:#}").contains(&dead), "{err:#}");
}

/// Writes a LoRA adapter with random (non-zero) `B` factors in PEFT layout.
fn write_adapter(base: &Qwen3, dir: &Path, seed: u64) -> Qwen3 {
    let config = LoraConfig {
        rank: 2,
        alpha: 4.0,
        target_modules: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
    };
    let mut model = base.clone();
    model.add_lora(&config, seed).unwrap();
    for (name, var) in model.lora_vars() {
        if name.contains("lora_B") {
            let noise = Tensor::randn(0f32, 0.5, var.shape(), &Device::Cpu).unwrap();
            var.set(&noise).unwrap();
        }
    }
    model.save_lora_peft(dir, &config, NAME).unwrap();
    let mut loaded = base.clone();
    loaded.load_lora_peft(dir).unwrap();
    loaded
}

#[test]
fn lora_sync_in_place_changes_the_samples_and_the_weight_version() {
    let base = tiny(4);
    let server = start(&base, options(LogprobKind::TemperatureScaled));
    let p = params(1.0, &[]);
    let reqs = requests(5);
    for (round, protocol) in [Protocol::Vllm, Protocol::Sglang].into_iter().enumerate() {
        let mut remote = RemoteEngine::connect(config(
            protocol,
            vec![server.url()],
            LogprobKind::TemperatureScaled,
        ))
        .unwrap();
        let before = remote.generate(&reqs, &p).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let name = format!("policy-{round}");
        for (version, seed) in [(1u64, 10u64), (2, 20)] {
            // The same folder and name each time: the second load replaces the first in place.
            let adapted = write_adapter(&base, dir.path(), seed + round as u64);
            remote
                .sync_weights(&WeightSync::LoraAdapter {
                    dir: dir.path().to_path_buf(),
                    name: name.clone(),
                    version,
                })
                .unwrap();
            assert_eq!(remote.weight_version(), version);
            assert_eq!(remote.adapter(), Some(name.as_str()));
            let after = remote.generate(&reqs, &p).unwrap();
            assert_same_samples(&after, &local(&adapted, &reqs, &p));
            assert!(after.iter().all(|c| c.weight_version == version));
            let logprobs =
                |c: &[Completion]| c.iter().map(|c| c.logprobs.clone()).collect::<Vec<_>>();
            assert_ne!(
                logprobs(&after),
                logprobs(&before),
                "the adapter changes the samples"
            );
        }
    }
    // Syncing the trainer's weights "in place" means nothing to a server.
    let mut remote = RemoteEngine::connect(config(
        Protocol::Vllm,
        vec![server.url()],
        LogprobKind::TemperatureScaled,
    ))
    .unwrap();
    let err = remote
        .sync_weights(&WeightSync::Shared { version: 1 })
        .unwrap_err();
    assert!(err
        .to_string()
        .contains("cannot read the trainer's weights"));
    // A missing adapter folder fails the sync, and the engine refuses to sample until a
    // sync succeeds.
    let err = remote
        .sync_weights(&WeightSync::LoraAdapter {
            dir: "/no/such/adapter".into(),
            name: "x".into(),
            version: 9,
        })
        .unwrap_err();
    assert!(format!("{err:#}").contains(&server.url()), "{err:#}");
    let err = remote.generate(&reqs, &p).unwrap_err();
    assert!(err.to_string().contains("last weight sync failed"), "{err}");
}

#[test]
fn full_weight_sync_goes_through_sglang_and_stamps_its_version() {
    let model = tiny(5);
    let next = tiny(6);
    let dir = tempfile::tempdir().unwrap();
    next.save(dir.path()).unwrap();
    let server = start(&model, options(LogprobKind::TemperatureScaled));
    let p = params(1.0, &[]);
    let reqs = requests(8);
    let mut remote = RemoteEngine::connect(config(
        Protocol::Sglang,
        vec![server.url()],
        LogprobKind::TemperatureScaled,
    ))
    .unwrap();
    remote
        .sync_weights(&WeightSync::FullWeights {
            dir: dir.path().to_path_buf(),
            version: 5,
        })
        .unwrap();
    let got = remote.generate(&reqs, &p).unwrap();
    assert_same_samples(&got, &local(&next, &reqs, &p));
    assert!(got.iter().all(|c| c.weight_version == 5));
    let mut vllm = RemoteEngine::connect(config(
        Protocol::Vllm,
        vec![server.url()],
        LogprobKind::TemperatureScaled,
    ))
    .unwrap();
    let err = vllm
        .sync_weights(&WeightSync::FullWeights {
            dir: dir.path().to_path_buf(),
            version: 6,
        })
        .unwrap_err();
    assert!(err.to_string().contains("vLLM has no HTTP route"), "{err}");
}

fn post(url: &str, route: &str, body: serde_json::Value) -> serde_json::Value {
    let text = ureq::post(&format!("{url}{route}"))
        .send_string(&body.to_string())
        .unwrap()
        .into_string()
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids_of(value: &serde_json::Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn omitted_parameters_come_from_generation_config_and_forced_temperature_wins() {
    let model = tiny(7);
    let defaults = GenerationDefaults::from_json(
        r#"{"temperature": 0.6, "top_k": 20, "top_p": 0.95, "max_new_tokens": 9}"#,
    )
    .unwrap();
    let server = start(
        &model,
        ServeOptions {
            defaults,
            ..options(LogprobKind::TemperatureScaled)
        },
    );
    let prompt = vec![5u32, 6, 7];
    let request = |seed| GenerateRequest {
        prompt: prompt.clone(),
        seed,
        session: None,
    };
    let folder = GenerateParams {
        sampling: SamplingParams {
            temperature: 0.6,
            top_p: 0.95,
            top_k: 20,
        },
        max_tokens: 9,
        stop: vec![],
    };
    let bare = post(
        &server.url(),
        "/v1/completions",
        serde_json::json!({"model": NAME, "prompt": prompt, "seed": 3, "logprobs": 0,
                           "return_token_ids": true}),
    );
    let want = local(&model, &[request(3)], &folder).remove(0);
    let choice = &bare["choices"][0];
    assert_eq!(ids_of(&choice["token_ids"]), want.tokens);
    let lps: Vec<f64> = choice["logprobs"]["token_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    for (a, b) in lps.iter().zip(&want.logprobs) {
        assert!((a - *b as f64).abs() < 1e-5);
    }
    // SGLang's route fills the same defaults.
    let sgl = post(
        &server.url(),
        "/generate",
        serde_json::json!({"input_ids": prompt, "sampling_params": {"sampling_seed": 3},
                           "return_logprob": true}),
    );
    assert_eq!(ids_of(&sgl["output_ids"]), want.tokens);
    // The remote engine sends every parameter, so the folder's defaults never apply to it.
    let mut remote = RemoteEngine::connect(config(
        Protocol::Vllm,
        vec![server.url()],
        LogprobKind::TemperatureScaled,
    ))
    .unwrap();
    let explicit = params(1.0, &[]);
    let got = remote.generate(&[request(3)], &explicit).unwrap();
    assert_same_samples(&got, &local(&model, &[request(3)], &explicit));
    drop(server);

    // A server forced to temperature 0.5 samples and reports at 0.5 whatever is asked.
    let forced = start(
        &model,
        ServeOptions {
            force_temperature: Some(0.5),
            ..options(LogprobKind::TemperatureScaled)
        },
    );
    let mut remote = RemoteEngine::connect(config(
        Protocol::Vllm,
        vec![forced.url()],
        LogprobKind::TemperatureScaled,
    ))
    .unwrap();
    let got = remote.generate(&requests(1), &explicit).unwrap();
    assert_same_samples(&got, &local(&model, &requests(1), &params(0.5, &[])));
}
