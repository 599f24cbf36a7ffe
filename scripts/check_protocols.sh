#!/usr/bin/env bash
# The ecosystem's protocols against a real `agentrl gym serve`, with their own clients (run by
# .ci/run): `openenv validate --url` exits 0, then clients/python/check_protocols.py (OpenEnv's
# GenericEnvClient/MCPToolClient and TRL's OpenRewardSpec; capacity; same seed twice), whose
# output must match its recording, clients/python/check_protocols.out.
#   bash scripts/check_protocols.sh VENV "target/release/agentrl gym serve"
set -euo pipefail
venv=$1 serve=$2
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$out"' EXIT
$serve --port 0 --max-episodes 2 >"$out/stdout" 2>"$out/stderr" &
pid=$!
for _ in $(seq 100); do
  grep -q '^listening on ' "$out/stdout" 2>/dev/null && break
  sleep 0.1
done
url=$(sed -n 's/^listening on //p' "$out/stdout")
[ -n "$url" ] || { cat "$out/stderr" >&2; echo "gym serve did not start" >&2; exit 1; }
"$venv/bin/openenv" validate --url "$url/openenv"
# openreward 0.1.167 derives its session host from the URL as `sessions.HOST`; a self-hosted
# server is named by OPENREWARD_SESSION_URL. No update check (no network in CI).
OPENREWARD_SESSION_URL="$url" OPENREWARD_DISABLE_UPDATE_CHECK=1 TRL_EXPERIMENTAL_SILENCE=1 \
  "$venv/bin/python" clients/python/check_protocols.py "$url" --capacity 2 \
  >"$out/check.out"
diff -u clients/python/check_protocols.out "$out/check.out" || { cp "$out/check.out" /tmp/check_protocols.out; exit 1; }
# SIGTERM with live episodes: gone within seconds.
kill -TERM "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then echo "gym serve outlived SIGTERM by 10 s" >&2; exit 1; fi
echo "protocols: ok"
