"""Per-function latency of the NVML calls the exporter's NVML source makes, on this GPU
(issue 36's latency model). Prints JSON: {function: {"median_us", "p90_us", "calls", "rc"}}.
Usage: python3 scripts/gpu-nvml-latency.py [CALLS]"""
import ctypes as C
import json
import statistics
import sys
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
lib = C.CDLL("libnvidia-ml.so.1")
assert lib.nvmlInit_v2() == 0
h = C.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, C.byref(h)) == 0
u = C.c_uint()
ull = C.c_ulonglong()
buf = C.create_string_buffer(256)
big = C.create_string_buffer(65536)
# nvmlMemory_v2_t: version, then total, reserved, free, used; version = size | 2 << 24.
mem_v2 = C.create_string_buffer(40)
C.c_uint.from_buffer(mem_v2).value = 40 | (2 << 24)


class FieldValue(C.Structure):
    _fields_ = [("fieldId", C.c_uint), ("scopeId", C.c_uint), ("timestamp", C.c_longlong),
                ("latencyUsec", C.c_longlong), ("valueType", C.c_uint), ("nvmlReturn", C.c_uint),
                ("value", C.c_ulonglong)]


def batch(ids, scope=None):
    """A field-values array for `ids`; `scope` maps an id to its scopeId (default 0)."""
    arr = (FieldValue * len(ids))()
    for i, fid in enumerate(ids):
        arr[i].fieldId = fid
        arr[i].scopeId = (scope or {}).get(fid, 0)
    return arr


