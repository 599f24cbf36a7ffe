//! `agentrl bench gym`: what the sandbox costs, measured side by side in one run, with the same
//! parallelism (one thread per pool worker) on both sides of each ratio:
//! - **verdicts**: a built-in task's reference fix verified again and again (no cache), the
//!   real verdict path (the warm job tree on the pool: one job per verdict), against the
//!   baseline of one fresh `python3` per hidden case; reported as case executions/s,
//!   verdicts/s, jobs per verdict and CPU ms per case;
//! - **test runs**: what the `test` tool does in an episode (a small module plus a `unittest`
//!   file, run by a harness that reports on fd 3), a fresh `python3` per run against the pool.
//!
//! With `--remote` ([`remote`]): whole episodes ending in a verdict through one and two local
//! `agentrl gym serve` processes against the gym in process.

pub mod remote;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use crate::sandbox::{Executor, FreshExecutor, Job, Limits, PoolExecutor, Termination};
use crate::task::{Split, Task, TaskSet};

/// How long each executor is measured.
pub(crate) const MEASURE_FOR: Duration = Duration::from_millis(1500);

const MODULE: &str = r#""""Interval helpers (the code under test)."""


def merge_intervals(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [tuple(pair) for pair in merged]


def total_length(intervals):
    return sum(end - start for start, end in merge_intervals(intervals))
"#;

const TESTS: &str = r#"import unittest

from intervals import merge_intervals, total_length


class MergeTests(unittest.TestCase):
    def test_empty(self):
        self.assertEqual(merge_intervals([]), [])

    def test_disjoint(self):
        self.assertEqual(merge_intervals([(5, 6), (1, 2)]), [(1, 2), (5, 6)])

    def test_overlap(self):
        self.assertEqual(merge_intervals([(1, 4), (2, 6), (8, 9)]), [(1, 6), (8, 9)])

    def test_touching(self):
        self.assertEqual(merge_intervals([(1, 2), (2, 3)]), [(1, 3)])

    def test_total(self):
        self.assertEqual(total_length([(1, 4), (2, 6), (10, 11)]), 6)
"#;

/// The harness: run the test file, report counts on fd 3 (what a `test` tool call runs).
const HARNESS: &str = r#"import io, json, os, sys, unittest
suite = unittest.defaultTestLoader.loadTestsFromName("test_intervals")
stream = io.StringIO()
result = unittest.TextTestRunner(stream=stream, verbosity=0).run(suite)
os.write(3, json.dumps({"run": result.testsRun, "failures": len(result.failures),
                        "errors": len(result.errors)}).encode())
"#;

/// CPU seconds (user + system) and minor page faults so far of this process and its reaped
/// descendants. Copy-on-write faults are what a forked job mostly costs, so the bench reports
/// them beside the CPU time.
fn usage() -> (f64, f64) {
    let (mut cpu, mut faults) = (0.0, 0.0);
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: usage is a valid rusage to fill in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut usage) } == 0 {
            for t in [usage.ru_utime, usage.ru_stime] {
                cpu += t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
            }
            faults += usage.ru_minflt as f64;
        }
    }
    (cpu, faults)
}

fn cpu_seconds() -> f64 {
    usage().0
}

/// The 1-minute load average (`/proc/loadavg`), quoted beside every figure.
pub(crate) fn load_average_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
}

/// The verdict half of the report.
#[derive(Debug, Serialize)]
struct VerdictBench {
    task: String,
    cases_per_verdict: usize,
    /// The verdict tree on the warm pool (what an episode's `submit` runs).
    pool_case_execs_per_s: f64,
    pool_verdicts_per_s: f64,
    pool_jobs_per_verdict: f64,
    pool_cpu_ms_per_case: f64,
    /// Minor page faults per case, everything included (mostly copy-on-write after forks).
    pool_page_faults_per_case: f64,
    /// What the CPU cost allows on `threads` otherwise idle cores.
    pool_case_execs_per_s_if_cores_idle: f64,
    /// One fresh `python3` per hidden case.
    baseline_case_execs_per_s: f64,
    baseline_verdicts_per_s: f64,
    baseline_jobs_per_verdict: f64,
    baseline_cpu_ms_per_case: f64,
    baseline_page_faults_per_case: f64,
    /// pool case executions/s over the baseline's.
    case_ratio: f64,
    pool_verdicts: u64,
    baseline_verdicts: u64,
}

