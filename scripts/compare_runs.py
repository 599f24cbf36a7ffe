#!/usr/bin/env python3
"""Compares two run directories line by line, ignoring timings: the check that a refactor
left training unchanged (the same config and seed must give the same `metrics.jsonl` and
`episodes/*.jsonl`).

    python3 scripts/compare_runs.py RUN_BEFORE RUN_AFTER
    python3 scripts/compare_runs.py --files metrics.jsonl RUN_BEFORE RUN_AFTER

Every JSON value is compared exactly (floats included: a pure refactor reproduces every bit),
except under keys that measure the machine rather than the seed: names starting with
`timing_s/` or `perf/` (`agentrl_run::metrics::is_wall_clock`), and names containing `time`,
`seconds`, `per_s`, `duration` or `elapsed` (at any depth: the evaluation report inside a
metrics line, an episode's fields). The keys it skipped are listed, so a reader can see
nothing else was. Exit status 0 when equal, 1 when not (the first differences are printed),
2 on a usage error. Standard library only.
"""

import argparse
import json
import sys
from pathlib import Path

WALL_CLOCK_PREFIXES = ("timing_s/", "perf/")
WALL_CLOCK_WORDS = ("time", "seconds", "per_s", "duration", "elapsed")


def is_wall_clock(key):
    """Whether `key` names a value that depends on the machine's speed or memory."""
    lower = key.lower()
    return lower.startswith(WALL_CLOCK_PREFIXES) or any(w in lower for w in WALL_CLOCK_WORDS)


def compare(a, b, path, diffs, skipped):
    """Appends to `diffs` every difference between `a` and `b` below `path`."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if is_wall_clock(key):
                skipped.add(key)
                continue
            if key not in a or key not in b:
                diffs.append(f"{path}.{key}: only in {'after' if key in b else 'before'}")
            else:
                compare(a[key], b[key], f"{path}.{key}", diffs, skipped)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            diffs.append(f"{path}: {len(a)} items before, {len(b)} after")
        for i, (x, y) in enumerate(zip(a, b)):
            compare(x, y, f"{path}[{i}]", diffs, skipped)
    elif type(a) is not type(b) or a != b:
        diffs.append(f"{path}: {a!r} before, {b!r} after")


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def files_to_compare(before, after, names):
    """`metrics.jsonl` and every `episodes/*.jsonl` of either run (or the given names)."""
    if names:
        return names
    found = set()
    for root in (before, after):
        if (root / "metrics.jsonl").exists():
            found.add("metrics.jsonl")
        found.update(str(p.relative_to(root)) for p in root.glob("episodes/*.jsonl"))
    return sorted(found)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="run directory of the reference binary")
    parser.add_argument("after", type=Path, help="run directory of the binary under test")
    parser.add_argument("--files", nargs="*", help="files to compare, relative to the runs")
    parser.add_argument("--show", type=int, default=10, help="differences printed (default 10)")
    args = parser.parse_args()
    for root in (args.before, args.after):
        if not root.is_dir():
            print(f"compare_runs: {root} is not a directory", file=sys.stderr)
            return 2
    names = files_to_compare(args.before, args.after, args.files)
    if not names:
        print("compare_runs: no metrics.jsonl or episodes/*.jsonl in either run", file=sys.stderr)
        return 2
    diffs, skipped, lines = [], set(), 0
    for name in names:
        a, b = args.before / name, args.after / name
        if not a.exists() or not b.exists():
            diffs.append(f"{name}: only in {'after' if b.exists() else 'before'}")
            continue
        la, lb = read_lines(a), read_lines(b)
        if len(la) != len(lb):
            diffs.append(f"{name}: {len(la)} lines before, {len(lb)} after")
        for i, (x, y) in enumerate(zip(la, lb)):
            compare(x, y, f"{name}:{i + 1}", diffs, skipped)
        lines += min(len(la), len(lb))
    print(f"compared {len(names)} file(s), {lines} line(s); skipped keys: "
          f"{', '.join(sorted(skipped)) or 'none'}")
    if diffs:
        print(f"DIFFERENT: {len(diffs)} difference(s)")
        for d in diffs[: args.show]:
            print(f"  {d}")
        return 1
    print("EQUAL")
    return 0


if __name__ == "__main__":
    sys.exit(main())
