//! SFT → RL on a few real BugFix tasks: a short SFT on the gym expert's demonstrations raises
//! the untrained TinyAgent's hidden solve rate by a wide margin, `init_weights_from` (`train
//! --init`) starts RL from those weights, and SFT reads episodes from a JSONL file. Small
//! model, few steps, fixed seeds.

use std::path::Path;

use agentrl_train::demonstrations::expert_demonstrations;
use agentrl_train::recipes::sft::{run_sft_session, write_episodes};
use agentrl_train::trainer::Trainer;

use crate::common;
use crate::small_runs::{config, quiet, solve_rate};

#[test]
fn sft_on_expert_demonstrations_raises_the_solve_rate_and_rl_starts_from_it() -> anyhow::Result<()>
{
    let tmp = tempfile::tempdir()?;
    let tasks = tmp.path().join("tasks");
    common::task_dir(&tasks, [2, 1, 1])?;
    let runs = tmp.path().join("runs");
    let mut passed = Vec::new();
    for seed in [3u64, 4, 5] {
        let seed_set = format!("train.seed={seed}");
        let sft_config = config(
            &runs,
            &tasks,
            &format!("sft-{seed}"),
            &[seed_set.clone(), "train.steps=8".into()],
        )?;
        let (trainer, _) = Trainer::create(sft_config)?;
        let untrained = solve_rate(&trainer)?;
        let outcome = run_sft_session(trainer, &quiet(), &mut |_, _| Ok(()))?;
        assert_eq!(outcome.steps, 8);
        let sft_run = std::path::PathBuf::from(&outcome.run_dir);
        let tuned = solve_rate(&Trainer::open_for_eval(&sft_run)?)?;

        // RL from the SFT run's weights: fresh step counter, the SFT policy's solve rate.
        let rl_config = config(
            &runs,
            &tasks,
            &format!("rl-{seed}"),
            &[seed_set, "train.steps=2".into()],
        )?;
        let (mut rl, _) = Trainer::create(rl_config)?;
        rl.init_weights_from(&sft_run)?;
        assert_eq!(rl.state.step, 0);
        let started = solve_rate(&rl)?;
        let first = rl.step()?;
        eprintln!(
            "seed {seed}: untrained {untrained:.3}, after SFT {tuned:.3}, RL from it {started:.3}, \
             its first step {:.3}",
            first.hidden_solve_rate
        );
        assert!(
            (started - tuned).abs() < 1e-9,
            "same weights, same evaluation"
        );
        passed.push(tuned >= untrained + 0.3 && first.hidden_solve_rate >= untrained + 0.2);
    }
    assert!(
        passed.iter().filter(|&&p| p).count() >= 2,
        "SFT → RL held for {passed:?} of seeds 3, 4, 5"
    );
    Ok(())
}

#[test]
fn sft_trains_on_a_jsonl_file_of_episodes_and_its_loss_falls() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let tasks = tmp.path().join("tasks");
    common::task_dir(&tasks, [2, 0, 0])?;
    let runs = tmp.path().join("runs");
    let (maker, _) = Trainer::create(config(&runs, &tasks, "maker", &["train.steps=1".into()])?)?;
    let demos = expert_demonstrations(&maker, 0)?;
    assert_eq!(demos.len(), 16);
    assert!(demos
        .iter()
        .all(|e| e.reward.solved() && e.format_errors == 0));
    let file = tmp.path().join("demos.jsonl");
    write_episodes(&file, &demos)?;
    drop(maker);

    let data = format!("sft.data={:?}", file.display().to_string());
    let (trainer, _) = Trainer::create(config(
        &runs,
        &tasks,
        "from-file",
        &[data, "train.steps=6".into(), "train.seed=3".into()],
    )?)?;
    let outcome = run_sft_session(trainer, &quiet(), &mut |_, _| Ok(()))?;
    let metrics = std::fs::read_to_string(Path::new(&outcome.run_dir).join("metrics.jsonl"))?;
    let losses: Vec<f64> = metrics
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["actor/sft_loss"]
                .as_f64()
                .unwrap()
        })
        .collect();
    assert_eq!(losses.len(), 6);
    assert!(
        losses[5] < 0.7 * losses[0],
        "the NLL of the action tokens falls: {losses:?}"
    );
    // A file that is not episodes is refused, naming the line.
    std::fs::write(&file, "{\"task_id\": 3}\n")?;
    let bad = format!("sft.data={:?}", file.display().to_string());
    let (trainer, _) = Trainer::create(config(&runs, &tasks, "bad", &[bad])?)?;
    let err = run_sft_session(trainer, &quiet(), &mut |_, _| Ok(())).unwrap_err();
    assert!(format!("{err:#}").contains("line 1"), "{err:#}");
    Ok(())
}
