#!/usr/bin/env bash
# Checks the Grafana dashboards without a Grafana server:
#   1. grafana/dashboards/ (and the Helm chart's copy) equal grafana/generate.py's output;
#   2. every dashboard is valid JSON and follows our conventions (datasource and node variables,
#      job annotations, descriptions, no legacy panels, a row in docs/dashboards.md per panel),
#      and the grafana/provisioning/ files have the shape Grafana reads;
#   3. tsc --noEmit --strict type-checks every dashboard against @grafana/schema, and every panel
#      against its plugin's options (and fails on a broken copy, so the check can fail);
#   4. every panel, variable and annotation query parses (promtool check rules);
#   5. a real Prometheus with the recording rules loaded scrapes a fleet of built-in scenarios
#      (dgx-h100 with its image-generation workload, its [cost] table, DCGM profiling and
#      probes; dgx-a100-mig; fault-xid-storm with a finished evaluation job in a textfile;
#      fault-gpu-lost; a GB200 NVL72 tray; an idle node with a GPU held by an HPC job; a DGX
#      Spark node that stops once scraped) and every query returns at least one series with
#      "All" selected, no exception; then with one node and GPU selected, but for the panels
#      grafana/tests/check.py lists with the node they are about; a misspelt metric must fail it.
# Usage: grafana/check.sh PATH/TO/dgx-pixels-exporter   (tools from scripts/install-test-tools.sh)
set -euo pipefail
BIN=$(realpath "${1:?usage: $0 EXPORTER_BINARY}")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
TS="$ROOT/.tools/grafana-ts"
PROMTOOL="$ROOT/.tools/prometheus/usr/bin/promtool"
PROMETHEUS="$ROOT/.tools/prometheus/usr/bin/prometheus"
dashboards=(grafana/dashboards/*.json)

work=$(mktemp -d)
pids=()
TSC_DIR=
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work" ${TSC_DIR:+"$TSC_DIR"}
}
trap cleanup EXIT
fail() { echo "grafana: FAIL: $*" >&2; for l in "$work"/*.log; do [ -f "$l" ] && { echo "--- $l" >&2; tail -20 "$l" >&2; }; done; exit 1; }
free_port() { python3 tests/e2e/free_port.py "$work/.next-port"; } # scripts/test's range
wait_for() { # URL TIMEOUT_S
  local deadline=$((SECONDS + $2))
  until curl -sf "$1" >/dev/null; do [ $SECONDS -lt $deadline ] || return 1; sleep 0.1; done
}

echo "-- dashboards equal grafana/generate.py's output"
python3 grafana/generate.py --check || fail "generated dashboards are stale"

echo "-- JSON, conventions, docs/dashboards.md"
for f in "${dashboards[@]}"; do jq empty "$f" || fail "$f is not valid JSON"; done
python3 grafana/tests/check.py static "${dashboards[@]}" || fail "dashboard conventions"
# PyYAML from the tools' venv (kubernetes-validate depends on it), else the system's.
PY_YAML="$ROOT/.venv-tools/bin/python"
[ -x "$PY_YAML" ] || PY_YAML=python3
"$PY_YAML" grafana/tests/check.py provisioning grafana/provisioning || fail "grafana/provisioning/"

echo "-- tsc --noEmit --strict against @grafana/schema"
# Inside $TS so that the files find its node_modules; one folder per run.
TSC_DIR=$(mktemp -d "$TS/check.XXXXXX")
mkdir -p "$TSC_DIR/broken"
python3 grafana/tests/typecheck.py "$TSC_DIR" "${dashboards[@]}"
cat >"$TSC_DIR/tsconfig.json" <<'JSON'
{"compilerOptions": {"strict": true, "noEmit": true, "module": "esnext", "moduleResolution": "bundler",
 "target": "es2022", "skipLibCheck": true, "types": []}, "include": ["*.ts"]}
JSON
"$TS/node_modules/.bin/tsc" -p "$TSC_DIR" || fail "dashboards do not type-check against @grafana/schema"
# The same check must reject a dashboard with a misspelt option and a wrong enum value.
jq '(.panels[] | select(.type == "timeseries") | .options.legend) += {"placment": "bottom"}
  | (.panels[] | select(.type == "stat") | .fieldConfig.defaults.thresholds.mode) = "absolut"' \
  grafana/dashboards/dgx-pixels-performance.json >"$work/broken.json"
python3 grafana/tests/typecheck.py "$TSC_DIR/broken" "$work/broken.json"
sed 's/"include": \["\*.ts"\]/"include": ["broken\/*.ts"]/' "$TSC_DIR/tsconfig.json" >"$TSC_DIR/tsconfig.broken.json"
if "$TS/node_modules/.bin/tsc" -p "$TSC_DIR/tsconfig.broken.json" >"$work/tsc-broken.txt" 2>&1; then
  fail "tsc accepted a broken dashboard"
fi
grep -q "placment" "$work/tsc-broken.txt" && grep -q '"absolut"' "$work/tsc-broken.txt" \
  || { cat "$work/tsc-broken.txt"; fail "tsc did not name both errors of the broken dashboard"; }

echo "-- every query parses (promtool check rules)"
python3 grafana/tests/check.py rules "$work/queries.yml" "${dashboards[@]}"
"$PROMTOOL" check rules "$work/queries.yml" >"$work/promtool.log" 2>&1 \
  || { cat "$work/promtool.log"; fail "a dashboard query does not parse"; }

echo "-- every query returns data from a real Prometheus scraping simulated nodes"
# dgx-h100 trains on all eight GPUs and the probes leave busy GPUs alone by default: the demo
# node probes busy GPUs too (they then measure the share the workload leaves them), often, so
# results arrive within seconds; it runs the node probes too (NCCL across its GPUs, a storage
# path: simulated, nothing of the host is read). Its cost gauges come from the scenario's [cost] table. Its
# simulated training job drops traces every 2 s (listed every 500 ms), so the training panels,
# which need two analysed drops, have data within seconds on this node too.
cat >"$work/probes.toml" <<'TOML'
[probes]
busy_threshold = 1.0
settle = "0s"
duty_cycle = 0.2
probes = "gemm_bf16,copy_d2d,copy_h2d"
nccl_allreduce = true
storage_paths = ["/data"]
[simulation]
trace_period = "2s"
[collector.trace]
interval = "500ms"
TOML
mkdir "$work/textfile"
now=$(date +%s)
JOB_ID=grafana-eval COMMIT_SHA=abc123 MODEL=grafana-model DATASET=grafana-set LPIPS=0.18 \
  SSIM=0.91 PSNR_DB=26.5 CLIP_DISTANCE=0.09 RATING_MEAN=4.3 RATINGS=5 START=$((now - 600)) \
  END=$((now - 60)) examples/textfile/eval-job.sh "$work/textfile" || fail "eval-job.sh"
targets=()
start_exporter() { # NAME ARGS...
  local name=$1 port
  shift
  port=$(free_port)
  "$BIN" --node.name "$name" --web.listen-address "127.0.0.1:$port" "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  targets+=("127.0.0.1:$port")
  wait_for "http://127.0.0.1:$port/-/ready" 10 || fail "exporter $name not ready"
}
start_exporter dgx-h100-sim --simulate dgx-h100 --config.file "$work/probes.toml" \
  --collector.probes.interval 200ms
start_exporter dgx-a100-sim --simulate dgx-a100-mig
start_exporter xid-storm-sim --simulate fault-xid-storm --textfile.directory "$work/textfile"
start_exporter gpu-lost-sim --simulate fault-gpu-lost
# A GB200 NVL72 compute tray: NVLink fabric, rack position and rail NICs for the by-domain panels.
start_exporter gb200-tray-sim --simulate gb200-nvl72-tray
# An idle node with GPU 1 held by an HPC job, for the allocated-but-idle panels.
mkdir -p "$work/jobs" && echo 7001 >"$work/jobs/1"
printf '[health]\nidle_after = "1s"\n' >"$work/idle.toml"
start_exporter idle-sim --simulate tests/e2e/idle-scenario.toml --config.file "$work/idle.toml" \
  --hpc.job-mapping-dir "$work/jobs"
# A node that goes away once scraped, for "GPUs that stopped reporting" (stopped below).
start_exporter gone-sim --simulate dgx-spark
gone_pid=${pids[-1]}

PROM_PORT=$(free_port)
{
  printf 'global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n'
  printf 'rule_files:\n  - %s/deploy/prometheus/rules/*.yml\n' "$ROOT"
  printf 'scrape_configs:\n  - job_name: dgx-pixels\n    static_configs:\n      - targets: [%s]\n' \
    "$(IFS=,; echo "${targets[*]}")"
} >"$work/prometheus.yml"
"$PROMTOOL" check config "$work/prometheus.yml" >/dev/null || fail "prometheus config"
"$PROMETHEUS" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$work/prometheus.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$PROM_PORT/-/ready" 30 || fail "prometheus not ready"
# gone-sim stops once Prometheus has its GPU: the next scrape fails and its series go stale.
gone_query="http://127.0.0.1:$PROM_PORT/api/v1/query?query=dgx_pixels_gpu_up%7Bnode%3D%22gone-sim%22%7D"
deadline=$((SECONDS + 30))
until curl -sf "$gone_query" | grep -q '"node":"gone-sim"'; do
  [ $SECONDS -lt $deadline ] || fail "Prometheus never scraped gone-sim"
  sleep 0.5
done
kill "$gone_pid"
# fault-gpu-lost loses GPU 3 at 30 s and fault-xid-storm has its ECC error at 45 s.
python3 grafana/tests/check.py live --timeout 90 "http://127.0.0.1:$PROM_PORT" "${dashboards[@]}" \
  || fail "a dashboard query returned no data"
# The same check must fail on a misspelt metric.
jq '(.panels[] | select(.title == "GPU utilization") | .targets[0].expr) |= sub("dgx_pixels_gpu_utilization_ratio"; "dgx_pixels_gpu_utilisation_ratio")' \
  grafana/dashboards/dgx-pixels-system-health.json >"$work/broken-query.json"
if python3 grafana/tests/check.py live --timeout 2 "http://127.0.0.1:$PROM_PORT" "$work/broken-query.json" \
  >"$work/broken-query.txt" 2>&1; then
  fail "the live check accepted a query without data"
fi
grep -q "GPU utilization / A: no series" "$work/broken-query.txt" \
  || { cat "$work/broken-query.txt"; fail "the live check did not name the broken query"; }
echo "grafana: all checks passed"
