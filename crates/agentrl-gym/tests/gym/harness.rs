//! Scoring one hidden case from its records: exactly one good outcome passes, limits and cuts are
//! named, and a check is the trusted side's, with the in-sandbox fallback flagged.

use std::time::Duration;

use agentrl_gym::check::Expect;
use agentrl_gym::harness::{score_case, CaseVerdict, Scored};
use agentrl_gym::sandbox::{Limits, RunOutput, SandboxError, Termination};
use agentrl_gym::task::HiddenCase;
use agentrl_gym::trusted::{Evaluated, Split};

fn output(result: &str, termination: Termination, truncated: bool) -> RunOutput {
    RunOutput {
        termination,
        stdout: Vec::new(),
        stderr: Vec::new(),
        result: result.as_bytes().to_vec(),
        truncated,
        elapsed: Duration::from_millis(10),
    }
}

fn case(expect: Expect) -> HiddenCase {
    HiddenCase {
        name: "c".into(),
        setup: String::new(),
        expr: "f()".into(),
        expect,
        check: None,
        time_limit_s: None,
    }
}

fn trivial() -> Split {
    Split {
        parts: vec!["f()".into()],
        skeleton: None,
        sandbox_check: None,
    }
}

fn score(
    result: &str,
    termination: Termination,
    truncated: bool,
    expect: &HiddenCase,
) -> CaseVerdict {
    score_case(
        &output(result, termination, truncated),
        expect,
        &trivial(),
        &Limits::default(),
        |_| panic!("a trivial case never reaches the checker"),
    )
    .unwrap()
    .verdict()
}

/// `Scored::verdict`, the verdict of a case that needs no sandbox check.
trait Verdict {
    fn verdict(self) -> CaseVerdict;
}

impl Verdict for Scored {
    fn verdict(self) -> CaseVerdict {
        match self {
            Scored::Verdict(v) => v,
            Scored::NeedsSandboxCheck => panic!("needs a sandbox check"),
        }
    }
}

#[test]
fn a_case_passes_only_with_exactly_one_good_record() {
    let exited = Termination::Exited { code: 0 };
    let expect = case(Expect::Value("None".into()));
    let one = "{\"value\": null, \"part\": 0}\n{\"done\": true}\n";
    assert_eq!(score(one, exited.clone(), false, &expect).detail, None);
    let two = "{\"value\": null, \"part\": 0}\n{\"value\": null, \"part\": 0}\n{\"done\": true}\n";
    let verdict = score(two, exited.clone(), false, &expect);
    assert!(verdict.detail.unwrap().contains("2 outcomes"));
    let stray = "{\"value\": null, \"part\": 0}\n{\"value\": null}\n{\"done\": true}\n";
    assert!(score(stray, exited.clone(), false, &expect)
        .detail
        .unwrap()
        .contains("2 outcomes"));
    let early = score(
        "{\"value\": null, \"part\": 0}\n",
        exited.clone(),
        false,
        &expect,
    );
    assert!(early.run_problem && early.detail.unwrap().contains("exited with code 0"));
    let cut = score("{\"value\": \"xx", exited.clone(), true, &expect);
    assert!(
        cut.detail.unwrap().contains("output cap"),
        "never a silent cut"
    );
    let hung = score("", Termination::TimedOut, false, &expect);
    assert!(hung.time_limited);
    assert_eq!(hung.detail.as_deref(), Some("time limit of 5 s exceeded"));
    let xcpu = Termination::Signaled {
        signal: libc::SIGXCPU,
    };
    let cpu = score("", xcpu, false, &expect);
    assert_eq!(cpu.detail.as_deref(), Some("time limit of 4 s exceeded"));
    // A setup that raised is the case's outcome.
    let raises = case(Expect::Raises("ValueError".into()));
    let setup = "{\"raises\": \"ValueError\", \"lookalike\": false}\n{\"done\": true}\n";
    assert_eq!(score(setup, exited, false, &raises).detail, None);
}

#[test]
fn a_check_is_the_trusted_sides_and_an_object_falls_back_with_a_flag() {
    let exited = Termination::Exited { code: 0 };
    let split = Split {
        parts: vec!["f(2)".into()],
        skeleton: Some("abs(_part(0) - 4.0) < 1e-9".into()),
        sandbox_check: None,
    };
    let expect = case(Expect::Value("True".into()));
    let records = "{\"value\": {\"float\": \"4.0\"}, \"part\": 0}\n{\"done\": true}\n";
    // Whatever the sandbox said, the verdict is what the checker computed.
    let verdict = score_case(
        &output(records, exited.clone(), false),
        &expect,
        &split,
        &Limits::default(),
        |parts| {
            assert_eq!(parts, [serde_json::json!({"value": {"float": "4.0"}})]);
            Ok(Evaluated::Outcome(serde_json::json!({"value": false})))
        },
    )
    .unwrap()
    .verdict();
    assert!(verdict.detail.is_some() && !verdict.checked_in_sandbox);
    let slow = score_case(
        &output(records, exited.clone(), false),
        &expect,
        &split,
        &Limits::default(),
        |_| Ok(Evaluated::TimedOut),
    )
    .unwrap()
    .verdict();
    assert!(slow.time_limited && slow.detail.unwrap().contains("trusted check"));
    let object =
        "{\"value\": {\"other\": \"m.P\", \"repr\": \"P()\"}, \"part\": 0}\n{\"done\": true}\n";
    let never = |_: &[serde_json::Value]| -> Result<Evaluated, SandboxError> {
        panic!("an object cannot be rebuilt on the trusted side")
    };
    let first = score_case(
        &output(object, exited.clone(), false),
        &expect,
        &split,
        &Limits::default(),
        never,
    );
    assert_eq!(first.unwrap(), Scored::NeedsSandboxCheck);
    let object = "{\"value\": {\"other\": \"m.P\", \"repr\": \"P()\"}, \"part\": 0}\n{\"fallback\": true}\n{\"done\": true}\n";
    let fallback = score_case(
        &output(object, exited, false),
        &expect,
        &split,
        &Limits::default(),
        never,
    )
    .unwrap()
    .verdict();
    assert!(fallback.detail.is_none() && fallback.checked_in_sandbox);
}
