#!/usr/bin/env python3
"""bench/gpu/bench_gpu.py — dpt-train (cuda backend) vs PyTorch (torchvision resnet50, the
peer's own installation) on one GPU, issue 14.  Run through bench/gpu/run.sh, which checks
for the GPU, the build and the peer first; writes OUT.json (dpt.bench.gpu/1) and OUT.md.

ResNet-50 v1.5, synthetic 224-px images, 1000 classes, momentum SGD, one GPU, one launch per
configuration, interleaved in this order at each batch size (--batches, default 256 then 128):
  dpt fp32, torch fp32, dpt tf32, torch tf32 NCHW, torch tf32 channels_last, dpt fp16 (mixed),
  torch fp16 AMP channels_last, torch.compile fp16 AMP, dpt bf16, torch bf16 AMP channels_last,
  torch.compile bf16.
Measured the same way for both, by bench/train/bench.py's launcher (reused, not copied): the
program prints one line per step after the step's result is on the host (dpt-train --log-every 1
prints the step's loss; torch_gpu.py calls loss.item()), the harness timestamps each line as it
arrives, a step's time is the gap between two lines; the first --warmup steps (cuDNN algorithm
search, torch.compile's compilation) are left out; images/s = batch / median step time, with
the p25-p75 range.  Peak memory: PyTorch torch.cuda.max_memory_allocated (whole run; the timed
steps alone too), dpt its own accounting from the job report (results.backend_memory.peak_bytes_rank0:
every device allocation the cuda backend makes — the planned regions, slabs, convolution
workspace and the algorithm search's workspace; not the CUDA context nor cuDNN's and cuBLAS's
handle-internal memory), and for both the device's memory.used from nvidia-smi sampled every
200 ms minus its value before the launch (context and allocator caching included).
A --budget (seconds) bounds the whole run: a launch gets what is left (at most --launch-timeout,
--compile-timeout for torch.compile); a configuration that no longer fits is recorded as not run.

Issue 15: every dpt precision also as "fused" (dpt-train --fuse on --cuda-graph on: the fused
cuDNN-graph step captured in CUDA graphs), and the kernel breakdown of a few configurations
(--profile-configs, at the largest batch): their launches run --profile-steps more steps after the
timed ones (not timed) under a profiler (dpt-train --profile-steps: CUPTI; torch_gpu.py:
torch.profiler's Kineto trace), summarised by bench/gpu/breakdown.py with one class table: kernels
per step, time per class, idle between kernels."""
import argparse
import ctypes
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(here), "train"))
import bench as trainbench  # noqa: E402  (bench/train/bench.py: launch, pct, signals; benchinfo)

benchinfo = trainbench.benchinfo

# (key, framework, label, dpt --precision / torch_gpu.py arguments)
CONFIGS = [
    ("dpt-fp32", "dpt", "fp32 (TF32 off)", ["--precision", "fp32"]),
    ("dpt-fp32-fused", "dpt", "fp32 (TF32 off), fused + CUDA graphs",
     ["--precision", "fp32", "--fuse", "on", "--cuda-graph", "on"]),
    ("torch-fp32", "torch", "fp32 (TF32 off), NCHW", ["--mode", "fp32"]),
    # dpt runs fp32 in NHWC: is cuDNN's float NHWC slow for PyTorch too (the H200 visit: dpt's fp32
    # data gradients took 819 ms of a 2 s step)?
    ("torch-fp32-cl", "torch", "fp32 (TF32 off), channels_last", ["--mode", "fp32", "--channels-last"]),
    ("dpt-tf32", "dpt", "tf32", ["--precision", "tf32"]),
    # the default (legacy-call) step captured in CUDA graphs, no fused step: the second visit's mixed
    # step was host-bound (kernels 46.9 ms of a 73.9 ms step) and its fused start took over a minute
    ("dpt-tf32-graph", "dpt", "tf32, CUDA graphs", ["--precision", "tf32", "--cuda-graph", "on"]),
    ("dpt-tf32-fused", "dpt", "tf32, fused + CUDA graphs", ["--precision", "tf32", "--fuse", "on", "--cuda-graph", "on"]),
    ("torch-tf32", "torch", "tf32, NCHW", ["--mode", "tf32"]),
    ("torch-tf32-cl", "torch", "tf32, channels_last", ["--mode", "tf32", "--channels-last"]),
    ("dpt-fp16", "dpt", "mixed fp16 (dynamic loss scaling)", ["--precision", "mixed"]),
    ("dpt-fp16-graph", "dpt", "mixed fp16, CUDA graphs", ["--precision", "mixed", "--cuda-graph", "on"]),
    ("dpt-fp16-fused", "dpt", "mixed fp16, fused + CUDA graphs",
     ["--precision", "mixed", "--fuse", "on", "--cuda-graph", "on"]),
    ("torch-fp16-cl", "torch", "fp16 AMP + GradScaler, channels_last", ["--mode", "fp16", "--channels-last"]),
    ("torch-fp16-compile", "torch", "fp16 AMP + GradScaler, channels_last, torch.compile",
     ["--mode", "fp16", "--channels-last", "--compile"]),
    ("dpt-bf16", "dpt", "bf16", ["--precision", "bf16"]),
    ("dpt-bf16-graph", "dpt", "bf16, CUDA graphs", ["--precision", "bf16", "--cuda-graph", "on"]),
    ("dpt-bf16-fused", "dpt", "bf16, fused + CUDA graphs", ["--precision", "bf16", "--fuse", "on", "--cuda-graph", "on"]),
    ("torch-bf16-cl", "torch", "bf16 AMP, channels_last", ["--mode", "bf16", "--channels-last"]),
    ("torch-bf16-compile", "torch", "bf16 AMP, channels_last, torch.compile",
     ["--mode", "bf16", "--channels-last", "--compile"]),
]
PRECISION = {"dpt-tf32-graph": "tf32", "dpt-fp16-graph": "fp16", "dpt-bf16-graph": "bf16",
             "dpt-fp32-fused": "fp32", "dpt-tf32-fused": "tf32", "dpt-fp16-fused": "fp16", "dpt-bf16-fused": "bf16",
             "dpt-fp32": "fp32", "torch-fp32": "fp32", "torch-fp32-cl": "fp32", "dpt-tf32": "tf32", "torch-tf32": "tf32",
             "torch-tf32-cl": "tf32", "dpt-fp16": "fp16", "torch-fp16-cl": "fp16", "torch-fp16-compile": "fp16",
             "dpt-bf16": "bf16", "torch-bf16-cl": "bf16", "torch-bf16-compile": "bf16"}
