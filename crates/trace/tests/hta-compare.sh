#!/usr/bin/env bash
# Runs HTA (traceinsight, in .venv-tools) and our `trace analyze --format json` on generated
# traces and fails on any difference in an HTA-defined number (µs equal, percentages within
# 0.01 points). Several shapes: 4 ranks with a straggler, gzip with distributedInfo first and
# more than 10 kernel names per class, one rank, one profiler step (no step filter), and traces
# with epoch-based nanosecond timestamps.
# Usage: crates/trace/tests/hta-compare.sh [path/to/dgx-pixels-exporter]
set -euo pipefail
cd "$(dirname "$0")/../../.."
BIN="${1:-target/debug/dgx-pixels-exporter}"
PY=.venv-tools/bin/python
"$PY" -c 'import hta' 2>/dev/null || { echo "hta-compare: traceinsight is not installed in .venv-tools (scripts/install-test-tools.sh)"; exit 1; }
cargo build -q --locked -p dgx-pixels-trace-synth --example gen_trace
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {
  local name=$1; shift
  local dir="$tmp/$name"
  target/debug/examples/gen_trace "$dir" "$@"
  "$BIN" trace analyze --format json "$dir" >"$tmp/$name.report.json"
  echo "-- $name"
  "$PY" crates/trace/tests/hta_compare.py "$dir" "$tmp/$name.report.json"
}
run straggler --ranks 4 --steps 4 --layers 6
run gzip-many-kernels --ranks 2 --steps 3 --layers 14 --gz --no-straggler
run one-rank --ranks 1 --steps 5 --layers 4
run one-step --ranks 2 --steps 1 --layers 5
# Epoch-based nanosecond times (~1.7e15 µs, where float64 resolves 0.25 µs) with a sub-2 µs
# memset or memcpy beside every row: HTA's float64 rounding, not exact decimals, must be matched.
run ns-epoch --ranks 2 --steps 4 --layers 8 --ns-epoch --no-straggler
run ns-epoch-gzip-straggler --ranks 3 --steps 3 --layers 12 --ns-epoch --gz
# Real traces captured on an H200 (crates/trace/tests/fixtures/): sub-µs kernels whose rounded
# durations sum below zero, which HTA never groups into "others".
for f in crates/trace/tests/fixtures/h200-2026-11-26-fsdp2-shapes/fsdp2-shapes-rank0.pt.trace.json.gz \
         crates/trace/tests/fixtures/h200-2026-11-26/*.pt.trace.json.gz; do
  [ -e "$f" ] || continue
  name=real-$(basename "$f" .pt.trace.json.gz)
  mkdir -p "$tmp/$name" && cp "$f" "$tmp/$name/"
  "$BIN" trace analyze --format json "$tmp/$name" >"$tmp/$name.report.json"
  echo "-- $name"
  "$PY" crates/trace/tests/hta_compare.py "$tmp/$name" "$tmp/$name.report.json"
done
