#!/usr/bin/env python3
"""bench/gpu/breakdown.py -- per-step GPU kernel breakdown (issue 15, item 4).

Reads PyTorch's torch.profiler trace (Kineto's Chrome-trace JSON, export_chrome_trace) or
dpt's CUPTI records (trainer/cuda/dpt_kprof.h's TSV: step, kind, stream, start_ns, end_ns,
name) and writes, per profiled step and as the median over them: kernels per step, time per
kernel class (bench/gpu/kernel-classes.tsv, the table dpt's C side compiles in), the step's
span on the GPU timeline, busy time (union of kernel intervals over all streams) and idle
time between kernels, memcpy/memset count and time.  The same rules as
trainer/cuda/dpt_kprof.c (tests/trainer/test_breakdown.py runs both on the same records):

  * a kernel's class is that of the first rule whose pattern occurs in its name, ASCII
    case-insensitively; no rule: "other";
  * a step spans from its first activity to the next step's first activity (the last step:
    to its own last end; never before its own last end);
  * busy = union of its kernels' intervals clipped to the span; idle = span - busy;
  * gap = the part of idle after the step's last activity and before the next step's first
    (the host between steps); idle - gap is the idle inside the step;
  * class times are sums of kernel durations (concurrent kernels can add up to > busy);
  * the median of every field over the steps (statistics.median).

Steps of a Kineto trace: a kernel belongs to the ProfilerStep#N range (CPU side) that holds the
runtime call that launched it (matched by the "correlation" id); without launch records, to
the GPU-side "gpu_user_annotation" ProfilerStep#N range that holds its start.

  breakdown.py --trace trace.json [--label pytorch-fp16] [--json OUT.json] [--md OUT.md]
  breakdown.py --records dpt.tsv  [...]
  breakdown.py --classify < names       (one class per input line, for tests)
Options: --classes TSV (default: kernel-classes.tsv next to this script), --skip-steps K
(drop the first K profiled steps).  Standard library only.
"""
import argparse
import json
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
CLASS_MAX, NAME_MAX, PAT_MAX = 24, 24, 96  # dpt_kprof.h's limits


class TableError(Exception):
    pass


def load_classes(path):
    """[(class, pattern)] and the class names (rule order, then "other"), as dpt_kclasses_parse."""
    rules, names = [], []
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    for n, line in enumerate(text.split("\n"), 1):
        line = line[:-1] if line.endswith("\r") else line
        if not line or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0] or not parts[1] or len(parts[0]) >= NAME_MAX or len(parts[1]) >= PAT_MAX:
            raise TableError(f"kernel classes {path}:{n}: not 'CLASS<TAB>PATTERN'")
        cls, pat = parts
        if cls == "other":
            raise TableError(f"kernel classes {path}:{n}: 'other' is the class of kernels no rule matches")
        if cls not in names:
            if len(names) >= CLASS_MAX - 1:
                raise TableError(f"kernel classes {path}:{n}: more than {CLASS_MAX - 1} classes")
            names.append(cls)
        rules.append((cls, pat.translate(ASCII_LOWER)))
    return rules, names + ["other"]


def classify(rules, name):
    low = name.translate(ASCII_LOWER)
    for cls, pat in rules:
        if pat in low:
            return cls
    return "other"


def _median(values):
    return statistics.median(values) if values else 0.0


