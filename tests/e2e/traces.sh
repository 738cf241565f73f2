#!/usr/bin/env bash
# End to end, the trace collector (issue 18): the real exporter on the simulated dgx-h100 node
# watches a trace directory (--trace.directory alone turns the collector on in simulation); a
# real Prometheus scrapes it. Generated traces of a job of four ranks are written into the
# directory, two gzipped in place (slowly) and two plain, renamed into place, and a memory
# snapshot, beside a truncated
# trace, a JSON file that is no trace, a 2 GiB (sparse) file and 10,000 unrelated files. Through
# Prometheus' HTTP API: every per-rank series equals what `trace analyze` reports for the same
# file, the job-level straggler score equals `trace analyze` of the four files, each bad file is
# counted under its outcome, and the source stays up.
# Usage: tests/e2e/traces.sh PATH/TO/dgx-pixels-exporter   (prometheus, jq, python3 on PATH)
set -euo pipefail
BIN=${1:?usage: $0 EXPORTER_BINARY}
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.."

cargo build -q --locked -p dgx-pixels-trace-synth --example gen_trace
target/debug/examples/gen_trace "$work/gen" --ranks 4 --steps 4 --layers 6
target/debug/examples/gen_trace "$work/gen-gz" --ranks 4 --steps 4 --layers 6 --gz

traces="$work/traces"
job="$traces/llama/iteration_10"
mkdir -p "$job"
for i in $(seq 1 10000); do : >"$traces/node-$i.prom"; done
# There before the start: left alone (after a restart it would be counted twice).
cp "$work/gen/rank0.pt.trace.json" "$traces/before.pt.trace.json"
touch -d '-1 minute' "$traces/before.pt.trace.json"

# Without the simulated node's own training job: only the files written here are counted.
DGX_PIXELS_SIMULATION__TRACES=false \
  start_exporter --simulate dgx-h100 --trace.directory "$traces" --collector.trace.interval 200ms
start_prometheus
truncate -s 2G "$traces/huge.pt.trace.json"

# Ranks 0 and 2: gzip written into the final path in four pieces (export_chrome_trace does not
# rename); ranks 1 and 3: plain JSON written beside and renamed into place.
for r in 0 2; do
  src="$work/gen-gz/rank$r.pt.trace.json.gz" dst="$job/host_$r.1700000000$r.pt.trace.json.gz"
  size=$(stat -c %s "$src") piece=$(( $(stat -c %s "$src") / 4 + 1 ))
  : >"$dst"
  for k in 0 1 2 3; do
    dd if="$src" bs="$piece" skip="$k" count=1 status=none >>"$dst"
    sleep 0.1
  done
  [ "$(stat -c %s "$dst")" = "$size" ] || fail "copy of rank $r"
done
for r in 1 3; do
  cp "$work/gen/rank$r.pt.trace.json" "$job/.rank${r}_trace.json.tmp"
  mv "$job/.rank${r}_trace.json.tmp" "$job/rank${r}_trace.json"
done
head -c 5000 "$work/gen-gz/rank0.pt.trace.json.gz" >"$job/cut.pt.trace.json.gz"
echo '{"lr": 0.001, "world_size": 4}' >"$job/hparams.json"
# A CUDA memory snapshot of rank 1 (torch.cuda.memory._dump_snapshot's pickle).
cp crates/trace/tests/fixtures/snapshot_p4.pickle "$job/rank1_memory.pickle"

files=("$job/host_0.17000000000.pt.trace.json.gz" "$job/rank1_trace.json"
       "$job/host_2.17000000002.pt.trace.json.gz" "$job/rank3_trace.json")
for r in 0 1 2 3; do "$BIN" trace analyze --format json "${files[$r]}" >"$work/rank$r.json"; done
"$BIN" trace analyze --format json "${files[@]}" >"$work/job.json"
"$BIN" trace analyze --format json "${files[1]}" "$job/rank1_memory.pickle" >"$work/memory.json"

