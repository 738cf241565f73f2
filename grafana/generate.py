#!/usr/bin/env python3
"""Generates the Grafana dashboards of grafana/dashboards/ (and the Helm chart's copy).

The dashboards are written from this file rather than by hand so that every panel shares the
same datasource, variables, annotations and thresholds. Edit the panels here, then run
`grafana/generate.py`; `grafana/generate.py --check` (run by grafana/check.sh) fails when the
committed JSON differs from what this file generates.

Thresholds are the targets of the metrics framework (docs/dashboards.md lists them).
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIRS = [
    os.path.join(ROOT, "grafana", "dashboards"),
    os.path.join(ROOT, "helm", "dgx-pixels-exporter", "files", "dashboards"),
]
# The dashboard JSON model of Grafana 12 (@grafana/schema 12-13 generate this version).
SCHEMA_VERSION = 41
DS = {"type": "prometheus", "uid": "${datasource}"}

# The framework's targets.
P95_TARGET_S = 0.2
SCALING_TARGET = 0.85
# The metrics framework's fabric and storage targets: NCCL bus bandwidth across the node's GPUs
# and storage read throughput, bytes per second.
NCCL_TARGET_BPS = 200e9
STORAGE_TARGET_BPS = 8e9
LPIPS_TARGET = 0.20
SSIM_TARGET = 0.85
PSNR_TARGET_DB = 25
CLIP_TARGET = 0.10
RATING_TARGET = 4.0
ENERGY_PER_IMAGE_TARGET_KWH = 0.0002
NCCL_BUS_BANDWIDTH_TARGET = 200e9  # bytes/s on 8 GPUs
TRACE_COMPUTE_ALERT = 0.5  # DgxPixelsTraceLowCompute
TRACE_STRAGGLER_ALERT = 0.1  # DgxPixelsTraceStraggler

GREEN, YELLOW, RED, BLUE = "green", "yellow", "red", "blue"

# Label matchers of the template variables.
NODE = 'node=~"$node"'
NODE_GPU = 'node=~"$node", gpu=~"$gpu"'
# Workload series recorded per uuid lose node and gpu: take them (and the selection) from
# dgx_pixels_gpu_info, which carries both.
SELECTED_GPUS = f"max by (uuid, node, gpu) (dgx_pixels_gpu_info{{{NODE_GPU}}})"
GPU_LEGEND = "{{node}} GPU {{gpu}}"


# A GPU's verdict as one number (0 healthy, 1 degraded, 2 unhealthy, 3 unknown), for
# state timelines: the health state series are one 0/1 series per state.
HEALTH_STATE_CODE = (
    "max by (node, gpu) (\n"
    '  (dgx_pixels_gpu_health_state{{{sel}, state="healthy"}} == 1) * 0\n'
    '  or (dgx_pixels_gpu_health_state{{{sel}, state="degraded"}} == 1)\n'
    '  or (dgx_pixels_gpu_health_state{{{sel}, state="unhealthy"}} == 1) * 2\n'
    '  or (dgx_pixels_gpu_health_state{{{sel}, state="unknown"}} == 1) * 3)')
HEALTH_STATE_CODE_MAPPINGS = [{"type": "value", "options": {
    "0": {"text": "healthy", "color": "green", "index": 0},
    "1": {"text": "degraded", "color": "yellow", "index": 1},
    "2": {"text": "unhealthy", "color": "red", "index": 2},
    "3": {"text": "unknown", "color": "gray", "index": 3}}}]
HEALTH_STATE_TEXT_MAPPINGS = [{"type": "value", "options": {
    "healthy": {"color": "green", "index": 0},
    "degraded": {"color": "yellow", "index": 1},
    "unhealthy": {"color": "red", "index": 2},
    "unknown": {"color": "gray", "index": 3}}}]


def on_selected_gpus(expr):
    """expr (with a uuid label) restricted to the selected GPUs, with node and gpu added."""
    return f"{expr}\n  * on (uuid) group_left (node, gpu) {SELECTED_GPUS}"


def steps(*pairs):
    """Threshold steps: steps(GREEN, (0.2, RED)) = green below 0.2, red from 0.2."""
    base, *rest = pairs
    return {"mode": "absolute",
            "steps": [{"color": base, "value": None}] + [{"color": c, "value": v} for v, c in rest]}


def upper_target(t):  # lower is better: green up to the target, red above it
    return steps(GREEN, (t, RED))


def lower_target(t):  # higher is better: red below the target, green from it
    return steps(RED, (t, GREEN))


NO_THRESHOLDS = steps(GREEN)


class Dashboard:
    def __init__(self, uid, title, description, tags, variables):
        self.uid, self.title, self.description, self.tags = uid, title, description, tags
        self.variables = variables
        self.panels = []
        self.x = self.y = self.row_h = 0

    def _place(self, w, h):
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def row(self, title):
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        self.panels.append({"type": "row", "title": title, "collapsed": False, "panels": [],
                            "id": len(self.panels) + 1,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}})
        self.y += 1

    def panel(self, kind, title, description, targets, w=12, h=8, unit=None, thresholds=None,
              options=None, custom=None, mappings=None, min_=None, max_=None, overrides=None,
              transformations=None, decimals=None, no_value=None, color=None):
        defaults = {"thresholds": thresholds or NO_THRESHOLDS}
        if unit:
            defaults["unit"] = unit
        if min_ is not None:
            defaults["min"] = min_
        if max_ is not None:
            defaults["max"] = max_
        if decimals is not None:
            defaults["decimals"] = decimals
        if mappings:
            defaults["mappings"] = mappings
        if no_value:
            defaults["noValue"] = no_value
        if color:
            defaults["color"] = color
        if custom:
            defaults["custom"] = custom
        p = {"type": kind, "title": title, "description": description, "datasource": DS,
             "id": len(self.panels) + 1, "gridPos": self._place(w, h),
             "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
             "options": options if options is not None else OPTIONS[kind](),
             "targets": [dict(t, refId=chr(ord("A") + i), datasource=DS)
                         for i, t in enumerate(targets)]}
        if transformations:
            p["transformations"] = transformations
        self.panels.append(p)

    def json(self):
        return {
            "uid": self.uid, "title": self.title, "description": self.description,
            "tags": ["dgx-pixels"] + self.tags, "editable": True, "graphTooltip": 1,
            "schemaVersion": SCHEMA_VERSION, "version": 1, "refresh": "30s",
            "time": {"from": "now-6h", "to": "now"}, "timezone": "browser",
            "fiscalYearStartMonth": 0, "liveNow": False, "weekStart": "",
            "links": [{"title": "DGX Pixels", "type": "dashboards", "tags": ["dgx-pixels"],
                       "asDropdown": True, "includeVars": True, "keepTime": True,
                       "icon": "external link", "targetBlank": False, "tooltip": "",
                       "url": ""}],
            "annotations": {"list": ANNOTATIONS},
            "templating": {"list": [DATASOURCE_VAR] + self.variables},
            "panels": self.panels,
        }


def q(expr, legend=None, instant=False, fmt="time_series"):
    t = {"expr": expr, "editorMode": "code", "range": not instant, "instant": instant,
         "format": fmt}
    if legend:
        t["legendFormat"] = legend
    return t


def ts_custom(threshold_line=False, stack=False, fill=10):
    c = {"drawStyle": "line", "lineInterpolation": "linear", "lineWidth": 1,
         "fillOpacity": fill, "showPoints": "never", "spanNulls": False,
         "axisPlacement": "auto", "axisBorderShow": False,
         "stacking": {"mode": "normal" if stack else "none", "group": "A"},
         "thresholdsStyle": {"mode": "line+area" if threshold_line else "off"}}
    return c


def reduce_opts(**extra):
    o = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    o.update(extra)
    return o


OPTIONS = {
    "timeseries": lambda: {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []},
        "tooltip": {"mode": "multi", "sort": "desc"}},
    "stat": lambda: reduce_opts(
        colorMode="value", graphMode="area", justifyMode="auto", orientation="auto",
        textMode="auto", wideLayout=True, showPercentChange=False,
        percentChangeColorMode="standard"),
    # Grafana 13's gauge options (older versions ignore the ones they do not know).
    "gauge": lambda: reduce_opts(
        orientation="auto", showThresholdLabels=False, showThresholdMarkers=True, minVizHeight=75,
        minVizWidth=75, sizing="auto", barShape="flat", barWidthFactor=0.5, effects={},
        segmentCount=1, segmentSpacing=0.3, shape="gauge", textMode="auto"),
    "bargauge": lambda: reduce_opts(
        displayMode="gradient", orientation="horizontal", showUnfilled=True, valueMode="color",
        namePlacement="auto", sizing="auto", minVizHeight=16, minVizWidth=8, maxVizHeight=300,
        legend={"displayMode": "list", "placement": "bottom", "showLegend": False, "calcs": []}),
    "table": lambda: {"showHeader": True, "cellHeight": "sm", "frameIndex": 0},
    "state-timeline": lambda: {
        "mergeValues": True, "showValue": "never", "alignValue": "left", "rowHeight": 0.9,
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []},
        "tooltip": {"mode": "single", "sort": "none"}},
    "heatmap": lambda: {
        "calculate": False, "cellGap": 1,
        "color": {"mode": "scheme", "scheme": "Oranges", "fill": "dark-orange", "scale": "exponential",
                  "exponent": 0.5, "steps": 64, "reverse": False},
        "yAxis": {"axisPlacement": "left", "unit": "s", "reverse": False},
        "rowsFrame": {"layout": "auto"},
        "cellValues": {"unit": "short"},
        "filterValues": {"le": 1e-9},
        "tooltip": {"mode": "single", "yHistogram": True, "showColorScale": False},
        "legend": {"show": True},
        "exemplars": {"color": "rgba(255,0,255,0.7)"},
        "showValue": "never"},
}

DATASOURCE_VAR = {"type": "datasource", "name": "datasource", "label": "Data source",
                  "query": "prometheus", "refresh": 1, "regex": "", "hide": 0,
                  "options": [], "includeAll": False, "multi": False}


def query_var(name, label, query, multi=True, description="", sort=1):
    # sort 1: alphabetical, 3: numerical (GPU indices).
    return {"type": "query", "name": name, "label": label, "description": description,
            "datasource": DS, "query": query, "refresh": 2, "regex": "", "sort": sort,
            "hide": 0, "includeAll": True, "multi": multi, "allValue": ".*",
            "options": []}


NODE_VAR = query_var("node", "Node", "label_values(dgx_pixels_gpu_up, node)",
                     description="The exporter's --node.name (the Helm chart sets it to the "
                                 "Kubernetes node).")
GPU_VAR = query_var("gpu", "GPU", 'label_values(dgx_pixels_gpu_up{node=~"$node"}, gpu)',
                    description="NVML index of the GPU on its node.", sort=3)
MODEL_VAR = query_var(
    "model", "Model",
    'label_values(dgx_pixels_workload_images_generated_total{node=~"$node"}, model)',
    description="Image-generation model (label model of the workload series).")
QUALITY_MODEL_VAR = query_var("model", "Model",
                              'label_values(dgx_pixels_quality_ssim{node=~"$node"}, model)',
                              description="Model of the evaluation (label model).")
CURRENCY_VAR = query_var("currency", "Currency",
                         "label_values(dgx_pixels_cost_electricity_price_per_joule, currency)",
                         multi=False, description="Currency of the [cost] table.")

JOB_LABELS = "commit_sha, model, lora, dataset"
JOB_INFO = f"max by (job_id, {JOB_LABELS}) (dgx_pixels_workload_job_info)"


def job_annotation(name, metric, color, verb):
    return {
        "name": name, "enable": True, "hide": False, "iconColor": color, "datasource": DS,
        "target": {"refId": "Anno", "expr": f"{metric}{{{NODE}}} * 1000\n"
                                            f"  * on (job_id) group_left ({JOB_LABELS}) {JOB_INFO}",
                   "interval": "1m"},
        "titleFormat": f"Job {{{{job_id}}}} {verb}",
        "textFormat": "commit {{commit_sha}}, model {{model}}, LoRA {{lora}}, dataset {{dataset}}",
        "tagKeys": "job_id,model,dataset",
        "useValueForTime": True,
    }


ANNOTATIONS = [
    {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
     "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
     "type": "dashboard"},
    job_annotation("Job start", "dgx_pixels_workload_job_start_timestamp_seconds", GREEN,
                   "started"),
    job_annotation("Job end", "dgx_pixels_workload_job_end_timestamp_seconds", BLUE, "ended"),
]


# ---------------------------------------------------------------------------------------------
def performance():
    d = Dashboard("dgx-pixels-performance", "DGX Pixels / Performance",
                  "Image generation throughput, latency against the 200 ms p95 target, "
                  "scaling efficiency, and what the CUDA probes measure against peak.",
                  ["performance"], [NODE_VAR, GPU_VAR, MODEL_VAR])
    images_per_gpu = on_selected_gpus("uuid:dgx_pixels_workload_images:rate5m")
    buckets = ("dgx_pixels_workload_generation_latency_seconds_bucket"
               f'{{{NODE_GPU}, model=~"$model"}}')
    d.row("Throughput and latency")
    d.panel("stat", "Images per second",
            "Images generated per second by the selected GPUs (5-minute rate, all models).",
            [q(f"sum({images_per_gpu})")], w=6, h=5, unit="suffix: img/s", decimals=1)
    d.panel("stat", "p95 latency",
            "95th percentile of the time to generate one image on the selected GPUs and models, "
            "against the 200 ms target (red above it).",
            [q(f"histogram_quantile(0.95, sum by (le) (rate({buckets}[$__rate_interval])))")],
            w=6, h=5, unit="s", thresholds=upper_target(P95_TARGET_S))
    d.panel("gauge", "Scaling efficiency",
            "Throughput of each model over (GPUs running it x its single-GPU benchmark "
            "throughput); 1 is linear scaling, the target is 0.85 or more.",
            [q('model:dgx_pixels_workload_scaling_efficiency:ratio5m{model=~"$model"}',
               "{{model}}")],
            w=6, h=5, unit="percentunit", min_=0, max_=1, thresholds=lower_target(SCALING_TARGET))
    d.panel("stat", "GPUs generating",
            "Selected GPUs that generated at least one image in the last 5 minutes.",
            [q(f"count(({images_per_gpu}) > 0)")], w=6, h=5, unit="short")
    d.panel("timeseries", "Images per second per GPU",
            "Images generated per second by each GPU (recording rule "
            "uuid:dgx_pixels_workload_images:rate5m).",
            [q(images_per_gpu, GPU_LEGEND)], unit="suffix: img/s", custom=ts_custom())
    d.panel("timeseries", "p95 latency per GPU",
            "95th percentile generation latency of each GPU (recording rule "
            "uuid:dgx_pixels_workload_generation_latency_seconds:p95_5m); the red area is above "
            "the 200 ms target.",
            [q(on_selected_gpus("uuid:dgx_pixels_workload_generation_latency_seconds:p95_5m"),
               GPU_LEGEND)],
            unit="s", thresholds=upper_target(P95_TARGET_S), custom=ts_custom(True))
    d.panel("heatmap", "Latency distribution",
            "Images per latency bucket over time on the selected GPUs and models: where the "
            "mass of the histogram sits relative to the 200 ms bucket boundary.",
            [q(f"sum by (le) (increase({buckets}[$__rate_interval]))", "{{le}}",
               fmt="heatmap")],
            unit="s", custom={"hideFrom": {"legend": False, "tooltip": False, "viz": False},
                              "scaleDistribution": {"type": "linear"}})
    d.panel("timeseries", "p95 latency per model",
            "95th percentile latency per model across all GPUs (recording rule "
            "model:dgx_pixels_workload_generation_latency_seconds:p95_5m).",
            [q('model:dgx_pixels_workload_generation_latency_seconds:p95_5m{model=~"$model"}',
               "{{model}}")],
            unit="s", thresholds=upper_target(P95_TARGET_S), custom=ts_custom(True))
    d.row("Scaling")
    d.panel("timeseries", "Scaling efficiency over time",
            "Scaling efficiency per model (recording rule "
            "model:dgx_pixels_workload_scaling_efficiency:ratio5m); red below the 0.85 target.",
            [q('model:dgx_pixels_workload_scaling_efficiency:ratio5m{model=~"$model"}',
               "{{model}}")],
            unit="percentunit", min_=0, thresholds=lower_target(SCALING_TARGET),
            custom=ts_custom(True))
    d.panel("timeseries", "Throughput vs GPUs (scaling curve)",
            "Images per second of each model beside the linear ideal: GPUs running it times its "
            "single-GPU benchmark throughput (dgx_pixels_workload_single_gpu_images_per_second).",
            [q('sum by (model) (rate(dgx_pixels_workload_images_generated_total'
               '{model=~"$model"}[$__rate_interval]))', "{{model}} measured"),
             q('count by (model) (sum by (model, uuid) (rate(dgx_pixels_workload_images_generated_total'
               '{model=~"$model"}[$__rate_interval])) > 0)\n'
               '  * on (model) max by (model) (dgx_pixels_workload_single_gpu_images_per_second)',
               "{{model}} linear ideal")],
            unit="suffix: img/s", custom=ts_custom(fill=0))
    d.row("CUDA probes against peak")
    d.panel("bargauge", "Probe result as a fraction of peak",
            "Last result of each CUDA probe as a fraction of the GPU model's published peak "
            "(dgx_pixels_probe_peak_fraction_ratio); the alert DgxPixelsProbeThroughputLow fires "
            "below 0.5.",
            [q(f"dgx_pixels_probe_peak_fraction_ratio{{{NODE_GPU}}}",
               GPU_LEGEND + " {{probe}}", instant=True)],
            w=8, unit="percentunit", min_=0, max_=1, thresholds=steps(RED, (0.5, YELLOW),
                                                                      (0.8, GREEN)))
    d.panel("timeseries", "Probe GEMM throughput",
            "FLOP/s the cuBLAS GEMM probes measured on each GPU (dgx_pixels_probe_gemm_flops).",
            [q(f"dgx_pixels_probe_gemm_flops{{{NODE_GPU}}}", GPU_LEGEND + " {{probe}}")],
            w=8, unit="flops", custom=ts_custom(fill=0))
    d.panel("timeseries", "Probe copy bandwidth",
            "Bandwidth the copy probes measured (device to device, host to device, device to "
            "host; dgx_pixels_probe_bandwidth_bytes_per_second).",
            [q(f"dgx_pixels_probe_bandwidth_bytes_per_second{{{NODE_GPU}}}",
               GPU_LEGEND + " {{probe}}")],
            w=8, unit="Bps", custom=ts_custom(fill=0))
    d.row("Fabric and storage against targets")
    d.panel("timeseries", "NCCL bus bandwidth",
            "NCCL all-reduce bus bandwidth at the largest message size, measured by the "
            "nccl_allreduce node probe while the node's GPUs are idle "
            "(dgx_pixels_probe_nccl_largest_bus_bandwidth_bytes_per_second), beside the ring "
            "figure expected of the node's GPUs; red below the 200 GB/s target.",
            [q(f"dgx_pixels_probe_nccl_largest_bus_bandwidth_bytes_per_second{{{NODE}}}",
               "{{node}} measured"),
             q(f"dgx_pixels_probe_nccl_expected_bus_bandwidth_bytes_per_second{{{NODE}}}",
               "{{node}} expected")],
            w=8, unit="Bps", min_=0, thresholds=lower_target(NCCL_TARGET_BPS),
            custom=ts_custom(True, fill=0))
    d.panel("bargauge", "NCCL bus bandwidth against expected",
            "Each node's last NCCL bus bandwidth as a fraction of the figure expected of its GPUs "
            "(recording rule instance:dgx_pixels_probe_nccl_bus_bandwidth:expected_ratio); the "
            "alert DgxPixelsNcclBusBandwidthLow fires after 2 hours under 0.8.",
            [q(f"instance:dgx_pixels_probe_nccl_bus_bandwidth:expected_ratio{{{NODE}}}",
               "{{node}}", instant=True)],
            w=8, unit="percentunit", min_=0, max_=1, thresholds=steps(RED, (0.8, GREEN)))
    d.panel("timeseries", "Storage read throughput",
            "Sequential read throughput of each configured storage path, measured by the "
            "storage_read node probe while the node's GPUs are idle "
            "(dgx_pixels_probe_storage_read_bytes_per_second); red below the 8 GB/s target.",
            [q(f"dgx_pixels_probe_storage_read_bytes_per_second{{{NODE}}}",
               "{{node}} {{path}}")],
            w=8, unit="Bps", min_=0, thresholds=lower_target(STORAGE_TARGET_BPS),
            custom=ts_custom(True, fill=0))
    d.row("Jobs")
    d.panel("table", "Jobs",
            "Jobs that export dgx_pixels_workload_job_info: what they ran, when they started and "
            "how long they ran (up to now for a job without an end time). The same jobs mark the "
            "graphs through the Job start and Job end annotations.",
            [q(f"dgx_pixels_workload_job_start_timestamp_seconds{{{NODE}}} * 1000\n"
               f"  * on (job_id) group_left ({JOB_LABELS}) {JOB_INFO}", instant=True, fmt="table"),
             q(f"(max by (job_id) (dgx_pixels_workload_job_end_timestamp_seconds{{{NODE}}})\n"
               f"  or max by (job_id) (timestamp(dgx_pixels_workload_job_start_timestamp_seconds{{{NODE}}})))\n"
               f"- max by (job_id) (dgx_pixels_workload_job_start_timestamp_seconds{{{NODE}}})",
               instant=True, fmt="table")],
            w=24,
            transformations=[
                {"id": "merge", "options": {}},
                {"id": "organize", "options": {
                    "excludeByName": {"Time": True, "__name__": True, "instance": True,
                                      "job": True},
                    "indexByName": {}, "includeByName": {},
                    "renameByName": {"Value #A": "Started", "Value #B": "Runtime",
                                     "job_id": "Job", "commit_sha": "Commit"}}}],
            overrides=[
                {"matcher": {"id": "byName", "options": "Started"},
                 "properties": [{"id": "unit", "value": "dateTimeAsIso"}]},
                {"matcher": {"id": "byName", "options": "Runtime"},
                 "properties": [{"id": "unit", "value": "s"}]}])
    return d


def quality():
    d = Dashboard("dgx-pixels-quality", "DGX Pixels / Quality",
                  "Quality of the latest evaluation of each model against the framework's "
                  "targets, and how it moved over time.",
                  ["quality"], [NODE_VAR, QUALITY_MODEL_VAR])
    sel = f'{{{NODE}, model=~"$model"}}'
    metrics = [
        ("LPIPS", "dgx_pixels_quality_lpips", "none", upper_target(LPIPS_TARGET),
         "LPIPS perceptual distance to the reference images; lower is better, target 0.20 or "
         "less.", {"min_": 0}),
        ("SSIM", "dgx_pixels_quality_ssim", "none", lower_target(SSIM_TARGET),
         "Structural similarity to the reference images; higher is better, target 0.85 or more.",
         {"min_": 0, "max_": 1}),
        ("PSNR", "dgx_pixels_quality_psnr_decibels", "dB", lower_target(PSNR_TARGET_DB),
         "Peak signal-to-noise ratio; target 25 dB or more.", {}),
        ("CLIP distance", "dgx_pixels_quality_clip_distance", "none", upper_target(CLIP_TARGET),
         "CLIP embedding distance to the reference style; target 0.10 or less.", {"min_": 0}),
        ("Human rating", "dgx_pixels_quality_human_rating_mean", "none",
         lower_target(RATING_TARGET),
         "Mean human rating on a 1 to 5 scale; target 4.0 or more.", {"min_": 1, "max_": 5}),
    ]
    d.row("Latest evaluation")
    for title, metric, unit, th, desc, lim in metrics:
        d.panel("stat", title, desc + " Latest value per model.", [q(f"{metric}{sel}", "{{model}}")],
                w=4, h=5, unit=unit, thresholds=th, decimals=1 if unit == "dB" else 2 if title == "Human rating" else 3,
                **lim)
    d.panel("stat", "Human ratings",
            "Number of human ratings behind the mean (3 to 5 per image in the sprite protocol).",
            [q(f"dgx_pixels_quality_human_ratings{sel}", "{{model}}")], w=4, h=5, unit="short",
            options=reduce_opts(colorMode="none", graphMode="none", justifyMode="auto",
                                orientation="auto", textMode="auto", wideLayout=True,
                                showPercentChange=False, percentChangeColorMode="standard"))
    d.row("Over time")
    for title, metric, unit, th, desc, lim in metrics:
        d.panel("timeseries", f"{title} over time",
                desc + " The shaded area is outside the target.",
                [q(f"{metric}{sel}", "{{model}} {{lora}} {{dataset}}")], w=12,
                unit=unit, thresholds=th, custom=ts_custom(True), **lim)
    d.panel("table", "Evaluations by model",
            "The latest value of every quality metric per model, LoRA and dataset.",
            [q(f"{m}{sel}", instant=True, fmt="table") for _, m, *_ in metrics]
            + [q(f"dgx_pixels_quality_human_ratings{sel}", instant=True, fmt="table")],
            w=24,
            transformations=[
                {"id": "merge", "options": {}},
                {"id": "organize", "options": {
                    "excludeByName": {"Time": True, "__name__": True, "instance": True,
                                      "job": True},
                    "indexByName": {}, "includeByName": {},
                    "renameByName": {"Value #A": "LPIPS", "Value #B": "SSIM",
                                     "Value #C": "PSNR (dB)", "Value #D": "CLIP distance",
                                     "Value #E": "Rating", "Value #F": "Ratings"}}}])
    return d


def system_health():
    d = Dashboard("dgx-pixels-system-health", "DGX Pixels / System Health",
                  "Utilization, profiling ratios, memory, thermals, power, clocks, errors, "
                  "interconnects of the GPUs, and the health of the exporter itself.",
                  ["health"], [NODE_VAR, GPU_VAR])
    g = f"{{{NODE_GPU}}}"
    d.row("At a glance")
    d.panel("stat", "GPUs up", "GPUs that answer queries (dgx_pixels_gpu_up).",
            [q(f"sum(dgx_pixels_gpu_up{g})")], w=4, h=4, unit="short",
            color={"mode": "fixed", "fixedColor": GREEN},
            options=reduce_opts(colorMode="value", graphMode="none", justifyMode="auto",
                                orientation="auto", textMode="auto", wideLayout=True,
                                showPercentChange=False, percentChangeColorMode="standard"))
    d.panel("stat", "GPUs lost",
            "GPUs the driver reports but that stopped answering (dgx_pixels_gpu_up == 0).",
            [q(f"sum(1 - dgx_pixels_gpu_up{g})")], w=4, h=4, unit="short",
            thresholds=steps(GREEN, (1, RED)))
    d.panel("stat", "XID errors",
            "XID errors the driver reported in the time range, all codes.",
            [q(f"sum(increase(dgx_pixels_gpu_xid_errors_total{g}[$__range]))")], w=4, h=4,
            unit="short", thresholds=steps(GREEN, (1, RED)), decimals=0,
            no_value="none reported")
    d.panel("stat", "Uncorrected ECC errors",
            "Uncorrected (double-bit) volatile ECC errors in the time range.",
            [q("sum(increase(dgx_pixels_gpu_ecc_errors_total"
               f'{{{NODE_GPU}, error_type="uncorrected", counter="volatile"}}[$__range]))')],
            w=4, h=4, unit="short", thresholds=steps(GREEN, (1, RED)), decimals=0)
    d.panel("stat", "Row remap failures / pending",
            "GPUs whose row remapping failed (need service) and GPUs waiting for a reset to "
            "remap rows.",
            # Both flags are served only while set (value 1) by default: none served is 0.
            [q(f"count(dgx_pixels_gpu_remapped_rows_failure{g} == 1) or vector(0)", "failed"),
             q(f"count(dgx_pixels_gpu_remapped_rows_pending{g} == 1) or vector(0)", "pending")],
            w=4, h=4, unit="short", thresholds=steps(GREEN, (1, RED)))
    d.panel("stat", "Exporter sources down",
            "Exporter sources (sim, nvml, dcgm, textfile, probes, ...) whose last poll failed.",
            [q(f"sum(1 - dgx_pixels_source_up{{{NODE}}})")], w=4, h=4, unit="short",
            thresholds=steps(GREEN, (1, RED)))
    d.row("Health verdict")
    d.panel("table", "GPU health",
            "Each GPU's health verdict with the most severe recommended action and the rule "
            "behind it (docs/health.md lists the rules and how each clears).",
            # A healthy GPU has no action series in the default series profile: the "or"
            # keeps it in the table with its state and no action.
            [q(f"max by (node, gpu, uuid, state) (dgx_pixels_gpu_health_state{g} == 1)"
               "\n  * on (node, uuid) group_left (action, reason) max by (node, uuid, action, reason) "
               f"(dgx_pixels_gpu_health_action_info{g})"
               f"\nor max by (node, gpu, uuid, state) (dgx_pixels_gpu_health_state{g} == 1)",
               instant=True, fmt="table")],
            w=14, h=8,
            overrides=[{"matcher": {"id": "byName", "options": "state"}, "properties": [
                {"id": "mappings", "value": HEALTH_STATE_TEXT_MAPPINGS},
                {"id": "custom.cellOptions", "value": {"type": "color-background"}}]}],
            transformations=[{"id": "organize", "options": {
                "excludeByName": {"Time": True, "Value": True},
                "indexByName": {"node": 0, "gpu": 1, "state": 2, "action": 3, "reason": 4,
                                "uuid": 5},
                "includeByName": {}, "renameByName": {}}}])
    d.panel("state-timeline", "Verdict over time",
            "One row per GPU: healthy, degraded, unhealthy or unknown (cannot be read).",
            [q(HEALTH_STATE_CODE.format(sel=NODE_GPU), GPU_LEGEND)], w=10, h=8,
            mappings=HEALTH_STATE_CODE_MAPPINGS,
            thresholds=steps(GREEN, (1, YELLOW), (2, RED), (3, "gray")),
            color={"mode": "thresholds"}, custom={"fillOpacity": 70, "lineWidth": 0})
    d.row("Utilization")
    d.panel("timeseries", "GPU utilization",
            "Fraction of time one or more kernels ran (NVML; dgx_pixels_gpu_utilization_ratio).",
            [q(f"dgx_pixels_gpu_utilization_ratio{g}", GPU_LEGEND)], unit="percentunit",
            min_=0, max_=1, custom=ts_custom())
    d.panel("timeseries", "Memory interface utilization",
            "Fraction of time device memory was read or written (NVML).",
            [q(f"dgx_pixels_gpu_memory_utilization_ratio{g}", GPU_LEGEND)], unit="percentunit",
            min_=0, max_=1, custom=ts_custom())
    for title, metric, desc in [
        ("SM active", "dgx_pixels_gpu_sm_active_ratio",
         "Fraction of time at least one warp was resident on an SM, averaged over all SMs "
         "(DCGM profiling)."),
        ("SM occupancy", "dgx_pixels_gpu_sm_occupancy_ratio",
         "Resident warps relative to the SM maximum (DCGM profiling)."),
        ("Tensor pipe active", "dgx_pixels_gpu_tensor_pipe_active_ratio",
         "Fraction of cycles the tensor pipes were active (DCGM profiling)."),
        ("DRAM active", "dgx_pixels_gpu_dram_active_ratio",
         "Fraction of cycles the memory interface was busy (DCGM profiling)."),
    ]:
        d.panel("timeseries", title, desc, [q(f"{metric}{g}", GPU_LEGEND)], w=6,
                unit="percentunit", min_=0, max_=1, custom=ts_custom())
    d.panel("timeseries", "MIG instance activity",
            "Graphics/compute engine activity of each MIG instance "
            "(dgx_pixels_mig_graphics_engine_active_ratio).",
            [q(f"dgx_pixels_mig_graphics_engine_active_ratio{g}",
               GPU_LEGEND + " GI {{gpu_instance}} {{mig_profile}}")],
            w=24, unit="percentunit", min_=0, max_=1, custom=ts_custom())
    d.panel("timeseries", "Who uses the shared GPU",
            "SM activity of each process on GPUs shared by several processes (time-slicing, "
            "MPS): the most active ones, the rest as pid other ([nvml] process_activity_top_k); "
            "stacked, they add up to the GPU's utilization. The pod where one pod holds the "
            "GPU; with several, dgx_pixels_gpu_pod_info names them "
            "(dgx_pixels_process_utilization_ratio).",
            [q(f'dgx_pixels_process_utilization_ratio{{{NODE_GPU}, engine="sm"}}',
               GPU_LEGEND + " pid {{pid}} {{namespace}}/{{pod}} {{container_id}}")],
            w=24, unit="percentunit", min_=0, max_=1, custom=ts_custom(stack=True))
    d.row("Memory")
    d.panel("timeseries", "Memory used", "Framebuffer memory in use per GPU.",
            [q(f"dgx_pixels_gpu_memory_used_bytes{g}", GPU_LEGEND)], unit="bytes", min_=0,
            custom=ts_custom())
    d.panel("bargauge", "Memory used of total",
            "Framebuffer memory in use as a fraction of the GPU's total.",
            [q(f"dgx_pixels_gpu_memory_used_bytes{g} / dgx_pixels_gpu_memory_total_bytes{g}",
               GPU_LEGEND, instant=True)],
            unit="percentunit", min_=0, max_=1, thresholds=steps(GREEN, (0.9, YELLOW),
                                                                 (0.97, RED)))
    d.row("Thermals, power and clocks")
    d.panel("timeseries", "Temperatures", "GPU die and HBM temperatures.",
            [q(f"dgx_pixels_gpu_temperature_celsius{g}", GPU_LEGEND + " {{sensor}}")],
            unit="celsius", custom=ts_custom(fill=0))
    d.panel("timeseries", "Power against limit",
            "Board power as a fraction of the enforced power limit; at 1 the GPU is power-capped.",
            [q(f"dgx_pixels_gpu_power_watts{g} / dgx_pixels_gpu_power_limit_watts{g}",
               GPU_LEGEND)],
            unit="percentunit", min_=0, thresholds=steps(GREEN, (0.95, YELLOW), (1, RED)),
            custom=ts_custom(True, fill=0))
    d.panel("timeseries", "Power draw", "Board power per GPU, and its enforced limit.",
            [q(f"dgx_pixels_gpu_power_watts{g}", GPU_LEGEND),
             q(f"max by (node) (dgx_pixels_gpu_power_limit_watts{g})", "{{node}} limit")],
            unit="watt", min_=0, custom=ts_custom(fill=0))
    d.panel("timeseries", "Power swings: 1 s average, peak and p99",
            "The driver's 1 s average power against the fast samples (docs/power.md): the "
            "peak of the recent window (dgx_pixels_gpu_power_sample_peak_watts) and the 99th "
            "percentile of the instant samples in each interval. A peak far above the average "
            "is a swing (compute and communication phases) the average hides.",
            [q(f"dgx_pixels_gpu_power_watts{g}", GPU_LEGEND + " 1 s average"),
             q(f"dgx_pixels_gpu_power_sample_peak_watts{g}", GPU_LEGEND + " peak"),
             q("histogram_quantile(0.99, sum by (node, gpu, le) "
               f"(rate(dgx_pixels_gpu_power_sample_watts_bucket{g}[$__rate_interval])))",
               GPU_LEGEND + " p99")],
            unit="watt", min_=0, custom=ts_custom(fill=0))
    d.panel("timeseries", "SM clock against maximum",
            "Current SM clock as a fraction of its maximum; a drop under load is throttling.",
            [q(f'dgx_pixels_gpu_clock_hertz{{{NODE_GPU}, clock="sm"}}\n'
               f'  / dgx_pixels_gpu_clock_max_hertz{{{NODE_GPU}, clock="sm"}}', GPU_LEGEND)],
            unit="percentunit", min_=0, max_=1, custom=ts_custom(fill=0))
    d.panel("timeseries", "Throttle reasons",
            "GPUs held down by each throttle reason (sum of dgx_pixels_gpu_throttle_reason, "
            "which serves active reasons only); \"none\" is 0 while the GPUs are read.",
            [q(f"sum by (node, reason) (dgx_pixels_gpu_throttle_reason{g})"
               f'\nor label_replace(sum by (node) (dgx_pixels_gpu_up{g}) * 0, "reason", "none", "", "")',
               "{{node}} {{reason}}")],
            unit="short", min_=0, custom=ts_custom(stack=True))
    d.panel("timeseries", "Time throttled",
            "Fraction of time clocks were held below the requested clocks, per policy "
            "(rate of dgx_pixels_gpu_throttle_violation_seconds_total).",
            [q(f"rate(dgx_pixels_gpu_throttle_violation_seconds_total{g}[$__rate_interval])",
               GPU_LEGEND + " {{policy}}")],
            unit="percentunit", min_=0, custom=ts_custom(fill=0))
    d.row("Errors")
    d.panel("timeseries", "XID errors by code",
            "XID errors per GPU and code in each interval.",
            [q(f"sum by (node, gpu, xid) (increase(dgx_pixels_gpu_xid_errors_total{g}"
               "[$__rate_interval]))", GPU_LEGEND + " XID {{xid}}")],
            w=8, unit="short", min_=0, custom=ts_custom(fill=0))
    d.panel("timeseries", "ECC errors",
            "Volatile ECC errors per GPU and type in each interval.",
            [q("sum by (node, gpu, error_type) (increase(dgx_pixels_gpu_ecc_errors_total"
               f'{{{NODE_GPU}, counter="volatile"}}[$__rate_interval]))',
               GPU_LEGEND + " {{error_type}}")],
            w=8, unit="short", min_=0, custom=ts_custom(fill=0))
    d.panel("table", "Remapped rows",
            "Rows remapped to spares by cause, and whether a remap is pending or failed.",
            [q(f"dgx_pixels_gpu_remapped_rows{g}", instant=True, fmt="table")],
            w=8,
            transformations=[{"id": "organize", "options": {
                "excludeByName": {"Time": True, "__name__": True, "instance": True, "job": True},
                "indexByName": {}, "includeByName": {},
                "renameByName": {"Value": "Rows"}}}])
    d.row("Interconnects")
    d.panel("timeseries", "PCIe traffic",
            "PCIe throughput per GPU as sampled by the driver (transmit up, receive down).",
            [q(f"dgx_pixels_pcie_transmit_bytes_per_second{g}", GPU_LEGEND + " tx"),
             q(f"-dgx_pixels_pcie_receive_bytes_per_second{g}", GPU_LEGEND + " rx")],
            w=8, unit="Bps", custom=ts_custom(fill=0))
    d.panel("timeseries", "NVLink traffic",
            "NVLink data per GPU (rate of the NVML byte counters; transmit up, receive down).",
            [q(f"rate(dgx_pixels_nvlink_transmit_bytes_total{g}[$__rate_interval])",
               GPU_LEGEND + " tx"),
             q(f"-rate(dgx_pixels_nvlink_receive_bytes_total{g}[$__rate_interval])",
               GPU_LEGEND + " rx")],
            w=8, unit="Bps", custom=ts_custom(fill=0))
    d.panel("timeseries", "NVLink links down and errors",
            "Links that are not active, and NVLink errors (replay, recovery, CRC; on NVLink 5 "
            "receive, recovery failed and errors left after correction) per interval. Symbol "
            "errors are left out: forward error correction fixes them on every healthy NVLink 5 "
            "link (dgx_pixels_nvlink_link_down and dgx_pixels_nvlink_link_errors_total name the "
            "links).",
            [q(f"dgx_pixels_nvlink_links{g} - dgx_pixels_nvlink_links_up{g}",
               GPU_LEGEND + " links down"),
             q(f"sum by (node, gpu) (increase(dgx_pixels_nvlink_errors_total{{{NODE_GPU}, "
               "error_type!=\"symbol\"}[$__rate_interval]))", GPU_LEGEND + " errors")],
            w=8, unit="short", min_=0, custom=ts_custom(fill=0))
    d.row("Exporter")
    d.panel("state-timeline", "Source up",
            "Whether each exporter source's last poll succeeded within its deadline.",
            [q(f"dgx_pixels_source_up{{{NODE}}}", "{{node}} {{source}}")],
            mappings=[{"type": "value", "options": {
                "0": {"text": "down", "color": RED, "index": 0},
                "1": {"text": "up", "color": GREEN, "index": 1}}}],
            thresholds=steps(RED, (1, GREEN)), custom={"fillOpacity": 70, "lineWidth": 0})
    d.panel("timeseries", "Source freshness",
            "Seconds since each source's last successful poll (the alert DgxPixelsSourceStale "
            "fires above 120 s).",
            [q(f"time() - dgx_pixels_source_last_success_timestamp_seconds{{{NODE}}}",
               "{{node}} {{source}}")],
            unit="s", min_=0, thresholds=steps(GREEN, (120, RED)), custom=ts_custom(True, fill=0))
    d.panel("timeseries", "Source poll duration and errors",
            "Duration of each source's last poll, and failed polls per second.",
            [q(f"dgx_pixels_source_poll_duration_seconds{{{NODE}}}", "{{node}} {{source}} duration"),
             q(f"rate(dgx_pixels_source_poll_errors_total{{{NODE}}}[$__rate_interval])",
               "{{node}} {{source}} errors/s")],
            unit="s", min_=0, custom=ts_custom(fill=0),
            overrides=[{"matcher": {"id": "byRegexp", "options": ".*errors/s"},
                        "properties": [{"id": "unit", "value": "short"},
                                       {"id": "custom.axisPlacement", "value": "right"}]}])
    d.panel("table", "Textfiles",
            "Workload textfiles: 1 when skipped (see the exporter log), and when each served file "
            "was last written.",
            [q(f"dgx_pixels_textfile_scrape_error{{{NODE}}}", instant=True, fmt="table"),
             q(f"dgx_pixels_textfile_mtime_seconds{{{NODE}}} * 1000", instant=True, fmt="table")],
            transformations=[
                {"id": "merge", "options": {}},
                {"id": "organize", "options": {
                    "excludeByName": {"Time": True, "__name__": True, "instance": True,
                                      "job": True},
                    "indexByName": {}, "includeByName": {},
                    "renameByName": {"Value #A": "Skipped", "Value #B": "Written"}}}],
            overrides=[{"matcher": {"id": "byName", "options": "Written"},
                        "properties": [{"id": "unit", "value": "dateTimeAsIso"}]}])
    d.panel("table", "Exporters",
            "Version and mode of every exporter; mode \"simulated\" marks a simulated node.",
            [q(f"dgx_pixels_exporter_build_info{{{NODE}}}", instant=True, fmt="table")],
            transformations=[{"id": "organize", "options": {
                "excludeByName": {"Time": True, "__name__": True, "Value": True},
                "indexByName": {}, "includeByName": {}, "renameByName": {}}}])
    return d


def cost():
    d = Dashboard("dgx-pixels-cost", "DGX Pixels / Cost",
                  "GPU-hours, energy, energy and cost per image, and throughput per watt, from "
                  "the exporter's [cost] table and the recording rules.",
                  ["cost"], [NODE_VAR, GPU_VAR, CURRENCY_VAR])
    g = f"{{{NODE_GPU}}}"
    gc = f'{{{NODE_GPU}, currency=~"$currency"}}'
    energy_by_target = f"sum by (job, instance) (increase(dgx_pixels_gpu_energy_joules_total{g}[$__range]))"
    d.row("In the time range")
    d.panel("stat", "GPU-hours",
            "GPU-hours of the selected GPUs in the time range: GPUs that answered, weighted by "
            "the time they did.",
            [q(f"sum(avg_over_time(dgx_pixels_gpu_up{g}[$__range])) * $__range_s / 3600")],
            w=6, h=5, unit="h", decimals=1)
    d.panel("stat", "GPU energy",
            "Energy the selected GPU boards consumed in the time range (facility overhead "
            "excluded).",
            [q(f"sum(increase(dgx_pixels_gpu_energy_joules_total{g}[$__range])) / 3.6e6")],
            w=6, h=5, unit="kwatth", decimals=2)
    d.panel("stat", "Facility energy",
            "GPU energy times the configured PUE (facility energy over IT energy).",
            [q(f"sum({energy_by_target}\n"
               "  * on (job, instance) dgx_pixels_cost_power_usage_effectiveness) / 3.6e6")],
            w=6, h=5, unit="kwatth", decimals=2)
    d.panel("stat", "Estimated cost",
            "Facility energy at the configured price plus the hardware amortization of the "
            "GPUs that were up, in the time range.",
            [q(f"sum by (currency) (\n  {energy_by_target}\n"
               "    * on (job, instance) group_left (currency) instance:dgx_pixels_cost_energy_price_per_joule:pue"
               '{currency=~"$currency"}\n'
               f"  + on (job, instance, currency)\n"
               f"  sum by (job, instance) (avg_over_time(dgx_pixels_gpu_up{g}[$__range])) * $__range_s\n"
               "    * on (job, instance) group_left (currency) dgx_pixels_cost_gpu_amortization_per_second"
               '{currency=~"$currency"}\n)', "{{currency}}")],
            w=6, h=5, unit="none", decimals=2,
            options=reduce_opts(colorMode="value", graphMode="none", justifyMode="auto",
                                orientation="auto", textMode="value_and_name", wideLayout=True,
                                showPercentChange=False, percentChangeColorMode="standard"))
    d.row("Per image")
    d.panel("timeseries", "Energy per image",
            "Board energy per generated image per GPU (recording rule "
            "gpu:dgx_pixels_workload_energy_per_image_kwh:rate5m); red above the 0.0002 kWh "
            "target.",
            [q(f"gpu:dgx_pixels_workload_energy_per_image_kwh:rate5m{g}", GPU_LEGEND)],
            unit="kwatth", decimals=6, thresholds=upper_target(ENERGY_PER_IMAGE_TARGET_KWH),
            custom=ts_custom(True))
    d.panel("timeseries", "Cost per image",
            "Energy at the facility price plus hardware amortization, per generated image "
            "(recording rule gpu:dgx_pixels_workload_cost_per_image:rate5m).",
            [q(f"gpu:dgx_pixels_workload_cost_per_image:rate5m{gc}",
               GPU_LEGEND + " ({{currency}})")],
            unit="none", decimals=6, custom=ts_custom())
    d.panel("timeseries", "Images per second per watt",
            "Throughput per watt of average board power (recording rule "
            "gpu:dgx_pixels_workload_images_per_second_per_watt:rate5m).",
            [q(f"gpu:dgx_pixels_workload_images_per_second_per_watt:rate5m{g}", GPU_LEGEND)],
            unit="suffix: img/s/W", custom=ts_custom())
    d.panel("bargauge", "Energy per image by GPU",
            "Latest energy per image per GPU against the 0.0002 kWh target.",
            [q(f"gpu:dgx_pixels_workload_energy_per_image_kwh:rate5m{g}", GPU_LEGEND,
               instant=True)],
            unit="kwatth", decimals=6, min_=0, max_=2 * ENERGY_PER_IMAGE_TARGET_KWH,
            thresholds=upper_target(ENERGY_PER_IMAGE_TARGET_KWH))
    d.row("Running cost")
    d.panel("timeseries", "Cost per hour per GPU",
            "What each GPU costs per hour now: energy at the facility price plus amortization "
            "(recording rule gpu:dgx_pixels_cost_per_second:rate5m x 3600).",
            [q(f"gpu:dgx_pixels_cost_per_second:rate5m{gc} * 3600",
               GPU_LEGEND + " ({{currency}})")],
            unit="none", decimals=3, custom=ts_custom(stack=True))
    d.panel("timeseries", "Average board power",
            "Average board power from the energy counter (recording rule "
            "gpu:dgx_pixels_gpu_energy_joules:rate5m).",
            [q(f"gpu:dgx_pixels_gpu_energy_joules:rate5m{g}", GPU_LEGEND)],
            unit="watt", custom=ts_custom(stack=True))
    d.panel("timeseries", "GPU-hours per hour",
            "GPU-hours of the last hour per node (recording rule "
            "instance:dgx_pixels_gpu_hours:increase1h).",
            [q(f"instance:dgx_pixels_gpu_hours:increase1h{{{NODE}}}", "{{node}}")],
            unit="h", min_=0, custom=ts_custom())
    d.panel("table", "Cost model",
            "The [cost] table each exporter serves: electricity price per kWh, PUE and hardware "
            "amortization per GPU-hour.",
            [q(f'dgx_pixels_cost_electricity_price_per_joule{{{NODE}, currency=~"$currency"}} * 3.6e6',
               instant=True, fmt="table"),
             q(f"dgx_pixels_cost_power_usage_effectiveness{{{NODE}}}", instant=True, fmt="table"),
             q(f'dgx_pixels_cost_gpu_amortization_per_second{{{NODE}, currency=~"$currency"}} * 3600',
               instant=True, fmt="table")],
            transformations=[
                {"id": "merge", "options": {}},
                {"id": "organize", "options": {
                    "excludeByName": {"Time": True, "__name__": True},
                    "indexByName": {}, "includeByName": {},
                    "renameByName": {"Value #A": "Price per kWh", "Value #B": "PUE",
                                     "Value #C": "Amortization per GPU-hour"}}}])
    return d


def fleet():
    d = Dashboard("dgx-pixels-fleet", "DGX Pixels / Fleet",
                  "Every node and GPU at a glance: which GPUs are up, busy, hot or lost, and "
                  "which use the most power, memory and energy.",
                  ["fleet"], [NODE_VAR, GPU_VAR])
    g = f"{{{NODE_GPU}}}"
    d.row("Fleet")
    glance = dict(w=6, h=4, options=reduce_opts(
        colorMode="value", graphMode="none", justifyMode="auto", orientation="auto",
        textMode="auto", wideLayout=True, showPercentChange=False,
        percentChangeColorMode="standard"))
    d.panel("stat", "Nodes", "Nodes with GPUs reporting.",
            [q(f"count(count by (node) (dgx_pixels_gpu_up{g}))")], unit="short", **glance)
    d.panel("stat", "GPUs up", "GPUs that answer queries.",
            [q(f"sum(dgx_pixels_gpu_up{g})")], unit="short",
            color={"mode": "fixed", "fixedColor": GREEN}, **glance)
    d.panel("stat", "GPUs lost",
            "GPUs their exporter reports as not answering (dgx_pixels_gpu_up == 0).",
            [q(f"sum(1 - dgx_pixels_gpu_up{g})")], unit="short",
            thresholds=steps(GREEN, (1, RED)), **glance)
    d.panel("stat", "Mean utilization", "Mean GPU utilization over the selected GPUs.",
            [q(f"avg(dgx_pixels_gpu_utilization_ratio{g})")], unit="percentunit", min_=0,
            max_=1, **glance)
    d.panel("state-timeline", "GPU state",
            "One row per node and GPU: up, or lost (fell off the bus or stopped responding).",
            [q(f"dgx_pixels_gpu_up{g}", "{{node}} / GPU {{gpu}}")], w=12, h=10,
            mappings=[{"type": "value", "options": {
                "0": {"text": "lost", "color": RED, "index": 0},
                "1": {"text": "up", "color": GREEN, "index": 1}}}],
            thresholds=steps(RED, (1, GREEN)), custom={"fillOpacity": 70, "lineWidth": 0})
    d.panel("state-timeline", "Utilization by node and GPU",
            "One row per node and GPU, colored by utilization: the fleet at a glance.",
            [q(f"dgx_pixels_gpu_utilization_ratio{g}", "{{node}} / GPU {{gpu}}")], w=12, h=10,
            unit="percentunit", min_=0, max_=1,
            thresholds=steps(BLUE, (0.1, GREEN), (0.5, YELLOW), (0.9, "orange")),
            color={"mode": "thresholds"}, custom={"fillOpacity": 80, "lineWidth": 0},
            options={**OPTIONS["state-timeline"](), "mergeValues": False})
    d.panel("table", "Lost GPUs",
            "GPUs reported lost now, with their model and PCI bus id.",
            [q(f"(dgx_pixels_gpu_up{g} == 0)\n"
               "  * on (uuid) group_left (model, pci_bus_id) max by (uuid, model, pci_bus_id) "
               "(dgx_pixels_gpu_info)", instant=True, fmt="table")],
            no_value="none lost",
            transformations=[{"id": "organize", "options": {
                "excludeByName": {"Time": True, "__name__": True, "Value": True},
                "indexByName": {}, "includeByName": {}, "renameByName": {}}}])
    d.panel("table", "GPUs that stopped reporting",
            "GPUs that reported in the last hour but have no dgx_pixels_gpu_up now: the exporter "
            "or the node is gone, or the GPU vanished from the driver.",
            # Matched on the GPU alone: a job that starts or ends changes the series' holder
            # labels, and the GPU has not stopped reporting.
            [q(f"max_over_time(dgx_pixels_gpu_up{g}[1h]) "
               f"unless on (job, instance, gpu, uuid) dgx_pixels_gpu_up{g}",
               instant=True, fmt="table")],
            transformations=[{"id": "organize", "options": {
                "excludeByName": {"Time": True, "__name__": True, "Value": True},
                "indexByName": {}, "includeByName": {}, "renameByName": {}}}])
    d.panel("timeseries", "Utilization per node",
            "Mean GPU utilization of each node.",
            [q(f"avg by (node) (dgx_pixels_gpu_utilization_ratio{g})", "{{node}}")],
            unit="percentunit", min_=0, max_=1, custom=ts_custom(fill=0))
    d.panel("heatmap", "Temperature distribution",
            "How many GPUs sit at each temperature over time (die sensor), across the selection.",
            [q(f'dgx_pixels_gpu_temperature_celsius{{{NODE_GPU}, sensor="gpu"}}', GPU_LEGEND)],
            options={**OPTIONS["heatmap"](), "calculate": True,
                     "calculation": {"yBuckets": {"mode": "size", "value": "5"}},
                     "yAxis": {"axisPlacement": "left", "unit": "celsius", "reverse": False}},
            custom={"hideFrom": {"legend": False, "tooltip": False, "viz": False},
                    "scaleDistribution": {"type": "linear"}})
    d.row("Health")
    d.panel("stat", "GPUs by verdict",
            "How many GPUs are healthy, degraded, unhealthy, or unknown (cannot be read), by the "
            "rules of docs/health.md.",
            [q(f"sum by (state) (dgx_pixels_gpu_health_state{g})", "{{state}}")], w=8, h=4,
            unit="short", options=reduce_opts(
                colorMode="value", graphMode="none", justifyMode="auto", orientation="auto",
                textMode="value_and_name", wideLayout=True, showPercentChange=False,
                percentChangeColorMode="standard"))
    d.panel("stat", "Nodes with an unhealthy GPU",
            "Nodes where at least one GPU is unhealthy now.",
            [q(f'count(max by (node) (dgx_pixels_gpu_health_state{{{NODE_GPU}, state="unhealthy"}}) == 1)')],
            w=4, h=4, unit="short", thresholds=steps(GREEN, (1, RED)), no_value="none")
    d.panel("bargauge", "GPUs by recommended action",
            "GPUs waiting for each recommended action (reset, reboot, drain, support, ...).",
            [q(f'count by (action) (dgx_pixels_gpu_health_action_info{{{NODE_GPU}, action!="none"}})',
               "{{action}}", instant=True)], w=12, h=4, unit="short", min_=0,
            no_value="none pending")
    d.panel("table", "GPUs that need action",
            "Every GPU that is not healthy, with the recommended action and the rule behind it.",
            [q(f'max by (node, gpu, uuid, action, reason) (dgx_pixels_gpu_health_action_info{{{NODE_GPU}, action!="none"}})',
               instant=True, fmt="table")], w=12, h=8, no_value="none",
            transformations=[{"id": "organize", "options": {
                "excludeByName": {"Time": True, "Value": True},
                "indexByName": {"node": 0, "gpu": 1, "action": 2, "reason": 3, "uuid": 4},
                "includeByName": {}, "renameByName": {}}}])
    d.panel("bargauge", "Wasted GPU-hours by holder",
            "GPU-hours in the time range that pods and jobs held GPUs they left idle (allocated "
            "but idle, docs/health.md), the ten largest.",
            [q(f"topk(10, sum by (namespace, pod, hpc_job) (increase("
               f"dgx_pixels_gpu_allocated_idle_seconds_total{g}[$__range]))) / 3600",
               "{{namespace}}/{{pod}}{{hpc_job}}", instant=True)], w=12, h=8, unit="h",
            min_=0, no_value="none wasted")
    d.panel("timeseries", "XID incidents",
            "New XID incidents per node and code (a storm of one code is one incident; "
            "docs/xid.md).",
            [q(f"sum by (node, xid) (increase(dgx_pixels_gpu_xid_incidents_total{g}"
               "[$__rate_interval]))", "{{node}} XID {{xid}}")], w=12, h=8, unit="short",
            min_=0, custom=ts_custom(fill=0))
    d.row("NVLink domains and racks")
    # A GPU's NVLink domain (cluster, clique) joined onto its other series; max by dedupes a GPU
    # scraped twice.
    domain = (f"on (node, uuid) group_left (cluster_uuid, clique_id) max by "
              f"(node, uuid, cluster_uuid, clique_id) (dgx_pixels_gpu_fabric_info{g})")

    def organize(order):
        return [{"id": "organize", "options": {
            "excludeByName": {"Time": True}, "indexByName": order,
            "includeByName": {}, "renameByName": {"Value": "GPUs"}}}]
    d.panel("table", "GPUs by NVLink domain",
            "Each NVLink domain (cluster UUID and clique: the GPUs that share NVLink through the "
            "switch trays, e.g. one GB200 NVL72 rack) with the nodes (compute trays) in it and "
            "how many of their GPUs the fabric registered there. A node listed under two "
            "domains is the clique_split rule (docs/health.md).",
            [q(f"count by (cluster_uuid, clique_id, node) (dgx_pixels_gpu_fabric_info{g})",
               instant=True, fmt="table")], w=12, h=8, no_value="no NVLink fabric",
            transformations=organize({"cluster_uuid": 0, "clique_id": 1, "node": 2}))
    d.panel("table", "Racks and trays",
            "Where the GPUs sit (nvmlDeviceGetPlatformInfo, rack-scale systems): each chassis "
            "(rack) serial number with its compute trays (index and slot), the node each tray "
            "is, and its GPUs.",
            [q(f"count by (chassis_serial, tray, slot, node) (dgx_pixels_gpu_platform_info{g})",
               instant=True, fmt="table")], w=12, h=8, no_value="no platform information",
            transformations=organize({"chassis_serial": 0, "tray": 1, "slot": 2, "node": 3}))
    d.panel("timeseries", "Verdicts by NVLink domain",
            "How many GPUs of each NVLink domain are healthy, degraded, unhealthy or unknown: a "
            "domain is only as usable to a job spanning it as its worst GPU.",
            [q(f"sum by (clique_id, state) (dgx_pixels_gpu_health_state{g} * {domain})",
               "domain {{clique_id}} {{state}}")], w=12, h=8, unit="short", min_=0,
            custom=ts_custom(fill=0))
    d.panel("timeseries", "Utilization by NVLink domain",
            "Mean GPU utilization of each NVLink domain.",
            [q(f"avg by (cluster_uuid, clique_id) (dgx_pixels_gpu_utilization_ratio{g} * {domain})",
               "domain {{clique_id}}")], w=12, h=8, unit="percentunit", min_=0, max_=1,
            custom=ts_custom(fill=0))
    d.row("Top consumers")
    d.panel("bargauge", "Top 10 GPUs by power", "The GPUs drawing the most power now.",
            [q(f"topk(10, dgx_pixels_gpu_power_watts{g})", GPU_LEGEND, instant=True)], w=8,
            unit="watt", min_=0)
    d.panel("bargauge", "Top 10 processes by GPU memory",
            "The compute processes holding the most device memory now.",
            [q(f"topk(10, dgx_pixels_process_memory_used_bytes{g})",
               GPU_LEGEND + " pid {{pid}} {{container_id}}", instant=True)], w=8,
            unit="bytes", min_=0)
    d.panel("bargauge", "Top 10 nodes by energy",
            "The nodes whose GPUs consumed the most energy in the time range.",
            [q(f"topk(10, sum by (node) (increase(dgx_pixels_gpu_energy_joules_total{g}"
               "[$__range]))) / 3.6e6", "{{node}}", instant=True)], w=8,
            unit="kwatth", min_=0)
    d.panel("bargauge", "Top 10 GPUs by images per second",
            "The GPUs generating the most images.",
            [q(f"topk(10, {on_selected_gpus('uuid:dgx_pixels_workload_images:rate5m')})",
               GPU_LEGEND, instant=True)], w=12, unit="suffix: img/s", min_=0)
    d.panel("bargauge", "Top 10 GPUs by XID errors",
            "The GPUs with the most XID errors in the time range.",
            [q(f"topk(10, sum by (node, gpu) (increase(dgx_pixels_gpu_xid_errors_total{g}"
               "[$__range])))", GPU_LEGEND, instant=True)], w=12, unit="short", min_=0,
            thresholds=steps(GREEN, (1, RED)), no_value="none reported")
    return d



# ---------------------------------------------------------------------------------------------
TRACE_JOB_VAR = query_var(
    "trace_job", "Job",
    'label_values(dgx_pixels_trace_gpu_seconds_total{node=~"$node"}, trace_job)',
    description="The job of the profiler traces (label trace_job: the traces' directory under "
                "the watched one; docs/traces.md).")
TRACE = 'node=~"$node", trace_job=~"$trace_job"'
TRACE_JOB = 'trace_job=~"$trace_job"'
RANK_LEGEND = "{{trace_job}} rank {{rank}}"
# Traces arrive in bursts (a profiled window now and then): shares are taken over the same
# 30 minutes as the recording rules, not over $__rate_interval, which would mostly be empty.
TRACE_WINDOW = "30m"


def trace_share(part, whole="gpu", by="trace_job, rank"):
    """Share of one analysed-time counter in another, per `by`, over TRACE_WINDOW."""
    inc = lambda m: (f"sum by ({by}) (increase(dgx_pixels_trace_{m}_seconds_total"
                     f"{{{TRACE}}}[{TRACE_WINDOW}]))")
    return f"{inc(part)}\n  / ({inc(whole)} > 0)"


def training():
    d = Dashboard("dgx-pixels-training", "DGX Pixels / Training efficiency",
                  "How well each training job uses its GPUs, from the PyTorch profiler traces "
                  "the trace collector analyses: compute, idle and exposed communication, "
                  "overlap, NCCL bus bandwidth against 200 GB/s, stragglers and memory.",
                  ["training", "traces"], [NODE_VAR, TRACE_JOB_VAR])
    d.row("Where the GPU time goes")
    for title, rule, desc, th in [
        ("Compute", "trace_job:dgx_pixels_trace_compute:ratio30m",
         "Share of the analysed GPU time in compute kernels per job over 30 minutes of traces "
         "(recording rule); red under 50%, where the DgxPixelsTraceLowCompute alert fires.",
         lower_target(TRACE_COMPUTE_ALERT)),
        ("Idle", "trace_job:dgx_pixels_trace_idle:ratio30m",
         "Share of the analysed GPU time with nothing running (waiting on data loading, the "
         "host or a synchronization).", NO_THRESHOLDS),
        ("Exposed communication", "trace_job:dgx_pixels_trace_exposed_communication:ratio30m",
         "Share of the analysed GPU time in communication not hidden by compute: the GPUs wait "
         "on the network.", NO_THRESHOLDS),
        ("Communication overlap", "trace_job:dgx_pixels_trace_communication_overlap:ratio30m",
         "Share of communication time hidden under compute (HTA's overlap ratio); higher is "
         "better.", NO_THRESHOLDS),
    ]:
        d.panel("stat", title, desc, [q(f"{rule}{{{TRACE_JOB}}}", "{{trace_job}}")], w=6, h=5,
                unit="percentunit", min_=0, max_=1, thresholds=th)
    d.panel("timeseries", "GPU time breakdown per job",
            "Compute, non-compute (communication, memory copies, synchronization not hidden by "
            "compute) and idle shares of the analysed GPU time of each job, over 30 minutes of "
            "traces; they add up to 1.",
            [q(trace_share(part, by="trace_job"), f"{{{{trace_job}}}} {label}")
             for part, label in (("compute", "compute"), ("non_compute", "non-compute"),
                                 ("idle", "idle"))],
            unit="percentunit", min_=0, max_=1, custom=ts_custom(stack=True))
    d.panel("timeseries", "Communication overlap per job",
            "Share of each job's communication time hidden under compute "
            "(trace_job:dgx_pixels_trace_communication_overlap:ratio30m) beside its exposed "
            "communication share of GPU time.",
            [q(f"trace_job:dgx_pixels_trace_communication_overlap:ratio30m{{{TRACE_JOB}}}",
               "{{trace_job}} hidden"),
             q(f"trace_job:dgx_pixels_trace_exposed_communication:ratio30m{{{TRACE_JOB}}}",
               "{{trace_job}} exposed")],
            unit="percentunit", min_=0, max_=1, custom=ts_custom(fill=0))
    for title, part, desc in [
        ("Compute per rank", "compute", "Share of each rank's analysed GPU time in compute "
         "kernels over 30 minutes of traces; a rank below the others computes less per step."),
        ("Idle per rank", "idle", "Share of each rank's analysed GPU time with nothing running."),
        ("Exposed communication per rank", "exposed_communication",
         "Share of each rank's analysed GPU time in communication not hidden by compute; the "
         "fast ranks wait longest for a straggler."),
    ]:
        d.panel("timeseries", title, desc, [q(trace_share(part), RANK_LEGEND)], w=8,
                unit="percentunit", min_=0, max_=1, custom=ts_custom(fill=0))
    d.row("Communication")
    busbw = "trace_job_collective:dgx_pixels_trace_bus_bandwidth_bytes_per_second:rate30m"
    d.panel("timeseries", "Bus bandwidth per collective",
            "Achieved NCCL bus bandwidth (nccl-tests' busbw) per job and collective over 30 "
            "minutes of traces (recording rule); the red area is under the metrics framework's "
            "target of 200 GB/s on 8 GPUs. A lower bound: kernel time includes waiting for the "
            "slowest rank, and small collectives (a grad-norm all-reduce) are latency-bound.",
            [q(f"{busbw}{{{TRACE_JOB}}}", "{{trace_job}} {{collective}}")],
            unit="Bps", min_=0, thresholds=lower_target(NCCL_BUS_BANDWIDTH_TARGET),
            custom=ts_custom(True, fill=0))
    d.panel("bargauge", "Bus bandwidth against 200 GB/s",
            "Latest bus bandwidth per job and collective over the 200 GB/s target "
            "(trace_job_collective:dgx_pixels_trace_bus_bandwidth:target_ratio30m; 1 = on "
            "target).",
            [q(f"trace_job_collective:dgx_pixels_trace_bus_bandwidth:target_ratio30m"
               f"{{{TRACE_JOB}}}", "{{trace_job}} {{collective}}", instant=True)],
            unit="percentunit", min_=0, thresholds=lower_target(1))
    d.panel("timeseries", "Collective time per step",
            "Time in communication kernels per profiled step, per job and collective type "
            "(all ranks' mean).",
            [q(f"sum by (trace_job, collective) (increase(dgx_pixels_trace_collective_seconds_total"
               f"{{{TRACE}}}[{TRACE_WINDOW}]))\n  / on (trace_job) group_left () "
               f"(sum by (trace_job) (increase(dgx_pixels_trace_steps_total{{{TRACE}}}"
               f"[{TRACE_WINDOW}])) > 0)", "{{trace_job}} {{collective}}")],
            unit="s", min_=0, custom=ts_custom(fill=0))
    d.panel("timeseries", "Bytes moved per step",
            "Message bytes (nccl-tests' size) per profiled step, per job and collective type.",
            [q(f"sum by (trace_job, collective) (increase(dgx_pixels_trace_collective_bytes_total"
               f"{{{TRACE}}}[{TRACE_WINDOW}]))\n  / on (trace_job) group_left () "
               f"(sum by (trace_job) (increase(dgx_pixels_trace_steps_total{{{TRACE}}}"
               f"[{TRACE_WINDOW}])) > 0)", "{{trace_job}} {{collective}}")],
            unit="bytes", min_=0, custom=ts_custom(fill=0))
    d.row("Stragglers and steps")
    d.panel("bargauge", "Slowest rank",
            "The slowest rank of each job and how much longer its steps take than the median "
            "rank's (trace_job:dgx_pixels_trace_straggler_score:topk1); the "
            "DgxPixelsTraceStraggler alert fires above 10% for 30 minutes.",
            [q(f"trace_job:dgx_pixels_trace_straggler_score:topk1{{{TRACE_JOB}}}", RANK_LEGEND,
               instant=True)],
            w=8, unit="percentunit", min_=0,
            thresholds=steps(GREEN, (TRACE_STRAGGLER_ALERT, RED)))
    d.panel("timeseries", "Straggler score per rank",
            "Each rank's step time over the median rank's, minus 1, in the latest job analysis "
            "(dgx_pixels_trace_straggler_score).",
            [q(f"dgx_pixels_trace_straggler_score{{{TRACE}}}", RANK_LEGEND)], w=8,
            unit="percentunit", custom=ts_custom(fill=0))
    d.panel("timeseries", "Waiting for the slowest rank",
            "Per rank, the time its collectives waited for the last rank to arrive in the latest "
            "job analysis (dgx_pixels_trace_sync_wait_seconds): high on the fast ranks.",
            [q(f"dgx_pixels_trace_sync_wait_seconds{{{TRACE}}}", RANK_LEGEND)], w=8, unit="s",
            min_=0, custom=ts_custom(fill=0))
    d.panel("timeseries", "Mean step time per rank",
            "Profiled step time of each rank over 30 minutes of traces (step seconds over "
            "steps).",
            [q(f"sum by (trace_job, rank) (increase(dgx_pixels_trace_step_seconds_total"
               f"{{{TRACE}}}[{TRACE_WINDOW}]))\n  / (sum by (trace_job, rank) (increase("
               f"dgx_pixels_trace_steps_total{{{TRACE}}}[{TRACE_WINDOW}])) > 0)",
               RANK_LEGEND)],
            unit="s", min_=0, custom=ts_custom(fill=0))
    d.panel("timeseries", "Step time spread",
            "Slowest minus fastest rank's step time, averaged over the steps of the latest job "
            "analysis (dgx_pixels_trace_job_step_spread_seconds).",
            [q(f"dgx_pixels_trace_job_step_spread_seconds{{{TRACE}}}", "{{trace_job}}")],
            unit="s", min_=0, custom=ts_custom(fill=0))
    d.panel("table", "Ranks and their GPUs",
            "The GPU each rank ran on: the host pid of its kernel launches matched to the GPU "
            "processes NVML lists on the node (trace_job_rank:dgx_pixels_trace_gpu:info). "
            "Ranks of a job in its own PID namespace (a pod without hostPID) are not listed: "
            "join those through the pod (docs/traces.md).",
            [q(f"trace_job_rank:dgx_pixels_trace_gpu:info{{{TRACE}}}", instant=True, fmt="table")],
            w=24, h=8,
            transformations=[{"id": "organize", "options": {
                "excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True,
                                  "instance": True},
                "indexByName": {"node": 0, "trace_job": 1, "rank": 2, "gpu": 3, "uuid": 4,
                                "pid": 5}}}])
    d.row("Memory (latest CUDA memory snapshot)")
    d.panel("timeseries", "Memory per rank",
            "Reserved (held from CUDA by the caching allocator), allocated (asked for by "
            "tensors) and peak allocated bytes in each rank's latest memory snapshot.",
            [q(f"dgx_pixels_trace_memory_{m}_bytes{{{TRACE}}}", f"{RANK_LEGEND} {label}")
             for m, label in (("reserved", "reserved"), ("allocated", "allocated"),
                              ("peak_allocated", "peak"))],
            unit="bytes", min_=0, custom=ts_custom(fill=0))
    d.panel("timeseries", "Memory fragmentation per rank",
            "Free memory held in the allocator's segments over reserved memory, in each rank's "
            "latest snapshot: high values waste memory and can cause out-of-memory errors with "
            "memory free.",
            [q(f"dgx_pixels_trace_memory_fragmentation_ratio{{{TRACE}}}", RANK_LEGEND)],
            unit="percentunit", min_=0, max_=1, custom=ts_custom(fill=0))
    d.row("The trace collector")
    d.panel("bargauge", "Trace files by outcome",
            "Files the trace collector finished with in the time range, by outcome (analysed, "
            "too_large, truncated, not_a_trace, parse_error, unreadable, timeout); the log "
            "names each file it could not analyse.",
            [q(f'sum by (outcome) (increase(dgx_pixels_trace_files_total{{{NODE}}}[$__range]))',
               "{{outcome}}", instant=True)],
            unit="short", min_=0)
    d.panel("timeseries", "Files waiting and analysis time",
            "Trace files found but not analysed yet (dgx_pixels_trace_pending_files), and the "
            "share of a core the analysis thread uses (it runs at the lowest priority).",
            [q(f"dgx_pixels_trace_pending_files{{{NODE}}}", "{{node}} pending files"),
             q(f"rate(dgx_pixels_trace_analysis_seconds_total{{{NODE}}}[$__rate_interval])",
               "{{node}} analysis (cores)")],
            unit="short", min_=0, custom=ts_custom(fill=0))
    return d

DASHBOARDS = {
    "dgx-pixels-performance.json": performance,
    "dgx-pixels-quality.json": quality,
    "dgx-pixels-system-health.json": system_health,
    "dgx-pixels-cost.json": cost,
    "dgx-pixels-fleet.json": fleet,
    "dgx-pixels-training.json": training,
}


def render():
    return {name: json.dumps(f().json(), indent=2) + "\n" for name, f in DASHBOARDS.items()}


def main():
    check = sys.argv[1:] == ["--check"]
    stale = []
    for name, text in render().items():
        for out in OUT_DIRS:
            path = os.path.join(out, name)
            if check:
                try:
                    with open(path) as f:
                        if f.read() != text:
                            stale.append(path)
                except FileNotFoundError:
                    stale.append(path)
            else:
                os.makedirs(out, exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
    if check:
        for out in OUT_DIRS:
            extra = set(os.listdir(out)) - set(DASHBOARDS) if os.path.isdir(out) else set()
            stale += [os.path.join(out, e) for e in sorted(extra)]
        if stale:
            sys.exit("stale or unexpected dashboards (run grafana/generate.py): " + ", ".join(
                os.path.relpath(p, ROOT) for p in stale))
        print(f"grafana: {len(DASHBOARDS)} dashboards equal grafana/generate.py's output")


if __name__ == "__main__":
    main()
