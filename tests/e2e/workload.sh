#!/usr/bin/env bash
# End to end, workload and cost: a real Prometheus with the recording and alerting rules of
# deploy/prometheus/rules loaded scrapes two real exporters:
#   - dgx-sim: the simulated dgx-h100 node (image generation on GPUs 0-3) with a [cost] table;
#   - dgx-textfile: an exporter without GPUs whose textfile directory the example writers of
#     examples/textfile/ (shell, and Python) write into, plus one broken file.
# It checks that energy per image and cost per image recorded by Prometheus match what the
# simulator's energy (checked against its power) and image counts imply, within 5%, and that
# the writers' metrics are served and ingested.
# Usage: tests/e2e/workload.sh PATH/TO/dgx-pixels-exporter   (prometheus, promtool on PATH)
set -euo pipefail
BIN=${1:?usage: $0 EXPORTER_BINARY}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; for l in "$work"/*.log; do echo "--- $l" >&2; tail -20 "$l" >&2; done; exit 1; }
free_port() { python3 "$(dirname "$0")/free_port.py" "$work/.next-port"; } # scripts/test's range
wait_for() { # URL TIMEOUT_S
  local deadline=$((SECONDS + $2))
  until curl -sf "$1" >/dev/null; do [ $SECONDS -lt $deadline ] || return 1; sleep 0.1; done
}
query() { curl -sf --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" | jq -r '.data.result[0].value[1] // "none"'; }

# The cost model: 0.30 per kWh, PUE 1.25, GPUs amortized at 0.10 per hour.
cat >"$work/cost.toml" <<'TOML'
[cost]
currency = "EUR"
electricity_price_per_kwh = 0.30
pue = 1.25
gpu_cost_per_hour = 0.10
TOML
SIM_PORT=$(free_port)
"$BIN" --simulate dgx-h100 --config.file "$work/cost.toml" --web.listen-address "127.0.0.1:$SIM_PORT" >"$work/sim.log" 2>&1 &
pids+=($!)

mkdir "$work/textfile"
JOB_ID=e2e-eval COMMIT_SHA=abc123 MODEL=e2e-model DATASET=e2e-set LPIPS=0.18 SSIM=0.91 PSNR_DB=26.5 \
  CLIP_DISTANCE=0.09 RATING_MEAN=4.3 RATINGS=5 START=1700000000 END=1700003600 \
  "$ROOT/examples/textfile/eval-job.sh" "$work/textfile" || fail "shell writer"
python3 "$ROOT/examples/textfile/imagegen_metrics.py" "$work/textfile" --job-id e2e-gen --gpu 0 \
  --uuid GPU-e2e --model e2e-model --dataset e2e-set --batch-size 2 --peak-active-bytes 123456789 \
  --latency 0.12 0.18 0.19 0.3 >/dev/null || fail "python writer"
printf 'broken{ 1\n' >"$work/textfile/broken.prom"
# Every type of the text format, to prove Prometheus parses our OpenMetrics rendering of each.
cat >"$work/textfile/kinds.prom" <<'PROM'
# TYPE e2e_legacy_events counter
e2e_legacy_events 7
# TYPE e2e_rpc_seconds summary
e2e_rpc_seconds{quantile="0.5"} 0.02
e2e_rpc_seconds{quantile="0.99"} 0.2
e2e_rpc_seconds_sum 3.5
e2e_rpc_seconds_count 100
e2e_untyped{kind="plain"} -1.5
# TYPE e2e_queue_depth gauge
e2e_queue_depth 3
PROM
TF_PORT=$(free_port)
"$BIN" --no-collector.nvml --textfile.directory "$work/textfile" --web.listen-address "127.0.0.1:$TF_PORT" >"$work/textfile.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$SIM_PORT/-/ready" 10 || fail "sim exporter not ready"
wait_for "http://127.0.0.1:$TF_PORT/-/ready" 10 || fail "textfile exporter not ready"

# The rules as shipped, with their 5m windows shortened to 30s: a 5m rate over a series that is
# younger than 5m is divided by the whole 5m, which cancels in energy per image but not in the
# hardware amortization part of cost per image. 30s windows are full by the time we check.
mkdir "$work/rules"
for f in "$ROOT"/deploy/prometheus/rules/*.yml; do sed 's/\[5m\]/[30s]/g' "$f" >"$work/rules/$(basename "$f")"; done
PROM_PORT=$(free_port)
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $work/rules/*.yml
scrape_configs:
  - job_name: dgx-sim
    static_configs:
      - targets: ["127.0.0.1:$SIM_PORT"]
  - job_name: dgx-textfile
    static_configs:
      - targets: ["127.0.0.1:$TF_PORT"]
YAML
promtool check config "$work/prometheus.yml" >/dev/null || fail "prometheus config"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$work/prometheus.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$PROM_PORT/-/ready" 30 || fail "prometheus not ready"
started=$SECONDS

passed=0 failed=0
check() { # NAME EXPR EXPECTED [TIMEOUT_S]
  local deadline=$((SECONDS + ${4:-20})) got
  while :; do
    got=$(query "$2")
    [ "$got" = "$3" ] && { echo "ok: $1 ($2 = $got)"; passed=$((passed + 1)); return; }
    [ $SECONDS -lt $deadline ] || { echo "not ok: $1: $2 = $got, want $3" >&2; failed=$((failed + 1)); return; }
    sleep 0.5
  done
}
check "both targets up (OpenMetrics with external families parses)" 'sum(up{job=~"dgx-sim|dgx-textfile"})' 2
check "shell writer: quality served" 'dgx_pixels_quality_ssim{job="dgx-textfile",model="e2e-model",dataset="e2e-set"}' 0.91
check "shell writer: job info" 'dgx_pixels_workload_job_info{job_id="e2e-eval",commit_sha="abc123"}' 1
check "shell writer: job end" 'dgx_pixels_workload_job_end_timestamp_seconds{job_id="e2e-eval"}' 1700003600
check "python writer: images" 'dgx_pixels_workload_images_generated_total{job="dgx-textfile",uuid="GPU-e2e"}' 4
check "python writer: 3 of 4 images within 200 ms" 'dgx_pixels_workload_generation_latency_seconds_bucket{job="dgx-textfile",le="0.2"}' 3
check "python writer: PyTorch peak" 'dgx_pixels_workload_pytorch_peak_active_bytes{uuid="GPU-e2e"}' 123456789
check "good files report no error" 'sum(dgx_pixels_textfile_scrape_error{file=~"eval-.*|imagegen-.*|kinds.prom"})' 0
check "the broken file is reported" 'dgx_pixels_textfile_scrape_error{file="broken.prom"}' 1
check "the broken file has no mtime" 'count(dgx_pixels_textfile_mtime_seconds{job="dgx-textfile"})' 3
check "counter without _total (OpenMetrics unknown)" 'e2e_legacy_events{job="dgx-textfile"}' 7
check "summary quantile" 'e2e_rpc_seconds{job="dgx-textfile",quantile="0.99"}' 0.2
check "summary count" 'e2e_rpc_seconds_count{job="dgx-textfile"}' 100
check "untyped" 'e2e_untyped{job="dgx-textfile",kind="plain"}' -1.5
# Prometheus scrapes OpenMetrics; it must ingest exactly the series of the classic text format.
text_series=$(curl -sf "http://127.0.0.1:$TF_PORT/metrics" | grep -vc '^#')
check "every textfile series ingested from OpenMetrics" 'scrape_samples_scraped{job="dgx-textfile"}' "$text_series"
check "simulated workload on 4 GPUs" 'count(dgx_pixels_workload_images_generated_total{job="dgx-sim"})' 4
check "cost gauges" 'dgx_pixels_cost_power_usage_effectiveness{job="dgx-sim"}' 1.25
# dgx-h100's job starts 30 s in (its first 30 s are between jobs): images, and so energy per
# image, from then on.
check "rules loaded" 'count(gpu:dgx_pixels_workload_energy_per_image_joules:rate5m{job="dgx-sim"})' 4 60

# Let the 30s windows fill with the job running, then compare the recorded values with the raw
# samples.
while [ $((SECONDS - started)) -lt 70 ]; do sleep 1; done
python3 - "$PROM_PORT" <<'PY' || failed=$((failed + 1))
import json, sys, urllib.parse, urllib.request

port = sys.argv[1]
def q(expr, t=None):
    params = {"query": expr}
    if t is not None:
        params["time"] = repr(t)
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(params)
    return json.load(urllib.request.urlopen(url))["data"]["result"]

price = 0.30 / 3.6e6
pue, amort = 1.25, 0.10 / 3600
bad = 0
rows = q('timestamp(gpu:dgx_pixels_workload_cost_per_image:rate5m{job="dgx-sim"})')
assert len(rows) == 4, rows
for row in rows:
    uuid = row["metric"]["uuid"]
    te = float(row["value"][1])
    sel = f'{{job="dgx-sim",uuid="{uuid}"}}'
    def raw(name):
        return [(float(t), float(v)) for t, v in q(f"{name}{sel}[30s]", te)[0]["values"]]
    def one(name):
        return float(q(f"{name}{sel}", te)[0]["value"][1])
    energy, images, power = raw("dgx_pixels_gpu_energy_joules_total"), raw("dgx_pixels_workload_images_generated_total"), raw("dgx_pixels_gpu_power_watts")
    assert [t for t, _ in energy] == [t for t, _ in images], "energy and images are scraped together"
    dt = energy[-1][0] - energy[0][0]
    d_energy = energy[-1][1] - energy[0][1]
    d_images = images[-1][1] - images[0][1]
    # The energy counter is the integral of the power the simulator reports.
    integral = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(power, power[1:]))
    checks = [
        ("energy counter vs power integral (J)", d_energy, integral),
        ("energy per image (J)", one("gpu:dgx_pixels_workload_energy_per_image_joules:rate5m"), d_energy / d_images),
        ("energy per image (kWh)", one("gpu:dgx_pixels_workload_energy_per_image_kwh:rate5m"), d_energy / d_images / 3.6e6),
        ("cost per image (EUR)", one("gpu:dgx_pixels_workload_cost_per_image:rate5m"), (d_energy * pue * price + amort * dt) / d_images),
    ]
    for what, got, want in checks:
        ok = abs(got / want - 1) <= 0.05
        bad += not ok
        print(f"{'ok' if ok else 'not ok'}: GPU {uuid[:12]} {what}: {got:.6g}, implied {want:.6g} ({100 * (got / want - 1):+.2f}%, {d_images:.0f} images in {dt:.0f} s)")
sys.exit(1 if bad else 0)
PY
[ "$failed" = 0 ] && passed=$((passed + 1))

# The classic text format of the textfile exporter parses, and lints clean but for the one lint
# problem kinds.prom carries on purpose (a counter without _total, which node_exporter accepts).
curl -sf "http://127.0.0.1:$TF_PORT/metrics" >"$work/textfile.txt"
# promtool: rc 0 clean, 3 lint problems, 1 parse error; the expected outcome is exactly rc 3 with
# exactly that one problem.
rc=0; lint=$(promtool check metrics <"$work/textfile.txt" 2>&1) || rc=$?
if [ "$rc" = 3 ] && [ "$lint" = 'e2e_legacy_events counter metrics should have "_total" suffix' ]; then
  echo "ok: promtool check metrics on the textfile exporter: parses, only the expected lint"; passed=$((passed + 1))
else
  echo "not ok: promtool check metrics (rc $rc): $lint" >&2; failed=$((failed + 1))
fi

echo "e2e workload: $passed passed, $failed failed"
[ "$failed" = 0 ]
