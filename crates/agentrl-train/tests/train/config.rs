//! The run configuration: loading, `--set` overrides, presets, validation errors and
//! warnings, and the shipped `configs/*.toml` files.

use std::path::Path;

use agentrl_rl::AggMode;

use agentrl_train::algo::Algorithm;
use agentrl_train::config::{
    load_config, parse_config_file, Config, ScheduleKind, DEFAULT_CONFIG_TOML,
};

fn with(sets: &[&str]) -> anyhow::Result<Config> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    load_config(None, &sets)
}

fn errors_of(sets: &[&str]) -> Vec<String> {
    with(sets).expect("config loads").validate().errors
}

#[test]
fn stale_async_rollouts_get_decoupled_correction_unless_one_is_chosen() -> anyhow::Result<()> {
    let stale = with(&["engine.async_rollouts=true", "engine.max_staleness=2"])?;
    assert_eq!(
        stale.algorithm.knobs.rollout_is,
        Some(agentrl_rl::IsLevel::Token)
    );
    assert!(stale.algorithm.knobs.old_logprob_pass);
    let v = stale.validate();
    assert!(v.errors.is_empty(), "{:?}", v.errors);
    assert!(v.warnings.iter().any(|w| w.contains("decoupled PPO")));
    // The resolved config, as a run directory stores it, reads back the same.
    assert_eq!(
        parse_config_file_from_str(&stale.to_toml()?)?
            .algorithm
            .knobs,
        stale.algorithm.knobs
    );
    // A bound of 0 is the synchronous run, and a chosen correction is kept.
    let fresh = with(&["engine.async_rollouts=true", "engine.max_staleness=0"])?;
    assert_eq!(fresh.algorithm.knobs.rollout_is, None);
    let bypass = with(&[
        "engine.async_rollouts=true",
        "algorithm.bypass_mode=true",
        "algorithm.rollout_is=\"sequence\"",
    ])?;
    assert_eq!(
        bypass.algorithm.knobs.rollout_is,
        Some(agentrl_rl::IsLevel::Sequence)
    );
    assert!(!bypass.algorithm.knobs.old_logprob_pass);
    Ok(())
}

#[test]
fn the_default_config_is_the_builtin_file_and_names_every_key() -> anyhow::Result<()> {
    let builtin = Config::builtin()?;
    assert_eq!(Config::default(), builtin);
    assert_eq!(builtin.sampling, agentrl_engine::SamplingParams::default());
    // Every key of the schema is written in configs/default.toml, except the algorithm
    // knobs (they come from the preset) and the keys that default to unset.
    let file: toml::Table = toml::from_str(DEFAULT_CONFIG_TOML)?;
    let written: toml::Table = toml::from_str(&builtin.to_toml()?)?;
    for (section, body) in &written {
        if section == "algorithm" {
            continue;
        }
        let (Some(toml::Value::Table(body)), Some(toml::Value::Table(in_file))) =
            (Some(body), file.get(section))
        else {
            panic!("section [{section}] missing from configs/default.toml");
        };
        for key in body.keys() {
            assert!(
                in_file.contains_key(key),
                "{section}.{key} missing from default.toml"
            );
        }
    }
    Ok(())
}

