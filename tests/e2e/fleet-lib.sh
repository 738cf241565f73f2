# The simulated fleet of tests/e2e/fleet.sh and bench/fleet_storage.sh: 20 exporter processes,
# a real Prometheus with the shipped rules remote-writing to a single-node VictoriaMetrics.
# Source it after lib.sh (it uses $work, $pids, fail, free_port, wait_for).
#
# Why 20 processes: each simulated exporter is one process serving one node, exactly as
# deployed, and costs little (the simulator integrates 8 GPUs in 100 ms steps; the measured CPU
# and RSS are printed). A single process faking many nodes would test a path no user runs.
# Each node gets its own copy of its scenario with its own seed, so UUIDs and serials are unique
# across the fleet, as the recording rules' `on (uuid)` joins require.
FLEET_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# node name|scenario (built-in, or idle: tests/e2e/idle-scenario.toml, fabric:
# tests/e2e/fabric-scenario.toml)|role. The mix gives every Fleet panel, recording rule and most
# alerts data: training and MIG nodes, a GB200 NVL72 tray with lasting fabric and rail faults
# and an expected GPU count it misses (node-07), a GB10 serving an LLM
# (a textfile writer, below), one node per fault scenario, idle nodes (one with a GPU held by an
# HPC job, one whose kubelet socket is missing), a node probing P2P pairs in its idle window, a finished
# evaluation job and a broken textfile. node-20 is the one fleet.sh stops before comparing.
FLEET_NODES=(
  "node-01|dgx-h100|probes"
  "node-02|dgx-h100|" "node-03|dgx-h100|" "node-04|dgx-h100|" "node-05|dgx-h100|"
  "node-06|dgx-h100|" "node-07|fabric|fabric"
  "node-08|dgx-a100-mig|" "node-09|dgx-a100-mig|" "node-10|dgx-a100-mig|" "node-11|dgx-a100-mig|"
  "node-12|dgx-spark|llm"
  "node-13|fault-health|" "node-14|fault-xid-storm|textfile" "node-15|fault-gpu-lost|"
  "node-16|fault-ecc|" "node-17|fault-thermal|"
  "node-18|idle|held" "node-19|idle|kubelet-down"
  "node-20|dgx-h100|"
)
FLEET_TARGETS=()
FLEET_PIDS=()
declare -A FLEET_PID_OF

# A copy of the scenario with the seed of node N (1000 + N), in $work/scenarios/.
fleet_scenario() { # SCENARIO N
  local src=$FLEET_ROOT/crates/sim/scenarios/$1.toml out=$work/scenarios/$1-$2.toml
  [ "$1" = idle ] && src=$FLEET_ROOT/tests/e2e/idle-scenario.toml
  [ "$1" = fabric ] && src=$FLEET_ROOT/tests/e2e/fabric-scenario.toml
  mkdir -p "$work/scenarios"
  grep -q '^seed = ' "$src" || fail "$src has no seed line"
  sed -E "s/^seed = .*/seed = $((1000 + $2))/" "$src" >"$out"
  echo "$out"
}

# Extra files for a node's role: probes config, textfiles, HPC job mapping.
fleet_role_args() { # ROLE
  case $1 in
    probes)
      # The pair probe alone in the node's idle window (its first 30 s; the job's process then
      # makes every GPU `skipped_in_use`, as on hardware), so each GPU gets a pair within it and
      # the node-median P2P rule has its six; NCCL across the node and a storage path
      # (simulated: nothing of the host is read). The other H100 nodes run every kind.
      printf '[probes]\nsettle = "0s"\nduty_cycle = 0.2\nprobes = "p2p_copy"\nnccl_allreduce = true\nstorage_paths = ["/data"]\n' \
        >"$work/probes.toml"
      echo "--config.file $work/probes.toml --collector.probes.interval 1s" ;;
    textfile)
      mkdir -p "$work/textfile"
      local now
      now=$(date +%s)
      JOB_ID=fleet-eval COMMIT_SHA=abc123 MODEL=fleet-model DATASET=fleet-set LPIPS=0.18 \
        SSIM=0.91 PSNR_DB=26.5 CLIP_DISTANCE=0.09 RATING_MEAN=4.3 RATINGS=5 START=$((now - 600)) \
        END=$((now - 60)) "$FLEET_ROOT/examples/textfile/eval-job.sh" "$work/textfile" >/dev/null \
        || fail "eval-job.sh"
      printf 'broken{ 1\n' >"$work/textfile/broken.prom"
      echo "--textfile.directory $work/textfile" ;;
    held)
      mkdir -p "$work/jobs" && echo 7001 >"$work/jobs/1"
      { printf '[health]\nidle_after = "1s"\n'; fleet_cost_table; } >"$work/idle.toml"
      echo "--config.file $work/idle.toml --hpc.job-mapping-dir $work/jobs" ;;
    llm)
      mkdir -p "$work/llm"
      fleet_cost_table >"$work/llm.toml"
      echo "--config.file $work/llm.toml --textfile.directory $work/llm" ;;
    fabric)
      printf '[health]\nexpected_gpus = 5\n' >"$work/fabric.toml"
      echo "--config.file $work/fabric.toml" ;;
    kubelet-down)
      echo "--collector.kubernetes --kubernetes.pod-resources-socket $work/no-kubelet.sock" ;;
    *) echo "" ;;
  esac
}

