//! `agentrl plan`'s memory model against what a real step allocates: a counting global
//! allocator (this test binary's own) measures the heap bytes a training step adds at its
//! peak, for TinyAgent at two shapes and for a tiny random Qwen3 with the real vocabulary.
//! The plan, evaluated at the step's real batch shape, must be within 25% of it.
//!
//! One test function, so that no other test allocates while a step is measured.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentrl_train::config::load_config;
use agentrl_train::plan::{ModelShape, StepPlan};
use agentrl_train::trainer::Trainer;

mod common;

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let grown = new_size - layout.size();
                let now = CURRENT.fetch_add(grown, Ordering::Relaxed) + grown;
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Trains one step of `sets` and returns (the heap bytes the step added at its peak, the
/// plan's figure for the step's real batch shape).
fn measured_and_planned(
    root: &Path,
    file: Option<&Path>,
    sets: &[String],
) -> anyhow::Result<(f64, f64, String)> {
    let mut all = vec![format!(
        "train.runs_root={}",
        serde_json::to_string(root.to_str().unwrap())?
    )];
    all.extend(sets.iter().cloned());
    let config = load_config(file, &all)?;
    let shape = ModelShape::of(&config)?;
    let (mut trainer, _) = Trainer::create(config.clone())?;
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let record = trainer.step()?;
    let added = (PEAK.load(Ordering::Relaxed) - base) as f64;
    assert!(
        record.truncated_rate > 0.0,
        "an episode filled model.max_seq"
    );
    // The batch is padded to its longest episode, which filled max_seq.
    let loss_tokens = record.action_tokens.ceil() as usize;
    let minibatches = config.algorithm.knobs.minibatches.clamp(1, record.episodes);
    let plan = StepPlan::for_batch(
        &config,
        shape,
        record.episodes,
        record.episodes.div_ceil(minibatches),
        config.model.max_seq,
        loss_tokens,
    );
    // The weights (and reference) exist before the step; the optimizer's moments are
    // allocated by its first step.
    let planned = plan.update_peak - plan.weights - plan.reference;
    Ok((added, planned, plan.table(false)))
}

#[test]
fn the_plan_is_within_a_quarter_of_a_real_steps_memory() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let tasks = tmp.path().join("tasks");
    common::task_dir(&tasks, [2, 0, 0])?;
    let tasks_dir = format!(
        "rollout.tasks_dir={}",
        serde_json::to_string(tasks.to_str().unwrap())?
    );
    let tiny = |episodes: usize, max_seq: usize, d_model: usize| -> Vec<String> {
        vec![
            tasks_dir.clone(),
            "train.threads=1".into(),
            "train.checkpoint_every=0".into(),
            "train.episodes_every=0".into(),
            "rollout.tasks_per_step=2".into(),
            format!("rollout.group_size={}", episodes / 2),
            format!("model.max_seq={max_seq}"),
            format!("model.d_model={d_model}"),
            "rollout.max_turns=8".into(),
        ]
    };
    for (name, sets) in [
        ("tiny 32 × 96, d 64", tiny(32, 96, 64)),
        ("tiny 64 × 128, d 128", tiny(64, 128, 128)),
    ] {
        let (measured, planned, table) = measured_and_planned(tmp.path(), None, &sets)?;
        eprintln!(
            "{name}: measured {:.1} MB, planned {:.1} MB\n{table}",
            measured / 1e6,
            planned / 1e6
        );
        assert!(
            (planned / measured - 1.0).abs() <= 0.25,
            "{name}: planned {planned} bytes, measured {measured}"
        );
    }

    // A tiny random Qwen3 with the real 151,936-token vocabulary and template, LoRA 16.
    let assets = agentrl_chat::qwen3_assets_for_tests().expect("the shared Qwen3 assets");
    let model = tmp.path().join("tiny-qwen3");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let status = std::process::Command::new("python3")
        .arg(repo.join("scripts/make_tiny_qwen3.py"))
        .args(["--hidden-size", "64", "--assets"])
        .arg(&assets)
        .arg("--out")
        .arg(&model)
        .status()?;
    anyhow::ensure!(status.success(), "make_tiny_qwen3.py failed");
    let sets = vec![
        tasks_dir.clone(),
        format!(
            "model.dir={}",
            serde_json::to_string(model.to_str().unwrap())?
        ),
        "train.threads=1".into(),
        "train.format_warmup_steps=0".into(),
        "train.steps=2".into(),
        "engine.preflight=false".into(),
        "model.max_seq=1024".into(),
        "rollout.max_turns=4".into(),
    ];
    let file = repo.join("configs/tests/qwen3-tiny-grpo.toml");
    let (measured, planned, table) = measured_and_planned(tmp.path(), Some(&file), &sets)?;
    eprintln!(
        "tiny Qwen3: measured {:.1} MB, planned {:.1} MB\n{table}",
        measured / 1e6,
        planned / 1e6
    );
    assert!(
        (planned / measured - 1.0).abs() <= 0.25,
        "tiny Qwen3: planned {planned} bytes, measured {measured}"
    );
    Ok(())
}