#[test]
fn every_shipped_config_loads_validates_and_round_trips() -> anyhow::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let mut seen = Vec::new();
    // The presets, and `configs/tests/`: the configs tests and experiments train with.
    let mut paths = Vec::new();
    for folder in [dir.clone(), dir.join("tests")] {
        for entry in std::fs::read_dir(&folder)? {
            paths.push(entry?.path());
        }
    }
    assert!(paths
        .iter()
        .any(|p| p.ends_with("tests/qwen3-tiny-grpo.toml")));
    for path in paths {
        if path.extension().is_none_or(|e| e != "toml") {
            // `configs/models/`: model shapes for `agentrl plan`, not run configs.
            continue;
        }
        let config = load_config(Some(&path), &[])?;
        let v = config.validate();
        assert!(v.errors.is_empty(), "{}: {:?}", path.display(), v.errors);
        // The written-out config (as stored in a run) reads back unchanged.
        let back = parse_config_file_from_str(&config.to_toml()?)?;
        assert_eq!(
            back.algorithm.knobs,
            config.algorithm.knobs,
            "{}",
            path.display()
        );
        assert_eq!(back.algorithm.name, config.algorithm.name);
        assert_eq!(back.optim, config.optim);
        seen.push(config.algorithm.name);
        // A preset file names only what differs from its preset.
        let raw: toml::Table = toml::from_str(&std::fs::read_to_string(&path)?)?;
        if let Some(toml::Value::Table(algo)) = raw.get("algorithm") {
            let preset = toml::Value::try_from(config.algorithm.name.preset())?;
            for (key, value) in algo {
                if key != "name" {
                    assert_ne!(
                        preset.get(key),
                        Some(value),
                        "{}: algorithm.{key} repeats the preset's value",
                        path.display()
                    );
                }
            }
        }
    }
    for algorithm in agentrl_train::algo::ALL {
        assert!(seen.contains(&algorithm), "no config file for {algorithm}");
    }
    Ok(())
}

fn parse_config_file_from_str(text: &str) -> anyhow::Result<Config> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("config.toml");
    std::fs::write(&path, text)?;
    parse_config_file(&path)
}

/// The default run pools candidate keys "mean-last"; a run folder written before
/// `model.pointer_pool` existed resumes and evaluates with the mean it was trained with.
#[test]
fn a_run_config_without_pointer_pool_reads_as_the_mean_it_was_trained_with() -> anyhow::Result<()> {
    use agentrl_model::tiny::PointerPool;
    let builtin = Config::builtin()?;
    assert_eq!(builtin.model.pointer_pool, PointerPool::MeanLast);
    let mut raw: toml::Table = toml::from_str(&builtin.to_toml()?)?;
    let Some(toml::Value::Table(model)) = raw.get_mut("model") else {
        anyhow::bail!("no [model] table in the written config");
    };
    assert!(model.remove("pointer_pool").is_some());
    let old = parse_config_file_from_str(&toml::to_string(&raw)?)?;
    assert_eq!(old.model.pointer_pool, PointerPool::Mean);
    let chosen = load_config(None, &["model.pointer_pool=\"mean\"".to_string()])?;
    assert_eq!(chosen.model.pointer_pool, PointerPool::Mean);
    let err = load_config(None, &["model.pointer_pool=\"max\"".to_string()]).unwrap_err();
    assert!(format!("{err:#}").contains("pointer_pool"), "{err:#}");
    Ok(())
}

#[test]
fn a_truncated_run_config_is_an_error_naming_the_file() -> anyhow::Result<()> {
    let text = Config::builtin()?.to_toml()?;
    let cut = &text[..text.len() / 2];
    let err = parse_config_file_from_str(cut).unwrap_err().to_string();
    assert!(err.contains("config.toml"), "{err}");
    let err = parse_config_file_from_str("").unwrap_err().to_string();
    assert!(
        err.contains("config.toml") && err.contains("missing"),
        "{err}"
    );
    Ok(())
}

#[test]
fn overrides_parse_values_as_toml_or_strings() -> anyhow::Result<()> {
    let c = with(&[
        "optim.lr=0.01",
        "rollout.group_size=3",
        "algorithm.name=ppo",
        "algorithm.loss_agg_mode=\"token-mean\"",
        "train.run_name=my-run",
        "optim.schedule=cosine",
    ])?;
    assert_eq!(c.optim.lr, 0.01);
    assert_eq!(c.rollout.group_size, 3);
    assert_eq!(c.algorithm.name, Algorithm::Ppo);
    assert_eq!(c.algorithm.knobs.loss_agg_mode, AggMode::TokenMean);
    assert_eq!(c.train.run_name.as_deref(), Some("my-run"));
    assert_eq!(c.optim.schedule, ScheduleKind::Cosine);
    Ok(())
}

