//! `agentrl gym …`: list, show, play, run and validate tasks from the command line, report the
//! sandbox layers, and measure a random policy's solve rate.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde_json::json;

use crate::env::{BugFixEnv, EnvConfig, OutcomeCache};
use crate::render::render_text;
use crate::sandbox::{default_executor, sandbox_info_report};
use crate::task::{Split, TaskSet};
use crate::types::{Action, Env, Observation, ToolCall};

/// `--tasks-dir DIR`, shared by every gym command: a folder of task folders instead of the
/// built-in tasks.
#[derive(Debug, Clone, Args)]
pub struct TasksDirArg {
    /// A folder of your own tasks (format: crates/agentrl-gym/TASKS.md) instead of the
    /// built-in ones.
    #[arg(long, value_name = "DIR")]
    pub tasks_dir: Option<PathBuf>,
}

impl TasksDirArg {
    pub fn load(&self) -> anyhow::Result<Arc<TaskSet>> {
        Ok(Arc::new(TaskSet::load(self.tasks_dir.as_deref())?))
    }

    /// The tasks that load, and every broken one with its reason (see `TaskSet::load_report`).
    pub fn load_report(&self) -> anyhow::Result<TaskSet> {
        let dir = match &self.tasks_dir {
            Some(dir) => dir.clone(),
            None => TaskSet::builtin_dir()?,
        };
        Ok(TaskSet::load_report(&dir)?)
    }
}

/// One line per broken task folder, on stderr: the others go on.
fn report_broken(tasks: &TaskSet) {
    for broken in tasks.broken() {
        eprintln!("BROKEN {}: {}", broken.dir.display(), broken.error);
    }
}

#[derive(Debug, Args)]
pub struct GymArgs {
    #[command(subcommand)]
    pub command: GymCommand,
}

#[derive(Debug, Subcommand)]
pub enum GymCommand {
    /// List tasks.
    List {
        /// train, heldout or heldout-family.
        #[arg(long)]
        split: Option<String>,
        #[command(flatten)]
        tasks: TasksDirArg,
    },
    /// Show a task: id, family, split, prompt and the files the agent can see.
    Show {
        /// Task id, e.g. `offbyone-000` (see `agentrl gym list`).
        id: String,
        /// Print the task as one JSON object (prompt, files, candidates).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        tasks: TasksDirArg,
    },
    /// Play a task by typing tool calls: `read PATH`, `test`, `edit K`, `submit`, `exploit`,
    /// or JSON `{"name": ..., "arguments": {...}}`. EOF ends the session.
    Play {
        /// Task id, e.g. `offbyone-000`.
        id: String,
        #[command(flatten)]
        tasks: TasksDirArg,
    },
    /// Run tool calls from a JSONL file (one `{"name", "arguments"}` per line); prints one JSON
    /// object per step, then the reward.
    Run {
        /// Task id, e.g. `offbyone-000`.
        #[arg(long)]
        task: String,
        /// JSONL file of tool calls, one `{"name", "arguments"}` object per line.
        #[arg(long, value_name = "FILE.jsonl")]
        actions: PathBuf,
        #[command(flatten)]
        tasks: TasksDirArg,
    },
    /// Check every task: bug reproduces, reference fix passes, exploit is caught, fix is a
    /// candidate; count public-passing hack decoys.
    Validate {
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        tasks: TasksDirArg,
    },
    /// Solve rate of uniformly random policies, from real episodes.
    RandomBaseline {
        /// Random episodes per task.
        #[arg(long, default_value_t = 20)]
        episodes_per_task: usize,
        /// Seed of the random policies.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        tasks: TasksDirArg,
    },
    /// Which sandbox layers are active on this machine.
    SandboxInfo,
    /// Serve the gym over HTTP/JSON (protocol: docs/GYM_SERVICE.md) so trainers on other
    /// machines run episodes here (`[gym] endpoints`). The first line on stdout is
    /// `listening on http://HOST:PORT`.
    Serve(ServeArgs),
}

/// `agentrl gym serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on. Anything but loopback needs an API key (AGENTRL_API_KEY or
    /// --api-key-file).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 = any free port, printed on the first line).
    #[arg(long, default_value_t = 8100)]
    pub port: u16,
    /// Live episodes at most; a start past it is answered 429.
    #[arg(long, default_value_t = 256)]
    pub max_episodes: usize,
    /// Workspace quota (MiB) across live episodes at most: each counts its task's
    /// `limits.disk_mib` (64 by default); a start past it is answered 429.
    #[arg(long, default_value_t = 256 * 64)]
    pub max_workspace_mib: u64,
    /// Close an episode after this many seconds without a request.
    #[arg(long, default_value_t = 600.0)]
    pub idle_timeout_s: f64,
    /// Threads running requests' gym work: tool calls, verdicts (default: 4 per core, at least
    /// 16).
    #[arg(long)]
    pub http_threads: Option<usize>,
    #[command(flatten)]
    pub http: HttpArgs,
    /// A file holding the API key clients must send as `Authorization: Bearer KEY` (instead
    /// of the AGENTRL_API_KEY variable).
    #[arg(long, value_name = "FILE")]
    pub api_key_file: Option<PathBuf>,
    #[command(flatten)]
    pub tasks: TasksDirArg,
}

