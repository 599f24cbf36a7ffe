//! The remote engine's endpoint pool: results in order, retries on other endpoints, errors
//! naming the request, and the per-endpoint in-flight cap.

use std::sync::atomic::Ordering;
use std::time::Duration;

use agentrl_engine::remote::pool::{Balance, Failure, Pool, RetryPolicy};
use std::sync::atomic::AtomicUsize;

fn pool(n: usize, per: usize, balance: Balance, retries: usize) -> Pool {
    Pool::new(
        (0..n).map(|i| format!("e{i}")).collect(),
        per,
        balance,
        RetryPolicy {
            retries,
            backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
        },
    )
}

#[test]
fn results_come_back_in_order_and_failures_move_to_another_endpoint() {
    let p = pool(2, 2, Balance::RoundRobin, 2);
    let out = p
        .run(10, "request", |url, i| {
            if url == "e0" {
                Err(Failure::unreachable(anyhow::anyhow!("connection refused")))
            } else {
                Ok(i * 10)
            }
        })
        .unwrap();
    assert_eq!(out, (0..10).map(|i| i * 10).collect::<Vec<_>>());
}

#[test]
fn a_request_that_keeps_failing_is_an_error_naming_it_and_its_endpoints() {
    let p = pool(2, 1, Balance::LeastInFlight, 3);
    let calls = AtomicUsize::new(0);
    let err = p
        .run(3, "request", |url, i| {
            calls.fetch_add(1, Ordering::SeqCst);
            if i == 1 {
                Err(Failure::retry(anyhow::anyhow!("HTTP 500 at {url}")))
            } else {
                Ok(i)
            }
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("request 1 of 3"), "{err}");
    assert!(err.contains("4 attempts"), "{err}");
    assert!(
        err.contains("e0: HTTP 500") && err.contains("e1: HTTP 500"),
        "{err}"
    );
    // A fatal error is not retried.
    let err = p
        .run(1, "request", |_, _| -> Result<(), _> {
            Err(Failure::fatal(anyhow::anyhow!("HTTP 400")))
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("1 attempt:"), "{err}");
}

#[test]
fn never_more_than_max_in_flight_per_endpoint() {
    let p = pool(2, 3, Balance::LeastInFlight, 0);
    let now = [AtomicUsize::new(0), AtomicUsize::new(0)];
    let peak = [AtomicUsize::new(0), AtomicUsize::new(0)];
    p.run(40, "request", |url, _| {
        let e = usize::from(url == "e1");
        let current = now[e].fetch_add(1, Ordering::SeqCst) + 1;
        peak[e].fetch_max(current, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(2));
        now[e].fetch_sub(1, Ordering::SeqCst);
        Ok::<_, Failure>(())
    })
    .unwrap();
    for e in &peak {
        let peak = e.load(Ordering::SeqCst);
        assert!((1..=3).contains(&peak), "peak {peak}");
    }
}
