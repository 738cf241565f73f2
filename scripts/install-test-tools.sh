#!/usr/bin/env bash
# Installs, idempotently, the tools the test suite runs beside cargo: Prometheus and promtool
# (Debian's package, unpacked under .tools/ rather than installed system-wide), curl, jq, and
# bindgen with libclang (for the dcgm-sys bindings check).
# Usage: scripts/install-test-tools.sh [--bench]   (--bench adds node_exporter and wrk)
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools"
mkdir -p "$TOOLS"

apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "$@" >/dev/null
}

for cmd in curl jq; do
  command -v "$cmd" >/dev/null || apt_install "$cmd"
done

# bindgen (Debian 12's 0.60.1) and libclang: crates/dcgm-sys/scripts/regen.sh --check regenerates
# the committed DCGM bindings and diffs them (about 30 MB to download).
if ! command -v bindgen >/dev/null || ! ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1; then
  apt_install bindgen libclang-dev
fi

# Prometheus: the Debian package unpacked (108 MiB) instead of installed with its deps (316 MiB).
if [ ! -x "$TOOLS/prometheus/usr/bin/prometheus" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && { apt-get download prometheus >/dev/null 2>&1 || { apt_updated=0; apt-get -o DPkg::Lock::Timeout=300 update -qq && apt-get download prometheus >/dev/null; }; })
  dpkg-deb -x "$tmp"/prometheus_*.deb "$TOOLS/prometheus"
  rm -rf "$tmp"
fi
"$TOOLS/prometheus/usr/bin/prometheus" --version 2>&1 | head -1

if [ "${1:-}" = "--bench" ]; then
  command -v prometheus-node-exporter >/dev/null || [ -x /usr/bin/prometheus-node-exporter ] || apt_install prometheus-node-exporter
  command -v wrk >/dev/null || apt_install wrk
fi
