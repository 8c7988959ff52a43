#!/usr/bin/env python3
"""bench/allreduce/from_peers.py PEERS.json OUT.md — issue 4's CPU all-reduce table (ring /
hierarchical vs Open MPI's MPI_Allreduce, 2 and 4 ranks, 64 MiB .. 128 MiB and ResNet-50's
102,228,128 B) from the runs bench/peers/run.sh already made: the same dpt-launch -n P --
dpt-bench allreduce --comm ring,hierarchical,mpi launches, so run-all does not repeat them
(bench/allreduce/run.sh still makes its own runs, 10 iterations each, when called alone).
The summary table has the format of run.sh's (run-all's SUMMARY reads it)."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "thintree"))
import benchinfo  # noqa: E402

peers_json, out = sys.argv[1], sys.argv[2]
d = json.load(open(peers_json))
s = d["setup"]
L = ["# CPU all-reduce: ring / hierarchical vs Open MPI MPI_Allreduce\n",
     f"Produced by `bench/allreduce/from_peers.py` from the all-reduce runs of `{d['command']}` "
     f"({d['date']}): the same `dpt-launch -n P -- dpt-bench allreduce --comm ring,hierarchical,mpi` launches, "
     f"{s['repeat']} per rank count, {s['iters']} iterations after {s['warmup']} warm-up each.  "
     f"{benchinfo.md_machine({'machine': d['machine'], 'versions': d['versions'], 'date': d['date']})}\n",
     f"busbw = {s['busbw']}; time = {s['time']}.\n",
     "## Summary (median over the runs)\n",
     "| ranks | bytes | ring GB/s | hierarchical GB/s | mpi GB/s | ring / mpi | hierarchical / mpi |",
     "|---:|---:|---:|---:|---:|---:|---:|"]
for e in sorted(d["allreduce"], key=lambda e: (e["ranks"], e["bytes"])):
    r, h, x = (e[c]["busbw_gbs_median"] for c in ("ring", "hierarchical", "mpi"))
    L.append(f"| {e['ranks']} | {e['bytes']} | {r:.3f} | {h:.3f} | {x:.3f} | {r / x:.2f}x | {h / x:.2f}x |")
L += ["", "## Every run (busbw GB/s)\n", "| ranks | bytes | ring | hierarchical | mpi |", "|---:|---:|---|---|---|"]
for e in sorted(d["allreduce"], key=lambda e: (e["ranks"], e["bytes"])):
    L.append(f"| {e['ranks']} | {e['bytes']} | " + " | ".join(
        ", ".join(f"{v:.3f}" for v in e[c]["busbw_gbs_runs"]) for c in ("ring", "hierarchical", "mpi")) + " |")
open(out, "w").write("\n".join(L) + "\n")
print(f"wrote {out}")
