//! The gym as a service (`agentrl_gym::service`): a [`GymServer`] on loopback answered with
//! plain HTTP (bad requests are 4xx with a reason, the live-episode bound is a 429, idle
//! episodes are reaped, repeated steps are answered once, the token rule), and the trainer's
//! client ([`GymFleet`] / `RemoteEnv`): the same episode as in process, a server lost
//! mid-episode (the episode restarted on the other and replayed, counted), and a server whose
//! tasks differ refused at connect.

use std::sync::Arc;
use std::time::Duration;

use agentrl_gym::service::{access, AccessRule, FleetConfig, GymFleet, GymServeOptions, GymServer};
use agentrl_gym::task::TaskSet;
use agentrl_gym::{Action, BugFixEnv, Env, EnvConfig, OutcomeCache, ToolCall};
use serde_json::{json, Value};

use crate::shared;

const TASK: &str = "intdiv-000";
const MODULE: &str = "averages.py";

fn server(options: GymServeOptions) -> GymServer {
    let (tasks, executor) = shared();
    GymServer::start(tasks, executor, options, "127.0.0.1:0").expect("the server starts")
}

/// `(status, JSON body)`; error statuses are answers too.
fn call(method: &str, url: &str, body: Option<&str>, key: Option<&str>) -> (u16, Value) {
    let mut request = ureq::request(method, url).set("Connection", "close");
    if let Some(key) = key {
        request = request.set("Authorization", &format!("Bearer {key}"));
    }
    let result = match body {
        Some(body) => request.send_string(body),
        None => request.call(),
    };
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = response.status();
    let text = response.into_string().expect("a body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn message(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message in {body}"))
        .to_string()
}

fn start(url: &str, task: &str) -> (u16, Value) {
    call(
        "POST",
        &format!("{url}/v1/episodes"),
        Some(&json!({ "task_id": task }).to_string()),
        None,
    )
}

fn step(url: &str, id: &str, action: Value, turn: Option<u32>) -> (u16, Value) {
    let mut body = json!({ "action": action });
    if let Some(turn) = turn {
        body["turn"] = json!(turn);
    }
    call(
        "POST",
        &format!("{url}/v1/episodes/{id}/step"),
        Some(&body.to_string()),
        None,
    )
}

fn tool(name: &str, arguments: Value) -> Value {
    json!({ "kind": "call", "name": name, "arguments": arguments })
}

