#!/usr/bin/env bash
# One job per crate: the engines (trace analysis, CUDA probes) stay free of what only the daemon's
# sources or the one-shot subcommands need, and the shipped binary free of the test fakes. Fails
# when a forbidden crate comes back into a package's normal (non-dev) dependency tree, directly
# or through another crate.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
# check PACKAGE FORBIDDEN...
check() {
  local pkg=$1
  shift
  local tree
  tree=$(cargo tree --locked -p "$pkg" -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u)
  for bad in "$@"; do
    if grep -qx -- "$bad" <<<"$tree"; then
      echo "check-crate-deps: $pkg depends on $bad:" >&2
      cargo tree --locked -p "$pkg" -e normal -i "$bad" >&2 || true
      status=1
    fi
  done
}

check dgx-pixels-trace dgx-pixels-metrics clap plotters dgx-pixels-charts indicatif tempfile
check dgx-pixels-probes dgx-pixels-metrics plotters dgx-pixels-charts clap indicatif
# The registry is what every collector crate depends on: none of the daemon's machinery.
check dgx-pixels-registry clap config dgx-pixels-web dgx-pixels-exposition axum tokio
# The fakes and their support are for tests: never in what ships.
# The OTLP push: the wire types and one HTTP/1.1 client, no gRPC stack, no second HTTP client.
check dgx-pixels-otlp tonic reqwest axum dgx-pixels-web
check dgx-pixels-exporter fake-support fake-nvml fake-dcgm fake-cuda fake-nccl

if [ "$status" -eq 0 ]; then
  echo "check-crate-deps: the engines, the registry and the binary have none of their forbidden dependencies"
fi
exit "$status"
