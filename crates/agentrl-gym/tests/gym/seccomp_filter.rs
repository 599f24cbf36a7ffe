//! The seccomp filter compiles for this architecture, serialises 8 bytes per instruction, and
//! the table in `src/sandbox/seccomp.rs`'s doc comment says exactly what the filter does.

use std::collections::BTreeMap;

use agentrl_gym::sandbox::seccomp::{decisions, sandbox_filter, to_hex};

#[test]
fn filter_compiles_and_serialises_per_instruction() {
    for allow_inet in [true, false] {
        let program = sandbox_filter(allow_inet).expect("filter for this architecture");
        assert!(
            program.len() > 20 && program.len() < 1000,
            "{}",
            program.len()
        );
        assert_eq!(to_hex(&program).len(), program.len() * 16);
    }
}

/// `(syscall, decision)` for every row of the doc table; a row may name several calls. Rows
/// marked `(x86_64)` are left out on other architectures.
fn documented() -> BTreeMap<String, String> {
    let source = include_str!("../../src/sandbox/seccomp.rs");
    let mut table = BTreeMap::new();
    for line in source.lines() {
        let Some(row) = line.strip_prefix("//! | `") else {
            continue;
        };
        let cells: Vec<&str> = row.split(" | ").collect();
        assert!(cells.len() >= 3, "a table row without its columns: {line}");
        if cells[0].contains("(x86_64)") && std::env::consts::ARCH != "x86_64" {
            continue;
        }
        let names = format!("`{}", cells[0]);
        for name in names.split('`').skip(1).step_by(2) {
            let previous = table.insert(name.to_string(), cells[1].trim().to_string());
            assert!(previous.is_none(), "`{name}` is in the table twice");
        }
    }
    table
}

#[test]
fn the_doc_table_matches_the_filter() {
    let table = documented();
    let filter: BTreeMap<String, String> = decisions()
        .into_iter()
        .map(|(name, decision, _)| (name.to_string(), decision.to_string()))
        .collect();
    assert!(table.len() > 60, "the table was not parsed: {table:?}");
    for (name, decision) in &filter {
        assert_eq!(
            table.get(name),
            Some(decision),
            "`{name}`: the filter says {decision}, the table {:?}",
            table.get(name)
        );
    }
    for (name, decision) in &table {
        assert!(
            filter.contains_key(name),
            "`{name}` is in the table ({decision}) but not in the filter"
        );
    }
    // Every number is distinct: a copy-paste slip would deny one call twice and another never.
    let mut numbers: Vec<i64> = decisions().iter().map(|&(_, _, nr)| nr).collect();
    numbers.sort();
    let count = numbers.len();
    numbers.dedup();
    assert_eq!(numbers.len(), count, "a number is listed twice");
}