# issue 14's table (dpt-train before the issue, bs 256, H100): the floor for dpt's images/s
FLOOR_IPS_BS256 = {"fp32": 770.0, "tf32": 1226.0}
# issue 15's acceptance at bs 256 (dpt fused over the PyTorch configuration): fp16/bf16 >= 1.1x
# torch.compile AMP channels_last and >= 1.25x eager; tf32 >= 1.1x eager channels_last; fp32 >= 1.0x
SPEED_GOALS = {"fp16": [("torch-fp16-compile", 1.1), ("torch-fp16-cl", 1.25)],
               "bf16": [("torch-bf16-compile", 1.1), ("torch-bf16-cl", 1.25)],
               "tf32": [("torch-tf32-cl", 1.1)], "fp32": [("torch-fp32", 1.0)]}
PROFILE_CONFIGS = "dpt-fp16,dpt-fp16-fused,torch-fp16-cl,torch-fp16-compile,dpt-bf16-fused,torch-bf16-compile"


def breakdown_of(rec, fw, src, work, tag):
    """bench/gpu/breakdown.py over dpt's records (TSV) or torch's Kineto trace: the median step
    into rec["breakdown"], its Markdown into rec["breakdown_md"]; an error into rec."""
    out_j, out_m = os.path.join(work, f"breakdown-{tag}.json"), os.path.join(work, f"breakdown-{tag}.md")
    cmd = [sys.executable, os.path.join(here, "breakdown.py"), "--trace" if fw == "torch" else "--records", src,
           "--label", f"{rec['config']} batch {rec['batch']}", "--json", out_j, "--md", out_m]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode:
        rec["breakdown_error"] = f"{shlex.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-300:]}"
        return
    doc = json.load(open(out_j))
    rec["breakdown"] = dict(doc["median"], steps=len(doc["steps"]), classes=doc["classes"])
    rec["breakdown_md"] = open(out_m).read()


def run(cmd, env=None):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