#[test]
fn bad_requests_get_a_4xx_with_a_reason() {
    let server = server(GymServeOptions::default());
    let url = server.url();
    let episodes = format!("{url}/v1/episodes");
    for (body, want) in [
        ("{not json", "invalid JSON"),
        ("", "empty"),
        (r#"{"task_id": 3}"#, "invalid JSON"),
        (r#"{"task_id": "intdiv-000", "colour": "red"}"#, "colour"),
        (r#"{"task_id": "intdiv-000", "max_turns": 0}"#, "max_turns"),
    ] {
        let (status, answer) = call("POST", &episodes, Some(body), None);
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(message(&answer).contains(want), "{body}: {answer}");
    }
    let (status, answer) = start(&url, "intdiv-999");
    assert_eq!(status, 404, "{answer}");
    assert!(message(&answer).contains("intdiv-999"), "{answer}");
    let (status, answer) = call("GET", &format!("{url}/v1/tasks?split=test"), None, None);
    assert_eq!(status, 400, "{answer}");
    let (status, _) = call("GET", &format!("{url}/v2/anything"), None, None);
    assert_eq!(status, 404);
    let (status, _) = call("PUT", &episodes, Some("{}"), None);
    assert_eq!(status, 405);
    let (status, answer) = step(&url, "ep-1-0", tool("test", json!({})), None);
    assert_eq!(status, 404, "{answer}");

    // A started episode: a malformed step body is a 400, a bad tool call an observation.
    let (status, started) = start(&url, TASK);
    assert_eq!(status, 201, "{started}");
    let id = started["episode_id"].as_str().unwrap();
    let (status, answer) = call(
        "POST",
        &format!("{url}/v1/episodes/{id}/step"),
        Some(r#"{"action": {"kind": "teleport"}}"#),
        None,
    );
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = step(&url, id, tool("fly", json!({})), None);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["step"]["observation"]["kind"], "error", "{answer}");
    // The server is still up after all of that.
    let (status, health) = call("GET", &format!("{url}/health"), None, None);
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
}

#[test]
fn the_live_episode_bound_is_a_429_and_finished_or_idle_episodes_free_their_slot() {
    let server = server(GymServeOptions {
        max_episodes: 2,
        idle_timeout: Duration::from_millis(400),
        ..GymServeOptions::default()
    });
    let url = server.url();
    let (_, first) = start(&url, TASK);
    let (_, second) = start(&url, TASK);
    let (status, full) = start(&url, TASK);
    assert_eq!(status, 429, "{full}");
    assert!(message(&full).contains("--max-episodes"), "{full}");
    assert_eq!(server.load().refused_full, 1);

    // Submitting ends the first episode: its slot is free.
    let id = first["episode_id"].as_str().unwrap();
    let (status, submitted) = step(&url, id, tool("submit", json!({})), Some(0));
    assert_eq!(status, 200, "{submitted}");
    assert_eq!(submitted["step"]["done"], true);
    let (status, third) = start(&url, TASK);
    assert_eq!(status, 201, "{third}");
    assert_eq!(server.load().live_episodes, 2);

    // Left idle, the others are reaped: their ids are gone and their slots free.
    std::thread::sleep(Duration::from_millis(1200));
    let load = server.load();
    assert_eq!(load.live_episodes, 0, "{load:?}");
    assert!(load.episodes_reaped >= 2, "{load:?}");
    let id = second["episode_id"].as_str().unwrap();
    let (status, answer) = step(&url, id, tool("test", json!({})), None);
    assert_eq!(status, 404, "{answer}");
    assert!(message(&answer).contains("reaped"), "{answer}");
    let (status, _) = start(&url, TASK);
    assert_eq!(status, 201);
}

#[test]
fn a_repeated_step_is_answered_from_the_record_and_one_out_of_order_is_a_409() {
    let server = server(GymServeOptions::default());
    let url = server.url();
    let (_, started) = start(&url, TASK);
    let id = started["episode_id"].as_str().unwrap();
    let read = tool("read", json!({ "path": MODULE }));
    let (status, once) = step(&url, id, read.clone(), Some(0));
    assert_eq!(status, 200, "{once}");
    let (status, again) = step(&url, id, read, Some(0));
    assert_eq!((status, &again), (200, &once));
    let (status, answer) = step(&url, id, tool("test", json!({})), Some(0));
    assert_eq!(status, 409, "another action at a recorded turn: {answer}");
    let (status, answer) = step(&url, id, tool("test", json!({})), Some(u32::MAX));
    assert_eq!(status, 409, "{answer}");
    let (status, answer) = step(&url, id, tool("test", json!({})), Some(5));
    assert_eq!(status, 409, "{answer}");
    let (status, state) = call("GET", &format!("{url}/v1/episodes/{id}"), None, None);
    assert_eq!((status, state["turn"].as_u64()), (200, Some(1)), "{state}");
    let (status, _) = call("DELETE", &format!("{url}/v1/episodes/{id}"), None, None);
    assert_eq!(status, 200);
    let (status, _) = call("GET", &format!("{url}/v1/episodes/{id}"), None, None);
    assert_eq!(status, 404);
}

#[test]
fn the_token_rule() {
    assert!(AccessRule::for_bind("127.0.0.1", None).is_ok());
    assert!(AccessRule::for_bind("localhost", None).is_ok());
    assert!(AccessRule::for_bind("::1", None).is_ok());
    let refused = AccessRule::for_bind("0.0.0.0", None)
        .unwrap_err()
        .to_string();
    assert!(refused.contains(access::API_KEY_ENV), "{refused}");
    assert!(AccessRule::for_bind("0.0.0.0", Some(String::new())).is_err());
    assert!(AccessRule::for_bind("0.0.0.0", Some("k".into())).is_ok());

    let server = server(GymServeOptions {
        access: AccessRule::for_bind("127.0.0.1", Some("sesame".into())).unwrap(),
        ..GymServeOptions::default()
    });
    let url = server.url();
    for key in [None, Some("sesam"), Some("sesame2"), Some("")] {
        let (status, answer) = call("GET", &format!("{url}/health"), None, key);
        assert_eq!(status, 401, "{key:?}: {answer}");
        let (status, _) = call(
            "POST",
            &format!("{url}/v1/episodes"),
            Some(&json!({ "task_id": TASK }).to_string()),
            key,
        );
        assert_eq!(status, 401, "{key:?}");
    }
    let (status, _) = call("GET", &format!("{url}/health"), None, Some("sesame"));
    assert_eq!(status, 200);
}

/// A fleet over `servers`, quick to give up on a dead one.
fn fleet_of(servers: &[&GymServer]) -> Arc<GymFleet> {
    let config = FleetConfig {
        endpoints: servers.iter().map(|s| s.url()).collect(),
        backoff_s: 0.01,
        timeout_s: 20.0,
        ..FleetConfig::default()
    };
    GymFleet::connect(&config, &shared().0).expect("the servers serve the tasks")
}

fn local_steps(actions: &[Action]) -> Vec<agentrl_gym::Step> {
    let (tasks, executor) = shared();
    let mut env = BugFixEnv::new(tasks, executor, OutcomeCache::new(), EnvConfig::default());
    env.reset(TASK).unwrap();
    actions.iter().map(|a| env.step(a).unwrap()).collect()
}

fn call_action(name: &str, arguments: Value) -> Action {
    Action::Call(ToolCall {
        name: name.into(),
        arguments,
    })
}

/// Two servers; the episode's server is shut down after two steps. The next step restarts
/// the episode on the other server, replays its two actions, and answers as the in-process
/// env does; the failure and the restart are counted.
#[test]
fn an_episode_whose_server_dies_is_restarted_on_another_and_replayed() {
    let a = server(GymServeOptions::default());
    let b = server(GymServeOptions::default());
    let (tasks, _) = shared();
    let fleet = fleet_of(&[&a, &b]);
    let mut env = fleet.env(&EnvConfig::default());
    let fix = tasks.get(TASK).unwrap().fix_candidate().unwrap();
    let actions = [
        call_action("read", json!({ "path": MODULE })),
        call_action("test", json!({})),
        call_action("edit", json!({ "candidate": fix })),
        call_action("submit", json!({})),
    ];
    env.reset(TASK).unwrap();
    let mut remote = vec![
        env.step(&actions[0]).unwrap(),
        env.step(&actions[1]).unwrap(),
    ];
    assert_eq!(fleet.take_counts().failures, 0);
    // The fewest-live placement put it on the first server.
    assert_eq!((a.load().live_episodes, b.load().live_episodes), (1, 0));
    a.shutdown();
    remote.push(env.step(&actions[2]).unwrap());
    remote.push(env.step(&actions[3]).unwrap());
    assert_eq!(remote, local_steps(&actions));
    assert!(remote[3].reward.as_ref().unwrap().solved());
    let counts = fleet.take_counts();
    assert_eq!(counts.retries, 1, "{counts:?}");
    assert!(counts.failures >= 1, "{counts:?}");
    // The other server ran the replay and the rest: 2 + 2 steps.
    assert_eq!(b.load().steps, 4);
}

#[test]
fn a_server_with_other_tasks_is_refused_at_connect() {
    let (_, executor) = shared();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tasks");
    let other = GymServer::start(
        Arc::new(TaskSet::load_dir(&fixtures).unwrap()),
        executor,
        GymServeOptions::default(),
        "127.0.0.1:0",
    )
    .unwrap();
    let (tasks, _) = shared();
    let config = FleetConfig {
        endpoints: vec![other.url()],
        ..FleetConfig::default()
    };
    let error = GymFleet::connect(&config, &tasks).unwrap_err().to_string();
    assert!(
        error.contains(&other.url()) && error.contains("has no task"),
        "{error}"
    );
    let unreachable = FleetConfig {
        endpoints: vec!["http://127.0.0.1:9".into()],
        timeout_s: 2.0,
        ..FleetConfig::default()
    };
    let error = GymFleet::connect(&unreachable, &tasks)
        .unwrap_err()
        .to_string();
    assert!(error.contains("127.0.0.1:9"), "{error}");
}

/// A public test run that a time limit stopped depends on the machine's load, so its replay
/// elsewhere may differ: the episode goes on (the recorded answer stands; a test run changes no
/// file). Here the first server's limit is a nanosecond, the second's the default; after the
/// first dies, the episode is replayed on the second and solved. (A millisecond was not a sure
/// stop: on a fast, idle machine a warm worker's fork ran the three public tests inside it.)
#[test]
fn a_time_limited_test_run_may_replay_differently() {
    let mut hurried = EnvConfig::default();
    hurried.limits.time_limit = Duration::from_nanos(1);
    let a = server(GymServeOptions {
        env: hurried,
        ..GymServeOptions::default()
    });
    let b = server(GymServeOptions::default());
    let (tasks, _) = shared();
    let fleet = fleet_of(&[&a, &b]);
    let mut env = fleet.env(&EnvConfig::default());
    env.reset(TASK).unwrap();
    let tested = env.step(&call_action("test", json!({}))).unwrap();
    let agentrl_gym::Observation::Tests(report) = &tested.observation else {
        panic!("{tested:?}");
    };
    assert!(
        report
            .crashed
            .as_deref()
            .is_some_and(|c| c.contains("time limit")),
        "{report:?}"
    );
    a.shutdown();
    let fix = tasks.get(TASK).unwrap().fix_candidate().unwrap();
    env.step(&call_action("edit", json!({ "candidate": fix })))
        .expect("the replayed, untimed test run does not stop the episode");
    let submitted = env.step(&call_action("submit", json!({}))).unwrap();
    assert!(submitted.reward.unwrap().solved());
    assert_eq!(fleet.take_counts().retries, 1);
}
