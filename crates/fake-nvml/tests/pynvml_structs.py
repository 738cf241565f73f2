#!/usr/bin/env python3
"""Prints the NVML struct layouts and versions the fake's ABI tests pin, from nvidia-ml-py
(NVIDIA's Python binding): `python3 -m venv V && V/bin/pip install nvidia-ml-py &&
V/bin/python crates/fake-nvml/tests/pynvml_structs.py`. Compare with tests/abi.rs."""
import ctypes

import pynvml

for name in ("c_nvmlGpuFabricInfo_v2_t", "c_nvmlGpuFabricInfo_v3_t",
             "c_nvmlPlatformInfo_v1_t", "c_nvmlPlatformInfo_v2_t"):
    t = getattr(pynvml, name)
    fields = ", ".join(f"{f[0]}@{getattr(t, f[0]).offset}" for f in t._fields_)
    print(f"{name}: {ctypes.sizeof(t)} bytes: {fields}")
for name in ("nvmlGpuFabricInfo_v2", "nvmlGpuFabricInfo_v3",
             "nvmlPlatformInfo_v1", "nvmlPlatformInfo_v2"):
    print(f"{name} = {getattr(pynvml, name):#010x}")
