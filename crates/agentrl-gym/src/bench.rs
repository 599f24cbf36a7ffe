//! `agentrl bench gym`: sandboxed test executions per second, a fresh `python3` per run
//! (baseline) against the warm fork-server pool, on the same representative job and with the
//! same parallelism (one thread per pool worker), so the ratio is the pool's gain alone.
//!
//! The job is what the `test` tool does in an episode: a small module plus a `unittest` file
//! in a workspace, run by a harness that reports results on fd 3.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use crate::sandbox::{Executor, FreshExecutor, Job, Limits, PoolExecutor, Termination};

/// How long each executor is measured.
const MEASURE_FOR: Duration = Duration::from_millis(1500);

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

/// CPU seconds (user + system) used so far by this process and its reaped descendants.
fn cpu_seconds() -> f64 {
    let mut total = 0.0;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: usage is a valid rusage to fill in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut usage) } == 0 {
            for t in [usage.ru_utime, usage.ru_stime] {
                total += t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
            }
        }
    }
    total
}

#[derive(Debug, Serialize)]
struct BenchReport {
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

/// Runs the job on `executor` from `threads` threads for [`MEASURE_FOR`]; returns jobs/s and
/// the job count. Every job's result is checked, so a broken sandbox cannot look fast.
fn measure(
    executor: &dyn Executor,
    workspaces: &[tempfile::TempDir],
) -> anyhow::Result<(f64, u64)> {
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let outcome: anyhow::Result<()> = std::thread::scope(|scope| {
        let handles: Vec<_> = workspaces
            .iter()
            .map(|workspace| {
                let (done, stop) = (&done, &stop);
                scope.spawn(move || -> anyhow::Result<()> {
                    let job = Job {
                        workspace: workspace.path().to_path_buf(),
                        program: HARNESS.to_string(),
                        stdin: Vec::new(),
                        limits: Limits::default(),
                    };
                    while !stop.load(Ordering::Relaxed) {
                        let out = executor.run(&job).context("bench job")?;
                        let report = String::from_utf8_lossy(&out.result);
                        if out.termination != (Termination::Exited { code: 0 })
                            || report != r#"{"run": 5, "failures": 0, "errors": 0}"#
                        {
                            stop.store(true, Ordering::Relaxed);
                            anyhow::bail!(
                                "bench job went wrong: {:?}, result {report}, stderr {}",
                                out.termination,
                                String::from_utf8_lossy(&out.stderr)
                            );
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
    let jobs = done.load(Ordering::Relaxed);
    Ok((jobs as f64 / start.elapsed().as_secs_f64(), jobs))
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
    let load_average_1m = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()));

    let report = BenchReport {
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
