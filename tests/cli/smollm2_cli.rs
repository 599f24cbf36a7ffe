//! The user's command on a real pretrained model: `agentrl train --config configs/smollm2.toml`
//! with SmolLM2-135M-Instruct's GGUF file, shortened to two GRPO steps on one task per split,
//! through the real binary: the same progress lines and final table as the default run, and a
//! run directory whose metrics come from the real model's episodes. The file comes from
//! `smollm2_gguf_for_tests()` (`scripts/fetch_smollm2.sh`; CI fetches it first).

use std::path::Path;
use std::process::Command;

use agentrl_gym::{Split, TaskSet};

use crate::support::copy_dir;

const BIN: &str = env!("CARGO_BIN_EXE_agentrl");

#[test]
fn smollm2_trains_two_grpo_steps_through_the_users_command() {
    let Some(gguf) = agentrl_chat::smollm2_gguf_for_tests() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    let all = TaskSet::builtin().unwrap();
    for split in Split::ALL {
        let task = &all.split(split)[0];
        copy_dir(&task.dir, &tasks.join(&task.id));
    }
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/smollm2.toml");
    let runs = tmp.path().join("runs").display().to_string();
    let sets = [
        format!("train.runs_root={runs:?}"),
        "train.run_name=\"smollm2\"".to_string(),
        format!("rollout.tasks_dir={:?}", tasks.display().to_string()),
        "train.steps=2".into(),
        "train.format_warmup_steps=0".into(),
        "rollout.tasks_per_step=1".into(),
        "rollout.group_size=2".into(),
        "algorithm.minibatches=2".into(),
        "rollout.max_turns=2".into(),
        "rollout.max_action_tokens=24".into(),
    ];
    let mut command = Command::new(BIN);
    command
        .arg("train")
        .arg("--config")
        .arg(&config)
        .arg("--model")
        .arg(&gguf);
    for set in &sets {
        command.arg("--set").arg(set);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let all_text = format!("{stdout}{stderr}");
    assert!(
        all_text.contains("Llama (") && all_text.contains("hidden 576, 30 layers"),
        "{all_text}"
    );
    assert!(all_text.contains("step 2/2"), "{all_text}");
    for split in ["train", "heldout"] {
        assert!(
            stdout.contains(split),
            "the final table lacks {split}: {stdout}"
        );
    }
    let run = tmp.path().join("runs/smollm2");
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let steps: Vec<serde_json::Value> = metrics
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .filter(|record: &serde_json::Value| record.get("actor/entropy").is_some())
        .collect();
    assert_eq!(steps.len(), 2, "{metrics}");
    for record in &steps {
        let entropy = record["actor/entropy"].as_f64().unwrap();
        assert!(entropy.is_finite() && entropy > 0.0, "{record}");
        // The real prompt (system message with the tool list, the task) is hundreds of tokens.
        let tokens = record["env/episode_tokens/mean"].as_f64().unwrap();
        assert!(tokens > 300.0, "{record}");
        assert!(
            record["actor/grad_norm"].as_f64().unwrap().is_finite(),
            "{record}"
        );
    }
    let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert!(config.contains(&gguf.display().to_string()), "{config}");
}