#[derive(Debug, Serialize)]
struct BenchReport {
    verdicts: VerdictBench,
    baseline_execs_per_s: f64,
    pool_execs_per_s: f64,
    ratio: f64,
    /// CPU time per execution, everything included (our threads, python processes, kernel).
    baseline_cpu_ms_per_exec: f64,
    pool_cpu_ms_per_exec: f64,
    /// What the CPU cost allows on `threads` otherwise idle cores: threads / cpu per exec.
    /// On a shared, loaded machine the measured rates above fall short of this.
    pool_execs_per_s_if_cores_idle: f64,
    load_average_1m: Option<f64>,
    workers: usize,
    threads: usize,
    baseline_jobs: u64,
    pool_jobs: u64,
    seconds_per_executor: f64,
    job: &'static str,
}

/// Runs `work(thread)` from `threads` threads for [`MEASURE_FOR`]; returns units/s and the
/// unit count. `work` checks its own result, so a broken sandbox cannot look fast.
pub(crate) fn measure_work(
    threads: usize,
    work: impl Fn(usize) -> anyhow::Result<()> + Sync,
) -> anyhow::Result<(f64, u64)> {
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let outcome: anyhow::Result<()> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let (done, stop, work) = (&done, &stop, &work);
                scope.spawn(move || -> anyhow::Result<()> {
                    while !stop.load(Ordering::Relaxed) {
                        if let Err(e) = work(thread) {
                            stop.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        std::thread::sleep(MEASURE_FOR);
        stop.store(true, Ordering::Relaxed);
        for handle in handles {
            handle
                .join()
                .map_err(|_| anyhow::anyhow!("bench thread panicked"))??;
        }
        Ok(())
    });
    outcome?;
    let units = done.load(Ordering::Relaxed);
    Ok((units as f64 / start.elapsed().as_secs_f64(), units))
}

/// The verdict bench's task: the built-in train task with the most hidden cases (first by id).
pub(crate) fn verdict_task() -> anyhow::Result<Arc<Task>> {
    let tasks = TaskSet::builtin().context("load the built-in tasks")?;
    let mut best: Option<Arc<Task>> = None;
    for task in tasks.split(Split::Train) {
        if best
            .as_ref()
            .is_none_or(|b| task.hidden.len() > b.hidden.len())
        {
            best = Some(task.clone());
        }
    }
    best.context("no built-in train task")
}

/// Verdicts of `task`'s reference fix per second on `executor`; each must solve the task.
fn measure_verdicts(
    executor: &dyn Executor,
    task: &Task,
    threads: usize,
    case_by_case: bool,
) -> anyhow::Result<(f64, u64)> {
    let limits = Limits::default();
    measure_work(threads, |_| {
        let hidden = if case_by_case {
            crate::verify::verify_case_by_case(executor, task, &task.reference, &limits)?
        } else {
            crate::verify::verify(executor, task, &task.reference, &limits, false)?.hidden
        };
        anyhow::ensure!(
            hidden.passed.iter().all(|p| *p),
            "the reference fix of {} failed a hidden case: {:?}",
            task.id,
            hidden.details
        );
        Ok(())
    })
}

/// Runs the test job on `executor` from one thread per workspace for [`MEASURE_FOR`]; returns
/// jobs/s and the job count. Every job's result is checked, so a broken sandbox cannot look
/// fast.
fn measure(
    executor: &dyn Executor,
    workspaces: &[tempfile::TempDir],
) -> anyhow::Result<(f64, u64)> {
    measure_work(workspaces.len(), |thread| {
        let out = executor
            .run(&Job {
                workspace: workspaces[thread].path().to_path_buf(),
                program: HARNESS.to_string(),
                stdin: Vec::new(),
                limits: Limits::default(),
            })
            .context("bench job")?;
        let report = String::from_utf8_lossy(&out.result);
        anyhow::ensure!(
            out.termination == (Termination::Exited { code: 0 })
                && report == r#"{"run": 5, "failures": 0, "errors": 0}"#,
            "bench job went wrong: {:?}, result {report}, stderr {}",
            out.termination,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    })
}

/// `agentrl bench gym`: the bench runs its own representative test job, so it takes no task
/// folder.
pub fn run(json: bool) -> anyhow::Result<()> {
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .max(2);
    let workspaces = (0..workers)
        .map(|_| -> anyhow::Result<tempfile::TempDir> {
            let dir =
                crate::sandbox::scratch_dir("agentrl-bench-").context("create bench workspace")?;
            std::fs::write(dir.path().join("intervals.py"), MODULE)
                .context("write bench module")?;
            std::fs::write(dir.path().join("test_intervals.py"), TESTS)
                .context("write bench tests")?;
            Ok(dir)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;

    let fresh = FreshExecutor::new().context("start the fresh executor")?;
    let task = verdict_task()?;
    let cases = task.hidden.len();
    // Splits and the trusted checker start outside the measured windows.
    crate::verify::verify(&fresh, &task, &task.reference, &Limits::default(), false)
        .context("warm-up verdict")?;
    let before = usage();
    let (baseline_verdicts_per_s, baseline_verdicts) =
        measure_verdicts(&fresh, &task, workers, true).context("baseline verdicts")?;
    let after = usage();
    let (baseline_verdict_cpu, baseline_faults) = (after.0 - before.0, after.1 - before.1);
    let before = usage();
    drop(warm_pool(workers, &workspaces)?);
    let after = usage();
    let startup = (after.0 - before.0, after.1 - before.1);
    let before = usage();
    let pool = warm_pool(workers, &workspaces)?;
    let (pool_verdicts_per_s, pool_verdicts) =
        measure_verdicts(&pool, &task, workers, false).context("pool verdicts")?;
    drop(pool);
    let after = usage();
    let pool_verdict_cpu = (after.0 - before.0 - startup.0).max(0.0);
    let pool_faults = (after.1 - before.1 - startup.1).max(0.0);
    let per_case_ms = |cpu: f64, verdicts: u64| {
        if verdicts > 0 {
            cpu * 1e3 / (verdicts as f64 * cases as f64)
        } else {
            f64::NAN
        }
    };
    let pool_cpu_ms_per_case = per_case_ms(pool_verdict_cpu, pool_verdicts);
    let verdicts = VerdictBench {
        task: task.id.clone(),
        cases_per_verdict: cases,
        pool_case_execs_per_s: pool_verdicts_per_s * cases as f64,
        pool_verdicts_per_s,
        pool_jobs_per_verdict: 1.0,
        pool_cpu_ms_per_case,
        pool_page_faults_per_case: pool_faults / (pool_verdicts.max(1) * cases as u64) as f64,
        pool_case_execs_per_s_if_cores_idle: workers as f64 * 1e3 / pool_cpu_ms_per_case,
        baseline_case_execs_per_s: baseline_verdicts_per_s * cases as f64,
        baseline_verdicts_per_s,
        baseline_jobs_per_verdict: cases as f64,
        baseline_cpu_ms_per_case: per_case_ms(baseline_verdict_cpu, baseline_verdicts),
        baseline_page_faults_per_case: baseline_faults
            / (baseline_verdicts.max(1) * cases as u64) as f64,
        case_ratio: if baseline_verdicts_per_s > 0.0 {
            pool_verdicts_per_s / baseline_verdicts_per_s
        } else {
            f64::INFINITY
        },
        pool_verdicts,
        baseline_verdicts,
    };

    let cpu_before = cpu_seconds();
    let (baseline, baseline_jobs) =
        measure(&fresh, &workspaces).context("baseline (fresh python3 per run)")?;
    let baseline_cpu = cpu_seconds() - cpu_before;

    // The pool's CPU is counted when its workers are reaped (at drop); start-up and warm-up
    // are measured on their own and subtracted.
    let cpu_before = cpu_seconds();
    drop(warm_pool(workers, &workspaces)?);
    let startup_cpu = cpu_seconds() - cpu_before;
    let cpu_before = cpu_seconds();
    let pool = warm_pool(workers, &workspaces)?;
    let (pooled, pool_jobs) = measure(&pool, &workspaces).context("warm pool")?;
    drop(pool);
    let pool_cpu = (cpu_seconds() - cpu_before - startup_cpu).max(0.0);
    let per_exec_ms = |cpu: f64, jobs: u64| {
        if jobs > 0 {
            cpu * 1e3 / jobs as f64
        } else {
            f64::NAN
        }
    };
    let pool_cpu_ms_per_exec = per_exec_ms(pool_cpu, pool_jobs);
    let load_average_1m = load_average_1m();

    let report = BenchReport {
        verdicts,
        baseline_execs_per_s: baseline,
        pool_execs_per_s: pooled,
        ratio: if baseline > 0.0 {
            pooled / baseline
        } else {
            f64::INFINITY
        },
        baseline_cpu_ms_per_exec: per_exec_ms(baseline_cpu, baseline_jobs),
        pool_cpu_ms_per_exec,
        pool_execs_per_s_if_cores_idle: workers as f64 * 1e3 / pool_cpu_ms_per_exec,
        load_average_1m,
        workers,
        threads: workers,
        baseline_jobs,
        pool_jobs,
        seconds_per_executor: MEASURE_FOR.as_secs_f64(),
        job: "unittest file with 5 tests + module, run by a harness reporting on fd 3",
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let v = &report.verdicts;
        println!(
            "hidden-case verdicts of {} ({} cases, {} threads, {:.1} s each)",
            v.task,
            v.cases_per_verdict,
            workers,
            MEASURE_FOR.as_secs_f64()
        );
        println!(
            "{:<28}{:>12}{:>12}{:>10}{:>14}{:>14}",
            "executor", "cases/s", "verdicts/s", "jobs/v", "cpu ms/case", "faults/case"
        );
        println!(
            "{:<28}{:>12.1}{:>12.1}{:>10.0}{:>14.2}{:>14.0}",
            "fresh python3 per case",
            v.baseline_case_execs_per_s,
            v.baseline_verdicts_per_s,
            v.baseline_jobs_per_verdict,
            v.baseline_cpu_ms_per_case,
            v.baseline_page_faults_per_case
        );
        println!(
            "{:<28}{:>12.1}{:>12.1}{:>10.0}{:>14.2}{:>14.0}",
            "verdict tree on the pool",
            v.pool_case_execs_per_s,
            v.pool_verdicts_per_s,
            v.pool_jobs_per_verdict,
            v.pool_cpu_ms_per_case,
            v.pool_page_faults_per_case
        );
        println!(
            "ratio tree/fresh: {:.1}x; on {workers} idle cores (from its CPU cost): {:.0} cases/s",
            v.case_ratio, v.pool_case_execs_per_s_if_cores_idle
        );
        println!();
        println!(
            "sandboxed test executions ({} threads, {:.1} s each)",
            workers, report.seconds_per_executor
        );
        println!(
            "{:<28}{:>10}{:>10}{:>14}",
            "executor", "execs/s", "jobs", "cpu ms/exec"
        );
        println!(
            "{:<28}{:>10.1}{:>10}{:>14.2}",
            "fresh python3 per run", baseline, baseline_jobs, report.baseline_cpu_ms_per_exec
        );
        println!(
            "{:<28}{:>10.1}{:>10}{:>14.2}",
            format!("warm pool ({workers} workers)"),
            pooled,
            pool_jobs,
            report.pool_cpu_ms_per_exec
        );
        println!("ratio pool/fresh: {:.1}x", report.ratio);
        println!(
            "pool on {workers} idle cores (from its CPU cost): {:.0} execs/s; 1-min load average now: {}",
            report.pool_execs_per_s_if_cores_idle,
            load_average_1m.map(|l| format!("{l:.1}")).unwrap_or_else(|| "unknown".into())
        );
    }
    Ok(())
}

/// A pool with one warm-up job done per worker, so start-up is not measured as throughput.
fn warm_pool(workers: usize, workspaces: &[tempfile::TempDir]) -> anyhow::Result<PoolExecutor> {
    let pool = PoolExecutor::new(workers).context("start the worker pool")?;
    measure_warmup(&pool, workspaces)?;
    Ok(pool)
}

fn measure_warmup(pool: &PoolExecutor, workspaces: &[tempfile::TempDir]) -> anyhow::Result<()> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = workspaces
            .iter()
            .map(|workspace| {
                scope.spawn(move || {
                    pool.run(&Job {
                        workspace: workspace.path().to_path_buf(),
                        program: HARNESS.to_string(),
                        stdin: Vec::new(),
                        limits: Limits::default(),
                    })
                })
            })
            .collect();
        for handle in handles {
            handle
                .join()
                .map_err(|_| anyhow::anyhow!("warm-up thread panicked"))?
                .context("warm-up job")?;
        }
        Ok(())
    })
}
