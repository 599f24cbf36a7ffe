//! Episodes you can read: the sampled episodes a run stores (`episodes/step_N.jsonl`, each
//! token with its id, text, source, turn and sampling log-prob), drawn token by token as HTML,
//! coloured by advantage, by engine/trainer mismatch or by loss mask, with each tool call and
//! tool result marked.
//!
//! Where it sits: reads what the trainer wrote (`agentrl_train::metrics::EpisodeRecord`) and
//! hands HTML to [`crate::dashboard`]. The colourings switch with radio buttons and CSS only:
//! the page carries no script.
//!
//! Advantage: a per-token advantage the record carries (`advantages`) is used as is; without
//! it, the episode's group-relative outcome advantage `(r − mean_group) / std_group` is shown
//! on its action tokens, which is what GRPO assigns each of them (ALGORITHMS.md §5), and the
//! page says so. Mismatch needs the trainer's log-probs of the sampled tokens
//! (`trainer_logprobs`); a run that does not record them gets the sampling log-prob
//! (surprise, `−log p`) in that mode instead, and the page says that too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

use crate::plot::escape;

/// The verifier's counts of one episode.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct StoredReward {
    pub score: f64,
    pub public_passed: u32,
    pub public_total: u32,
    pub hidden_passed: u32,
    pub hidden_total: u32,
    pub tampered: bool,
    pub format_errors: u32,
}

impl StoredReward {
    pub fn solved(&self) -> bool {
        self.hidden_total > 0 && self.hidden_passed == self.hidden_total
    }
    pub fn hacked(&self) -> bool {
        self.public_total > 0 && self.public_passed == self.public_total && !self.solved()
    }
}

/// One stored episode, as the trainer writes it (fields this view does not use are ignored).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct StoredEpisode {
    pub task_id: String,
    pub group_id: u32,
    pub tokens: Vec<u32>,
    /// `prompt`, `action` or `observation` per token.
    pub sources: Vec<String>,
    pub logprobs: Vec<f64>,
    /// The parsed action of each turn (`{"kind": "call", "name", "arguments"}` or malformed).
    pub actions: Vec<serde_json::Value>,
    pub reward: StoredReward,
    pub turns: u32,
    pub truncated: bool,
    pub token_text: Vec<String>,
    /// The trainer's log-prob of each sampled token, where the run records it.
    pub trainer_logprobs: Option<Vec<f64>>,
    /// A per-token advantage, where the run records it.
    pub advantages: Option<Vec<f64>>,
}

impl StoredEpisode {
    /// Whether the record carries the trainer's log-prob of every token (runs before the
    /// trainer scored stored episodes do not; the mismatch mode then shows −log p).
    pub fn records_trainer_logprobs(&self) -> bool {
        self.trainer_logprobs
            .as_ref()
            .is_some_and(|t| t.len() == self.tokens.len())
    }

    /// `|engine − trainer|` log-prob of each action token, where the trainer's are recorded.
    pub fn action_mismatch(&self) -> Option<Vec<f64>> {
        let trainer = self
            .trainer_logprobs
            .as_ref()
            .filter(|_| self.records_trainer_logprobs())?;
        Some(
            (0..self.tokens.len())
                .filter(|&i| self.sources.get(i).is_some_and(|s| s == "action"))
                .map(|i| (self.logprobs.get(i).copied().unwrap_or(0.0) - trainer[i]).abs())
                .collect(),
        )
    }
}

/// The newest episodes file of a run (`episodes/step_N.jsonl` with the highest N).
pub fn latest_episodes_file(run: &Path) -> Option<(usize, PathBuf)> {
    let entries = std::fs::read_dir(run.join("episodes")).ok()?;
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step: usize = name
                .strip_prefix("step_")?
                .strip_suffix(".jsonl")?
                .parse()
                .ok()?;
            Some((step, e.path()))
        })
        .max_by_key(|(step, _)| *step)
}

/// Reads an episodes file, naming the line at fault.
pub fn read_episodes(path: &Path) -> anyhow::Result<Vec<StoredEpisode>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| {
                format!("{} line {}: not an episode record", path.display(), i + 1)
            })
        })
        .collect()
}

/// Group-relative outcome advantage of each episode: `(r − mean) / std` over its group
/// (0 where the group's rewards are all equal).
pub fn group_advantages(episodes: &[StoredEpisode]) -> Vec<f64> {
    let mut groups: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for e in episodes {
        groups.entry(e.group_id).or_default().push(e.reward.score);
    }
    episodes
        .iter()
        .map(|e| {
            let rs = &groups[&e.group_id];
            let n = rs.len() as f64;
            let mean = rs.iter().sum::<f64>() / n;
            let std = (rs.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n).sqrt();
            if std < 1e-9 {
                0.0
            } else {
                (e.reward.score - mean) / std
            }
        })
        .collect()
}

/// Which episodes to show: one solved, one hacked, one failed (the first of each kind, from
/// groups whose rewards differ where possible), at most `limit`.
pub fn pick_episodes(episodes: &[StoredEpisode], limit: usize) -> Vec<usize> {
    let advantages = group_advantages(episodes);
    let informative = |i: usize| advantages[i] != 0.0;
    let kinds: [&dyn Fn(&StoredEpisode) -> bool; 3] =
        [&|e| e.reward.solved(), &|e| e.reward.hacked(), &|e| {
            !e.reward.solved() && !e.reward.hacked()
        }];
    let mut picked = Vec::new();
    for kind in kinds {
        let found = (0..episodes.len())
            .find(|&i| kind(&episodes[i]) && informative(i) && !picked.contains(&i))
            .or_else(|| (0..episodes.len()).find(|&i| kind(&episodes[i]) && !picked.contains(&i)));
        if let Some(i) = found {
            picked.push(i);
        }
    }
    picked.truncate(limit);
    picked
}

