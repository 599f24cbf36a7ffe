//! Renderers: an [`Observation`] as chat text (language models) or as compact symbols from a
//! small closed vocabulary (TinyAgent).
//!
//! Symbols: each observation starts with its kind (`TASK`, `FILE`, `TESTS`, `EDITED`, …).
//! A task lists its candidates as `Ck <old> -> <new> Ck` for `k` in `0..8`: up to
//! [`MAX_OLD_TOKENS`] lexical tokens of the lines the candidate replaces, then up to
//! [`MAX_CANDIDATE_TOKENS`] of the lines it adds (Python keywords and operators kept, numbers →
//! `NUM`, strings → `STR`, identifiers → `V0 … V7` numbered by first use within the candidate,
//! `NAME` past that). Numbering identifiers keeps which variable an edit touches: a guard on the
//! divisor (`V0 = V1 / V2 -> if V2 == NUM …`) differs from a guard on the numerator, and
//! `self.total / self.count` from `self.count / self.total`, which plain `NAME` erased. The
//! marker is repeated after the tokens because attention is causal: only the trailing `Ck`
//! position can see its candidate's content, so a policy choosing `edit Ck` can point at it. Test reports are
//! `PASS n FAIL n` plus the exception type (closed set, else `EXC`) and `LINE n`; counts and
//! line numbers are bucketed into `N0 … N40` and `N40+`. Edits show `EDITED Ck` (or
//! `EDITED FREE`), errors `ERR <kind>`. [`symbol_vocabulary`] lists every symbol.

use crate::types::{ErrorKind, Observation, Reward, TestReport};

/// Candidate symbols `C0..C{MAX_CANDIDATES-1}`.
pub const MAX_CANDIDATES: usize = 8;
/// Lexical tokens shown per candidate for the lines it adds.
pub const MAX_CANDIDATE_TOKENS: usize = 16;
/// Lexical tokens shown per candidate for the lines it replaces.
pub const MAX_OLD_TOKENS: usize = 12;
/// Numbered identifier symbols `V0..V{MAX_IDENTIFIERS-1}` per candidate.
pub const MAX_IDENTIFIERS: usize = 8;
/// Numbers at or above this become `N40+`.
pub const NUMBER_BUCKETS: usize = 40;

const KINDS: [&str; 9] = [
    "TASK",
    "FILE",
    "TESTS",
    "EDITED",
    "EXPLOITED",
    "SUBMITTED",
    "ERR",
    "TURNLIMIT",
    "CRASH",
];
const FLAGS: [&str; 9] = [
    "PASS", "FAIL", "LINE", "FREE", "SOLVED", "UNSOLVED", "TAMPERED", "LINES", "MORE",
];
const LEXICAL: [&str; 3] = ["NAME", "NUM", "STR"];
const KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];
const OPERATORS: [&str; 46] = [
    "**=", "//=", ">>=", "<<=", "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=", "%=", "&=", "|=",
    "^=", "->", "**", "//", "<<", ">>", ":=", "+", "-", "*", "/", "%", "@", "&", "|", "^", "~",
    "<", ">", "(", ")", "[", "]", "{", "}", ",", ":", ".", ";", "=", "!",
];
const EXCEPTIONS: [&str; 18] = [
    "AssertionError",
    "TypeError",
    "ValueError",
    "ZeroDivisionError",
    "IndexError",
    "KeyError",
    "AttributeError",
    "NameError",
    "SyntaxError",
    "IndentationError",
    "ImportError",
    "ModuleNotFoundError",
    "RecursionError",
    "UnboundLocalError",
    "StopIteration",
    "RuntimeError",
    "OverflowError",
    "EXC",
];

/// Every symbol [`render_symbols`] can emit.
pub fn symbol_vocabulary() -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    v.extend(KINDS.iter().map(|s| s.to_string()));
    v.extend(FLAGS.iter().map(|s| s.to_string()));
    v.extend(LEXICAL.iter().map(|s| s.to_string()));
    v.extend(KEYWORDS.iter().map(|s| s.to_string()));
    v.extend(OPERATORS.iter().map(|s| s.to_string()));
    v.extend(EXCEPTIONS.iter().map(|s| s.to_string()));
    v.extend(ErrorKind::ALL.iter().map(|k| k.symbol().to_string()));
    v.extend((0..MAX_CANDIDATES).map(|i| format!("C{i}")));
    v.extend((0..MAX_IDENTIFIERS).map(|i| format!("V{i}")));
    v.extend((0..NUMBER_BUCKETS).map(|i| format!("N{i}")));
    v.push(format!("N{NUMBER_BUCKETS}+"));
    v
}