passed=0 failed=0
check() { # NAME EXPR EXPECTED -- equal within 1e-9 relative (numbers) or as strings
  local deadline=$((SECONDS + 60)) got
  while :; do
    got=$(query "$2")
    if python3 -c 'import sys; a,b=sys.argv[1:]; sys.exit(0 if a==b or (a!="none" and abs(float(a)-float(b))<=1e-9*max(abs(float(b)),1e-12)) else 1)' "$got" "$3"; then
      echo "ok: $1 ($got)"; passed=$((passed + 1)); return
    fi
    [ $SECONDS -lt $deadline ] || { echo "not ok: $1: $2 = $got, want $3" >&2; failed=$((failed + 1)); return; }
    sleep 0.5
  done
}
j='trace_job="llama/iteration_10"'
check "all four ranks and the snapshot analysed" 'dgx_pixels_trace_files_total{outcome="analysed"}' 5
check "the truncated gzip is counted" 'dgx_pixels_trace_files_total{outcome="truncated"}' 1
check "the JSON that is no trace is counted" 'dgx_pixels_trace_files_total{outcome="not_a_trace"}' 1
check "the 2 GiB file is counted, not read" 'dgx_pixels_trace_files_total{outcome="too_large"}' 1
check "nothing left pending" 'dgx_pixels_trace_pending_files' 0
check "the trace source is up" 'dgx_pixels_source_up{source="trace"}' 1
check "the simulated node is still served" 'count(dgx_pixels_gpu_power_watts)' 8
for r in 0 1 2 3; do
  f="$work/rank$r.json" l="$j,rank=\"$r\""
  us() { jq -r ".ranks[0].$1 / 1e6" "$f"; }
  check "rank $r gpu seconds" "dgx_pixels_trace_gpu_seconds_total{$l}" "$(us temporal_breakdown.kernel_time_us)"
  check "rank $r compute seconds" "dgx_pixels_trace_compute_seconds_total{$l}" "$(us temporal_breakdown.compute_time_us)"
  check "rank $r non-compute seconds" "dgx_pixels_trace_non_compute_seconds_total{$l}" "$(us temporal_breakdown.non_compute_time_us)"
  check "rank $r idle seconds" "dgx_pixels_trace_idle_seconds_total{$l}" "$(us temporal_breakdown.idle_time_us)"
  check "rank $r exposed communication" "dgx_pixels_trace_exposed_communication_seconds_total{$l}" "$(us communication.exposed_time_us)"
  check "rank $r overlap ratio" "dgx_pixels_trace_overlapped_communication_seconds_total{$l} / dgx_pixels_trace_communication_seconds_total{$l}" "$(jq -r '.ranks[0].comm_comp_overlap_ratio' "$f")"
  check "rank $r steps" "dgx_pixels_trace_steps_total{$l}" "$(jq -r '.ranks[0].steps.numbers | length' "$f")"
  for c in $(jq -r '.ranks[0].communication.collectives[].collective' "$f"); do
    lc="$l,collective=\"$c\""
    check "rank $r $c bytes" "dgx_pixels_trace_collective_bytes_total{$lc}" "$(jq -r ".ranks[0].communication.collectives[] | select(.collective == \"$c\") | .bytes" "$f")"
    check "rank $r $c bus bandwidth" "dgx_pixels_trace_collective_bus_bytes_total{$lc} / dgx_pixels_trace_collective_sized_seconds_total{$lc}" "$(jq -r ".ranks[0].communication.collectives[] | select(.collective == \"$c\") | .busbw_gbps * 1e9" "$f")"
  done
  check "rank $r straggler score" "dgx_pixels_trace_straggler_score{$l}" "$(jq -r ".job.straggler_score[\"$r\"]" "$work/job.json")"
done
m="$j,rank=\"1\",cuda_device=\"$(jq -r '.memory_snapshots[0].devices[0].device' "$work/memory.json")\""
check "snapshot reserved bytes" "dgx_pixels_trace_memory_reserved_bytes{$m}" "$(jq -r '.memory_snapshots[0].devices[0].reserved_bytes' "$work/memory.json")"
check "snapshot allocated bytes" "dgx_pixels_trace_memory_allocated_bytes{$m}" "$(jq -r '.memory_snapshots[0].devices[0].allocated_bytes' "$work/memory.json")"
check "snapshot fragmentation" "dgx_pixels_trace_memory_fragmentation_ratio{$m}" "$(jq -r '.memory_snapshots[0].devices[0].fragmentation_ratio' "$work/memory.json")"
check "the job is complete" "dgx_pixels_trace_job_complete{$j}" 1
check "the straggler" "dgx_pixels_trace_straggler{$j} == 1" 1
check "the straggler is rank 2" "count(dgx_pixels_trace_straggler{$j,rank=\"2\"} == 1)" 1
check "no kernel name in a label" 'count({__name__=~"dgx_pixels_trace_.*",collective=~".*nccl.*|.*gemm.*"})' none
check "the target stayed up" 'up{job="dgx-pixels"}' 1

echo "trace e2e: $passed passed, $failed failed"
[ "$failed" = 0 ] || fail "$failed checks failed"