class DeviceMemory:
    """nvidia-smi's memory.used of one GPU every 200 ms while a launch runs (MiB)."""

    def __init__(self, gpu):
        self.gpu, self.samples, self.proc, self.thread = gpu, [], None, None

    def used_now(self):
        out = run(["nvidia-smi", "-i", self.gpu, "--query-gpu=memory.used", "--format=csv,noheader,nounits"])
        try:
            return float(out.splitlines()[0])
        except (ValueError, IndexError):
            return None

    def start(self):
        self.base, self.samples = self.used_now(), []
        try:
            self.proc = subprocess.Popen(["nvidia-smi", "-i", self.gpu, "--query-gpu=memory.used",
                                          "--format=csv,noheader,nounits", "-lms", "200"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.samples.append(float(line.strip()))
            except ValueError:
                pass

    def stop(self):
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.thread.join(timeout=5)
        if self.base is None or not self.samples:
            return None
        return {"baseline_mib": self.base, "peak_mib": max(self.samples),
                "peak_above_baseline_bytes": int((max(self.samples) - self.base) * 2**20),
                "samples": len(self.samples)}


def cudnn_str(n):
    """cuDNN 9's version number (CUDNN_VERSION = major*10000 + minor*100 + patch) as text."""
    return f"{n // 10000}.{n % 10000 // 100}.{n % 100}" if isinstance(n, int) and n >= 90000 else str(n)


def lib_versions(dpt_train, env):
    """CUDA runtime/driver, cuDNN, NCCL versions of the libraries dpt-train loads (its ldd under
    this environment), asked through their own version calls."""
    paths = {}
    for line in run(["ldd", dpt_train], env=env).splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        if m:
            paths[m.group(1)] = m.group(2)
    out = {"libraries": {k: v for k, v in paths.items() if re.match(r"lib(cudart|cudnn|nccl|cublas)\.", k)}}

    def lib(prefix):
        p = next((v for k, v in paths.items() if k.startswith(prefix + ".so")), None)
        try:
            return ctypes.CDLL(p) if p else None
        except OSError:
            return None
    v = ctypes.c_int(0)
    rt = lib("libcudart")
    if rt:
        if rt.cudaRuntimeGetVersion(ctypes.byref(v)) == 0:
            out["cuda_runtime"] = f"{v.value // 1000}.{v.value % 1000 // 10}"
        if rt.cudaDriverGetVersion(ctypes.byref(v)) == 0 and v.value:  # 0: no driver
            out["cuda_driver_api"] = f"{v.value // 1000}.{v.value % 1000 // 10}"
    dnn = lib("libcudnn")
    if dnn:
        dnn.cudnnGetVersion.restype = ctypes.c_size_t
        out["cudnn"] = cudnn_str(dnn.cudnnGetVersion())
    nccl = lib("libnccl")
    if nccl and nccl.ncclGetVersion(ctypes.byref(v)) == 0:
        out["nccl"] = f"{v.value // 10000}.{v.value % 10000 // 100}.{v.value % 100}"
    return out


def gpu_info(gpu):
    q = run(["nvidia-smi", "-i", gpu, "--query-gpu=name,driver_version,memory.total,pci.bus_id,clocks.max.sm,"
             "power.limit", "--format=csv,noheader"])
    f = [x.strip() for x in q.split(",")] if q else []
    head = run(["nvidia-smi"]).splitlines()
    cuda = next((re.search(r"CUDA Version:\s*([0-9.]+)", l).group(1) for l in head if "CUDA Version" in l), None)
    keys = ["name", "driver", "memory_total", "pci_bus_id", "max_sm_clock", "power_limit"]
    d = dict(zip(keys, f))
    d["driver_cuda_version"] = cuda
    return d


def slug(name):
    m = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", name or "")
    return (m.group(1) if m else re.sub(r"[^a-z0-9]+", "-", (name or "gpu").lower()).strip("-")).lower()


def measure(key, fw, label, extra, bs, a, work, tag, timeout):
    total = a.warmup + a.steps
    log = os.path.join(work, f"log-{tag}.txt")
    env = dict(os.environ)
    prof = a.profile_steps if key in a.profile_configs and bs == max(a.batches) else 0
    if fw == "dpt":
        report = os.path.join(work, f"report-{tag}.json")
        iters = total + (prof + 1 if prof else 0)  # the profiled steps after the timed ones, then the last one
        ptrace = os.path.join(work, f"kernels-{tag}.json")
        argv = [a.dpt_train, "--backend", "cuda", *extra, "--dataset", "synthetic", "--image-size", "224",
                "--num-classes", "1000", "--width", "1", "--synthetic-images", str(bs * iters),
                "--batch-size", str(bs), "--iterations", str(iters), "--no-val", "--no-flip", "--log-every", "1",
                "--data-threads", str(a.data_threads), "--prefetch", "3", "--report", report]
        if prof:
            argv += ["--profile-steps", str(prof), "--profile-out", ptrace]
        step_re = re.compile(r"^epoch \d+/\d+ step \d+/\d+ ")
    else:
        ptrace = os.path.join(work, f"trace-{tag}.json")
        argv = [a.torch_python, os.path.join(here, "torch_gpu.py"), *extra, "--batch", str(bs),
                "--warmup", str(a.warmup), "--steps", str(a.steps)]
        if prof:
            argv += ["--profile-steps", str(prof), "--trace", ptrace]
        step_re = re.compile(r"^STEP \d+ ")
        # the peer's own installation: PyTorch loads the cuDNN / NCCL it was built with (its wheels'),
        # so the LD_LIBRARY_PATH set for dpt-train (another cuDNN, say) is not passed on, unless
        # TORCH_LD_LIBRARY_PATH names one for it
        env.pop("LD_LIBRARY_PATH", None)
        if os.environ.get("TORCH_LD_LIBRARY_PATH"):
            env["LD_LIBRARY_PATH"] = os.environ["TORCH_LD_LIBRARY_PATH"]
    rec = {"config": key, "framework": fw, "label": label, "precision": PRECISION[key], "batch": bs,
           "warmup_steps": a.warmup, "timed_steps": a.steps, "command": shlex.join(argv), "log": os.path.basename(log)}
    print(f"bench: {tag}: {fw} {label}, batch {bs}, {total} steps (timeout {timeout:.0f} s)", file=sys.stderr, flush=True)
    mem = DeviceMemory(a.gpu)
    mem.start()
    t_wall = time.time()
    t0, lines, rcs = trainbench.launch([argv], [env], log, step_re, timeout)
    rec["device_memory"] = mem.stop()
    rec["wall_s"] = time.time() - t_wall
    rec["exit_status"] = rcs[0]
    stamps = [t for t, l in lines if step_re.match(l)][:total]  # the timed steps (profiled ones come after)
    if rcs[0] or len(stamps) < total:
        rec["error"] = (f"exit {rcs[0]}{' (killed at the time limit)' if rec['wall_s'] >= timeout - 1 else ''}, "
                        f"{len(stamps)} of {total} step lines; log tail: " + " | ".join(l for _, l in lines[-6:]))
        print(f"bench: {tag}: FAILED: {rec['error']}", file=sys.stderr, flush=True)
        return rec
    gaps = [y - x for x, y in zip(stamps, stamps[1:])]
    steady = gaps[a.warmup - 1:] if a.warmup >= 1 else gaps
    med = statistics.median(steady)
    rec.update({"time_to_first_step_s": stamps[0] - t0, "step_s": steady, "step_s_median": med,
                "images_per_s": bs / med,
                "images_per_s_p25_p75": [bs / trainbench.pct(steady, 0.75), bs / trainbench.pct(steady, 0.25)]})
    if fw == "dpt":
        inproc = [float(m.group(1)) for _, l in lines if step_re.match(l)
                  for m in [re.search(r" ([0-9.]+) img/s", l)] if m]
        if len(inproc) >= total:
            rec["inprocess_images_per_s_median"] = statistics.median(inproc[a.warmup:])
        try:
            rep = json.load(open(report))
            bm = rep["results"]["backend_memory"]
            rk = rep["ranks"][0]["phases"]
            rec.update({"peak_bytes": bm["peak_bytes_rank0"], "allocated_bytes_end": bm["allocated_bytes_rank0"],
                        "peak_source": "dpt job report results.backend_memory.peak_bytes_rank0",
                        "report_step_p50_s": rk["step"]["p50_s"],
                        "report_data_wait_p50_s": rk.get("data_wait", {}).get("p50_s"),
                        "framework_version": "dpt-train " + str((rep.get("software") or {}).get("dpt"))})
            if "pinned_host_bytes_rank0" in bm:  # page-locked host memory at the end (loader slots, staging)
                rec["pinned_host_bytes"] = bm["pinned_host_bytes_rank0"]
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            rec["report_error"] = f"{report}: {e}"
        m = next((re.search(r"peak ([0-9.]+) MB", l) for _, l in lines if "backend cuda memory" in l), None)
        if m and "peak_bytes" not in rec:  # the line dpt-train prints at the end, when the report failed
            rec.update({"peak_bytes": int(float(m.group(1)) * 1e6), "peak_source": "dpt-train's end-of-run line"})
        pm = next((re.search(r"([0-9]+) parameters", l) for _, l in lines if "parameters," in l), None)
        if pm:
            rec["parameters"] = int(pm.group(1))
    else:
        res = next((l[len("RESULT "):] for _, l in lines if l.startswith("RESULT ")), None)
        try:
            r = json.loads(res)
            rec.update({"peak_bytes": r["peak_allocated_bytes"], "peak_timed_bytes": r["peak_allocated_timed_bytes"],
                        "peak_reserved_bytes": r["peak_reserved_bytes"],
                        "peak_source": "torch.cuda.max_memory_allocated (whole run)",
                        "framework_version": f"{r['framework']}, torchvision {r['torchvision']}",
                        "parameters": r["parameters"], "torch": r,
                        "inprocess_step_s_median": statistics.median(r["step_s"][a.warmup:])})
            rec["torch"].pop("step_s", None)
        except (TypeError, ValueError, KeyError, statistics.StatisticsError) as e:
            rec["result_error"] = f"no RESULT line from torch_gpu.py: {e}"
    if prof:
        src = ptrace[:-5] + ".tsv" if fw == "dpt" else ptrace
        if os.path.exists(src):
            breakdown_of(rec, fw, src, work, tag)
        else:
            rec["breakdown_error"] = f"no profile written ({src})"
    print(f"bench: {tag}: {rec['images_per_s']:.0f} img/s ({med * 1e3:.1f} ms/step), "
          f"peak {rec.get('peak_bytes', 0) / 2**30:.2f} GiB"
          + (f", {rec['breakdown']['kernels']:.0f} kernels/step, idle {rec['breakdown']['idle_pct']:.1f}% "
             f"({rec['breakdown'].get('gap_pct', 0.0):.1f}% between steps)" if "breakdown" in rec else ""), file=sys.stderr, flush=True)
    return rec


def gib(b):
    return f"{b / 2**30:.2f} GiB" if isinstance(b, (int, float)) else "-"


def summarize(runs, a):
    rows, goals = [], []
    for bs in a.batches:
        by = {r["config"]: r for r in runs if r["batch"] == bs}
        for prec, variant in [(p, v) for p in ("fp32", "tf32", "fp16", "bf16") for v in ("", "-graph", "-fused")]:
            d = by.get(f"dpt-{prec}{variant}")
            peers = [r for k, r in by.items() if r["framework"] == "torch" and r["precision"] == prec]
            if not d and (variant or not peers):  # not selected (--only)
                continue
            row = {"batch": bs, "precision": prec, "dpt_config": f"dpt-{prec}{variant}",
                   "dpt": d and d.get("images_per_s"), "vs": []}
            for p in peers:
                v = {"config": p["config"], "label": p["label"]}
                if d and "images_per_s" in d and "images_per_s" in p:
                    v["images_per_s_ratio"] = d["images_per_s"] / p["images_per_s"]
                if d and d.get("peak_bytes") and p.get("peak_bytes"):
                    v["peak_memory_ratio"] = d["peak_bytes"] / p["peak_bytes"]
                if d and d.get("allocated_bytes_end") and p.get("peak_timed_bytes"):  # the timed steps alone
                    v["steady_memory_ratio"] = d["allocated_bytes_end"] / p["peak_timed_bytes"]
                dm, pm = (d or {}).get("device_memory") or {}, p.get("device_memory") or {}
                if dm.get("peak_above_baseline_bytes") and pm.get("peak_above_baseline_bytes"):
                    v["device_memory_ratio"] = dm["peak_above_baseline_bytes"] / pm["peak_above_baseline_bytes"]
                row["vs"].append(v)
            rows.append(row)
            ran = bool(d and "images_per_s" in d)
            if not d:
                continue
            what = {"": "", "-graph": " CUDA-graph", "-fused": " fused"}[variant]
            goals.append({"goal": f"dpt-train {prec}{what} runs at batch {bs}", "target": "runs",
                          "met": ran,
                          "measured": f"{d['images_per_s']:.0f} img/s" if ran else (d or {}).get("error", "not run")})
            if variant == "-graph" and bs == 256:  # issue 22: at least PyTorch eager's speed
                for v in row["vs"]:
                    r_ = v.get("images_per_s_ratio")
                    if "compile" not in v["config"]:
                        goals.append({"goal": f"dpt-train {prec} CUDA-graph img/s / {v['config']} (batch 256, issue 22)",
                                      "target": ">= 1.00x", "met": bool(r_ and r_ >= 1.0),
                                      "measured": f"{r_:.2f}x" if r_ else "not measured"})
            if variant == "-fused" and bs == 256:  # issue 15: the fused, graph-captured step against PyTorch
                for peer, want in SPEED_GOALS.get(prec, []):
                    v = next((x for x in row["vs"] if x["config"] == peer), None)
                    r_ = v and v.get("images_per_s_ratio")
                    goals.append({"goal": f"dpt-train {prec} fused img/s / {peer} (batch 256, issue 15)",
                                  "target": f">= {want:.2f}x", "met": bool(r_ and r_ >= want),
                                  "measured": f"{r_:.2f}x" if r_ else "not measured"})
                bd = d.get("breakdown")
                if bd:
                    goals.append({"goal": f"dpt-train {prec} fused: idle between kernels (batch 256, issue 15)",
                                  "target": "<= 3% of the step", "met": bd["idle_pct"] <= 3.0,
                                  "measured": f"{bd['idle_pct']:.1f}%"})
                    tk = [r["breakdown"]["kernels"] for k, r in by.items()
                          if r["framework"] == "torch" and r["precision"] == prec and "breakdown" in r]
                    if tk:
                        goals.append({"goal": f"dpt-train {prec} fused: kernels per step below PyTorch's (issue 15)",
                                      "target": f"< {min(tk):.0f} (fewest of the profiled PyTorch runs)",
                                      "met": bd["kernels"] < min(tk), "measured": f"{bd['kernels']:.0f}"})
            eager = [v for v in row["vs"] if "compile" not in v["config"] and "peak_memory_ratio" in v]
            if eager:
                worst = max(v["peak_memory_ratio"] for v in eager)
                goals.append({"goal": f"dpt-train peak memory vs PyTorch eager ({prec}, batch {bs}; largest ratio "
                              "over the PyTorch layouts)", "target": "<= 1.0x", "measured": f"{worst:.2f}x",
                              "met": worst <= 1.0})
            if bs == 256 and prec in FLOOR_IPS_BS256:
                floor = FLOOR_IPS_BS256[prec]
                goals.append({"goal": f"dpt-train {prec} images/s at batch 256 not below issue 14's table",
                              "target": f">= {floor:.0f}", "met": ran and d["images_per_s"] >= floor,
                              "measured": f"{d['images_per_s']:.0f}" if ran else "not run"})
    return rows, goals


def write_md(doc, path):
    g, v = doc["gpu"], doc["versions"]
    t = (doc["runs"] and next((r["torch"] for r in doc["runs"] if "torch" in r), None)) or {}
    L = [f"# ResNet-50 training on one GPU: dpt-train vs PyTorch ({g.get('name', '?')})\n",
         f"Produced by `{doc['command']}` in {doc['elapsed_s']:.0f} s on {doc['date']}.  dpt commit "
         f"{doc.get('dpt_commit') or '?'}.\n",
         f"- **Device**: {g.get('name')}, {g.get('memory_total')}, bus {g.get('pci_bus_id')}, max SM clock "
         f"{g.get('max_sm_clock')}, power limit {g.get('power_limit')}; driver {g.get('driver')} (CUDA "
         f"{g.get('driver_cuda_version')} driver API)",
         f"- **dpt-train's libraries** (what it loads here): CUDA runtime {v.get('cuda_runtime', '?')}, cuDNN "
         f"{v.get('cudnn', '?')}, NCCL {v.get('nccl', '?')} ({', '.join(v.get('libraries', {}).values()) or '?'})",
         f"- **PyTorch**: {t.get('framework', '?')}, torchvision {t.get('torchvision', '?')}, CUDA {t.get('cuda', '?')}, "
         f"cuDNN {cudnn_str(t.get('cudnn', '?'))}, NCCL {t.get('nccl', '?')} (`{doc['torch_python']}`)",
         f"- **Host**: {doc['header']['machine'].get('cpu_model')}, {doc['header']['machine'].get('cores_online')} "
         "cores\n",
         "ResNet-50 v1.5 (torchvision's `resnet50`, 25,557,032 parameters, in both), synthetic 224-px images, "
         f"1000 classes, momentum SGD, one GPU.  Per launch {doc['warmup']} warm-up steps (cuDNN algorithm "
         f"search, torch.compile's compilation: not measured) then {doc['steps']} timed steps.\n",
         "**How it is measured** (the same for both, `bench/gpu/bench_gpu.py` with bench/train's launcher): the "
         "program prints one line per step once the step's loss is on the host (dpt-train `--log-every 1`; "
         "torch_gpu.py `loss.item()`), the harness timestamps each line as it arrives, a step's time is the gap "
         "between two lines; images/s = batch / median step time over the timed steps (p25-p75 in brackets).  "
         "**Peak memory**: PyTorch `torch.cuda.max_memory_allocated()` over the whole run (the timed steps "
         "alone in the JSON); dpt its own accounting, the job report's `results.backend_memory.peak_bytes_rank0` "
         "(dpt-train also prints it: `backend cuda memory (rank 0): ... peak ... MB`): every device allocation "
         "the cuda backend makes (planned regions, slabs, convolution workspace, the algorithm search's "
         "workspace), not the CUDA context nor cuDNN's/cuBLAS's handle-internal memory.  **Device** column: "
         "nvidia-smi's memory.used, sampled every 200 ms, peak minus the value before the launch (context, "
         "library handles and PyTorch's cached blocks included) — the same yardstick for both.  "
         "Launches are interleaved per batch size in the order of the table.\n",
         "| batch | framework | configuration | timed steps | images/s median (p25-p75) | ms/step | peak memory "
         "(own accounting) | device peak (nvidia-smi) | first step after |",
         "|---:|---|---|---:|---|---:|---:|---:|---:|"]
    for r in doc["runs"]:
        dev = (r.get("device_memory") or {}).get("peak_above_baseline_bytes")
        if "images_per_s" not in r:
            L.append(f"| {r['batch']} | {r['framework']} | {r['label']} | - | "
                     f"{'not run: ' + r['not_run'] if 'not_run' in r else 'failed: ' + r.get('error', '')[:300]} | | | | |")
            continue
        lo, hi = r["images_per_s_p25_p75"]
        L.append(f"| {r['batch']} | {r['framework']} | {r['label']} | {len(r['step_s'])} | "
                 f"{r['images_per_s']:.0f} ({lo:.0f}-{hi:.0f}) | {r['step_s_median'] * 1e3:.1f} | {gib(r.get('peak_bytes'))} | "
                 f"{gib(dev)} | {r['time_to_first_step_s']:.1f} s |")
    L += ["", "## dpt-train / PyTorch, same batch and precision\n",
          "| batch | precision | dpt configuration | PyTorch configuration | images/s ratio | peak memory ratio "
          "(own accounting) | timed steps' memory ratio | device peak ratio |", "|---:|---|---|---|---:|---:|---:|---:|"]
    for row in doc["rows"]:
        for x in row["vs"]:
            f = lambda k: f"{x[k]:.2f}x" if k in x else "-"  # noqa: E731
            L.append(f"| {row['batch']} | {row['precision']} | {row.get('dpt_config', 'dpt')} | {x['label']} | "
                     f"{f('images_per_s_ratio')} | "
                     f"{f('peak_memory_ratio')} | {f('steady_memory_ratio')} | {f('device_memory_ratio')} |")
    prof = [r for r in doc["runs"] if "breakdown" in r or "breakdown_error" in r]
    if prof:
        names = next((r["breakdown"]["classes"] for r in prof if "breakdown" in r), [])
        L += ["", "## Kernel breakdown (issue 15)\n",
              f"The {doc.get('profile_steps', '?')} steps after the timed ones of these launches, recorded by dpt-train "
              "--profile-steps (CUPTI) and by torch.profiler (Kineto trace), summarised by bench/gpu/breakdown.py with "
              "bench/gpu/kernel-classes.tsv: the median step; its span on the GPU timeline (first activity to the "
              "next step's first), busy time (the union of kernel intervals), idle between kernels = span - busy, "
              "of which 'between steps' after the step's last activity and before the next step's first (the host "
              "between steps); ms per class are sums of kernel durations.\n",
              "| batch | configuration | kernels/step | span ms | busy ms | idle % | between steps % | "
              + " | ".join(f"{c} ms" for c in names) + " |",
              "|---:|---|---:|---:|---:|---:|---:|" + "---:|" * len(names)]
        for r in prof:
            b = r.get("breakdown")
            if not b:
                L.append(f"| {r['batch']} | {r['config']} | failed: {r['breakdown_error'][:200]} |")
                continue
            L.append(f"| {r['batch']} | {r['config']} | {b['kernels']:.0f} | {b['span_ms']:.2f} | {b['busy_ms']:.2f} | "
                     f"{b['idle_pct']:.1f} | {b.get('gap_pct', 0.0):.1f} | " + " | ".join(f"{b['class_ms'].get(c, 0):.2f}" for c in names) + " |")
    L += ["", "## Goals (issues 14 and 15)\n", "| goal | target | measured | met |", "|---|---|---|---|"]
    for x in doc["goals"]:
        L.append(f"| {x['goal']} | {x['target']} | {x['measured']} | {'**met**' if x['met'] else '**not met**'} |")
    L += ["", "## Notes\n"] + [f"- {n}" for n in doc["notes"]]
    L += ["", "## Commands\n"] + [f"- {r['config']} batch {r['batch']}: `{r['command']}`" for r in doc["runs"]]
    open(path, "w").write("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dpt-train", required=True)
    ap.add_argument("--out", default=None, help="OUT prefix (default bench/results/gpu-<device>)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--gpu", default="0", help="nvidia-smi -i of the GPU the runs see")
    ap.add_argument("--torch-python", default="python3")
    ap.add_argument("--batches", default="256,128")
    ap.add_argument("--only", default=None, help="comma-separated configuration keys (default: all)")
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--data-threads", type=int, default=6)
    ap.add_argument("--budget", type=float, default=570, help="seconds for the whole run")
    ap.add_argument("--launch-timeout", type=float, default=120)
    ap.add_argument("--compile-timeout", type=float, default=200)
    ap.add_argument("--command", default=None)
    ap.add_argument("--profile-steps", type=int, default=3, help="steps profiled after the timed ones (0: none)")
    ap.add_argument("--profile-configs", default=PROFILE_CONFIGS,
                    help="configurations profiled at the largest batch (comma-separated keys)")
    ap.add_argument("--dpt-commit", default=None)
    a = ap.parse_args()
    a.batches = [int(x) for x in a.batches.split(",")]
    a.profile_configs = set(a.profile_configs.split(",")) if a.profile_steps > 0 else set()
    if a.warmup < 1 or a.steps < 3:
        ap.error("--warmup >= 1 and --steps >= 3")
    configs = [c for c in CONFIGS if not a.only or c[0] in a.only.split(",")]
    signal.signal(signal.SIGINT, trainbench.on_signal)
    signal.signal(signal.SIGTERM, trainbench.on_signal)
    t_start = time.time()
    os.makedirs(a.work, exist_ok=True)
    header = benchinfo.header()  # the machine and its load before the first launch
    gpu = gpu_info(a.gpu)
    out = a.out or os.path.join(os.path.dirname(here), "results", "gpu-" + slug(gpu.get("name")))
    versions = lib_versions(a.dpt_train, dict(os.environ))
    runs, i = [], 0
    for bs in a.batches:
        for key, fw, label, extra in configs:
            i += 1
            left = a.budget - (time.time() - t_start) - 10  # 10 s to write the results
            cap = a.compile_timeout if "--compile" in extra else a.launch_timeout
            need = 90 if "--compile" in extra else 30
            if left < need:
                runs.append({"config": key, "framework": fw, "label": label, "precision": PRECISION[key], "batch": bs,
                             "not_run": f"time budget: {left:.0f} s of --budget {a.budget:.0f} s left, "
                                        f"a launch needs ~{need} s", "command": ""})
                print(f"bench: {key} batch {bs}: not run ({runs[-1]['not_run']})", file=sys.stderr, flush=True)
                continue
            runs.append(measure(key, fw, label, extra, bs, a, a.work, f"{i:02d}-{key}-{bs}", min(cap, left)))
    rows, goals = summarize(runs, a)
    notes = [
        "dpt-train reads its synthetic images through its loader (uint8 set in host memory, converted and "
        f"normalised by {a.data_threads} loader threads, copied to the GPU each step; `--no-flip`); PyTorch "
        "trains on one random batch already on the GPU, which favours it slightly (dpt's data wait per step "
        "is in the JSON: report_data_wait_p50_s).",
        "PyTorch runs with cudnn.benchmark = True (its fastest algorithms for fixed shapes); fp32 sets TF32 "
        "off for convolutions and matmuls, tf32 on (through torch.backends fp32_precision where this PyTorch "
        "has it); the AMP rows keep PyTorch's default fp32 settings (convolutions and matmuls run in "
        "fp16/bf16 under autocast).",
        "dpt's peak includes the algorithm search's workspace where it is allocated (the cuDNN search at "
        "start-up runs in a gap of the activation arena when one fits, else in an allocation of its own); PyTorch's "
        "max_memory_allocated includes cudnn.benchmark's trial workspaces.  The ratio of the timed steps alone "
        "uses peak_timed_bytes (PyTorch: max_memory_allocated after a reset at the end of the warm-up) vs "
        "allocated_bytes_end (dpt: its allocations after the run; nothing is allocated while training): the "
        "\"timed steps' memory ratio\" column.",
        "One step line per step means one host wait per step for both (the loss is read); a run with "
        "--log-every 50 waits less (issue 14 item 4): these figures are per-step-synchronised for both.",
        "The fused rows are dpt-train --fuse on --cuda-graph on (issue 15): the fused cuDNN-graph step (each "
        "pattern without an engine on this GPU back on the legacy calls, said in its log) captured in CUDA graphs "
        "after one eager step; their first step includes timing the engines unless the engine cache "
        "(~/.cache/dpt) already has them.",
    ]
    if any("not_run" in r for r in runs):
        notes.append(f"Some configurations did not fit the {a.budget:.0f}-s budget (see the table).")
    doc = {"schema": "dpt.bench.gpu/1", "command": a.command or " ".join(sys.argv), "date": benchinfo.now(),
           "header": header, "gpu": gpu, "versions": versions, "dpt_commit": a.dpt_commit,
           "torch_python": a.torch_python, "elapsed_s": time.time() - t_start, "warmup": a.warmup,
           "steps": a.steps, "batches": a.batches, "profile_steps": a.profile_steps, "rows": rows, "goals": goals,
           "notes": notes, "runs": runs}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    json.dump(doc, open(out + ".json", "w"), indent=1)
    write_md(doc, out + ".md")
    print(f"bench: wrote {out}.json and {out}.md in {doc['elapsed_s']:.0f} s", file=sys.stderr)
    ok = [r for r in runs if "images_per_s" in r]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
