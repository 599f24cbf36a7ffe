//! The Python client (`clients/python/agentrl_gym.py`) against the real `agentrl gym serve`:
//! the scripted example prints exactly its recording (`clients/python/example_scripted.out`),
//! and the client's errors carry the server's status (404 for an unknown task, 401 without the
//! server's key). Needs only `python3`, like the BugFix tasks.

use std::process::{Command, Output};

use crate::support::{spawn_server, Served, KEY_ENV};

/// `agentrl gym serve --port 0`, with `key` as its API key (else none), once it listens.
fn gym_serve(key: Option<&str>) -> Served {
    spawn_server(&["gym", "serve"], key)
}

/// `python3 ARGS` from the repository root, with `key` (else no key) in `AGENTRL_API_KEY`.
fn python(args: &[&str], key: Option<&str>) -> Output {
    let mut command = Command::new("python3");
    command.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    match key {
        Some(key) => command.env(KEY_ENV, key),
        None => command.env_remove(KEY_ENV),
    };
    command.output().expect("running python3")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_scripted_example_prints_its_recording() {
    let served = gym_serve(None);
    let out = python(
        &["clients/python/example_scripted.py", served.url.as_str()],
        None,
    );
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "example_scripted.py failed ({}):\n{stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
    let recorded = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("clients/python/example_scripted.out"),
    )
    .unwrap();
    assert!(
        stdout == recorded,
        "the example's output differs from clients/python/example_scripted.out. If the change \
         is intended, re-record it against a fresh server:\n  \
         target/release/agentrl gym serve --port 0 &   # prints its URL\n  \
         python3 clients/python/example_scripted.py URL > clients/python/example_scripted.out\n\
         --- now ---\n{stdout}--- recorded ---\n{recorded}"
    );
}

/// Run with `python3 -c SNIPPET OPEN_URL KEYED_URL` from the repository root.
const ERRORS_SNIPPET: &str = r#"
import sys
sys.path.insert(0, "clients/python")
from agentrl_gym import GymClient, GymError

open_url, keyed_url = sys.argv[1], sys.argv[2]

def status_of(call):
    try:
        call()
    except GymError as e:
        assert e.message, "an error without the server's message"
        return e.status
    return 200

assert status_of(lambda: GymClient(open_url).start("no-such-task-000")) == 404
assert status_of(lambda: GymClient(open_url).health()) == 200
if len(sys.argv) > 3:  # AGENTRL_API_KEY=k in this process: the client's default key
    assert status_of(lambda: GymClient(keyed_url).health()) == 200
    assert status_of(lambda: GymClient(keyed_url, api_key="wrong").health()) == 401
else:
    assert status_of(lambda: GymClient(keyed_url).health()) == 401
    assert status_of(lambda: GymClient(keyed_url, api_key="k").health()) == 200
    assert status_of(lambda: GymClient(keyed_url, api_key="k").tasks()) == 200
print("ok")
"#;

#[test]
fn python_client_errors_carry_the_status_and_the_key_is_sent() {
    let open = gym_serve(None);
    let keyed = gym_serve(Some("k"));
    for (key, extra) in [(None, None), (Some("k"), Some("key-from-env"))] {
        let mut args = vec!["-c", ERRORS_SNIPPET, open.url.as_str(), keyed.url.as_str()];
        args.extend(extra);
        let out = python(&args, key);
        assert!(
            out.status.success() && text(&out.stdout).trim() == "ok",
            "the client's error checks failed (AGENTRL_API_KEY {}): {}\n{}{}",
            if key.is_some() { "set" } else { "unset" },
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
    }
}