#[test]
fn unknown_keys_and_bad_values_are_named() {
    let err = with(&["optim.lrr=1"]).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("optim.lrr") && msg.contains("lr"), "{msg}");
    let err = with(&["optimizer.lr=1"]).unwrap_err();
    assert!(format!("{err:#}").contains("optimizer"), "{err:#}");
    let err = with(&["lr=1"]).unwrap_err();
    assert!(format!("{err:#}").contains("`lr`"), "{err:#}");
    let err = with(&["optim.lr"]).unwrap_err();
    assert!(format!("{err:#}").contains("key.path=value"), "{err:#}");
    let err = with(&["algorithm.name=sarsa"]).unwrap_err();
    assert!(format!("{err:#}").contains("sarsa"), "{err:#}");
    let err = with(&["rollout.group_size=many"]).unwrap_err();
    assert!(format!("{err:#}").contains("group_size"), "{err:#}");
    // An unknown algorithm knob is named with the valid ones.
    let err = with(&["algorithm.eps_lo=0.1"]).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("eps_lo") && msg.contains("eps_low"), "{msg}");
    // Dead knobs are gone.
    assert!(with(&["algorithm.ratio_level=token"]).is_err());
    assert!(with(&["algorithm.clip_eps=0.2"]).is_err());
    // The names before verl's still load (old run directories), once.
    let legacy = with(&["algorithm.agg=token-sum", "algorithm.kl_estimator=k2"]).unwrap();
    assert_eq!(legacy.algorithm.knobs.loss_agg_mode, AggMode::TokenSum);
    assert_eq!(
        legacy.algorithm.knobs.kl_loss_type,
        agentrl_rl::KlEstimator::K2
    );
    let err = with(&[
        "algorithm.agg=token-sum",
        "algorithm.loss_agg_mode=token-mean",
    ]);
    assert!(format!("{:#}", err.unwrap_err()).contains("same knob"));
}

/// verl's names select the estimator, loss, aggregation, KL type and rollout correction on
/// any preset; a wrong one is an error naming the field and listing the valid names.
#[test]
fn verl_names_select_and_wrong_names_are_named() {
    let k = with(&[
        "algorithm.name=dapo",
        "algorithm.adv_estimator=rloo",
        "algorithm.policy_loss=cispo",
        "algorithm.loss_agg_mode=token-sum",
        "algorithm.kl_loss_type=low_var_kl+",
        "algorithm.old_logprob_pass=true",
        "algorithm.rollout_is=sequence",
        "algorithm.rollout_rs=\"token_k1,seq_mean_k3\"",
        "algorithm.rollout_rs_threshold=\"0.5_2.0,0.01\"",
    ])
    .unwrap();
    assert!(k.validate().errors.is_empty(), "{:?}", k.validate().errors);
    let knobs = &k.algorithm.knobs;
    assert_eq!(knobs.adv_estimator.as_str(), "rloo");
    assert_eq!(knobs.policy_loss.as_str(), "cispo");
    assert_eq!(knobs.loss_agg_mode, AggMode::TokenSum);
    assert_eq!(knobs.kl_loss_type, agentrl_rl::KlEstimator::K3Plus);
    // The preset's other knobs stay (DAPO's clip-higher).
    assert_eq!(knobs.eps_high, 0.28);
    assert!(knobs.rollout_correction().unwrap().is_some());
    // The written-out config reads back the same.
    let back: Config = toml::from_str(&k.to_toml().unwrap()).unwrap();
    assert_eq!(&back.algorithm.knobs, knobs);
    let cases: &[(&str, &[&str])] = &[
        (
            "algorithm.adv_estimator=grpo_plus",
            &["algorithm.adv_estimator", "gdpo"],
        ),
        (
            "algorithm.policy_loss=ppo",
            &["algorithm.policy_loss", "geo_mean"],
        ),
        (
            "algorithm.loss_agg_mode=mean",
            &["algorithm.loss_agg_mode", "seq-mean-token-sum-norm"],
        ),
        (
            "algorithm.kl_loss_type=full",
            &["algorithm.kl_loss_type", "k3+"],
        ),
        (
            "algorithm.rollout_is=tokens",
            &["algorithm.rollout_is", "sequence"],
        ),
        (
            "algorithm.loss_type=pg",
            &["algorithm.loss_type", "reinforce"],
        ),
        (
            "algorithm.gdpo_reward_keys=[\"hidden\"]",
            &["algorithm.gdpo_reward_keys", "hidden_fraction"],
        ),
    ];
    for (set, needles) in cases {
        let msg = format!("{:#}", with(&[set]).unwrap_err());
        for needle in *needles {
            assert!(msg.contains(needle), "{set}: {needle:?} not in {msg}");
        }
    }
    let v = with(&[
        "algorithm.old_logprob_pass=true",
        "algorithm.rollout_rs=seq_max_k9",
        "algorithm.rollout_rs_threshold=2.0",
    ])
    .unwrap()
    .validate();
    assert!(
        v.errors
            .iter()
            .any(|e| e.contains("algorithm.rollout_rs") && e.contains("seq_max_k3")),
        "{:?}",
        v.errors
    );
}

