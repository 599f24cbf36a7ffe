//! The socket seccomp filter compiles for this architecture and serialises 8 bytes per instruction.

use agentrl_gym::sandbox::seccomp::{socket_filter, to_hex};

#[test]
fn filter_compiles_and_serialises_per_instruction() {
    let program = socket_filter(true).expect("filter for this architecture");
    assert!(
        program.len() > 20 && program.len() < 1000,
        "{}",
        program.len()
    );
    assert_eq!(to_hex(&program).len(), program.len() * 16);
}
