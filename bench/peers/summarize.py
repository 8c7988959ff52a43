#!/usr/bin/env python3
"""Summarise bench/peers/run.sh: OUT.json (dpt.bench.peers/1) and OUT.md."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "thintree"))
import benchinfo  # noqa: E402

ap = argparse.ArgumentParser()
for a in ("allreduce", "launch", "out", "command"):
    ap.add_argument("--" + a, required=True)
for a in ("elapsed", "iters", "warmup", "repeat"):
    ap.add_argument("--" + a, type=int, required=True)
args = ap.parse_args()
med = benchinfo.median

ar = [json.loads(l) for l in open(args.allreduce) if l.strip()]
la = [json.loads(l) for l in open(args.launch) if l.strip()]

# busbw per (ranks, bytes, comm) over the launches
cells = {}
maxerr = {}
for r in ar:
    for x in r["bench"]["results"]:
        k = (r["ranks"], x["bytes"], x["comm"])
        cells.setdefault(k, []).append(x["busbw_gbs"])
        maxerr[k] = max(maxerr.get(k, 0.0), x["max_error"])
comms = ["ring", "hierarchical", "mpi", "gloo"]
table = []
for (np_, b) in sorted({(k[0], k[1]) for k in cells}):
    row = {"ranks": np_, "bytes": b}
    for c in comms:
        v = cells.get((np_, b, c), [])
        row[c] = {"busbw_gbs_median": med(v) if v else None, "busbw_gbs_runs": v,
                  "time_s_median": (b / (med(v) / (2.0 * (np_ - 1) / np_)) / 1e9) if v else None,
                  "max_error": maxerr.get((np_, b, c))}
    table.append(row)

goals = []
for row in table:
    for c in ("ring", "hierarchical"):
        me = row[c]["busbw_gbs_median"]
        for peer, target in (("mpi", 1.0), ("gloo", 1.2)):
            pv = row[peer]["busbw_gbs_median"]
            if me is None or pv is None:
                continue
            goals.append({"goal": f"{c} busbw >= {target:g}x {'Open MPI MPI_Allreduce' if peer == 'mpi' else 'torch.distributed gloo'}"
                                  f" ({row['ranks']} ranks, {row['bytes']:,} B)",
                          "target": f">= {target:g}x", "measured": round(me / pv, 3), "met": me / pv >= target})

launch = {}
for v in ("dpt-launch-true", "dpt-launch-python", "torchrun-python", "torchrun-python-fastpoll"):
    s = [x["seconds"] for x in la if x["variant"] == v]
    if s:
        launch[v] = {"median_s": med(s), "min_s": min(s), "max_s": max(s), "runs_s": s,
                     "command": next(x["command"] for x in la if x["variant"] == v)}
if "dpt-launch-python" in launch and "torchrun-python" in launch:
    g = launch["torchrun-python"]["median_s"] / launch["dpt-launch-python"]["median_s"]
    goals.append({"goal": "launch a 2-rank no-op python program: dpt-launch no slower than torchrun --standalone",
                  "target": ">= 1x (torchrun time / dpt-launch time)", "measured": round(g, 3), "met": g >= 1.0})
if "dpt-launch-python" in launch and "torchrun-python-fastpoll" in launch:
    g = launch["torchrun-python-fastpoll"]["median_s"] / launch["dpt-launch-python"]["median_s"]
    goals.append({"goal": "the same vs torchrun --monitor_interval 0.1 (its 5 s default poll removed)",
                  "target": ">= 1x", "measured": round(g, 3), "met": g >= 1.0})

h = benchinfo.header()
doc = {"schema": "dpt.bench.peers/1", "command": args.command, **h, "elapsed_s": args.elapsed,
       "setup": {"iters": args.iters, "warmup": args.warmup, "repeat": args.repeat, "wire": "fp32",
                 "busbw": "algbw * 2(p-1)/p (nccl-tests)", "time": "max over ranks of the mean of iters"},
       "allreduce": table, "launch": launch, "goals": goals, "raw": {"allreduce": ar, "launch": la}}
with open(args.out + ".json", "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")

L = ["# dpt vs peers on this machine: all-reduce and launch\n",
     f"Produced by `{args.command}` in {args.elapsed} s.  {benchinfo.md_machine(h)}\n",
     "All ranks on this one machine (2 cores): dpt's communicators move data through Open MPI "
     "(shared memory between local ranks), gloo through TCP loopback.  busbw = algbw * 2(p-1)/p; "
     f"time = max over ranks of the mean of {args.iters} all-reduces after {args.warmup} warm-up; "
     f"median over {args.repeat} launches per tool (interleaved).  `mpi` = Open MPI's MPI_Allreduce "
     "called through dpt's mpi communicator.  torchrun runs with `--redirects 1 --tee 1` (torch 1.13 "
     "under Python 3.11 crashes with its defaults).  Commands: "
     f"`{next((r['command'] for r in ar if r['tool'] == 'dpt'), '')}` and "
     f"`{next((r['command'] for r in ar if r['tool'] != 'dpt'), '')}` (P = 2, 4).\n",
     "## All-reduce busbw (GB/s, median)\n",
     "| ranks | bytes | ring | hierarchical | mpi | gloo | ring / mpi | ring / gloo | hier / gloo | maxerr (all) |",
     "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
f3 = lambda v: "-" if v is None else f"{v:.3f}"
rt = lambda a, b: "-" if a is None or b is None else f"{a / b:.2f}x"
for row in table:
    g = lambda c: row[c]["busbw_gbs_median"]
    errs = [row[c]["max_error"] for c in comms if row[c]["max_error"] is not None]
    L.append(f"| {row['ranks']} | {row['bytes']:,} | {f3(g('ring'))} | {f3(g('hierarchical'))} | {f3(g('mpi'))} | "
             f"{f3(g('gloo'))} | {rt(g('ring'), g('mpi'))} | {rt(g('ring'), g('gloo'))} | "
             f"{rt(g('hierarchical'), g('gloo'))} | {max(errs) if errs else '-'} |")
L += ["", "## Launch overhead (2-rank no-op, seconds)\n", "| launcher | median | min..max | command |",
      "|---|---:|---:|---|"]
for v, e in launch.items():
    L.append(f"| {v} | {e['median_s']:.3f} | {e['min_s']:.3f}..{e['max_s']:.3f} | `{e['command']}` |")
L += ["", "## Goals\n"]
for g in goals:
    L.append(f"- {'**met**' if g['met'] else '**not met**'}: {g['goal']}: target {g['target']}, measured {g['measured']}")
L.append("")
with open(args.out + ".md", "w") as f:
    f.write("\n".join(L) + "\n")
print("\n".join(L))
