#!/usr/bin/env bash
# The probe worker on a GPU host (issues 29 and 34), then the validation scripts and an FSDP2
# trace: idle power, SM clock, memory and compute processes from nvidia-smi (24 samples before,
# every ~0.7 s while the daemon probes for 110 s, 24 after it exits), the daemon's RSS, its
# probe series and per-NVML-function call time (nvml_calls.txt), a worker alone / with a
# PyTorch job starting mid-run / after, NVML per-call latency, scripts/gpu-validate-nvml.py (full detail), scripts/gpu-validate-probes.sh and
# scripts/gpu-capture-fsdp2.py. Needs the driver, nvidia-smi and a CUDA build of PyTorch; no
# Rust (build the binary elsewhere).
#
# Usage: OUT=DIR scripts/gpu-validate-worker.sh [BINARY]
#   Everything goes under $OUT/r, tarred to $OUT/results.tar.gz after every step.
set -u
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-target/release/dgx-pixels-exporter}")
: "${OUT:?set OUT to a directory for the results}"
R=$OUT/r; mkdir -p "$R"
# Every step leaves the results so far in $OUT/results.tar.gz, so a timeout still brings them back.
log() { echo "[$(date +%T)] $*" | tee -a "$R/steps.log"; tar czf "$OUT/results.tar.gz" -C "$OUT" r 2>/dev/null; }
TORCHLIB=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
CUBLAS=$(python3 - <<'PY'
import glob, os, site
d = set()
for s in site.getsitepackages():
    for p in glob.glob(os.path.join(s, "nvidia", "*", "lib", "libcublas.so*")):
        d.add(os.path.dirname(p))
print(":".join(sorted(d)))
PY
)
export LD_LIBRARY_PATH="$CUBLAS:$TORCHLIB:${LD_LIBRARY_PATH:-}"
{ nvidia-smi; nvidia-smi -q | head -40; python3 -c 'import torch;print(torch.__version__, torch.version.cuda)'; uname -a; "$BIN" --version; echo "cublas dirs: $CUBLAS"; } >"$R/env.txt" 2>&1
Q=timestamp,power.draw,clocks.sm,memory.used,utilization.gpu,pstate
samples() {  # N LABEL
  for _ in $(seq "$1"); do
    echo "$2,$(nvidia-smi --query-gpu=$Q --format=csv,noheader,nounits),$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | tr '\n' ';')" >>"$R/smi.csv"
    sleep 0.5
  done
}
log "baseline"; samples 24 before

log "daemon with probes"
cat >"$R/probes.toml" <<'TOML'
[probes]
probes = "gemm_bf16,copy_d2d,copy_h2d,launch_latency"
duty_cycle = 0.05
settle = "5s"
[collector.probes]
interval = "500ms"
TOML
PORT=19403
fetch() { python3 -c "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:$PORT/metrics',timeout=5).read().decode())" 2>/dev/null; }
"$BIN" --web.listen-address=127.0.0.1:$PORT --collector.probes --config.file "$R/probes.toml" --metrics.detail full --log.level=debug >"$R/daemon.log" 2>&1 &
DPID=$!
T0=$(date +%s)
while [ $(( $(date +%s) - T0 )) -lt 110 ]; do
  echo "$(date +%s.%N) $(grep -E 'VmRSS|VmHWM' /proc/$DPID/status | tr -s ' ' | tr '\n' ' ') children=$(pgrep -P $DPID | tr '\n' ' ')" >>"$R/daemon_rss.txt"
  samples 1 daemon
  fetch >"$R/metrics.last"
  grep -E '^dgx_pixels_(probe_(runs_total|gpus|worker|gemm|bandwidth|launch)|gpu_processes|process_memory)' "$R/metrics.last" | sed "s/^/$(date +%s) /" >>"$R/probe_metrics.txt"
done
fetch >"$R/metrics.full"
# What each NVML function cost the source over the run (issue 36; docs/performance.md).
grep -E '^dgx_pixels_(nvml_call|source_poll_duration)' "$R/metrics.full" >"$R/nvml_calls.txt"
kill -TERM $DPID; wait $DPID
log "after exit"; samples 24 after

log "contention: worker alone, then with a PyTorch job starting mid-run"
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
REQ="{\"op\":\"run\",\"ordinal\":0,\"uuid\":\"$UUID\",\"probe\":\"gemm_bf16\",\"sizes\":{\"gemm_n_16bit\":8192,\"gemm_n_32bit\":8192,\"gemm_n_64bit\":4096,\"copy_bytes\":268435456,\"host_copy_bytes\":67108864,\"launches\":1000,\"target_seconds\":0.5},\"warmup\":1,\"iterations\":20,\"seed\":42}"
if [ -x /usr/bin/time ]; then TIMEV="/usr/bin/time -v"; else TIMEV=""; fi
echo "$REQ" | $TIMEV "$BIN" probe-worker >"$R/worker_alone.json" 2>"$R/worker_alone.time"
python3 bench/torch_busy.py 1.0 15 & BUSY=$!
echo "$REQ" | "$BIN" probe-worker >"$R/worker_contended.json" 2>"$R/worker_contended.err"
wait $BUSY
sleep 2
echo "$REQ" | "$BIN" probe-worker >"$R/worker_after.json" 2>&1
log "nvml latency"; timeout 60 python3 scripts/gpu-nvml-latency.py 200 >"$R/nvml_latency.json" 2>&1
log "gpu-validate-nvml"; DGX_PIXELS_METRICS__DETAIL=full timeout 120 python3 scripts/gpu-validate-nvml.py "$BIN" >"$R/validate_nvml.txt" 2>&1; echo "rc=$?" >>"$R/validate_nvml.txt"
log "gpu-validate-probes"; timeout 200 scripts/gpu-validate-probes.sh --bin "$BIN" --iterations 10 >"$R/validate_probes.txt" 2>&1; echo "rc=$?" >>"$R/validate_probes.txt"
log "fsdp2 trace"; timeout 150 python3 scripts/gpu-capture-fsdp2.py "$R/fsdp" >"$R/fsdp.log" 2>&1; echo "rc=$?" >>"$R/fsdp.log"
log "done"
tar czf "$OUT/results.tar.gz" -C "$OUT" r && rm -rf "$R"
