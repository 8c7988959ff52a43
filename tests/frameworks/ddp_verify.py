#!/usr/bin/env python3
"""Check what ddp_check.py wrote on every rank against the plan.

usage: ddp_verify.py OUT_DIR WORLD [--plan PLAN.json] [--master-addr A] [--slurm] [--mpi]
                     [--cluster-env NAME]

  The records are ddp_check.py's, or lightning_check.py's and jax_check.py's (same form).

  every rank 0..WORLD-1 wrote rank-R.json; torch's rank == RANK (== DPT_RANK);
  --plan: rank R runs on the plan's node of ring rank R with the plan's local rank,
          GROUP_RANK is that node's index in plan order;
  --master-addr: every rank's MASTER_ADDR; all ranks the same MASTER_PORT;
  --slurm: MASTER_PORT is the one derived from the job and step (dpt_rdzv_port: 20000 +
           (31 * job + step) mod 10000, job.step from TORCHELASTIC_RUN_ID=slurm-JOB.STEP),
           and Slurm's order differs from the plan's for at least one rank (so the
           check above is not one Slurm's order passes by itself);
  --mpi:   OMPI_COMM_WORLD_RANK == RANK (dpt-launch: MPI ranks follow the plan);
  --cluster-env: the cluster environment Lightning chose on every rank (lightning_check.py);
  the parameters after two DDP steps equal one process's on the whole batch within 1e-5
  (ddp_check.py derives the bound), they moved (by > 1e-3: the comparison can fail), and
  all ranks hold the same parameters."""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("world", type=int)
    ap.add_argument("--plan")
    ap.add_argument("--master-addr")
    ap.add_argument("--slurm", action="store_true")
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--cluster-env")
    a = ap.parse_args()
    errors = []
    recs = {}
    for r in range(a.world):
        p = os.path.join(a.out, f"rank-{r}.json")
        if not os.path.exists(p):
            errors.append(f"rank {r} wrote nothing ({p})")
            continue
        recs[r] = json.load(open(p))
    plan = json.load(open(a.plan)) if a.plan else None
    if plan and plan["n_ranks"] != a.world:
        errors.append(f"plan has {plan['n_ranks']} ranks, the job {a.world}")
    ports = set()
    differs = False
    for r, rec in sorted(recs.items()):
        env = rec["env"]
        where = f"rank {r} on {rec['host']}"
        if rec["rank"] != r or rec["world"] != a.world:
            errors.append(f"{where}: torch says rank {rec['rank']} of {rec['world']}")
        if env["RANK"] != str(r) or (env["DPT_RANK"] not in (None, str(r))):
            errors.append(f"{where}: RANK={env['RANK']} DPT_RANK={env['DPT_RANK']}")
        if plan:
            pr = plan["ranks"][r]
            node = plan["nodes"][pr["node"]]
            if rec["host"] != node["host"]:
                errors.append(f"{where}: the plan puts ring rank {r} on {node['host']}")
            if env["LOCAL_RANK"] != str(pr["local_rank"]):
                errors.append(f"{where}: LOCAL_RANK={env['LOCAL_RANK']}, plan {pr['local_rank']}")
            if env["GROUP_RANK"] != str(pr["node"]):
                errors.append(f"{where}: GROUP_RANK={env['GROUP_RANK']}, plan node {pr['node']}")
        if a.master_addr and env["MASTER_ADDR"] != a.master_addr:
            errors.append(f"{where}: MASTER_ADDR={env['MASTER_ADDR']}, want {a.master_addr}")
        ports.add(env["MASTER_PORT"])
        if a.slurm:
            run = env["TORCHELASTIC_RUN_ID"] or ""
            if not run.startswith("slurm-"):
                errors.append(f"{where}: TORCHELASTIC_RUN_ID={run}")
            else:
                job, step = (int(x) for x in run[len("slurm-"):].split("."))
                want = 20000 + (31 * (job % 10000) + step) % 10000
                if env["MASTER_PORT"] != str(want):
                    errors.append(f"{where}: MASTER_PORT={env['MASTER_PORT']}, derived {want}")
            differs |= env["SLURM_PROCID"] != str(r)
        if a.cluster_env and rec.get("cluster_environment") != a.cluster_env:
            errors.append(f"{where}: Lightning chose {rec.get('cluster_environment')}, not {a.cluster_env}")
        if a.mpi and env["OMPI_COMM_WORLD_RANK"] != str(r):
            errors.append(f"{where}: MPI rank {env['OMPI_COMM_WORLD_RANK']}")
        if rec["max_diff_across_ranks"] != 0.0:
            errors.append(f"{where}: parameters differ from another rank's by {rec['max_diff_across_ranks']}")
    if len(ports) > 1:
        errors.append(f"ranks got different MASTER_PORTs: {sorted(ports)}")
    if a.slurm and not differs:
        errors.append("every rank's SLURM_PROCID equals its RANK: Slurm's order is the plan's here, "
                      "the test proves nothing (use a topology.conf that interleaves the nodes)")
    r0 = recs.get(0)
    if r0:
        d, move = r0["max_diff_vs_one_process"], r0["max_move"]
        print(f"ddp_verify: {len(recs)} ranks; parameters vs one process on the whole batch: max |diff| "
              f"{d:.3g} (bound 1e-5), moved by up to {move:.3g}")
        if not d <= 1e-5:
            errors.append(f"parameters after 2 DDP steps differ from one process's by {d:.3g} > 1e-5")
        if not move > 1e-3:
            errors.append(f"parameters moved by only {move:.3g}: the comparison cannot fail")
    for e in errors:
        print("ddp_verify: FAIL:", e)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
