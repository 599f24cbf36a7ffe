#!/usr/bin/env bash
# Makes crates/agentrl-monitor/assets/DejaVuSans-subset.ttf, the one font of the dashboard (its
# SVG text, inlined in the HTML page and rasterised into the PNG panels), from Debian's
# fonts-dejavu-core: ASCII plus the few symbols the panels use (±, ×, µ, arrows, Greek, ≤ ≥ ≈),
# 18 KB instead of 760 KB. Needs fonttools (`pip install fonttools`). The dashboard never
# reads system fonts, so every machine draws the same pixels.
set -euo pipefail
cd "$(dirname "$0")/.."
pyftsubset /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf \
  --unicodes="U+0020-007E,U+00B0,U+00B1,U+00B5,U+00D7,U+2013,U+2014,U+2019,U+2026,U+2190-2193,U+2212,U+2264,U+2265,U+2248,U+03B1-03C9,U+0394,U+2016,U+00B7,U+25B2,U+25BC,U+25CF" \
  --no-hinting --desubroutinize \
  --output-file=crates/agentrl-monitor/assets/DejaVuSans-subset.ttf
