//! The gym server's HTTP stack against clients that misbehave (`service/http.rs`): a body
//! declared and never sent is answered 408 within the read time-out; 2,000 connections that
//! never finish their requests leave `/health` answering within 2 s throughout and after;
//! past the connection bound a connection is answered 503 at once; a shutdown with live
//! episodes returns within seconds and removes their workspaces. Also the protocol layers'
//! routes answer (OpenEnv's `/openenv/health`, ORS's splits).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use agentrl_gym::service::http::HttpLimits;
use agentrl_gym::service::{GymServeOptions, GymServer};
use serde_json::json;

use crate::{post_json, shared};

fn server(http: HttpLimits) -> GymServer {
    let (tasks, executor) = shared();
    let options = GymServeOptions {
        http,
        ..GymServeOptions::default()
    };
    GymServer::start(tasks, executor, options, "127.0.0.1:0").expect("the server starts")
}

fn addr(server: &GymServer) -> String {
    server.url().trim_start_matches("http://").to_string()
}

/// `GET /health` answered 200 within `limit`.
fn health_within(url: &str, limit: Duration) {
    let started = Instant::now();
    let answer = ureq::get(&format!("{url}/health"))
        .timeout(limit)
        .call()
        .unwrap_or_else(|e| panic!("/health after {:?}: {e}", started.elapsed()));
    assert_eq!(answer.status(), 200);
}

