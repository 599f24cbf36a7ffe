//! Who may talk to a server: the token rule shared by `agentrl gym serve` and `agentrl serve`.
//!
//! Where it sits: a server builds one [`AccessRule`] from the address it binds and the key it
//! was given, before it binds; every request's `Authorization` header then goes through
//! [`AccessRule::allows`]. The rule: a server bound to a loopback address (127.0.0.0/8, `::1`,
//! `localhost`) needs no key; bound anywhere else it refuses to start without one, and with a
//! key (wherever it is bound) it answers every request that lacks `Authorization: Bearer KEY`
//! with 401. The key comes from an environment variable or a file, never a command-line
//! argument other users of the machine could read in the process list.

use std::net::{IpAddr, ToSocketAddrs};

/// Environment variable holding the key, read by both servers and by the clients.
pub const API_KEY_ENV: &str = "AGENTRL_API_KEY";

/// A server's token rule (see the module doc).
#[derive(Clone)]
pub struct AccessRule {
    key: Option<String>,
}

impl std::fmt::Debug for AccessRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessRule")
            .field("key", &self.key.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl AccessRule {
    /// The rule for a server about to bind `host`: an error when `host` is not loopback and
    /// there is no key (the message says how to give one). An empty key counts as none.
    pub fn for_bind(host: &str, key: Option<String>) -> anyhow::Result<Self> {
        let key = key.filter(|k| !k.is_empty());
        if key.is_none() && !is_loopback(host) {
            anyhow::bail!(
                "refusing to listen on {host} without an API key: anyone who can reach the \
                 address could use the server. Set {API_KEY_ENV} (or pass --api-key-file FILE) \
                 and give clients the same key, or bind 127.0.0.1"
            );
        }
        Ok(Self { key })
    }

    /// A rule that lets every request through (tests, in-process servers on loopback).
    pub fn open() -> Self {
        Self { key: None }
    }

    /// Whether requests must carry the key.
    pub fn requires_key(&self) -> bool {
        self.key.is_some()
    }

    /// Whether a request with this `Authorization` header value may go on.
    pub fn allows(&self, authorization: Option<&str>) -> bool {
        let Some(key) = &self.key else {
            return true;
        };
        let Some(given) = authorization.and_then(|h| h.trim().strip_prefix("Bearer ")) else {
            return false;
        };
        constant_time_eq(given.trim().as_bytes(), key.as_bytes())
    }
}

/// Whether a request with these headers may go on: `Authorization: Bearer KEY`, or the Open
/// Reward Standard's `X-API-Key: KEY` (its clients send that one).
#[cfg(feature = "service")]
pub fn allows_headers(rule: &AccessRule, headers: &axum::http::HeaderMap) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if rule.allows(header("authorization")) {
        return true;
    }
    match header("x-api-key") {
        Some(key) => rule.allows(Some(&format!("Bearer {}", key.trim()))),
        None => false,
    }
}

/// The key from `--api-key-file FILE` (trailing newline dropped) or else [`API_KEY_ENV`].
pub fn key_from(file: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    if let Some(file) = file {
        let text = std::fs::read_to_string(file)
            .map_err(|e| anyhow::anyhow!("--api-key-file {}: {e}", file.display()))?;
        let key = text.trim().to_string();
        anyhow::ensure!(
            !key.is_empty(),
            "--api-key-file {}: the file is empty",
            file.display()
        );
        return Ok(Some(key));
    }
    Ok(std::env::var(API_KEY_ENV).ok().filter(|k| !k.is_empty()))
}

/// Whether every address `host` names is a loopback one.
pub fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return ip.is_loopback();
    }
    match (bare, 0).to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<_> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => false,
    }
}

/// Compares in time that depends on the lengths only, so the key cannot be guessed byte by
/// byte from response times. Eight lines; a crate (`subtle`) for it would be the only use.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