fields = batch([150, 151, 155, 84, 85, 86, 87, 119, 120, 61, 62])
one_field = batch([186])  # power instant
# The NVML source's batches (crates/nvml/src/fields.rs): every poll's (NVLink totals over all
# links, scope UINT_MAX), and the slow one with the counters that ask the GPU.
ALL_LINKS = 0xFFFFFFFF
poll_batch = batch([3, 4, 5, 6, 82, 138, 139, 142, 143, 144, 145, 230], {138: ALL_LINKS, 139: ALL_LINKS})
slow_batch = batch([83, 94])
energy_field = batch([83])
replay_field = batch([94])
# NVML_FI_DEV_PERF_POLICY_* (74-79): the violation times the source reads with six
# nvmlDeviceGetViolationStatus calls on the slow cadence, if their values agree (printed below).
violation_fields = batch([74, 75, 76, 77, 78, 79])
gpm_sample = C.c_void_p()
gpm_ok = hasattr(lib, "nvmlGpmSampleAlloc") and lib.nvmlGpmSampleAlloc(C.byref(gpm_sample)) == 0
calls = {
    "nvmlDeviceGetUtilizationRates": lambda: lib.nvmlDeviceGetUtilizationRates(h, big),
    "nvmlDeviceGetMemoryInfo_v2": lambda: lib.nvmlDeviceGetMemoryInfo_v2(h, mem_v2),
    "nvmlDeviceGetPowerUsage": lambda: lib.nvmlDeviceGetPowerUsage(h, C.byref(u)),
    "nvmlDeviceGetTotalEnergyConsumption": lambda: lib.nvmlDeviceGetTotalEnergyConsumption(h, C.byref(ull)),
    "nvmlDeviceGetTemperature": lambda: lib.nvmlDeviceGetTemperature(h, 0, C.byref(u)),
    "nvmlDeviceGetClockInfo(SM)": lambda: lib.nvmlDeviceGetClockInfo(h, 1, C.byref(u)),
    "nvmlDeviceGetClockInfo(MEM)": lambda: lib.nvmlDeviceGetClockInfo(h, 2, C.byref(u)),
    "nvmlDeviceGetPerformanceState": lambda: lib.nvmlDeviceGetPerformanceState(h, C.byref(u)),
    "nvmlDeviceGetCurrentClocksEventReasons": lambda: lib.nvmlDeviceGetCurrentClocksEventReasons(h, C.byref(ull)),
    "nvmlDeviceGetBAR1MemoryInfo": lambda: lib.nvmlDeviceGetBAR1MemoryInfo(h, big),
    "nvmlDeviceGetEncoderUtilization": lambda: lib.nvmlDeviceGetEncoderUtilization(h, C.byref(u), C.byref(C.c_uint())),
    "nvmlDeviceGetDecoderUtilization": lambda: lib.nvmlDeviceGetDecoderUtilization(h, C.byref(u), C.byref(C.c_uint())),
    "nvmlDeviceGetTotalEccErrors": lambda: lib.nvmlDeviceGetTotalEccErrors(h, 0, 0, C.byref(ull)),
    "nvmlDeviceGetRemappedRows": lambda: lib.nvmlDeviceGetRemappedRows(h, C.byref(u), C.byref(C.c_uint()), C.byref(C.c_uint()), C.byref(C.c_uint())),
    "nvmlDeviceGetPcieReplayCounter": lambda: lib.nvmlDeviceGetPcieReplayCounter(h, C.byref(u)),
    "nvmlDeviceGetCurrPcieLinkGeneration": lambda: lib.nvmlDeviceGetCurrPcieLinkGeneration(h, C.byref(u)),
    "nvmlDeviceGetCurrPcieLinkWidth": lambda: lib.nvmlDeviceGetCurrPcieLinkWidth(h, C.byref(u)),
    "nvmlDeviceGetComputeRunningProcesses_v3(count)": lambda: lib.nvmlDeviceGetComputeRunningProcesses_v3(h, C.byref(C.c_uint(0)), None),
    "nvmlDeviceGetFieldValues(11 fields)": lambda: lib.nvmlDeviceGetFieldValues(h, 11, fields),
    "nvmlDeviceGetFieldValues(power instant)": lambda: lib.nvmlDeviceGetFieldValues(h, 1, one_field),
    "nvmlDeviceGetFieldValues(poll)": lambda: lib.nvmlDeviceGetFieldValues(h, 12, poll_batch),
    "nvmlDeviceGetFieldValues(slow)": lambda: lib.nvmlDeviceGetFieldValues(h, 2, slow_batch),
    "nvmlDeviceGetFieldValues(energy 83)": lambda: lib.nvmlDeviceGetFieldValues(h, 1, energy_field),
    "nvmlDeviceGetFieldValues(replays 94)": lambda: lib.nvmlDeviceGetFieldValues(h, 1, replay_field),
    "nvmlDeviceGetFieldValues(violations 74-79)": lambda: lib.nvmlDeviceGetFieldValues(h, 6, violation_fields),
    "nvmlDeviceGetNvLinkState(link 0)": lambda: lib.nvmlDeviceGetNvLinkState(h, 0, C.byref(u)),
    "nvmlDeviceGetNvLinkErrorCounter(link 0)": lambda: lib.nvmlDeviceGetNvLinkErrorCounter(h, 0, 0, C.byref(ull)),
    "nvmlDeviceGetViolationStatus(power)": lambda: lib.nvmlDeviceGetViolationStatus(h, 0, big),
    "nvmlDeviceGetEccMode": lambda: lib.nvmlDeviceGetEccMode(h, C.byref(u), C.byref(C.c_uint())),
    "nvmlDeviceGetMigMode": lambda: lib.nvmlDeviceGetMigMode(h, C.byref(u), C.byref(C.c_uint())),
    "nvmlDeviceGetName": lambda: lib.nvmlDeviceGetName(h, buf, 256),
    "nvmlDeviceGetUUID": lambda: lib.nvmlDeviceGetUUID(h, buf, 256),
    "nvmlDeviceGetPciInfo_v3": lambda: lib.nvmlDeviceGetPciInfo_v3(h, big),
    "nvmlDeviceGetHandleByIndex_v2": lambda: lib.nvmlDeviceGetHandleByIndex_v2(0, C.byref(C.c_void_p())),
    "nvmlDeviceGetComputeMode": lambda: lib.nvmlDeviceGetComputeMode(h, C.byref(u)),
}
if gpm_ok:
    calls["nvmlGpmSampleGet"] = lambda: lib.nvmlGpmSampleGet(h, gpm_sample)
out = {}
for name, f in calls.items():
    rc = f()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        f()
        ts.append((time.perf_counter_ns() - t0) / 1000)
    ts.sort()
    out[name] = {"median_us": round(statistics.median(ts), 2), "p90_us": round(ts[int(0.9 * n)], 2),
                 "calls": n, "rc": rc}
# PCIe throughput samples ~20 ms per call: time a few only.
ts = []
for _ in range(5):
    t0 = time.perf_counter_ns()
    rc = lib.nvmlDeviceGetPcieThroughput(h, 0, C.byref(u))
    ts.append((time.perf_counter_ns() - t0) / 1000)
out["nvmlDeviceGetPcieThroughput(TX)"] = {"median_us": round(statistics.median(ts), 2),
                                          "p90_us": round(max(ts), 2), "calls": 5, "rc": rc}
# Fields 74-79 beside the getter's violation time (ns) for the same policies, read together.
viol = C.c_ulonglong * 2
lib.nvmlDeviceGetFieldValues(h, 6, violation_fields)
out["violation_fields_vs_getter"] = []
for i, v in enumerate(violation_fields):
    t = viol()
    rc = lib.nvmlDeviceGetViolationStatus(h, i, C.byref(t))
    out["violation_fields_vs_getter"].append({"field": v.fieldId, "rc": v.nvmlReturn, "type": v.valueType,
                                              "value": v.value, "getter_rc": rc, "getter_ns": t[1]})
print(json.dumps(out, indent=1))
