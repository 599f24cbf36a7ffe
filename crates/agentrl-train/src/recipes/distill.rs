//! On-policy distillation (`agentrl distill --teacher RUN`, ALGORITHMS.md §15; Thinking
//! Machines 2025, tinker-cookbook): the student samples its own episodes and a frozen teacher
//! (another run's newest checkpoint, possibly a bigger TinyAgent) scores every sampled token.
//!
//! Data flow of one step: the step's tasks (as RL picks them) → `rollout.group_size` episodes
//! each, sampled by the student ([`Trainer::sample_policy_episodes`]) → the teacher's
//! log-probs of the student's action tokens → per-token reverse KL `log π_S − log π_T` →
//! advantages `−distill.coef · KL` (no future sum) → on-policy policy gradient at the
//! `[optim]` learning rate ([`Trainer::distill_update`]) → metrics line: the samples' rollout
//! figures plus `distill/reverse_kl` (the loss: 0 when student and teacher agree). The
//! teacher must read the student's token ids as its own: [`check_shared_vocabulary`] refuses
//! a pair that does not share the tokenizer.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::config::{Config, ModelKind};
use crate::metrics::episode_records;
use crate::schedule::learning_rate;
use crate::session::{run_recipe_session, SessionOptions, SessionOutcome, StepObserver};
use crate::step_record::StepRecord;
use crate::streams::stream;
use crate::trainer::Trainer;
use crate::update::UpdateMetrics;

/// Purpose of the student's sampling stream (distinct from the other recipes').
const STREAM_DISTILL_SAMPLES: u64 = 0x6473_746c;

/// Metric names of the distillation figures.
pub mod names {
    /// Mean per-token reverse KL (student − teacher log-prob) on the student's samples,
    /// before the step's update.
    pub const REVERSE_KL: &str = "distill/reverse_kl";
}

/// Fails, saying why, unless `teacher` reads `student`'s token ids as the same tokens: the
/// same model family and output size, and for Qwen3 the same `tokenizer.json`.
pub fn check_shared_vocabulary(
    student: &Config,
    student_vocab: usize,
    teacher: &Config,
    teacher_vocab: usize,
) -> anyhow::Result<()> {
    let refuse = |why: String| -> anyhow::Result<()> {
        bail!(
            "--teacher: the teacher and the student do not share a tokenizer, so the teacher \
             cannot score the student's tokens: {why}"
        )
    };
    if student.model.kind != teacher.model.kind {
        return refuse(format!(
            "the student is model.kind = {:?}, the teacher {:?}",
            student.model.kind, teacher.model.kind
        ));
    }
    match student.model.kind {
        // Every TinyAgent reads the tiny codec's ids (`model.action_vocab` only masks some of
        // them): the output size below is the check.
        ModelKind::Tiny => {}
        ModelKind::Qwen3 => {
            let tokenizer = |config: &Config, who: &str| -> anyhow::Result<Vec<u8>> {
                let dir = config
                    .model
                    .dir
                    .as_deref()
                    .with_context(|| format!("the {who}'s config has no model.dir"))?;
                let path = Path::new(dir).join("tokenizer.json");
                std::fs::read(&path)
                    .with_context(|| format!("reading the {who}'s {}", path.display()))
            };
            if tokenizer(student, "student")? != tokenizer(teacher, "teacher")? {
                return refuse("their tokenizer.json files differ".into());
            }
        }
    }
    if student_vocab != teacher_vocab {
        return refuse(format!(
            "the student has {student_vocab} output tokens, the teacher {teacher_vocab}"
        ));
    }
    Ok(())
}

/// Opens `run` as the teacher of `student`, checking the shared vocabulary.
pub fn open_teacher(student: &Trainer, run: &Path) -> anyhow::Result<Trainer> {
    let teacher = Trainer::open_as_teacher(run, student.config.threads())
        .with_context(|| format!("--teacher {}", run.display()))?;
    check_shared_vocabulary(
        &student.config,
        student.policy.vocab_size(),
        &teacher.config,
        teacher.policy.vocab_size(),
    )?;
    Ok(teacher)
}

/// One distillation step: the student samples, the teacher scores, one update.
pub fn distill_step(trainer: &mut Trainer, teacher: &Trainer) -> anyhow::Result<StepRecord> {
    let started = Instant::now();
    let step = trainer.state.step;
    let task_ids = trainer.tasks_for_step(step);
    let mut rng = stream(
        trainer.config.train.seed,
        step as u64,
        STREAM_DISTILL_SAMPLES,
    );
    let group_size = trainer.config.rollout.group_size;
    let samples = trainer.sample_policy_episodes(&task_ids, group_size, &mut rng)?;
    let time_rollout_s = started.elapsed().as_secs_f64();
    let lr = learning_rate(&trainer.config.optim, step, trainer.config.train.steps);
    let coef = trainer.config.distill.coef;
    let m = trainer.distill_update(teacher, &samples, coef, lr, false)?;
    let time_step_s = started.elapsed().as_secs_f64();
    trainer.finish_step(samples.len(), time_step_s);
    if crate::every(trainer.state.step, trainer.config.train.episodes_every) {
        trainer.run.write_episodes(
            trainer.state.step,
            &episode_records(&samples, trainer.codec.as_ref(), None),
        )?;
    }
    Ok(StepRecord {
        step: trainer.state.step,
        lr,
        update: UpdateMetrics {
            loss: m.reverse_kl,
            grad_norm: m.grad_norm,
            ..UpdateMetrics::default()
        },
        time_rollout_s,
        time_env_s: None,
        time_sync_s: None,
        time_update_s: time_step_s - time_rollout_s,
        time_step_s,
        recipe_metrics: BTreeMap::from([(names::REVERSE_KL.to_string(), m.reverse_kl)]),
        ..StepRecord::sampled(&samples, step, trainer.config.rollout.max_turns)
    })
}

/// A whole distillation session (`agentrl distill --teacher RUN`, the teacher from
/// `distill.teacher`): untrained evaluation, `train.steps` steps with the session's
/// checkpoints and periodic evaluations, trained evaluation, summary.
pub fn run_distill_session(
    trainer: Trainer,
    options: &SessionOptions,
    observer: StepObserver<'_>,
) -> anyhow::Result<SessionOutcome> {
    let Some(run) = trainer.config.distill.teacher.clone() else {
        bail!("distillation needs a teacher: --teacher RUN (distill.teacher)");
    };
    let teacher = open_teacher(&trainer, Path::new(&run))?;
    run_recipe_session(trainer, options, observer, &mut |t| {
        distill_step(t, &teacher)
    })
}