#[test]
fn a_config_file_with_an_unknown_key_is_rejected() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[optim]\nlearning_rate = 1.0\n")?;
    let err = load_config(Some(&path), &[]).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("learning_rate") && msg.contains("bad.toml"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn nonsense_knob_combinations_are_errors() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["algorithm.name=ppo", "algorithm.old_logprob_pass=false"],
            "old_logprob_pass",
        ),
        (&["algorithm.epochs=3"], "old_logprob_pass"),
        (
            &["algorithm.name=dapo", "rollout.group_size=1"],
            "dynamic_sampling",
        ),
        (&["algorithm.value_coef=0.5"], "no critic"),
        (&["algorithm.rollout_is=token"], "old_logprob_pass"),
        (
            &[
                "algorithm.name=bypass_pg_is",
                "algorithm.old_logprob_pass=true",
            ],
            "bypass_mode",
        ),
        (&["algorithm.policy_loss=dppo_kl"], "dual_clip_c"),
        (
            &["algorithm.adv_estimator=grpo_passk", "rollout.group_size=1"],
            "grpo_passk",
        ),
        (
            &["algorithm.name=gdpo", "algorithm.gdpo_reward_weights=[1.0]"],
            "gdpo_reward_weights",
        ),
        (
            &["algorithm.eps_low=0.3", "algorithm.eps_high=0.2"],
            "eps_high",
        ),
        (&["algorithm.dual_clip_c=0.5"], "dual_clip_c"),
        (&["algorithm.name=rloo", "rollout.group_size=1"], "rloo"),
        (&["model.d_model=30", "model.heads=4"], "multiple"),
        (
            &["train.steps=60", "train.format_warmup_steps=60"],
            "no RL steps",
        ),
        (
            &[
                "train.format_warmup_kl_anchor=true",
                "algorithm.kl_coef=0.1",
            ],
            "no warm-up to anchor to",
        ),
        (
            &[
                "train.format_warmup_kl_anchor=true",
                "train.format_warmup_steps=5",
            ],
            "no KL term to anchor",
        ),
        (&["sampling.top_p=0"], "top_p"),
        (&["optim.eps=0"], "optim.eps"),
        (&["optim.min_lr_ratio=2"], "min_lr_ratio"),
        (&["optim.weight_decay=-1"], "weight_decay"),
        (&["eval.temperature=-1"], "eval.temperature"),
        (&["algorithm.kl_horizon=0"], "kl_horizon"),
        (&["reward.format_penalty=-0.1"], "format_penalty"),
        (&["reward.turn_cost=-0.1"], "turn_cost"),
        (&["model.d_model=0"], "d_model"),
        (&["algorithm.entropy_coef=nan"], "entropy_coef"),
        (&["sft.edit_forms=[]"], "sft.edit_forms is empty"),
        (
            &["sft.edit_forms=[\"free_form\"]"],
            "TinyAgent writes only candidate",
        ),
    ];
    for (sets, needle) in cases {
        let errors = errors_of(sets);
        assert!(
            errors.iter().any(|e| e.contains(needle)),
            "{sets:?}: expected an error containing {needle:?}, got {errors:?}"
        );
    }
    assert!(with(&["algorithm.epochs=3"]).unwrap().validated().is_err());
}