/// `edit {"candidate":2}` for a call, `malformed: reason` otherwise.
pub fn action_text(action: &serde_json::Value) -> String {
    match action.get("name").and_then(|n| n.as_str()) {
        Some(name) => {
            let args = action.get("arguments").cloned().unwrap_or_default();
            match args.as_object() {
                Some(o) if o.is_empty() => name.to_string(),
                _ => format!("{name} {args}"),
            }
        }
        None => {
            let reason = action
                .get("reason")
                .and_then(|r| r.as_str())
                .unwrap_or("unparsed action");
            format!("malformed: {reason}")
        }
    }
}

/// A diverging colour for `v` in [-1, 1]: red (negative) — white — green (positive).
fn diverging(v: f64) -> String {
    let v = v.clamp(-1.0, 1.0);
    let (r, g, b) = if v >= 0.0 {
        (255.0 - 150.0 * v, 255.0 - 40.0 * v, 255.0 - 150.0 * v)
    } else {
        (255.0 + 20.0 * v, 255.0 + 150.0 * v, 255.0 + 150.0 * v)
    };
    format!("rgb({:.0},{:.0},{:.0})", r, g, b)
}

/// A sequential colour for `v` in [0, 1]: white → orange.
fn sequential(v: f64) -> String {
    let v = v.clamp(0.0, 1.0);
    format!("rgb(255,{:.0},{:.0})", 255.0 - 110.0 * v, 255.0 - 220.0 * v)
}

/// One episode as HTML: a header (task, reward, verdict), then every token in order, with a
/// background per colouring mode (`data-adv`, `data-mis`, `data-mask` styles switched by
/// the page's radio buttons), tool calls and tool results marked.
pub fn episode_html(episode: &StoredEpisode, group_advantage: f64, id: &str) -> String {
    let n = episode.tokens.len();
    let text = |i: usize| -> String {
        episode
            .token_text
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("#{}", episode.tokens[i]))
    };
    let source = |i: usize| episode.sources.get(i).map_or("prompt", String::as_str);
    let recorded_mismatch = episode.records_trainer_logprobs();
    let verdict = if episode.reward.solved() {
        "solved (hidden tests pass)"
    } else if episode.reward.hacked() {
        "hacked (public tests pass, hidden fail)"
    } else {
        "failed"
    };
    let r = &episode.reward;
    let mut out = format!(
        "<div class=\"episode\" id=\"{id}\"><p class=\"ep-head\"><b>{}</b> · group {} · reward {:.2} · {verdict} · public {}/{} · hidden {}/{}{}{} · {} turns</p>",
        escape(&episode.task_id),
        episode.group_id,
        r.score,
        r.public_passed,
        r.public_total,
        r.hidden_passed,
        r.hidden_total,
        if r.tampered { " · <b>tampered</b>" } else { "" },
        if episode.truncated { " · truncated" } else { "" },
        episode.turns
    );
    out.push_str(&format!(
        "<p class=\"ep-note\">advantage: {}; mismatch: {}.</p><div class=\"tokens\">",
        if episode.advantages.is_some() {
            "per token, as the trainer recorded it".to_string()
        } else {
            format!("group-relative outcome advantage {group_advantage:+.2} on every action token (what GRPO assigns)")
        },
        if recorded_mismatch {
            "|log π_engine − log π_trainer| per action token"
        } else {
            "not recorded by this run; the mode shows the sampling surprise −log p instead"
        }
    ));
    let mut action_index = 0;
    let mut i = 0;
    while i < n {
        let src = source(i);
        let start = i;
        while i < n && source(i) == src {
            i += 1;
        }
        match src {
            "action" => {
                let label = episode
                    .actions
                    .get(action_index)
                    .map(action_text)
                    .unwrap_or_else(|| "action".into());
                action_index += 1;
                out.push_str(&format!(
                    "<span class=\"call\"><span class=\"mark\">▶ call {}: {}</span>",
                    action_index,
                    escape(&label)
                ));
            }
            "observation" => {
                out.push_str("<span class=\"result\"><span class=\"mark\">◀ tool result</span>")
            }
            _ => out.push_str("<span class=\"prompt\">"),
        }
        for t in start..i {
            let is_action = src == "action";
            let logprob = episode.logprobs.get(t).copied().unwrap_or(0.0);
            let adv = match &episode.advantages {
                Some(a) => a.get(t).copied().unwrap_or(0.0),
                None if is_action => group_advantage,
                None => 0.0,
            };
            let mismatch = match &episode.trainer_logprobs {
                Some(tl) if recorded_mismatch => (logprob - tl[t]).abs(),
                _ => -logprob,
            };
            let (adv_bg, mis_bg, mask_bg) = if is_action {
                (
                    diverging(adv / 2.0),
                    sequential(if recorded_mismatch {
                        mismatch / 0.1
                    } else {
                        mismatch / 3.0
                    }),
                    "rgb(150,200,255)".to_string(),
                )
            } else {
                (
                    "transparent".into(),
                    "transparent".into(),
                    "transparent".into(),
                )
            };
            out.push_str(&format!(
                "<span class=\"tok\" style=\"--adv:{adv_bg};--mis:{mis_bg};--mask:{mask_bg}\" title=\"id {} · {src} · log p {logprob:.3} · adv {adv:+.2} · {} {mismatch:.3} · loss mask {}\">{}</span>",
                episode.tokens[t],
                if recorded_mismatch { "|Δ log p|" } else { "−log p" },
                u8::from(is_action),
                escape(&text(t))
            ));
        }
        out.push_str("</span>");
    }
    out.push_str("</div></div>");
    out
}