fleet_cost_table() {
  printf '[cost]\ncurrency = "USD"\nelectricity_price_per_kwh = 0.12\npue = 1.3\ngpu_cost_per_hour = 1.0\n'
}

# An LLM server's textfile on GPU 0 of node-12, rewritten every second as its counters grow
# (docs/workloads.md's families: tokens, TTFT and TPOT histograms), until killed.
fleet_llm_writer() { # DIR UUID
  local n=0 l tmp=$1/.llm.prom.tmp
  l="gpu=\"0\",uuid=\"$2\",model=\"fleet-llm\""
  while :; do
    n=$((n + 1))
    {
      echo "# TYPE dgx_pixels_workload_output_tokens_total counter"
      echo "dgx_pixels_workload_output_tokens_total{$l} $((n * 480))"
      fleet_histogram dgx_pixels_workload_time_to_first_token_seconds "$l" $n \
        "0.05:0 0.1:1 0.25:5 0.5:8 1:10 2:10 5:10 10:10" 4.1
      fleet_histogram dgx_pixels_workload_time_per_output_token_seconds "$l" $n \
        "0.005:0 0.01:2 0.02:7 0.03:9 0.05:10 0.1:10 0.25:10" 0.19
    } >"$tmp" && mv "$tmp" "$1/llm.prom"
    sleep 1
  done
}
fleet_histogram() { # NAME LABELS N "LE:COUNT..." SUM -- N times 10 requests of that shape
  local le_count
  echo "# TYPE $1 histogram"
  for le_count in $4; do echo "$1_bucket{$2,le=\"${le_count%%:*}\"} $(($3 * ${le_count#*:}))"; done
  echo "$1_bucket{$2,le=\"+Inf\"} $(($3 * 10))"
  echo "$1_sum{$2} $(awk -v n="$3" -v s="$5" 'BEGIN {print n * s}')"
  echo "$1_count{$2} $(($3 * 10))"
}

fleet_start() { # DETAIL -- starts every node, sets FLEET_TARGETS, FLEET_PIDS, FLEET_PID_OF
  local detail=$1 entry name scenario role n port file extra
  n=0
  for entry in "${FLEET_NODES[@]}"; do
    IFS='|' read -r name scenario role <<<"$entry"
    n=$((n + 1))
    file=$(fleet_scenario "$scenario" "$n")
    extra=$(fleet_role_args "$role")
    port=$(free_port)
    # shellcheck disable=SC2086 # extra is a list of arguments without spaces in them
    "$BIN" --simulate "$file" --node.name "$name" --metrics.detail "$detail" $extra \
      --web.listen-address "127.0.0.1:$port" >"$work/$name.log" 2>&1 &
    pids+=($!)
    FLEET_PIDS+=($!)
    FLEET_PID_OF[$name]=$!
    FLEET_TARGETS+=("127.0.0.1:$port")
  done
  for t in "${FLEET_TARGETS[@]}"; do
    wait_for "http://$t/-/ready" 30 || fail "exporter at $t not ready"
  done
  local uuid
  uuid=$(curl -sf "http://${FLEET_TARGETS[11]}/metrics" \
    | grep '^dgx_pixels_gpu_info{' | grep 'gpu="0"' | sed 's/.*uuid="\([^"]*\)".*/\1/' | head -1)
  [ -n "$uuid" ] || fail "node-12 serves no GPU 0"
  fleet_llm_writer "$work/llm" "$uuid" &
  pids+=($!)
}