#[test]
fn a_declared_body_that_never_arrives_is_answered_408_within_the_read_timeout() {
    let read_timeout = Duration::from_secs(1);
    let server = server(HttpLimits {
        read_timeout,
        ..HttpLimits::default()
    });
    let mut stream = TcpStream::connect(addr(&server)).unwrap();
    stream
        .write_all(b"POST /v1/episodes HTTP/1.1\r\nHost: gym\r\nContent-Length: 4096\r\n\r\n{\"ta")
        .unwrap();
    stream
        .set_read_timeout(Some(read_timeout + Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let waited = started.elapsed();
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "after {waited:?}: {answer:?}"
    );
    assert!(answer.contains("read time-out"), "{answer}");
    // Answered, then closed: `read_to_string` saw the end, well before the socket time-out.
    assert!(waited < read_timeout + Duration::from_secs(3), "{waited:?}");
    // A head that never ends is closed by hyper's own timer.
    let mut stream = TcpStream::connect(addr(&server)).unwrap();
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: g")
        .unwrap();
    stream
        .set_read_timeout(Some(read_timeout + Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(
        started.elapsed() < read_timeout + Duration::from_secs(3),
        "a stalled head held its connection {:?}",
        started.elapsed()
    );
}

#[test]
fn two_thousand_stalled_connections_leave_health_answering() {
    let read_timeout = Duration::from_secs(4);
    let server = server(HttpLimits {
        read_timeout,
        ..HttpLimits::default()
    });
    let url = server.url();
    let mut stalled = Vec::new();
    for i in 0..2000 {
        let mut stream = TcpStream::connect(addr(&server)).unwrap();
        // Half a head or half a body: neither request ever finishes.
        let partial: &[u8] = if i % 2 == 0 {
            b"GET /health HTTP/1.1\r\nHost: gy"
        } else {
            b"POST /v1/episodes HTTP/1.1\r\nHost: gym\r\nContent-Length: 100\r\n\r\n{"
        };
        let _ = stream.write_all(partial);
        stalled.push(stream);
        if i % 250 == 0 {
            health_within(&url, Duration::from_secs(2));
        }
    }
    for _ in 0..5 {
        health_within(&url, Duration::from_secs(2));
    }
    // After the read time-out the server has dropped them all, and still answers.
    std::thread::sleep(read_timeout + Duration::from_secs(1));
    health_within(&url, Duration::from_secs(2));
    drop(stalled);
    health_within(&url, Duration::from_secs(2));
}

#[test]
fn past_the_connection_bound_a_connection_is_answered_503_at_once() {
    let server = server(HttpLimits {
        max_connections: 4,
        ..HttpLimits::default()
    });
    let held: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(addr(&server)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = TcpStream::connect(addr(&server)).unwrap();
    extra
        .write_all(b"GET /health HTTP/1.1\r\nHost: gym\r\n\r\n")
        .unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = String::new();
    let _ = extra.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(answer.to_lowercase().contains("retry-after: 1"), "{answer}");
    drop(held);
}

#[test]
fn shutdown_with_live_episodes_is_quick_and_removes_their_workspaces() {
    let server = server(HttpLimits::default());
    let url = server.url();
    let before = workspaces();
    let mut ids = Vec::new();
    for task in ["intdiv-000", "comparison-000", "edgecase-000"] {
        let (status, started) = post_json(&format!("{url}/v1/episodes"), json!({"task_id": task}));
        assert_eq!(status, 201, "{started}");
        ids.push(started["episode_id"].as_str().unwrap().to_string());
    }
    // One of them mid-step while the shutdown comes.
    let stepping = {
        let url = format!("{url}/v1/episodes/{}/step", ids[0]);
        std::thread::spawn(move || {
            post_json(
                &url,
                json!({"action": {"kind": "call", "name": "test", "arguments": {}}}),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(server.load().live_episodes, 3);
    // The new workspaces: the server's three (and whatever other tests of this binary made
    // meanwhile, which may outlive the shutdown).
    let new: Vec<_> = workspaces().difference(&before).cloned().collect();
    assert!(new.len() >= 3, "{new:?} for 3 live episodes");
    let started = Instant::now();
    server.shutdown();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "shutdown took {:?}",
        started.elapsed()
    );
    let _ = stepping.join();
    let left = new
        .iter()
        .filter(|name| workspaces().contains(*name))
        .count();
    assert!(
        left <= new.len() - 3,
        "{left} of {new:?} are left: the server's workspaces were not all removed"
    );
}

/// The episode workspaces (`agentrl-ws-*`) of this process's run directory, by name.
fn workspaces() -> std::collections::BTreeSet<String> {
    let Some(run) = agentrl_gym::sandbox::scratch::scratch_root() else {
        return Default::default();
    };
    std::fs::read_dir(run)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with("agentrl-ws-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_protocol_layers_answer_on_the_same_port() {
    let server = server(HttpLimits::default());
    let url = server.url();
    let get = |path: &str| -> serde_json::Value {
        let text = ureq::get(&format!("{url}{path}"))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        serde_json::from_str(&text).unwrap()
    };
    let health = get("/openenv/health");
    assert_eq!(health, json!({"status": "healthy"}));
    let splits = get("/splits");
    assert_eq!(splits[1], json!({"name": "heldout", "type": "validation"}));
    let (status, answer) = post_json(
        &format!("{url}/openenv/reset"),
        json!({"split": "train", "seed": 3, "max_turns": 4}),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(answer["reward"].is_null(), "{answer}");
    let id = answer["metadata"]["episode_id"].as_str().unwrap();
    let (status, step) = post_json(
        &format!("{url}/openenv/step"),
        json!({"episode_id": id, "action": {"type": "call_tool", "tool_name": "submit", "arguments": {}}}),
    );
    assert_eq!(status, 200, "{step}");
    assert_eq!(step["done"], json!(true), "{step}");
    assert!(
        step["metadata"]["verdict"]["hidden_total"].as_u64() > Some(0),
        "{step}"
    );
    let (status, answer) = post_json(&format!("{url}/openenv/reset"), json!({"task": "x"}));
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("task"),
        "{answer}"
    );
}

#[test]
fn a_key_is_taken_as_bearer_as_x_api_key_or_in_openenvs_capability_prefix() {
    let (tasks, executor) = shared();
    let options = GymServeOptions {
        access: agentrl_gym::service::AccessRule::for_bind("127.0.0.1", Some("sesame".into()))
            .unwrap(),
        ..GymServeOptions::default()
    };
    let server = GymServer::start(tasks, executor, options, "127.0.0.1:0").unwrap();
    let url = server.url();
    let status = |path: &str, header: Option<(&str, &str)>| {
        let mut request = ureq::get(&format!("{url}{path}"));
        if let Some((name, value)) = header {
            request = request.set(name, value);
        }
        match request.call() {
            Ok(r) => r.status(),
            Err(ureq::Error::Status(status, _)) => status,
            Err(e) => panic!("{path}: {e}"),
        }
    };
    assert_eq!(status("/splits", None), 401);
    assert_eq!(status("/splits", Some(("X-API-Key", "sesame"))), 200);
    assert_eq!(status("/splits", Some(("X-API-Key", "sesam"))), 401);
    assert_eq!(
        status("/openenv/health", Some(("Authorization", "Bearer sesame"))),
        200
    );
    assert_eq!(status("/openenv/health", None), 401);
    assert_eq!(status("/openenv/k/sesame/health", None), 200);
    assert_eq!(status("/openenv/k/sesame/schema", None), 200);
    assert_eq!(status("/openenv/k/wrong/health", None), 401);
    // The prefix opens OpenEnv's routes only.
    assert_eq!(status("/openenv/k/sesame/../../v1/load", None), 401);
}