#[test]
fn questionable_combinations_are_warnings() {
    let c = with(&["algorithm.kl_coef=0.1", "algorithm.kl_loss_type=k1"]).unwrap();
    let v = c.validate();
    assert!(v.errors.is_empty(), "{:?}", v.errors);
    assert!(
        v.warnings.iter().any(|w| w.contains("k1")),
        "{:?}",
        v.warnings
    );
    let v = with(&["algorithm.lam=0.9"]).unwrap().validate();
    assert!(
        v.warnings.iter().any(|w| w.contains("GAE")),
        "{:?}",
        v.warnings
    );
}

#[test]
fn resolution_fills_preset_values_and_respects_overrides() {
    let dapo = with(&["algorithm.name=dapo"]).unwrap().algorithm.knobs;
    assert_eq!((dapo.eps_low, dapo.eps_high), (0.2, 0.28));
    assert!(dapo.dynamic_sampling);
    assert_eq!(dapo.loss_agg_mode, AggMode::TokenMean);
    let r = with(&["algorithm.name=dapo", "algorithm.eps_high=0.3"])
        .unwrap()
        .algorithm
        .knobs;
    assert_eq!((r.eps_low, r.eps_high), (0.2, 0.3));
    let ppo = with(&["algorithm.name=ppo"]).unwrap().algorithm.knobs;
    assert!(ppo.old_logprob_pass && ppo.value_coef > 0.0 && ppo.epochs > 1);
    // The default run's entropy bonus belongs to the GRPO preset and does not leak into
    // the others.
    assert_eq!(with(&[]).unwrap().algorithm.knobs.entropy_coef, 0.02);
    for name in [
        "ppo",
        "dapo",
        "rloo",
        "gspo",
        "cispo",
        "dr_grpo",
        "reinforce_pp",
    ] {
        let k = with(&[&format!("algorithm.name={name}")])
            .unwrap()
            .algorithm
            .knobs;
        assert_eq!(k.entropy_coef, 0.0, "{name}");
    }
    // A file that names another algorithm starts from that preset.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/ppo.toml");
    let from_file = load_config(Some(&dir), &[]).unwrap();
    assert_eq!(
        from_file.algorithm.knobs,
        agentrl_train::algo::Algorithm::Ppo.preset()
    );
}

/// `engine.cpu_matmul` (the AMX path of the local engine's Qwen3): `"amx"` is refused, naming
/// the key and the reason, wherever it cannot apply (TinyAgent, inference servers, a bf16
/// engine) and on a CPU without AMX; `"auto"` is accepted anywhere (it falls back to f32); the
/// resolved value is written out with the rest of the config.
#[test]
fn cpu_matmul_amx_is_refused_where_it_cannot_apply() -> anyhow::Result<()> {
    use agentrl_model::fused::amx_matmul::{amx_available, CpuMatmul};
    assert_eq!(with(&[])?.engine.cpu_matmul, CpuMatmul::F32);
    let refused = |sets: &[&str], why: &str| {
        let errors = errors_of(sets);
        assert!(
            errors
                .iter()
                .any(|e| e.contains("engine.cpu_matmul") && e.contains(why)),
            "{sets:?}: {errors:?}"
        );
    };
    refused(&["engine.cpu_matmul=amx"], "model.kind = \"tiny\"");
    let qwen3 = ["model.kind=qwen3", "engine.cpu_matmul=amx"];
    refused(
        &[
            &qwen3[..],
            &[
                "engine.kind=vllm",
                "engine.endpoints=[\"http://127.0.0.1:1\"]",
            ],
        ]
        .concat(),
        "engine.kind",
    );
    refused(
        &[&qwen3[..], &["engine.dtype=bf16"]].concat(),
        "engine.dtype",
    );
    if amx_available() {
        assert_eq!(errors_of(&qwen3), Vec::<String>::new());
    } else {
        refused(&qwen3, "no AMX");
    }
    assert_eq!(errors_of(&["engine.cpu_matmul=auto"]), Vec::<String>::new());
    let err = with(&["engine.cpu_matmul=bf16"]).unwrap_err();
    assert!(format!("{err:#}").contains("cpu_matmul"), "{err:#}");
    let auto = with(&["engine.cpu_matmul=auto"])?;
    assert!(auto.to_toml()?.contains("cpu_matmul = \"auto\""));
    assert_eq!(
        parse_config_file_from_str(&auto.to_toml()?)?.engine,
        auto.engine
    );
    Ok(())
}
