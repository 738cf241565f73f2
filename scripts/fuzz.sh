#!/usr/bin/env bash
# Longer property-based fuzzing of every parser than the test command runs (256 cases each;
# the scenario loader runs a quarter, the exporter's two properties half):
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
c=$PROPTEST_CASES
# 8 properties: web, textfile, dcgm and the trace's two at c cases, the scenario loader at c/4 + 1,
# the exporter's two at c/2 + 1 (125,003 cases at the default 20000).
echo "fuzz: 8 properties, $((5 * c + c / 4 + 1 + 2 * (c / 2 + 1))) cases in all ($c per property; $((c / 4 + 1)) for the scenario loader, $((c / 2 + 1)) for each exporter property), $(( $(date +%s) - start )) s, no failure"
