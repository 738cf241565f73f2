#!/usr/bin/env bash
# Validates the CUDA probes against PyTorch on a machine with an NVIDIA GPU: runs
# `dgx-pixels-exporter probe run` and bench/torch_probes.py (the same operations, sizes and
# timing) on the same GPU, one after the other, and prints a pass/fail table.
# Targets: gemm_bf16 >= 0.95x PyTorch's matmul FLOP/s, copy_d2d >= 0.90x PyTorch's copy.
#
# Needs: the exporter binary (no Rust toolchain: build it elsewhere with
#   cargo build --release -p dgx-pixels-exporter and copy target/release/dgx-pixels-exporter),
#   python3 with a CUDA build of PyTorch, the NVIDIA driver (libcuda.so.1).
# cuBLAS: the system's (ld.so.cache) or the one PyTorch's pip wheels ship, which this script
# adds to LD_LIBRARY_PATH for the exporter.
#
# Usage: scripts/gpu-validate-probes.sh [--bin PATH] [--gpu N] [--iterations N] [--record]
#   --record appends the table, with date, GPU and driver, to docs/validation.md.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="" GPU=0 ITERATIONS=30 WARMUP=5 RECORD=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --gpu) GPU=$2; shift 2 ;;
    --iterations) ITERATIONS=$2; shift 2 ;;
    --record) RECORD=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ]; then
  for c in ./dgx-pixels-exporter target/release/dgx-pixels-exporter target/debug/dgx-pixels-exporter; do
    [ -x "$c" ] && { BIN=$c; break; }
  done
fi
[ -n "$BIN" ] && [ -x "$BIN" ] || { echo "no exporter binary; pass --bin PATH" >&2; exit 2; }
PY=${PYTHON:-python3}
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || { echo "$PY: PyTorch with CUDA is not available" >&2; exit 2; }

# Directories holding cuBLAS from PyTorch's wheels (nvidia/cublas/lib, nvidia/cu13/lib, ...)
# or torch/lib, for the exporter's dlopen; the system's cuBLAS, if any, is found anyway.
libdirs=$("$PY" - <<'PY'
import glob, os, site
bases = site.getsitepackages() + [site.getusersitepackages()]
try:
    import torch
    bases.append(os.path.dirname(os.path.dirname(torch.__file__)))
except Exception:
    pass
dirs = []
for base in bases:
    for pattern in ("nvidia/**/libcublas.so*", "torch/lib/libcublas.so*"):
        for f in glob.glob(os.path.join(base, pattern), recursive=True):
            d = os.path.dirname(f)
            if d not in dirs:
                dirs.append(d)
print(":".join(dirs))
PY
)
if [ -n "$libdirs" ]; then
  export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | sed 's/^/gpu:     /'
echo "cuBLAS search path: ${libdirs:-system only}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PROBES=gemm_bf16,gemm_fp16,gemm_tf32,gemm_fp32,gemm_fp64,copy_d2d,copy_h2d,copy_d2h
echo "== dgx-pixels-exporter probe run"
rc=0
"$BIN" probe run --gpus "$GPU" --probe "$PROBES,launch_latency" --warmup "$WARMUP" \
  --iterations "$ITERATIONS" --output "$work/ours.json" || rc=$?
[ -s "$work/ours.json" ] || { echo "probe run produced no results (exit $rc)" >&2; exit 1; }
[ "$rc" = 0 ] || echo "probe run: some probes failed (exit $rc, see above); comparing those that ran" >&2
echo "== PyTorch reference and comparison"
args=(--ours "$work/ours.json" --gpu "$GPU" --warmup "$WARMUP" --iterations "$ITERATIONS")
[ "$RECORD" = 1 ] && args+=(--markdown docs/validation.md)
"$PY" bench/torch_probes.py "${args[@]}" || exit 1
[ "$rc" = 0 ] || exit 1
