"""Captures real FSDP2 profiler traces (record_shapes, profile_memory) and a CUDA memory
snapshot on one GPU, one rank, for the trace engine's fixtures (issue 34).

Usage: python3 scripts/gpu-capture-fsdp2.py OUTDIR
Writes OUTDIR/fsdp2-shapes-rank0.pt.trace.json.gz, OUTDIR/fsdp2-shapes-rank0_memory_snapshot.pickle
and OUTDIR/fsdp2-shapes-facts.json (torch.cuda.memory_stats peaks, versions). Paths of this
machine in the snapshot's frames are rewritten under /srv/jobs/train/.
"""
import glob
import gzip
import json
import os
import pickle
import shutil
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
dist.init_process_group("nccl", rank=0, world_size=1)
torch.cuda.set_device(0)
from torch.distributed.fsdp import fully_shard  # noqa: E402

torch.manual_seed(0)
layers = [nn.TransformerEncoderLayer(2048, 16, 8192, batch_first=True, dtype=torch.bfloat16,
                                     device="cuda") for _ in range(8)]
model = nn.Sequential(*layers)
for layer in model:
    fully_shard(layer)
fully_shard(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
x = torch.randn(8, 1024, 2048, dtype=torch.bfloat16, device="cuda")


def step():
    with torch.profiler.record_function("forward"):
        y = model(x)
        loss = y.float().pow(2).mean()
    with torch.profiler.record_function("backward"):
        loss.backward()
    with torch.profiler.record_function("optimizer"):
        opt.step()
        opt.zero_grad(set_to_none=True)


step()  # warm-up outside the profiler
torch.cuda.synchronize()
torch.cuda.memory.reset_peak_memory_stats()
torch.cuda.memory._record_memory_history(max_entries=30000)
tmp = os.path.join(out, "tb")
sched = torch.profiler.schedule(wait=1, warmup=1, active=3)
with torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
    schedule=sched,
    on_trace_ready=torch.profiler.tensorboard_trace_handler(tmp, worker_name="rank0", use_gzip=True),
    record_shapes=True,
    profile_memory=True,
) as prof:
    for _ in range(5):
        step()
        prof.step()
torch.cuda.synchronize()
snap = torch.cuda.memory._snapshot()
torch.cuda.memory._record_memory_history(enabled=None)
stats = torch.cuda.memory_stats()

# Paths of this machine in the frames: keep the tail, move the head under /srv/jobs/train.
prefixes = sorted({os.path.dirname(torch.__file__).rsplit("/torch", 1)[0], os.getcwd(),
                   os.path.expanduser("~")}, key=len, reverse=True)


def scrub(v):
    if isinstance(v, str):
        for p in prefixes:
            if p and v.startswith(p):
                return "/srv/jobs/train" + v[len(p):]
        return v
    if isinstance(v, list):
        return [scrub(e) for e in v]
    if isinstance(v, dict):
        return {k: scrub(e) for k, e in v.items()}
    return v


with open(os.path.join(out, "fsdp2-shapes-rank0_memory_snapshot.pickle"), "wb") as f:
    pickle.dump(scrub(snap), f)
traces = sorted(glob.glob(os.path.join(tmp, "*.pt.trace.json.gz")))
with gzip.open(traces[-1], "rt") as f:
    text = f.read()
for p in prefixes:
    if p:
        text = text.replace(p, "/srv/jobs/train")
with gzip.open(os.path.join(out, "fsdp2-shapes-rank0.pt.trace.json.gz"), "wt") as f:
    f.write(text)
shutil.rmtree(tmp)
facts = {
    "date": time.strftime("%Y-%m-%d"),
    "gpu": torch.cuda.get_device_name(0),
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "nccl": ".".join(map(str, torch.cuda.nccl.version())),
    "active_bytes.all.peak": stats["active_bytes.all.peak"],
    "reserved_bytes.all.peak": stats["reserved_bytes.all.peak"],
    "allocated_bytes.all.peak": stats["allocated_bytes.all.peak"],
}
with open(os.path.join(out, "fsdp2-shapes-facts.json"), "w") as f:
    json.dump(facts, f, indent=1)
dist.destroy_process_group()
print(json.dumps(facts))