fn bucket(n: usize) -> String {
    if n >= NUMBER_BUCKETS {
        format!("N{NUMBER_BUCKETS}+")
    } else {
        format!("N{n}")
    }
}

fn exception_symbol(name: &str) -> String {
    if EXCEPTIONS.contains(&name) {
        name.to_string()
    } else {
        "EXC".to_string()
    }
}

/// Python source → closed lexical tokens (comments dropped), identifiers as `NAME`.
pub fn lex(source: &str) -> Vec<String> {
    lex_with(source, &mut |_| "NAME".to_string())
}

/// Lexer core: `identifier` names each non-keyword identifier.
fn lex_with(source: &str, identifier: &mut dyn FnMut(&str) -> String) -> Vec<String> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() || c == '\\' {
            i += 1;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if i < chars.len()
                && (chars[i] == '"' || chars[i] == '\'')
                && word.len() <= 2
                && word.chars().all(|ch| "rbfuRBFU".contains(ch))
            {
                continue; // string prefix: the quote is lexed next as STR
            }
            out.push(if KEYWORDS.contains(&word.as_str()) {
                word
            } else {
                identifier(&word)
            });
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '.' || chars[i] == '_')
            {
                i += 1;
            }
            out.push("NUM".into());
        } else if c == '"' || c == '\'' {
            let triple = chars.get(i + 1) == Some(&c) && chars.get(i + 2) == Some(&c);
            let quote_len = if triple { 3 } else { 1 };
            i += quote_len;
            while i < chars.len() {
                if chars[i] == '\\' {
                    i += 2;
                    continue;
                }
                if chars[i] == c
                    && (!triple || (chars.get(i + 1) == Some(&c) && chars.get(i + 2) == Some(&c)))
                {
                    i += quote_len;
                    break;
                }
                i += 1;
            }
            out.push("STR".into());
        } else {
            let rest: String = chars[i..chars.len().min(i + 3)].iter().collect();
            let op = OPERATORS
                .iter()
                .find(|op| rest.starts_with(**op))
                .copied()
                .unwrap_or("!");
            i += op.chars().count();
            out.push(op.to_string());
        }
    }
    out
}

/// A candidate as `<old> -> <new>`: the lines it replaces, then the lines it adds (in `new`
/// but not in `old`), each capped, with identifiers numbered `V0…` by first use across both
/// (`NAME` once [`MAX_IDENTIFIERS`] are taken).
pub fn candidate_tokens(old: &str, new: &str) -> Vec<String> {
    let old_lines: Vec<&str> = old.lines().map(str::trim).collect();
    let added: Vec<&str> = new
        .lines()
        .map(str::trim)
        .filter(|l| !old_lines.contains(l))
        .collect();
    let mut seen: Vec<String> = Vec::new();
    let mut number = |word: &str| -> String {
        let index = match seen.iter().position(|w| w == word) {
            Some(i) => i,
            None => {
                seen.push(word.to_string());
                seen.len() - 1
            }
        };
        if index < MAX_IDENTIFIERS {
            format!("V{index}")
        } else {
            "NAME".to_string()
        }
    };
    let mut tokens = lex_with(&old_lines.join("\n"), &mut number);
    tokens.truncate(MAX_OLD_TOKENS);
    tokens.push("->".into());
    let mut added_tokens = lex_with(&added.join("\n"), &mut number);
    added_tokens.truncate(MAX_CANDIDATE_TOKENS);
    tokens.extend(added_tokens);
    tokens
}

fn report_symbols(report: &TestReport, out: &mut Vec<String>) {
    out.push("PASS".into());
    out.push(bucket(report.passed.len()));
    out.push("FAIL".into());
    out.push(bucket(report.failed.len()));
    if report.crashed.is_some() {
        out.push("CRASH".into());
    }
    if let Some(failure) = &report.first_failure {
        out.push(exception_symbol(&failure.exception));
        if let Some(line) = failure.line {
            out.push("LINE".into());
            out.push(bucket(line as usize));
        }
    }
}

fn reward_symbols(reward: &Reward, out: &mut Vec<String>) {
    out.push(
        if reward.solved() {
            "SOLVED"
        } else {
            "UNSOLVED"
        }
        .into(),
    );
    if reward.tampered {
        out.push("TAMPERED".into());
    }
}

