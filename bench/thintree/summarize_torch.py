#!/usr/bin/env python3
"""Summarise bench/thintree/torch.sh's runs: OUT.json (dpt.bench.thintree-torch/1) and OUT.md."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchinfo  # noqa: E402

ap = argparse.ArgumentParser()
for a in ("plan", "runs", "out", "command", "python"):
    ap.add_argument("--" + a, required=True)
for a in ("nodes", "leaves", "rate-mbit", "bytes", "iters", "warmup", "repeat", "elapsed"):
    ap.add_argument("--" + a, type=int, required=True)
args = ap.parse_args()

plan = json.load(open(args.plan))
runs = [json.loads(l) for l in open(args.runs) if l.strip()]
alt = {a["name"]: a for a in plan["alternatives"]}
p, size = plan["n_ranks"], args.bytes
rate_Bps = args.rate_mbit * 1e6 / 8
per_flow = 2.0 * (p - 1) / p * size           # bytes each ring link carries per all-reduce
bound_s = per_flow / rate_Bps
# all-reduces of SIZE per launch (the timing all-reduces and the barrier are bytes, not MiB)
n_allreduce = args.warmup + args.iters

rows = [("planned ring order (srun --dpt)", "planned", alt["planned"]),
        ("Slurm's order (plain srun, RANK = SLURM_PROCID)", "slurm", alt["slurm-order"])]
results = []
for label, v, a in rows:
    mine = [r for r in runs if r["variant"] == v]
    if not mine:
        continue
    per_launch = [sum(r["torch"]["times_s"]) / len(r["torch"]["times_s"]) for r in mine]
    busiest = [max(r["uplink_bytes"].values()) for r in mine]
    med = benchinfo.median(per_launch)
    order = mine[0]["torch"]["hosts"]
    e = {"label": label, "variant": v, "launch_means_s": per_launch, "median_s": med,
         "min_s": min(per_launch), "max_s": max(per_launch),
         "iteration_times_s": [t for r in mine for t in r["torch"]["times_s"]],
         "algbw_gbs": size / med / 1e9, "ratio_to_bound": med / bound_s,
         "rank_order": order, "rank_orders_agree": all(r["torch"]["hosts"] == order for r in mine),
         "max_abs_err": max(r["torch"]["max_abs_err"] for r in mine),
         "master_addr": mine[0]["torch"].get("master"),
         "plan_alternative": a["name"], "plan_node_order": a["node_order"],
         "predicted_s": a["predicted_s"], "ratio_to_predicted": med / a["predicted_s"],
         "flows_on_busiest_uplink_model": a["busiest_flows"],
         "flows_on_busiest_uplink_measured": benchinfo.median(busiest) / (n_allreduce * per_flow),
         "uplink_bytes_busiest_direction": busiest}
    results.append(e)
by = {e["variant"]: e for e in results}

goals = []
pr, sr = by.get("planned"), by.get("slurm")
if pr:
    goals.append({"goal": "PyTorch gloo all-reduce under srun --dpt within 1.2x of the bandwidth bound "
                          "2(p-1)/p*S/B", "target": "<= 1.2", "measured": round(pr["ratio_to_bound"], 3),
                  "met": pr["ratio_to_bound"] <= 1.2})
    goals.append({"goal": "srun --dpt ranks follow the plan's ring order",
                  "target": " ".join(pr["plan_node_order"]), "measured": " ".join(pr["rank_order"]),
                  "met": pr["rank_order"] == pr["plan_node_order"] and pr["rank_orders_agree"]})
if pr and sr:
    meas, model = sr["median_s"] / pr["median_s"], sr["predicted_s"] / pr["predicted_s"]
    goals.append({"goal": "plain srun (Slurm's order) slower than srun --dpt by the model's factor "
                          "(flows on the busiest uplink %d vs %d), within 20%%"
                          % (sr["flows_on_busiest_uplink_model"], pr["flows_on_busiest_uplink_model"]),
                  "target": "%.2fx +-20%% (%.2f..%.2f)" % (model, 0.8 * model, 1.2 * model),
                  "measured": round(meas, 3), "model": round(model, 3), "met": abs(meas / model - 1) <= 0.2})
for e in results:
    goals.append({"goal": "%s: the all-reduce's result exact (sum of 1..p)" % e["label"],
                  "target": "0", "measured": e["max_abs_err"], "met": e["max_abs_err"] == 0})

h = benchinfo.header()
doc = {"schema": "dpt.bench.thintree-torch/1", "command": args.command, **h, "elapsed_s": args.elapsed,
       "setup": {"nodes": args.nodes, "leaves": args.leaves, "node_link_mbit": args.rate_mbit,
                 "leaf_uplink": os.environ.get("DPT_TT_UPLINK", "%dmbit" % args.rate_mbit),
                 "mtu": int(os.environ.get("DPT_TT_MTU", "65520")), "size_bytes": size, "ranks": p,
                 "ranks_per_node": 1, "iters": args.iters, "warmup": args.warmup, "repeat": args.repeat,
                 "oversubscription": "%d:1" % (args.nodes // args.leaves), "python": args.python,
                 "plan_model": plan["model"]},
       "bound_s": bound_s, "results": results, "goals": goals, "runs": runs}
with open(args.out + ".json", "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")

L = ["# Thin tree on one machine: PyTorch's all-reduce under srun --dpt vs plain srun\n",
     f"Produced by `{args.command}` in {args.elapsed} s.  {benchinfo.md_machine(h)}\n",
     f"**Emulated cluster** (as bench/results/thintree.md): {args.nodes} nodes in network namespaces, "
     f"{args.leaves} leaf switches under one spine, node links and leaf uplinks at {args.rate_mbit} Mbit/s "
     f"(tc tbf, both directions; {args.nodes // args.leaves}:1 oversubscribed between leaves), node n<i> "
     f"on leaf ((i-1) mod {args.leaves})+1, so Slurm's name order crosses the spine at every hop.  One "
     f"slurmd per node namespace, the dpt SPANK plugin in plugstack.conf.\n",
     f"**The program**: `bench/thintree/torch_allreduce.py` with {args.python} (torch "
     f"{h['versions'].get('torch', '?').split(' (')[0]}): `torch.distributed.all_reduce` of a {size:,}-byte fp32 tensor "
     f"over gloo (`GLOO_SOCKET_IFNAME=fab0`), one rank per node, `init_process_group(\"gloo\", "
     f"init_method=\"env://\")`; {args.iters} timed iterations after {args.warmup} warm-up per launch, "
     f"{args.repeat} launches per variant (interleaved); an iteration's time is the max over ranks; a "
     f"launch's time the mean of its iterations; median and min..max over launches.  gloo's all-reduce "
     f"of a large tensor is a ring in rank order.\n",
     "**The two launches, same allocation**: `srun --dpt python3 torch_allreduce.py` (RANK, MASTER_ADDR/"
     "PORT from the plan) and `srun bench/thintree/slurm_env.sh <n1's address> python3 torch_allreduce.py` "
     "(RANK = SLURM_PROCID, MASTER_ADDR = the first node: what users' sbatch scripts do).\n",
     f"Bandwidth bound 2(p-1)/p * S / B = {bound_s:.3f} s (p = {p}, B = {args.rate_mbit} Mbit/s).  "
     "Predicted: `dpt-topo plan --host-gbps --uplink-gbps` at the same rate for the same order.  Uplink "
     "flows measured = bytes through the busiest leaf-uplink direction (tc counters) / (all-reduces x "
     "2(p-1)/p x S).\n",
     "| launch | ranks | median s | min..max s | algbw GB/s | measured / bound | predicted s | "
     "measured / predicted | busiest-uplink flows: model / measured | rank order (nodes of ranks 0..p-1) |",
     "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
for e in results:
    L.append(f"| {e['label']} | {p} | {e['median_s']:.3f} | {e['min_s']:.3f}..{e['max_s']:.3f} | "
             f"{e['algbw_gbs']:.4f} | {e['ratio_to_bound']:.2f} | {e['predicted_s']:.3f} | "
             f"{e['ratio_to_predicted']:.2f} | {e['flows_on_busiest_uplink_model']} / "
             f"{e['flows_on_busiest_uplink_measured']:.2f} | {' '.join(e['rank_order'])} |")
if pr and sr:
    L.append(f"\nPlain srun / srun --dpt: **{sr['median_s'] / pr['median_s']:.2f}x** (model "
             f"{sr['predicted_s'] / pr['predicted_s']:.2f}x).")
L.append("\n## Goals\n")
for g in goals:
    L.append(f"- **{'met' if g['met'] else 'not met'}**: {g['goal']}: target {g['target']}, measured {g['measured']}")
L.append("")
with open(args.out + ".md", "w") as f:
    f.write("\n".join(L))
print("\n".join(L))
