#!/usr/bin/env python3
"""Summarise bench/thintree/run.sh's runs: OUT.json (dpt.bench.thintree/1) and OUT.md."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchinfo  # noqa: E402

ap = argparse.ArgumentParser()
for a in ("plan", "plan-fp16", "runs", "out", "rate", "size", "command", "random-order"):
    ap.add_argument("--" + a, required=True)
ap.add_argument("--failures")
for a in ("nodes", "leaves", "iters", "warmup", "repeat", "elapsed"):
    ap.add_argument("--" + a, type=int, required=True)
args = ap.parse_args()

plan = json.load(open(args.plan))
plan16 = json.load(open(args.plan_fp16))
runs = [json.loads(l) for l in open(args.runs) if l.strip()]
failures = [json.loads(l) for l in open(args.failures) if l.strip()] if args.failures else []
alt = {a["name"]: a for a in plan["alternatives"]}
alt16 = {a["name"]: a for a in plan16["alternatives"]}
p = plan["n_ranks"]
size = plan["size_bytes"]
rate_gbps = float(args.rate[:-4]) / 1000.0
bound_s = 2.0 * (p - 1) / p * size / (rate_gbps * 1e9 / 8)

# (label, variant, comm, plan alternative, fp16 wire)
rows = [("planned ring (srun --dpt)", "planned", "ring", alt["planned"], False),
        ("hierarchical (srun --dpt)", "planned", "hierarchical", alt["hierarchical"], False),
        ("Slurm's order ring (plain srun)", "slurm", "ring", alt["slurm-order"], False),
        ("random order ring (seed 0)", "random", "ring", alt["random"], False),
        ("planned ring, fp16 on the wire", "fp16", "ring", alt16["planned"], True),
        ("2 nodes (n1, n2), ring fp32", "pair", "ring", None, False),
        ("2 nodes (n1, n2), ring fp16 on the wire", "pair-fp16", "ring", None, True),
        ("Open MPI MPI_Allreduce (Slurm's order)", "mpi", "mpi", None, False)]
results = []
for label, v, comm, a, fp16 in rows:
    mine = [r for r in runs if r["variant"] == v]
    times = [x["time_us"] / 1e6 for r in mine for x in r["bench"]["results"] if x["comm"] == comm]
    if not times:
        continue
    n_comms = len(mine[0]["bench"]["results"])
    rp = mine[0]["bench"]["ranks"]
    wire = size / 2 if fp16 else size
    per_flow = 2.0 * (rp - 1) / rp * wire
    row_bound = per_flow / (rate_gbps * 1e9 / 8)
    b = mine[0]["bench"]
    n_allreduce = n_comms * (b["warmup"] + b["iters"] + 1)  # + the correctness all-reduce
    busiest = [max(r["uplink_bytes"].values()) for r in mine]
    med = benchinfo.median(times)
    e = {"label": label, "variant": v, "comm": comm, "wire": "fp16" if fp16 else "fp32",
         "times_s": times, "median_s": med, "min_s": min(times), "max_s": max(times),
         "ranks": rp, "algbw_gbs": size / med / 1e9, "busbw_gbs": size / med / 1e9 * 2.0 * (rp - 1) / rp,
         "bound_s": row_bound,
         "max_error": max(x["max_error"] for r in mine for x in r["bench"]["results"] if x["comm"] == comm),
         "ratio_to_bound": med / row_bound,
         "uplink_bytes_busiest_direction": busiest,
         "flows_on_busiest_uplink_measured": benchinfo.median(busiest) / (n_allreduce * per_flow)}
    if a:
        e.update({"plan_alternative": a["name"], "node_order": a["node_order"],
                  "predicted_s": a["predicted_s"], "ratio_to_predicted": med / a["predicted_s"],
                  "flows_on_busiest_uplink_model": a["busiest_flows"],
                  "inter_group_hops": a["inter_group_hops"]})
    results.append(e)
by = {(e["variant"], e["comm"]): e for e in results}

goals = []
pr = by.get(("planned", "ring"))
if pr:
    goals.append({"goal": "thin tree: planned ring within 1.15x of the bandwidth bound 2(p-1)/p*S/B",
                  "target": "<= 1.15", "measured": round(pr["ratio_to_bound"], 3),
                  "met": pr["ratio_to_bound"] <= 1.15})
sr = by.get(("slurm", "ring"))
if pr and sr:
    meas = sr["median_s"] / pr["median_s"]
    model = sr["predicted_s"] / pr["predicted_s"]
    goals.append({"goal": "thin tree: Slurm-order ring slower than the planned ring by the model's "
                          "factor (flows on the busiest uplink: %d vs %d), within 20%%"
                          % (sr["flows_on_busiest_uplink_model"], pr["flows_on_busiest_uplink_model"]),
                  "target": "%.2fx +-20%% (%.2f..%.2f)" % (model, 0.8 * model, 1.2 * model),
                  "measured": round(meas, 3), "model": round(model, 3),
                  "met": abs(meas / model - 1) <= 0.2})
rr = by.get(("random", "ring"))
if pr and rr:
    meas = rr["median_s"] / pr["median_s"]
    model = rr["predicted_s"] / pr["predicted_s"]
    goals.append({"goal": "thin tree: random-order ring vs planned ring as the model predicts, within 20%",
                  "target": "%.2fx +-20%%" % model, "measured": round(meas, 3), "model": round(model, 3),
                  "met": abs(meas / model - 1) <= 0.2})
fr = by.get(("fp16", "ring"))
if pr and fr:
    g = fr["algbw_gbs"] / pr["algbw_gbs"]
    goals.append({"goal": "fp16 on the wire vs fp32 on the rate-limited link, algbw, 8 nodes (planned ring; "
                          "8 ranks' fp16 conversions share 2 cores)",
                  "target": ">= 1.7x", "measured": round(g, 3), "met": g >= 1.7})
a32, a16 = by.get(("pair", "ring")), by.get(("pair-fp16", "ring"))
if a32 and a16:
    g = a16["algbw_gbs"] / a32["algbw_gbs"]
    goals.append({"goal": "fp16 on the wire vs fp32 on the rate-limited link, algbw, 2 nodes across the "
                          "spine (one rank per core, as on real nodes)",
                  "target": ">= 1.7x", "measured": round(g, 3), "met": g >= 1.7})

h = benchinfo.header()
doc = {"schema": "dpt.bench.thintree/1", "command": args.command, **h,
       "elapsed_s": args.elapsed,
       "setup": {"nodes": args.nodes, "leaves": args.leaves, "node_link": args.rate,
                 "leaf_uplink": os.environ.get("DPT_TT_UPLINK", args.rate), "mtu": int(os.environ.get("DPT_TT_MTU", "65520")),
                 "size_bytes": size, "ranks": p, "ranks_per_node": 1, "iters": args.iters,
                 "warmup": args.warmup, "repeat": args.repeat,
                 "oversubscription": "%d:1" % (args.nodes // args.leaves),
                 "plan_model": plan["model"], "random_order": args.random_order.split()},
       "bound_s": bound_s, "results": results, "goals": goals, "runs": runs,
       "failed_launches": failures}
with open(args.out + ".json", "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")

L = []
L.append("# Thin tree on one machine: planned ring vs Slurm's order vs random vs hierarchical\n")
L.append(f"Produced by `{args.command}` in {args.elapsed} s.  {benchinfo.md_machine(h)}\n")
L.append(f"**Emulated cluster**: {args.nodes} nodes in network namespaces, {args.leaves} leaf switches "
         f"(Linux bridges) under one spine; node links and each leaf's uplink rate-limited to "
         f"{args.rate} by `tc tbf` on both directions ({args.nodes // args.leaves}:1 oversubscribed between "
         f"leaves), fabric MTU {doc['setup']['mtu']}; node n<i> on leaf ((i-1) mod {args.leaves})+1, so "
         f"Slurm's name order crosses the spine at every hop.  One slurmd per node namespace (own "
         f"hostname), the dpt SPANK plugin in plugstack.conf, Open MPI over TCP on the fabric interface "
         f"only.  All-reduce of {size:,} bytes, 1 rank per node, {args.iters} timed iterations after "
         f"{args.warmup} warm-up per launch, {args.repeat} launches per variant (interleaved); time = "
         f"max over ranks of the mean; median and min..max over the launches.\n")
L.append(f"Bandwidth bound 2(p-1)/p * S / B = {bound_s:.3f} s (p = {p}, B = {args.rate}; with fp16 S is "
         f"the fp16 bytes).  Predicted: "
         f"`dpt-topo plan --host-gbps {rate_gbps:g} --uplink-gbps {rate_gbps:g}` (alpha {plan['model'].get('alpha_us', '?')} us).  "
         f"Uplink flows measured = bytes through the busiest leaf-uplink direction (tc counters) / "
         f"(all-reduces x 2(p-1)/p x S).\n")
L.append("| variant | ranks | median s | min..max s | algbw GB/s | predicted s | measured / predicted | measured / bound | busiest-uplink flows: model / measured | maxerr |")
L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for e in results:
    pred = f"{e['predicted_s']:.3f}" if "predicted_s" in e else "-"
    rp = f"{e['ratio_to_predicted']:.2f}" if "ratio_to_predicted" in e else "-"
    fm = e.get("flows_on_busiest_uplink_model", "-")
    L.append(f"| {e['label']} | {e['ranks']} | {e['median_s']:.3f} | {e['min_s']:.3f}..{e['max_s']:.3f} | "
             f"{e['algbw_gbs']:.4f} | {pred} | {rp} | {e['ratio_to_bound']:.2f} | "
             f"{fm} / {e['flows_on_busiest_uplink_measured']:.2f} | {e['max_error']:g} |")
L.append("")
pa = by.get(("pair", "ring"))
if pa and pa["ratio_to_bound"] > 1.3:
    L.append(f"Note: the 2-node ring stays at {pa['ratio_to_bound']:.2f}x its bound in fp32 (and fp16 at a similar "
             "factor), while 8 nodes reach ~1.0x: with p = 2 both ring directions run between the same two "
             "ranks (one Open MPI TCP connection per pair); the cause is not isolated.  The 2-node fp16/fp32 "
             "ratio compares like with like, but its absolute times are not link-bound.\n")
L.append("Ring orders: planned " + " ".join(alt["planned"]["node_order"]) + "; Slurm's "
         + " ".join(alt["slurm-order"]["node_order"]) + "; random " + args.random_order + ".\n")
L.append("## Goals\n")
for g in goals:
    L.append(f"- {'**met**' if g['met'] else '**not met**'}: {g['goal']}: target {g['target']}, "
             f"measured {g['measured']}" + (f" (model {g['model']})" if "model" in g else ""))
L.append("")
if failures:
    L.append(f"{len(failures)} launch(es) failed and were retried once: "
             + "; ".join(f"{x['variant']} run {x['run']}" for x in failures)
             + " (stderr tails in the JSON, `failed_launches`).\n")
L.append("Raw per-launch figures (commands, uplink byte counters, rank 0's iteration percentiles) are "
         f"in `{os.path.basename(args.out)}.json`.")
with open(args.out + ".md", "w") as f:
    f.write("\n".join(L) + "\n")
print("\n".join(L))