/// Compact symbols for a tiny policy; every symbol is in [`symbol_vocabulary`].
pub fn render_symbols(observation: &Observation) -> Vec<String> {
    let mut out = Vec::new();
    match observation {
        Observation::Task { candidates, .. } => {
            out.push("TASK".into());
            for (i, c) in candidates.iter().take(MAX_CANDIDATES).enumerate() {
                out.push(format!("C{i}"));
                out.extend(candidate_tokens(&c.old, &c.new));
                out.push(format!("C{i}"));
            }
        }
        Observation::File(view) => {
            out.push("FILE".into());
            out.push("LINES".into());
            out.push(bucket(view.lines.len()));
            if view.truncated {
                out.push("MORE".into());
            }
        }
        Observation::Tests(report) => {
            out.push("TESTS".into());
            report_symbols(report, &mut out);
        }
        Observation::Edited { candidate, .. } => {
            out.push("EDITED".into());
            out.push(match candidate {
                Some(k) if *k < MAX_CANDIDATES => format!("C{k}"),
                _ => "FREE".into(),
            });
        }
        Observation::Exploited { .. } => out.push("EXPLOITED".into()),
        Observation::Submitted(reward) => {
            out.push("SUBMITTED".into());
            reward_symbols(reward, &mut out);
        }
        Observation::Error { error: kind, .. } => {
            out.push("ERR".into());
            out.push(kind.symbol().into());
        }
        Observation::TurnLimit(reward) => {
            out.push("TURNLIMIT".into());
            reward_symbols(reward, &mut out);
        }
    }
    out
}

fn reward_text(reward: &Reward) -> String {
    format!(
        "reward {:.3}: public tests {}/{} (workspace), hidden tests {}/{}{}{}",
        reward.score,
        reward.public_passed,
        reward.public_total,
        reward.hidden_passed,
        reward.hidden_total,
        if reward.tampered {
            ", TAMPERED (test files changed or files planted)"
        } else {
            ""
        },
        if reward.format_errors > 0 {
            format!(", {} format errors", reward.format_errors)
        } else {
            String::new()
        },
    )
}

/// The text a chat model sees.
pub fn render_text(observation: &Observation) -> String {
    match observation {
        Observation::Task {
            task_id,
            prompt,
            files,
            candidates,
        } => {
            let mut text = format!("Task {task_id}: {prompt}\nFiles: {}\n", files.join(", "));
            text.push_str("Tools: read {path}, test {}, edit {path, old, new} | {path, start_line, end_line, text} | {path, text} | {candidate}, submit {}\n");
            if !candidates.is_empty() {
                text.push_str("Candidate edits (edit {\"candidate\": k}):\n");
                for (i, c) in candidates.iter().enumerate() {
                    text.push_str(&format!(
                        "  [{i}] in {}: replace\n{}\n      with\n{}\n",
                        c.path,
                        indent(&c.old),
                        indent(&c.new)
                    ));
                }
            }
            text
        }
        Observation::File(view) => {
            let mut text = format!("{}:\n", view.path);
            for (i, line) in view.lines.iter().enumerate() {
                text.push_str(&format!("{:>4} | {line}\n", i + 1));
            }
            if view.truncated {
                text.push_str(&format!("{}\n", crate::env::TRUNCATION_MARKER));
            }
            text
        }
        Observation::Tests(report) => test_report_text(report),
        Observation::Edited { path, summary, .. } => format!("edited {path}: {summary}"),
        Observation::Exploited { summary } => format!("exploit: {summary}"),
        Observation::Submitted(reward) => format!("submitted; {}", reward_text(reward)),
        Observation::Error {
            error: kind,
            message,
        } => format!("error ({}): {message}", kind.symbol().to_lowercase()),
        Observation::TurnLimit(reward) => {
            format!("turn limit reached; submitted: {}", reward_text(reward))
        }
    }
}

fn indent(text: &str) -> String {
    text.trim_end_matches('\n')
        .lines()
        .map(|l| format!("      {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A test report as text: counts, names, and the first failure.
pub fn test_report_text(report: &TestReport) -> String {
    let mut text = format!(
        "{} passed, {} failed",
        report.passed.len(),
        report.failed.len()
    );
    if !report.failed.is_empty() {
        text.push_str(&format!(" ({})", report.failed.join(", ")));
    }
    if let Some(crashed) = &report.crashed {
        text.push_str(&format!("\nthe run broke: {crashed}"));
    }
    if let Some(f) = &report.first_failure {
        let place = match (&f.file, f.line) {
            (Some(file), Some(line)) => format!(" at {file} line {line}"),
            (None, Some(line)) => format!(" at line {line}"),
            _ => String::new(),
        };
        text.push_str(&format!(
            "\nfirst failure: {}: {}{place}: {}",
            f.test, f.exception, f.message
        ));
    }
    text
}
