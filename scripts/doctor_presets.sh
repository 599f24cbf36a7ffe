#!/usr/bin/env bash
# The doctor over the presets' default runs: for every TinyAgent preset in configs/ (and, when
# PRESETS names it, configs/tests/qwen3-tiny-grpo.toml on a tiny random Qwen3 that
# scripts/make_tiny_qwen3.py makes: a test config, not a preset), the preset's own run (`agentrl train --config configs/NAME.toml`, nothing else set but the seed)
# on each seed, then `agentrl doctor` on it; one Markdown table row per run. The doctor must
# find nothing on these runs (issue 44; docs/doctor-presets.md has the table).
#
# Left out: presets that need real weights (qwen3-0.6b-grpo, qwen3-8b-grpo) and smollm2 (a
# real 135M model on the CPU: hours per run).
#
#   scripts/doctor_presets.sh [OUT]            # train every preset x seed, then the doctor
#   DOCTOR_ONLY=1 scripts/doctor_presets.sh OUT  # the doctor again over OUT's runs (new rules)
#
# Environment: AGENTRL (the binary that trains, default: agentrl on PATH), DOCTOR (the binary
# whose doctor judges, default: AGENTRL), SEEDS (default "0 1 2"), PRESETS (default: all the
# presets above). Runs go seed by seed over every preset, so a sweep cut short still covers
# every preset once. Each run takes 1-2 minutes on 2 cores (80 steps of 8 x 8 episodes).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$REPO/target/doctor-presets}"
AGENTRL="${AGENTRL:-agentrl}"
DOCTOR="${DOCTOR:-$AGENTRL}"
SEEDS="${SEEDS:-0 1 2}"
SKIP="qwen3-0.6b-grpo qwen3-8b-grpo smollm2"
if [ -z "${PRESETS:-}" ]; then
  PRESETS=""
  for f in "$REPO"/configs/*.toml; do
    name="$(basename "$f" .toml)"
    case " $SKIP " in *" $name "*) continue ;; esac
    PRESETS="$PRESETS $name"
  done
fi
mkdir -p "$OUT/runs" "$OUT/logs"

# The tiny random Qwen3 of configs/tests/qwen3-tiny-grpo.toml (its header names the shape).
tiny_qwen3() {
  if [ ! -f "$OUT/tiny-qwen3/config.json" ]; then
    python3 "$REPO/scripts/make_tiny_qwen3.py" --out "$OUT/tiny-qwen3" \
      --hidden-size 64 --scale 0.15 --embed-scale 0.6 >"$OUT/logs/tiny-qwen3.log" 2>&1
  fi
  echo "$OUT/tiny-qwen3"
}

train() {
  local name="$1" seed="$2" run="$OUT/runs/$1-s$2"
  [ -f "$run/summary.json" ] && return 0
  rm -rf "$run"
  local model=() file="$REPO/configs/$name.toml"
  if [ "$name" = "qwen3-tiny-grpo" ]; then
    model=(--model "$(tiny_qwen3)")
    file="$REPO/configs/tests/$name.toml"
  fi
  local start=$SECONDS
  if "$AGENTRL" train --config "$file" "${model[@]}" --no-summary \
    --set train.seed="$seed" --set train.runs_root="\"$OUT/runs\"" \
    --set train.run_name="\"$name-s$seed\"" >"$OUT/logs/$name-s$seed.log" 2>&1; then
    echo "$name seed $seed: trained in $((SECONDS - start)) s"
  else
    echo "$name seed $seed: training failed (see $OUT/logs/$name-s$seed.log)"
  fi
}

# `| preset | seed | steps | hidden solve (last 5 steps) | doctor |` for one run.
row() {
  local name="$1" seed="$2" run="$OUT/runs/$1-s$2"
  if [ ! -f "$run/metrics.jsonl" ]; then
    echo "| $name | $seed | — | — | not trained |"
    return
  fi
  local steps solve verdict
  steps=$(wc -l <"$run/metrics.jsonl")
  solve=$(python3 -c '
import json, sys
v = [json.loads(l).get("env/solve_hidden") for l in open(sys.argv[1])]
v = sorted(x for x in v[-5:] if x is not None)
print(f"{v[len(v)//2]:.2f}" if v else "—")' "$run/metrics.jsonl")
  local report
  if report=$("$DOCTOR" doctor "$run" 2>/dev/null); then
    verdict="silent ($(head -1 <<<"$report" | grep -o '[0-9]* checks' || echo "no count"))"
  else
    verdict=$(grep -o '^\[[^]]*\] steps [0-9]*–[0-9]*' <<<"$report" | tr '\n' ';' | sed 's/;$//; s/;/; /g' || true)
    verdict="**${verdict:-doctor failed}**"
  fi
  echo "| $name | $seed | $steps | $solve | $verdict |"
}

if [ -z "${DOCTOR_ONLY:-}" ]; then
  for seed in $SEEDS; do
    for name in $PRESETS; do
      train "$name" "$seed"
    done
  done
fi

{
  echo "| preset | seed | steps | hidden solve (median of the last 5 steps) | doctor |"
  echo "|---|---|---|---|---|"
  for name in $PRESETS; do
    for seed in $SEEDS; do
      row "$name" "$seed"
    done
  done
} >"$OUT/table.md"
echo "table: $OUT/table.md"
flagged=$(grep -c '\*\*' "$OUT/table.md" || true)
echo "runs with findings: $flagged"
