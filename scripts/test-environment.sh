#!/usr/bin/env bash
# Runs the tests whose outcome depends on the machine, and says which ran where.
#
# Such a test is #[ignore]d (so a plain `cargo test` lists it as ignored, never as passed) and
# named for what it needs:
#   no_driver_*  a machine without an NVIDIA driver (libcuda.so.1 does not load): what the
#                exporter does without CUDA (clear errors, source down, daemon serving);
#   gpu_*        a GPU host (driver, at least one GPU, nvidia-smi): probes measure, NVML reads
#                the real devices.
# This script detects the kind of machine, runs the set that applies with --ignored, checks
# that every test of that set ran and passed, and prints a summary naming the tests that ran
# and the ones that did not (and why). An ignored test with neither prefix is an error: a
# skipped test must say what it waits for.
#
# Usage: scripts/test-environment.sh [--summary FILE]   (also writes the summary to FILE)
#        scripts/test-environment.sh --detect           (prints no-driver, gpu or driver-without-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."

detect() {
  python3 - <<'EOF'
import ctypes
def load(name):
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None
cuda = load("libcuda.so.1")
if cuda is None:
    print("no-driver")
    raise SystemExit
def count(lib, init, get, n):
    try:
        return n.value if getattr(lib, init)(*([0] if init == "cuInit" else [])) == 0 \
            and getattr(lib, get)(ctypes.byref(n)) == 0 else 0
    except AttributeError:  # not the real library
        return 0
cuda_gpus = count(cuda, "cuInit", "cuDeviceGetCount", ctypes.c_int(0))
nvml = load("libnvidia-ml.so.1")
nvml_gpus = count(nvml, "nvmlInit_v2", "nvmlDeviceGetCount_v2", ctypes.c_uint(0)) if nvml else 0
print("gpu" if cuda_gpus > 0 and nvml_gpus > 0 else "driver-without-gpu")
EOF
}

if [ "${1:-}" = "--detect" ]; then detect; exit 0; fi
summary_file=
if [ "${1:-}" = "--summary" ]; then summary_file=${2:?--summary FILE}; fi

env=$(detect)
case "$env" in
  no-driver) run=no_driver_ other=gpu_
    here="no NVIDIA driver (libcuda.so.1 does not load)"
    why_not="needs a GPU host: an NVIDIA driver, a GPU and nvidia-smi" ;;
  gpu) run=gpu_ other=no_driver_
    here="GPU host (libcuda.so.1 and libnvidia-ml.so.1 load and see a GPU)"
    why_not="needs a machine without an NVIDIA driver" ;;
  *) run= other=
    here="an NVIDIA driver but no usable GPU (CUDA or NVML sees none)"
    why_not="needs either no driver at all or a working GPU" ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Tracks the test binary cargo is running ("Running tests/gpu.rs (target/debug/deps/gpu-HASH)"
# gives "gpu"; doc tests give "doc:CRATE").
BINARY='
  /^ *Running .*\(.*\)$/ { bin = $NF; gsub(/[()]/, "", bin); sub(/^.*\//, "", bin); sub(/-[0-9a-f]+$/, "", bin) }
  /^ *Doc-tests / { bin = "doc:" $2 }'

# "BINARY TEST" for every ignored test, from cargo's own listing.
list_ignored() {
  cargo test --workspace --tests --locked -- --list --ignored 2>&1 | awk "$BINARY"'
    /: test$/ { sub(/: test$/, ""); print bin, $0 }'
}
list_ignored >"$work/ignored"
stray=$(awk '$2 !~ /(^|::)(no_driver_|gpu_)/' "$work/ignored")
if [ -n "$stray" ]; then
  echo "test-environment: ignored tests that name no environment (prefix no_driver_ or gpu_):" >&2
  echo "$stray" >&2
  exit 1
fi
grep -E " ([a-z_0-9]+::)*${run:-NOTHING}" "$work/ignored" >"$work/want" || true
grep -E " ([a-z_0-9]+::)*${other:-NOTHING}" "$work/ignored" >"$work/skip" || true
[ -n "$run" ] || cat "$work/ignored" >"$work/skip"

status=0
if [ -n "$run" ]; then
  [ -s "$work/want" ] || { echo "test-environment: no ${run}* test found" >&2; exit 1; }
  cargo test --workspace --tests --locked --no-fail-fast -- --ignored "$run" 2>&1 | tee "$work/out" || status=$?
  awk "$BINARY"'
    /^test .* \.\.\. ok$/ { print bin, $2 }' "$work/out" >"$work/passed"
  missing=$(sort "$work/want" | comm -23 - <(sort "$work/passed"))
  if [ -n "$missing" ]; then
    echo "test-environment: these ${run}* tests did not pass:" >&2
    echo "$missing" >&2
    status=1
  fi
fi

{
  echo "environment-dependent tests on this machine: $here"
  if [ -n "$run" ]; then
    echo "  ran here and passed ($(wc -l <"$work/passed")/$(wc -l <"$work/want")):"
    sed 's/^/    /' "$work/passed"
  fi
  echo "  not run here ($(wc -l <"$work/skip"), $why_not):"
  sed 's/^/    /' "$work/skip"
} | tee "$work/summary"
[ -z "$summary_file" ] || { mkdir -p "$(dirname "$summary_file")" && cp "$work/summary" "$summary_file"; }
exit "$status"
