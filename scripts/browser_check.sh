#!/usr/bin/env bash
# Opens an agentrl dashboard in headless Chromium and takes screenshots, as a person's browser
# would draw the page (tests/cli/monitor_runs.rs checks the pixels).
#
#   scripts/browser_check.sh PAGE.html OUT_DIR PANEL...   one 480x300 shot per panel, of
#                                                        PAGE.html#panel-PANEL (the page shows
#                                                        that panel alone: CSS :target)
#   scripts/browser_check.sh --full PAGE.html OUT.png [WIDTH HEIGHT]   the whole page
#
# Exit 77 when no Chromium is installed (Debian: apt-get install chromium; .ci/run does).
set -euo pipefail
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "browser_check: no chromium on PATH (apt-get install chromium)" >&2
  exit 77
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
shot() { # URL OUT W H
  # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
    --user-data-dir="$profile" --force-device-scale-factor=1 --window-size="$3,$4" \
    --screenshot="$2" "$1" >/dev/null 2>&1 || true
  if [ ! -s "$2" ]; then
    echo "browser_check: chromium wrote no screenshot of $1" >&2
    exit 1
  fi
}
if [ "${1:-}" = "--full" ]; then
  page=$(realpath "$2")
  shot "file://$page" "$3" "${4:-1000}" "${5:-2400}"
  exit 0
fi
page=$(realpath "$1")
out=$2
shift 2
mkdir -p "$out"
for panel in "$@"; do
  shot "file://$page#panel-$panel" "$out/$panel.png" 480 300
done