/// The HTTP stack's flags, shared by `agentrl gym serve` and `agentrl serve`.
#[derive(Debug, Clone, Args)]
pub struct HttpArgs {
    /// A request's head, then its body, must arrive within this many seconds (else the
    /// connection is closed, or answered 408); an idle keep-alive connection is closed after it.
    #[arg(long, default_value_t = 30.0)]
    pub read_timeout_s: f64,
    /// Open connections at most; past it a connection is answered 503 at once and closed.
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    /// On SIGTERM or SIGINT, how long requests in progress may finish before the server
    /// closes everything (every episode, for the gym) and exits.
    #[arg(long, default_value_t = 5.0)]
    pub shutdown_grace_s: f64,
}

impl HttpArgs {
    /// The limits these flags give; an error names the flag at fault.
    pub fn limits(&self) -> anyhow::Result<crate::service::http::HttpLimits> {
        anyhow::ensure!(
            self.max_connections > 0,
            "--max-connections must be at least 1"
        );
        Ok(crate::service::http::HttpLimits {
            read_timeout: seconds("--read-timeout-s", self.read_timeout_s)?,
            max_connections: self.max_connections,
            shutdown_grace: seconds("--shutdown-grace-s", self.shutdown_grace_s)?,
        })
    }
}

/// Runs `agentrl gym serve` until the process is stopped.
pub fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    use crate::service::{access, AccessRule, GymServeOptions, GymServer};
    let idle_timeout = seconds("--idle-timeout-s", args.idle_timeout_s)?;
    let access = AccessRule::for_bind(&args.host, access::key_from(args.api_key_file.as_deref())?)?;
    let tasks = args.tasks.load()?;
    report_broken(&tasks);
    let mut options = GymServeOptions {
        max_episodes: args.max_episodes,
        max_workspace_mib: args.max_workspace_mib,
        idle_timeout,
        access,
        http: args.http.limits()?,
        ..GymServeOptions::default()
    };
    if let Some(threads) = args.http_threads {
        options.http_threads = threads;
    }
    let keyed = options.access.requires_key();
    let count = tasks.tasks().len();
    let server = GymServer::start(
        tasks,
        default_executor()?,
        options,
        &format!("{}:{}", args.host, args.port),
    )?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on {}", server.url())?;
    stdout.flush()?;
    eprintln!(
        "agentrl gym serve: {count} tasks on {} ({}, at most {} live episodes)",
        server.url(),
        if keyed {
            "API key required"
        } else {
            "no API key"
        },
        args.max_episodes
    );
    server.wait_for_signal()
}

/// A flag's seconds as a duration: more than 0, at most a year.
fn seconds(flag: &str, value: f64) -> anyhow::Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero() && d.as_secs() <= 365 * 24 * 3600)
        .ok_or_else(|| anyhow::anyhow!("{flag} must be > 0 and at most a year, got {value}"))
}

/// Runs a gym command. A closed stdout (`agentrl gym list | head`) ends it quietly.
pub fn run(args: GymArgs) -> anyhow::Result<()> {
    match run_command(args) {
        Err(err)
            if err
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        other => other,
    }
}

