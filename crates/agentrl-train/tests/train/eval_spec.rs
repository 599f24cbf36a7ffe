//! `EvalSpec`: a run's own evaluation follows its `[eval]` section, and a spec that cannot be
//! evaluated is refused with the field at fault named.

use agentrl_gym::Split;
use agentrl_train::config::load_config;
use agentrl_train::EvalSpec;

#[test]
fn a_runs_evaluation_spec_follows_its_eval_section() -> anyhow::Result<()> {
    let config = load_config(
        None,
        &[
            "eval.samples=3".into(),
            "eval.temperature=0.5".into(),
            "eval.tasks_per_split=5".into(),
        ],
    )?;
    let spec = EvalSpec::for_run(&config.eval, Split::HeldoutFamily, 11);
    assert_eq!(
        spec,
        EvalSpec {
            split: Split::HeldoutFamily,
            max_tasks: Some(5),
            samples_per_task: 3,
            k: 3,
            temperature: 0.5,
            seed: 11,
        }
    );
    // 0 tasks per split means every task.
    let all = load_config(None, &["eval.tasks_per_split=0".into()])?;
    assert_eq!(
        EvalSpec::for_run(&all.eval, Split::Train, 0).max_tasks,
        None
    );
    Ok(())
}

#[test]
fn a_spec_that_cannot_be_evaluated_names_its_field() {
    assert!(EvalSpec::default().check().is_ok());
    for (spec, field) in [
        (
            EvalSpec {
                samples_per_task: 0,
                k: 0,
                ..EvalSpec::default()
            },
            "samples_per_task",
        ),
        (
            EvalSpec {
                samples_per_task: 2,
                k: 3,
                ..EvalSpec::default()
            },
            "EvalSpec.k",
        ),
        (
            EvalSpec {
                k: 0,
                ..EvalSpec::default()
            },
            "EvalSpec.k",
        ),
        (
            EvalSpec {
                temperature: f64::NAN,
                ..EvalSpec::default()
            },
            "temperature",
        ),
        (
            EvalSpec {
                temperature: -1.0,
                ..EvalSpec::default()
            },
            "temperature",
        ),
        (
            EvalSpec {
                max_tasks: Some(0),
                ..EvalSpec::default()
            },
            "max_tasks",
        ),
    ] {
        let error = spec.check().expect_err(field).to_string();
        assert!(error.contains(field), "{spec:?}: {error}");
    }
}
