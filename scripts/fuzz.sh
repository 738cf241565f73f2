#!/usr/bin/env bash
# Longer property-based fuzzing of every parser than the test command runs (256 cases each):
# the config loader, the web config loader, the textfile parser, the scenario loader, the
# dcgm-exporter field-list CSV parser, the Accept / Accept-Encoding handling, and the Kineto trace
# parser with the trace analyses. Usage: scripts/fuzz.sh [CASES]   (default 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${1:-20000}"
start=$(date +%s)
cargo test --release -q -p dgx-pixels-web --test fuzz
cargo test --release -q -p dgx-pixels-textfile --test fuzz
cargo test --release -q -p dgx-pixels-sim --test fuzz
cargo test --release -q -p dgx-pixels-dcgm --test fuzz
cargo test --release -q -p dgx-pixels-trace --test fuzz
cargo test --release -q -p dgx-pixels-exporter --bin dgx-pixels-exporter fuzz_tests
echo "fuzz: $PROPTEST_CASES cases per property, $(( $(date +%s) - start )) s, no failure"
