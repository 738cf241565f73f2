#!/usr/bin/env python3
"""Writes an image-generation job's metrics as a textfile that dgx-pixels-exporter serves.

No dependencies beyond the standard library. Use it from a generation loop:

    from imagegen_metrics import ImageGenMetrics
    m = ImageGenMetrics("/var/lib/dgx-pixels/textfile", job_id="gen-42",
                        gpu=0, uuid=torch.cuda.get_device_properties(0).uuid,  # "GPU-..." form
                        model="sdxl-turbo", lora="pixel-art-v2", dataset="pixels-16x16")
    for batch in batches:
        t0 = time.perf_counter(); images = pipe(batch); dt = time.perf_counter() - t0
        m.observe(dt / len(images), count=len(images))
        m.batch_size = len(images)
        m.peak_active_bytes = torch.cuda.memory_stats(0)["active_bytes.all.peak"]
        m.write()          # cheap: one small file, written then renamed into place

Or from the command line (what the tests do):

    imagegen_metrics.py DIR --job-id gen-1 --gpu 0 --uuid GPU-... --model m --latency 0.12 0.18

The metric names, labels and buckets are the workload contract of docs/workloads.md.
"""

import argparse
import bisect
import math
import os
import tempfile
import time

# Latency buckets of the contract (seconds): dense around the 200 ms target.
LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.15, 0.175, 0.2, 0.225, 0.25, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0)


def _escape(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs):
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _number(v):
    """Shortest form, as the Go client and the exporter write it: 1 not 1.0 (le values must match)."""
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    s = repr(float(v))
    return s[:-2] if s.endswith(".0") else s


class ImageGenMetrics:
    """Counters of one generation job on one GPU, rewritten whole on every write()."""

    def __init__(self, directory, job_id, gpu, uuid, model, lora="", dataset="", commit_sha="unknown"):
        self.directory = directory
        self.job_id = job_id
        self.commit_sha = commit_sha
        self.gpu_labels = [("gpu", str(gpu)), ("uuid", uuid), ("model", model), ("lora", lora), ("dataset", dataset)]
        self.job_labels = [("model", model), ("lora", lora), ("dataset", dataset)]
        self.images = 0
        self.bucket_counts = [0] * len(LATENCY_BUCKETS)
        self.latency_sum = 0.0
        self.batch_size = None
        self.peak_active_bytes = None
        self.started = time.time()
        self.ended = None

    def observe(self, latency_seconds, count=1):
        """Records `count` images that took `latency_seconds` each."""
        if latency_seconds < 0 or count < 0:
            raise ValueError("latency and count must be >= 0")
        self.images += count
        self.latency_sum += latency_seconds * count
        first = bisect.bisect_left(LATENCY_BUCKETS, latency_seconds)
        for i in range(first, len(LATENCY_BUCKETS)):
            self.bucket_counts[i] += count

    def finish(self):
        self.ended = time.time()

    def render(self):
        g = self.gpu_labels
        out = []

        def family(name, kind, help_text):
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")

        family("dgx_pixels_workload_images_generated_total", "counter", "Images generated.")
        out.append(f"dgx_pixels_workload_images_generated_total{_labels(g)} {self.images}")
        name = "dgx_pixels_workload_generation_latency_seconds"
        family(name, "histogram", "Time to generate one image.")
        for le, n in zip(LATENCY_BUCKETS, self.bucket_counts):
            out.append(f"{name}_bucket{_labels(g + [('le', _number(le))])} {n}")
        out.append(f"{name}_bucket{_labels(g + [('le', '+Inf')])} {self.images}")
        out.append(f"{name}_sum{_labels(g)} {_number(self.latency_sum)}")
        out.append(f"{name}_count{_labels(g)} {self.images}")
        if self.batch_size is not None:
            family("dgx_pixels_workload_batch_size", "gauge", "Images per batch.")
            out.append(f"dgx_pixels_workload_batch_size{_labels(g)} {int(self.batch_size)}")
        if self.peak_active_bytes is not None:
            family("dgx_pixels_workload_pytorch_peak_active_bytes", "gauge",
                   "PyTorch allocator active_bytes.all.peak of the GPU.")
            out.append(f"dgx_pixels_workload_pytorch_peak_active_bytes{_labels(g)} {int(self.peak_active_bytes)}")
        job = [("job_id", self.job_id)]
        family("dgx_pixels_workload_job_info", "gauge", "The job and what it ran, value 1.")
        out.append(f"dgx_pixels_workload_job_info{_labels(job + [('commit_sha', self.commit_sha)] + self.job_labels)} 1")
        family("dgx_pixels_workload_job_start_timestamp_seconds", "gauge", "Unix time the job started.")
        out.append(f"dgx_pixels_workload_job_start_timestamp_seconds{_labels(job)} {_number(self.started)}")
        if self.ended is not None:
            family("dgx_pixels_workload_job_end_timestamp_seconds", "gauge", "Unix time the job ended.")
            out.append(f"dgx_pixels_workload_job_end_timestamp_seconds{_labels(job)} {_number(self.ended)}")
        return "\n".join(out) + "\n"

    def write(self):
        """Writes the file under a temporary name, then renames it into place (atomic)."""
        safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in self.job_id)
        final = os.path.join(self.directory, f"imagegen-{safe}.prom")
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".imagegen-")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(self.render())
            os.chmod(tmp, 0o644)
            os.replace(tmp, final)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return final


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory")
    p.add_argument("--job-id", required=True)
    p.add_argument("--gpu", type=int, required=True)
    p.add_argument("--uuid", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--lora", default="")
    p.add_argument("--dataset", default="")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--peak-active-bytes", type=int)
    p.add_argument("--latency", type=float, nargs="*", default=[], help="latency of each image, seconds")
    a = p.parse_args()
    m = ImageGenMetrics(a.directory, a.job_id, a.gpu, a.uuid, a.model, a.lora, a.dataset)
    for latency in a.latency:
        m.observe(latency)
    m.batch_size = a.batch_size
    m.peak_active_bytes = a.peak_active_bytes
    m.finish()
    print(m.write())


if __name__ == "__main__":
    main()
