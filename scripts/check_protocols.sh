#!/usr/bin/env bash
# The ecosystem's protocols against a real `agentrl gym serve`, with their own clients (run by
# .ci/run): `openenv validate --url` exits 0; clients/python/check_protocols.py (OpenEnv's
# GenericEnvClient/MCPToolClient and TRL's OpenRewardSpec; capacity; same seed twice) and the
# framework examples (TRL through ORS and through OpenEnv, SkyRL-gym, and verifiers'
# OpenEnvTaskset when VERIFIERS_VENV is given) print exactly their recordings
# (clients/python/*.out); SIGTERM then ends the server within seconds.
#   bash scripts/check_protocols.sh VENV "target/release/agentrl gym serve" [VERIFIERS_VENV]
set -euo pipefail
venv=$1 serve=$2 verifiers_venv=${3:-}
cd "$(dirname "$0")/.."
out=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$out"' EXIT
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
export OPENREWARD_SESSION_URL="$url" OPENREWARD_DISABLE_UPDATE_CHECK=1 TRL_EXPERIMENTAL_SILENCE=1
check() { # NAME PYTHON SCRIPT ARGS...: the script's output must be its recording
  local name=$1 python=$2
  shift 2
  "$python" "$@" >"$out/$name.out"
  diff -u "clients/python/$name.out" "$out/$name.out" || {
    echo "clients/python/$name.out differs (new output in /tmp/$name.out)" >&2
    cp "$out/$name.out" "/tmp/$name.out"
    exit 1
  }
  echo "$name: as recorded"
}
check check_protocols "$venv/bin/python" clients/python/check_protocols.py "$url" --capacity 2
check example_trl_openreward "$venv/bin/python" clients/python/example_trl_openreward.py "$url"
check example_trl_openenv "$venv/bin/python" clients/python/example_trl_openenv.py "$url"
check example_skyrl "$venv/bin/python" clients/python/example_skyrl.py "$url"
if [ -n "$verifiers_venv" ]; then
  check example_verifiers "$verifiers_venv/bin/python" clients/python/example_verifiers.py "$url"
fi
# SIGTERM with a live episode: gone within seconds.
"$venv/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(urllib.request.Request(
    sys.argv[1] + "/v1/episodes", data=b"{\"task_id\": \"intdiv-000\"}", method="POST"))' "$url"
kill -TERM "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then echo "gym serve outlived SIGTERM by 10 s" >&2; exit 1; fi
wait "$pid" || { echo "gym serve exited $? on SIGTERM" >&2; exit 1; }
pid=
echo "protocols: ok"