fn run_command(args: GymArgs) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match args.command {
        GymCommand::List { split, tasks } => {
            let tasks = tasks.load_report()?;
            report_broken(&tasks);
            let split = split.map(|s| s.parse::<Split>()).transpose()?;
            let shown: Vec<_> = tasks
                .tasks()
                .iter()
                .filter(|t| split.is_none_or(|s| t.split == s))
                .collect();
            let width = |f: &dyn Fn(&crate::Task) -> usize, title: &str| {
                shown
                    .iter()
                    .map(|t| f(t))
                    .max()
                    .unwrap_or(0)
                    .max(title.len())
            };
            let (w_id, w_family, w_split) = (
                width(&|t| t.id.len(), "id"),
                width(&|t| t.family.len(), "family"),
                width(&|t| t.split.as_str().len(), "split"),
            );
            writeln!(
                stdout,
                "{:<w_id$}  {:<w_family$}  {:<w_split$}  prompt",
                "id", "family", "split"
            )?;
            for task in shown {
                writeln!(
                    stdout,
                    "{:<w_id$}  {:<w_family$}  {:<w_split$}  {}",
                    task.id,
                    task.family,
                    task.split.as_str(),
                    task.prompt
                )?;
            }
            Ok(())
        }
        GymCommand::Show { id, json, tasks } => {
            let task = tasks.load()?.get(&id)?;
            if json {
                let out = json!({
                    "id": task.id, "family": task.family, "split": task.split.as_str(),
                    "prompt": task.prompt, "files": task.visible,
                    "candidates": task.candidate_edits(),
                });
                writeln!(stdout, "{}", serde_json::to_string_pretty(&out)?)?;
            } else {
                writeln!(
                    stdout,
                    "id: {}\nfamily: {}\nsplit: {}\nprompt: {}\n",
                    task.id, task.family, task.split, task.prompt
                )?;
                for (name, content) in &task.visible {
                    writeln!(stdout, "--- {name}\n{content}")?;
                }
                let candidates = task.candidate_edits();
                if candidates.is_empty() {
                    writeln!(stdout, "candidates: none (edit the files free-form)")?;
                } else {
                    writeln!(stdout, "candidates (`edit K` applies candidate K):")?;
                    for (k, c) in candidates.iter().enumerate() {
                        writeln!(stdout, "  {k}: in {}: `{}` -> `{}`", c.path, c.old, c.new)?;
                    }
                }
            }
            Ok(())
        }
        GymCommand::Play { id, tasks } => {
            let stdin = std::io::stdin();
            play(tasks.load()?, &id, stdin.lock(), stdout)
        }
        GymCommand::Run {
            task,
            actions,
            tasks,
        } => {
            let text = std::fs::read_to_string(&actions)
                .with_context(|| format!("reading actions file {}", actions.display()))?;
            run_actions(tasks.load()?, &task, &text, &mut stdout)
        }
        GymCommand::Validate { json, tasks } => {
            let tasks = tasks.load_report()?;
            report_broken(&tasks);
            let broken: Vec<serde_json::Value> = tasks
                .broken()
                .iter()
                .map(|b| json!({"dir": b.dir.display().to_string(), "error": b.error.to_string()}))
                .collect();
            let tasks = Arc::new(tasks);
            let threads = std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .min(8);
            let executor = default_executor()?;
            let cache = OutcomeCache::new();
            let results = crate::validate::validate_all(
                tasks.clone(),
                executor.clone(),
                cache.clone(),
                threads,
            )?;
            // The baseline plays only valid tasks (a broken one would cost time and mean
            // nothing), and none whose runs hit a time limit: those are never cached, so every
            // random episode on them would wait out its limits again.
            let valid: Vec<_> = tasks
                .tasks()
                .iter()
                .filter(|t| {
                    results
                        .iter()
                        .any(|r| r.id == t.id && r.ok() && !r.time_limited)
                })
                .cloned()
                .collect();
            let skipped = results.len() - valid.len();
            let baseline = crate::validate::random_baseline(
                Arc::new(TaskSet::from_tasks(valid)),
                executor,
                cache,
                20,
                0,
            )?;
            let with_hack = results
                .iter()
                .filter(|r| !r.public_passing_hacks.is_empty())
                .count();
            let bad: Vec<_> = results.iter().filter(|r| !r.ok()).collect();
            if json {
                writeln!(
                    stdout,
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "tasks": results, "broken": broken, "with_public_passing_hack": with_hack, "random_baseline": baseline,
                    }))?
                )?;
            } else {
                for r in &results {
                    let status = if r.ok() {
                        "ok".to_string()
                    } else {
                        format!("FAIL: {}", r.problems.join("; "))
                    };
                    writeln!(
                        stdout,
                        "{:<20} {:<15} candidates {} solving {:?} public-only {:?}  {status}",
                        r.id, r.split, r.candidates, r.solving_candidates, r.public_passing_hacks
                    )?;
                    for warning in &r.warnings {
                        writeln!(stdout, "  warning: {warning}")?;
                    }
                }
                writeln!(stdout,
                    "{} tasks, {} valid; {} with a public-passing hack decoy; random candidate solve rate {:.3}, random tool-call solve rate {:.3} ({} episodes on {} tasks; invalid ones and those whose runs hit a time limit left out)",
                    results.len(), results.len() - bad.len(), with_hack,
                    baseline.random_candidate_solve_rate, baseline.random_tool_calls_solve_rate, baseline.episodes,
                    results.len() - skipped
                )?;
            }
            // A public-passing hack decoy makes reward hacking measurable, but a task set
            // without one is valid (free-form tasks have no candidates at all).
            if with_hack * 2 < results.len() {
                eprintln!("warning: only {with_hack} of {} tasks have a public-passing hack decoy; reward hacking by candidates is rare in this set", results.len());
            }
            if !bad.is_empty() || !broken.is_empty() {
                bail!(
                    "{} task(s) failed validation, {} task folder(s) are broken",
                    bad.len(),
                    broken.len()
                );
            }
            Ok(())
        }
        GymCommand::RandomBaseline {
            episodes_per_task,
            seed,
            tasks,
        } => {
            let baseline = crate::validate::random_baseline(
                tasks.load()?,
                default_executor()?,
                OutcomeCache::new(),
                episodes_per_task,
                seed,
            )?;
            writeln!(stdout, "{}", serde_json::to_string_pretty(&baseline)?)?;
            Ok(())
        }
        GymCommand::SandboxInfo => {
            write!(stdout, "{}", sandbox_info_report())?;
            Ok(())
        }
        GymCommand::Serve(args) => {
            drop(stdout);
            serve(&args)
        }
    }
}

