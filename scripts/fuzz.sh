#!/usr/bin/env bash
# Longer property-based fuzzing of every parser than the test command runs (256 cases each;
# the scenario loader runs a quarter, the exporter's two properties half):
# the config loader, the web config loader, the textfile parser, the scenario loader, the
# dcgm-exporter field-list CSV parser, the Accept / Accept-Encoding handling, the Kineto trace
# parser with the trace analyses, and the memory-snapshot unpickler (those two under a 512 MiB
# heap limit). Usage: scripts/fuzz.sh [CASES]   (default 20000)
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
# web, textfile, field list: 1 property each; scenario loader: 1 (a quarter of the cases);
# trace: 4 (traces mangled, arbitrary bytes, snapshots mangled, pickle opcodes); exporter: 2
# (half the cases each).
echo "fuzz: 10 properties, $((3 * c + c / 4 + 1 + 4 * c + 2 * (c / 2 + 1))) cases in all ($c per property; $((c / 4 + 1)) for the scenario loader, $((c / 2 + 1)) for each exporter property), $(( $(date +%s) - start )) s, no failure"