fleet_victoria_metrics() { # -- starts VictoriaMetrics, sets VM_PORT
  VM_PORT=$(free_port)
  # Fresh samples queryable after 1 s (default 30 s), no response cache (it would serve answers
  # computed before the last samples arrived), nothing else changed.
  victoria-metrics -storageDataPath="$work/vm" -retentionPeriod=1d \
    -httpListenAddr="127.0.0.1:$VM_PORT" -search.latencyOffset=1s -search.disableCache \
    -loggerLevel=WARN >"$work/victoria-metrics.log" 2>&1 &
  pids+=($!)
  FLEET_VM_PID=$!
  wait_for "http://127.0.0.1:$VM_PORT/health" 30 || fail "victoria-metrics not ready"
}

fleet_prometheus() { # INTERVAL -- scrapes the fleet, evaluates the shipped rules, remote-writes
  PROM_PORT=$(free_port)
  {
    printf 'global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n' \
      "$1" "$1" "$1"
    printf 'rule_files:\n  - %s/deploy/prometheus/rules/*.yml\n' "$FLEET_ROOT"
    # Small batches sent within 1 s, so VictoriaMetrics is at most a few seconds behind.
    printf 'remote_write:\n  - url: http://127.0.0.1:%s/api/v1/write\n' "$VM_PORT"
    printf '    queue_config:\n      batch_send_deadline: 1s\n      max_samples_per_send: 5000\n'
    printf 'scrape_configs:\n  - job_name: dgx-pixels\n    static_configs:\n      - targets: [%s]\n' \
      "$(IFS=,; echo "${FLEET_TARGETS[*]}")"
  } >"$work/prometheus.yml"
  promtool check config "$work/prometheus.yml" >/dev/null || fail "prometheus config"
  # A short flush deadline: on exit, a failed test does not wait a minute for a dead receiver.
  prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
    --storage.remote.flush-deadline=5s --web.listen-address="127.0.0.1:$PROM_PORT" \
    >"$work/prometheus.log" 2>&1 &
  pids+=($!)
  FLEET_PROM_PID=$!
  wait_for "http://127.0.0.1:$PROM_PORT/-/ready" 30 || fail "prometheus not ready"
}

# Stops Prometheus while VictoriaMetrics still runs: on shutdown it flushes its remote-write
# queue, for up to a minute if the receiver is gone.
fleet_stop_prometheus() {
  kill "$FLEET_PROM_PID" 2>/dev/null || true
  wait "$FLEET_PROM_PID" 2>/dev/null || true
}

# CPU seconds (user + system) and RSS of the running exporters, summed, from /proc.
fleet_usage() { # -- prints "CPU_SECONDS RSS_KIB COUNT"
  local pid cpu=0 rss=0 n=0 tck stat
  tck=$(getconf CLK_TCK)
  for pid in "${FLEET_PIDS[@]}"; do
    [ -r "/proc/$pid/stat" ] || continue
    stat=$(cut -d')' -f2- "/proc/$pid/stat")
    cpu=$((cpu + $(awk '{print $12 + $13}' <<<"$stat")))
    rss=$((rss + $(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")))
    n=$((n + 1))
  done
  echo "$(awk -v c="$cpu" -v t="$tck" 'BEGIN {printf "%.2f", c / t}') $rss $n"
}

# A sample of Prometheus' own /metrics (it does not scrape itself here), summed over its series.
prom_self() { # METRIC
  curl -sf "http://127.0.0.1:$PROM_PORT/metrics" | awk -v m="$1" '$1 == m || index($1, m "{") == 1 {s += $2; n++} END {print n ? s : "none"}'
}

# Waits until Prometheus has sent VictoriaMetrics every sample up to TIME.
fleet_wait_sent() { # TIME TIMEOUT_S
  local deadline=$((SECONDS + $2)) sent
  while :; do
    sent=$(prom_self prometheus_remote_storage_queue_highest_sent_timestamp_seconds)
    awk -v s="$sent" -v t="$1" 'BEGIN {exit !(s + 0 >= t)}' && return 0
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
}