def breakdown(records, rules, names):
    """records: dicts name, kind ("kernel" / "memcpy" / "memset"), step, stream, start, end (ns)."""
    steps = sorted({r["step"] for r in records if r["step"] >= 0})
    per = {s: {"step": s, "kernels": 0, "copies": 0, "copy_ns": 0.0, "class_ns": dict.fromkeys(names, 0.0),
               "class_n": dict.fromkeys(names, 0), "first": None, "last": None, "iv": []} for s in steps}
    for r in records:
        if r["end"] < r["start"]:
            raise ValueError(f"record '{r['name']}' ends before it starts")
        if r["step"] < 0:
            continue
        st = per[r["step"]]
        st["first"] = r["start"] if st["first"] is None else min(st["first"], r["start"])
        st["last"] = r["end"] if st["last"] is None else max(st["last"], r["end"])
        d = r["end"] - r["start"]
        if r["kind"] == "kernel":
            c = classify(rules, r["name"])
            st["kernels"] += 1
            st["class_ns"][c] += d
            st["class_n"][c] += 1
            st["iv"].append((r["start"], r["end"]))
        else:
            st["copies"] += 1
            st["copy_ns"] += d
    out = []
    for i, s in enumerate(steps):
        st = per[s]
        lo, hi = st["first"], st["last"]
        if i + 1 < len(steps) and per[steps[i + 1]]["first"] > hi:
            hi = per[steps[i + 1]]["first"]
        busy, cur = 0, None
        for a, b in sorted(st["iv"]):
            a, b = max(a, lo), min(b, hi)
            if b <= a:
                continue
            if cur and a <= cur[1]:
                cur[1] = max(cur[1], b)
                continue
            if cur:
                busy += cur[1] - cur[0]
            cur = [a, b]
        if cur:
            busy += cur[1] - cur[0]
        out.append({"step": s, "kernels": st["kernels"], "copies": st["copies"], "span_ns": hi - lo,
                    "busy_ns": busy, "idle_ns": (hi - lo) - busy, "gap_ns": hi - st["last"], "copy_ns": st["copy_ns"],
                    "class_ns": st["class_ns"], "class_n": st["class_n"]})
    med = {f: _median([s[f] for s in out])
           for f in ("kernels", "copies", "span_ns", "busy_ns", "idle_ns", "gap_ns", "copy_ns")}
    med["class_ns"] = {c: _median([s["class_ns"][c] for s in out]) for c in names}
    med["class_n"] = {c: _median([s["class_n"][c] for s in out]) for c in names}
    return out, med


def to_json(label, names, steps, med):
    """The JSON dpt_kprof_write_json writes (format dpt.kernel-breakdown/1; times in ms)."""
    def one(s, with_step):
        o = {"step": s["step"]} if with_step else {}
        o.update({"kernels": float(s["kernels"]), "copies": float(s["copies"]), "span_ms": s["span_ns"] / 1e6,
                  "busy_ms": s["busy_ns"] / 1e6, "idle_ms": s["idle_ns"] / 1e6,
                  "idle_pct": 100.0 * s["idle_ns"] / s["span_ns"] if s["span_ns"] > 0 else 0.0,
                  "gap_ms": s["gap_ns"] / 1e6,
                  "gap_pct": 100.0 * s["gap_ns"] / s["span_ns"] if s["span_ns"] > 0 else 0.0,
                  "copy_ms": s["copy_ns"] / 1e6,
                  "class_ms": {c: s["class_ns"][c] / 1e6 for c in names},
                  "class_kernels": {c: float(s["class_n"][c]) for c in names}})
        return o
    return {"format": "dpt.kernel-breakdown/1", "label": label, "classes": names,
            "steps": [one(s, True) for s in steps], "median": one(med, False)}


def to_markdown(doc):
    m = doc["median"]
    total = sum(m["class_ms"].values()) or 1.0
    lines = [f"Kernel breakdown, {doc['label'] or 'run'}: median of {len(doc['steps'])} steps: "
             f"{m['kernels']:.0f} kernels per step, span {m['span_ms']:.2f} ms, busy {m['busy_ms']:.2f} ms, "
             f"idle between kernels {m['idle_ms']:.2f} ms ({m['idle_pct']:.1f}%; between steps "
             f"{m.get('gap_ms', 0.0):.2f} ms), "
             f"{m['copies']:.0f} copies {m['copy_ms']:.2f} ms", "",
             "| class | kernels/step | ms/step | share of kernel time |", "|---|---|---|---|"]
    for c in doc["classes"]:
        if m["class_kernels"][c] or m["class_ms"][c]:
            lines.append(f"| {c} | {m['class_kernels'][c]:.0f} | {m['class_ms'][c]:.3f} | "
                         f"{100.0 * m['class_ms'][c] / total:.1f}% |")
    return "\n".join(lines) + "\n"


STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


def read_kineto(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    cpu_steps, gpu_steps, launch_ts, acts = [], [], {}, []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat, name = str(e.get("cat", "")).lower(), str(e.get("name", ""))
        ts, dur = float(e.get("ts", 0)), float(e.get("dur", 0))
        args = e.get("args") or {}
        m = STEP_RE.match(name)
        if m:
            (gpu_steps if cat == "gpu_user_annotation" else cpu_steps).append((ts, ts + dur, int(m.group(1))))
        elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            launch_ts[args["correlation"]] = ts
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            kind = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}[cat]
            acts.append((name, kind, int(args.get("stream", 0)), ts, dur, args.get("correlation")))
    records = []
    for name, kind, stream, ts, dur, corr in acts:
        step = -1
        if corr in launch_ts and cpu_steps:
            t = launch_ts[corr]
            step = next((s for a, b, s in cpu_steps if a <= t <= b), -1)
        elif gpu_steps:
            step = next((s for a, b, s in gpu_steps if a <= ts <= b), -1)
        records.append({"name": name, "kind": kind, "step": step, "stream": stream,
                        "start": round(ts * 1000), "end": round((ts + dur) * 1000)})
    return records


def read_records(path):
    records = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            p = line.split("\t", 5)
            if len(p) != 6 or p[1] not in ("kernel", "memcpy", "memset"):
                raise ValueError(f"{path}:{n}: not 'step<TAB>kind<TAB>stream<TAB>start_ns<TAB>end_ns<TAB>name'")
            records.append({"step": int(p[0]), "kind": p[1], "stream": int(p[2]), "start": int(p[3]),
                            "end": int(p[4]), "name": p[5]})
    return records


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--classes", default=os.path.join(HERE, "kernel-classes.tsv"))
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", help="torch.profiler Chrome-trace JSON")
    src.add_argument("--records", help="dpt CUPTI records (TSV)")
    src.add_argument("--classify", action="store_true", help="classify the names on stdin, one per line")
    ap.add_argument("--label", default="")
    ap.add_argument("--skip-steps", type=int, default=0)
    ap.add_argument("--json", help="write the breakdown JSON here ('-': stdout)")
    ap.add_argument("--md", help="write a Markdown summary here ('-': stdout)")
    a = ap.parse_args(argv)
    try:
        rules, names = load_classes(a.classes)
    except (OSError, TableError) as e:
        print(f"breakdown.py: {e}", file=sys.stderr)
        return 2
    if a.classify:
        for line in sys.stdin:
            print(classify(rules, line.rstrip("\n")))
        return 0
    try:
        records = read_kineto(a.trace) if a.trace else read_records(a.records)
    except (OSError, ValueError, KeyError) as e:
        print(f"breakdown.py: {a.trace or a.records}: {e}", file=sys.stderr)
        return 2
    if a.skip_steps:
        keep = sorted({r["step"] for r in records if r["step"] >= 0})[a.skip_steps:]
        records = [r if r["step"] in keep else dict(r, step=-1) for r in records]
    steps, med = breakdown(records, rules, names)
    if not steps:
        print(f"breakdown.py: {a.trace or a.records}: no kernel of a profiled step (ProfilerStep#N) found",
              file=sys.stderr)
        return 1
    doc = to_json(a.label, names, steps, med)
    for path, text in ((a.json, json.dumps(doc, indent=1) + "\n"), (a.md, to_markdown(doc))):
        if path == "-":
            sys.stdout.write(text)
        elif path:
            with open(path, "w") as f:
                f.write(text)
    if not a.json and not a.md:
        sys.stdout.write(to_markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
