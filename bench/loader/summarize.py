#!/usr/bin/env python3
"""Summarise bench/loader/run.sh's raw lines into OUT.json (dpt.bench.loader/1) and OUT.md.

usage: summarize.py RAW.jsonl OUT_PREFIX BUILD DATA_DIR "RUN_ARGS"
Every configuration (row, threads) is reduced to the median images/s over its repeats,
with the min..max spread, the median CPU cores used and images per CPU-second.
"""
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main():
    raw, out, build, data, args = sys.argv[1:6]
    rows, notes, meta = {}, [], {}
    for line in open(raw):
        line = line.strip()
        if not line:
            continue
        d = json.loads(line)
        if "note" in d:
            notes.append(d["note"])
        elif "dataset" in d or "load_before" in d or "load_after" in d:
            meta.update(d)
        elif "skipped" in d:
            notes.append("%s: skipped: %s" % (d.get("row", "?"), d["skipped"]))
        elif "row" in d:
            key = (d["row"], d.get("threads", d.get("workers", 0)), d.get("batch", 0))
            rows.setdefault(key, []).append(d)
    table = []
    for (row, thr, batch), ds in sorted(rows.items()):
        ips = [d["images_per_s"] for d in ds]
        cores = [d["cores_used"] for d in ds if "cores_used" in d]
        per = [d["images_per_core_s"] for d in ds if "images_per_core_s" in d]
        t = {"row": row, "threads": thr, "batch": batch, "repeats": len(ds),
             "images_per_s": statistics.median(ips), "images_per_s_min": min(ips), "images_per_s_max": max(ips)}
        if cores:
            t["cores_used"] = statistics.median(cores)
            t["images_per_core_s"] = statistics.median(per)
        for k in ("decoder", "layout", "dtype", "decoded_hw", "decoded_hybrid", "decoded_rgb", "decoded_cpu", "torch",
                  "torchvision", "gpu", "peer"):
            if k in ds[0]:
                t[k] = ds[0][k]
        table.append(t)

    def best(row, max_threads=None):
        c = [t for t in table if t["row"] == row and (max_threads is None or t["threads"] <= max_threads)]
        return max(c, key=lambda t: t["images_per_s"]) if c else None

    goals = []
    cands = [best(r, 4) for r in ("dpt-gpu", "dpt-gpu-hw-only", "dpt-gpu-cuda-only", "dpt-gpu-nhwc-fp16")]
    cands = [c for c in cands if c]
    g = max(cands, key=lambda t: t["images_per_s"]) if cands else None
    tv, tr = best("torchvision-gpu", 4), best("trainer-mixed")
    if g and tr:
        r = g["images_per_s"] / tr["images_per_s"]
        goals.append({"goal": "GPU loader >= 1.5x the trainer's mixed-precision img/s with <= 4 CPU threads",
                      "ratio": r, "met": r >= 1.5 and g.get("cores_used", 99) <= 4.0})
    if g and tv:
        r = g["images_per_s"] / tv["images_per_s"]
        goals.append({"goal": "GPU loader >= 1.0x torchvision decode_jpeg(device='cuda') on the same files",
                      "ratio": r, "met": r >= 1.0})
    cpu1 = [t for t in table if t["row"] == "dpt-cpu" and t["threads"] == 1]
    tv1 = [t for t in table if t["row"] == "torchvision-cpu" and t["threads"] == 1]
    if cpu1 and tv1:
        goals.append({"goal": "(report) dpt CPU loader vs torchvision DataLoader + PIL, 1 thread / worker",
                      "ratio": cpu1[0]["images_per_s"] / tv1[0]["images_per_s"], "met": None})
    machine = {"cpu": sh("lscpu | sed -n 's/^Model name: *//p'"), "cores": os.cpu_count(),
               "kernel": platform.release(), "gpu": sh("nvidia-smi --query-gpu=name,driver_version "
                                                       "--format=csv,noheader 2>/dev/null | head -1") or None}
    # the commit the build was made from: a snapshot's SRC/.commit (bench/README.md), else this tree's HEAD
    src = ""
    try:
        for line in open(os.path.join(build, "CMakeCache.txt")):
            if line.startswith("CMAKE_HOME_DIRECTORY:INTERNAL="):
                src = line.split("=", 1)[1].strip()
    except OSError:
        pass
    commit, dirty = "", ""
    if src and os.path.exists(os.path.join(src, ".commit")):
        commit = open(os.path.join(src, ".commit")).read().strip() + " (snapshot)"
    elif src:
        commit = sh("git -C '%s' rev-parse --short HEAD" % src)
        dirty = sh("git -C '%s' status --porcelain -- trainer bench/loader | head -1" % src)
    when = datetime.datetime.fromtimestamp(os.path.getmtime(raw))  # the run's end, also when re-summarised
    doc = {"schema": "dpt.bench.loader/1", "date": when.isoformat(timespec="seconds"),
           "command": "bench/loader/run.sh " + args, "commit": commit + ("+dirty" if dirty else ""),
           "machine": machine, "dataset": meta.get("dataset"), "data_dir": data,
           "load_before": meta.get("load_before"), "load_after": meta.get("load_after"),
           "rows": table, "goals": goals, "notes": notes}
    with open(out + ".json", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    with open(out + ".md", "w") as f:
        f.write("# Loader benchmark (issue 16): decoded 224-px training crops per second\n\n")
        f.write("Machine: %s, %s cores%s; load average %s before, %s after.  %s, commit %s, `%s`.\n\n" %
                (machine["cpu"], machine["cores"], ", GPU " + machine["gpu"] if machine["gpu"] else ", no GPU",
                 doc["load_before"], doc["load_after"], doc["date"], doc["commit"], doc["command"]))
        ds = doc["dataset"] or {}
        f.write("Data: %s ImageNet-like JPEGs written by `dpt-loader-bench make` (~500 x 375, quality 90, 4:2:0, "
                "mean %s bytes), read from the page cache.  Every row: random-resized crop (0.08-1, 3/4-4/3), "
                "flip, normalise to 224 x 224; images/s = median over %s repeats (min..max); cores used = CPU "
                "time of the process (and DataLoader workers) / wall time.\n\n" %
                (ds.get("images", "?"), ds.get("mean_bytes", "?"), max((t["repeats"] for t in table), default=0)))
        f.write("| path | threads / workers | batch | images/s | min..max | cores used | images per core-s |\n")
        f.write("|---|---|---|---|---|---|---|\n")
        names = {"dpt-cpu": "dpt CPU (libturbojpeg)", "dpt-gpu": "dpt GPU (nvJPEG), NCHW fp32 on the GPU",
                 "dpt-gpu-nhwc-fp16": "dpt GPU (nvJPEG), NHWC fp16 on the GPU",
                 "dpt-gpu-hw-only": "dpt GPU, every baseline file to the hardware decoder",
                 "dpt-gpu-cuda-only": "dpt GPU, nvJPEG's CUDA decoders only (no hardware decoder)",
                 "dpt-gpu-host-copy": "dpt GPU (nvJPEG), copied to host fp32 (dpt-train today)",
                 "torchvision-cpu": "torchvision DataLoader + PIL", "torchvision-gpu":
                 "torchvision decode_jpeg(cuda) + GPU transforms", "trainer-mixed":
                 "dpt-train --precision mixed, synthetic (consumer)"}
        for t in table:
            f.write("| %s | %s | %s | %.1f | %.1f..%.1f | %s | %s |\n" % (
                names.get(t["row"], t["row"]), t["threads"] or "-", t["batch"] or "-", t["images_per_s"],
                t["images_per_s_min"], t["images_per_s_max"],
                "%.2f" % t["cores_used"] if "cores_used" in t else "-",
                "%.0f" % t["images_per_core_s"] if "images_per_core_s" in t else "-"))
        if goals:
            f.write("\n| goal | ratio | met |\n|---|---|---|\n")
            for g in goals:
                f.write("| %s | %.3f | %s |\n" % (g["goal"], g["ratio"], {True: "yes", False: "NO", None: "-"}[g["met"]]))
        try:
            load = max(float(doc["load_before"].split()[0]), float(doc["load_after"].split()[0]))
        except (AttributeError, ValueError, IndexError):
            load = 0.0
        if load > (machine["cores"] or 1):
            notes.append("the machine was busy with other work (load average up to %.1f on %s cores): a row got "
                         "only its share of the cores (cores used < threads), so its images/s understates what "
                         "the loader does on idle cores; images per core-second (per CPU-second actually used) "
                         "is the figure that does not depend on that share" % (load, machine["cores"]))
        if notes:
            f.write("\nNotes:\n\n" + "".join("* %s\n" % n for n in notes))
    with open(out + ".json", "w") as f:  # again: with the notes the table added
        json.dump(doc, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
