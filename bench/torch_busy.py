"""A PyTorch job for the contention check: waits DELAY seconds, then runs bf16 matmuls for
SECONDS seconds. Usage: python3 bench/torch_busy.py DELAY SECONDS (scripts/gpu-validate-worker.sh)"""
import sys
import time

import torch

delay, seconds = float(sys.argv[1]), float(sys.argv[2])
time.sleep(delay)
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
end = time.time() + seconds
while time.time() < end:
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