/// Parses one line a person typed in `play`.
pub fn parse_typed(line: &str) -> Action {
    let line = line.trim();
    if line.starts_with('{') {
        return match serde_json::from_str::<ToolCall>(line) {
            Ok(call) => Action::Call(call),
            Err(err) => Action::Malformed {
                raw: line.into(),
                reason: format!("bad JSON tool call: {err}"),
            },
        };
    }
    let (name, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let rest = rest.trim();
    let arguments = match (name, rest) {
        (_, "") => json!({}),
        ("read", path) => json!({ "path": path }),
        ("edit", k) if k.parse::<u64>().is_ok() => {
            json!({ "candidate": k.parse::<u64>().unwrap_or(0) })
        }
        (_, args) if args.starts_with('{') => match serde_json::from_str(args) {
            Ok(v) => v,
            Err(err) => {
                return Action::Malformed {
                    raw: line.into(),
                    reason: format!("bad JSON arguments: {err}"),
                }
            }
        },
        _ => {
            return Action::Malformed {
                raw: line.into(),
                reason: format!("cannot read arguments `{rest}`; use JSON"),
            }
        }
    };
    Action::Call(ToolCall {
        name: name.to_string(),
        arguments,
    })
}

/// The interactive loop of `gym play`, over any reader/writer (tests feed it text).
pub fn play(
    tasks: Arc<TaskSet>,
    id: &str,
    input: impl BufRead,
    mut output: impl Write,
) -> anyhow::Result<()> {
    let mut env = BugFixEnv::new(
        tasks,
        default_executor()?,
        OutcomeCache::new(),
        EnvConfig::default(),
    );
    let first = env.reset(id)?;
    writeln!(output, "{}", render_text(&first))?;
    writeln!(output, "Type: read PATH | test | edit K | edit {{JSON}} | submit | exploit | {{\"name\":..,\"arguments\":..}}")?;
    write!(output, "> ")?;
    output.flush()?;
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            write!(output, "> ")?;
            output.flush()?;
            continue;
        }
        let step = env.step(&parse_typed(&line))?;
        writeln!(output, "{}", render_text(&step.observation))?;
        if step.done {
            return Ok(());
        }
        write!(output, "> ")?;
        output.flush()?;
    }
    writeln!(output, "(input ended without submit)")?;
    Ok(())
}

/// `gym run`: one JSON line per step, then the final reward line.
pub fn run_actions(
    tasks: Arc<TaskSet>,
    id: &str,
    jsonl: &str,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut calls = Vec::new();
    for (i, line) in jsonl.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let call: ToolCall = serde_json::from_str(line).with_context(|| {
            format!(
                "actions line {}: not a tool call `{{\"name\": …, \"arguments\": {{…}}}}`",
                i + 1
            )
        })?;
        calls.push(call);
    }
    let mut env = BugFixEnv::new(
        tasks,
        default_executor()?,
        OutcomeCache::new(),
        EnvConfig::default(),
    );
    env.reset(id)?;
    let mut reward = None;
    for call in calls {
        let step = env.step(&Action::Call(call.clone()))?;
        let ok = !matches!(step.observation, Observation::Error { .. });
        writeln!(
            out,
            "{}",
            json!({ "call": call, "result": { "ok": ok, "text": render_text(&step.observation), "observation": step.observation } })
        )?;
        if step.done {
            reward = step.reward;
            break;
        }
    }
    let reward = match reward {
        Some(r) => r,
        None => {
            let step = env.step(&Action::Call(ToolCall {
                name: "submit".into(),
                arguments: json!({}),
            }))?;
            step.reward.context("submit did not end the episode")?
        }
    };
    writeln!(
        out,
        "{}",
        json!({
            "reward": reward.score, "public_passed": reward.public_passed, "public_total": reward.public_total,
            "hidden_passed": reward.hidden_passed, "hidden_total": reward.hidden_total,
            "tampered": reward.tampered, "format_errors": reward.format_errors, "solved": reward.solved(),
        })
    )?;
    Ok(())
}
