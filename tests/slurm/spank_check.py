#!/usr/bin/env python3
"""Compare what srun --dpt gave every task (spank_probe.sh lines) with the plan
`dpt-topo plan --json` predicts for the same cluster, and with the CPUs Slurm
alone gave (a run without --dpt): the plugin may only narrow Slurm's binding.

usage: spank_check.py PLAN.json PROBE_DPT.txt PROBE_PLAIN.txt [key=value ...]
extra key=value pairs are expected on every task (e.g. comm=ring fp16=1)."""
import json
import sys


def parse(path):
    tasks = {}
    for line in open(path):
        line = line.strip()
        if not line.startswith("procid="):
            continue
        kv = dict(f.split("=", 1) for f in line.split())
        tasks[(kv["node"], int(kv["localid"]))] = kv
    return tasks


def cpus(s):
    out = set()
    for part in s.split(","):
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            out.update(range(int(a), int(b) + 1))
        else:
            out.add(int(part))
    return out


def main():
    plan = json.load(open(sys.argv[1]))
    got = parse(sys.argv[2])
    plain = parse(sys.argv[3])
    extra = dict(a.split("=", 1) for a in sys.argv[4:])
    errors = []
    nodes = {n["host"]: n for n in plan["nodes"]}
    ranks = plan["ranks"]
    if len(got) != plan["n_ranks"]:
        errors.append(f"{len(got)} tasks reported, plan has {plan['n_ranks']} ranks")
    seen = set()
    for (host, lid), t in sorted(got.items()):
        where = f"{host} local {lid} (SLURM_PROCID {t['procid']})"
        if host not in nodes:
            errors.append(f"{where}: host not in the plan")
            continue
        r = ranks[nodes[host]["first_rank"] + lid]
        exp = {
            "rank": str(r["rank"]), "RANK": str(r["rank"]), "LOCAL_RANK": str(lid),
            "size": str(plan["n_ranks"]), "WORLD_SIZE": str(plan["n_ranks"]),
            "cpuset": r["cpuset"], "launcher": "spank",
            "hca": nodes[host]["hcas"] or "unset", "omp": str(r["threads"]),
            "digest": plan["digest"], "plan_env": "",
        }
        exp.update(extra)
        for k, v in exp.items():
            if t.get(k) != v:
                errors.append(f"{where}: {k}={t.get(k)} but the plan says {v}")
        seen.add(r["rank"])
        # GPU: Slurm's CUDA_VISIBLE_DEVICES is kept (never widened); DPT_CUDA_DEVICE is the
        # position of the plan's GPU in it, found through SLURM_STEP_GPUS (the node's indices)
        base = plain.get((host, lid))
        if base is not None and t["cvd"] != base["cvd"]:
            errors.append(f"{where}: CUDA_VISIBLE_DEVICES={t['cvd']} but Slurm alone gives {base['cvd']}")
        try:
            dev = t["step_gpus"].split(",")[int(t["cuda_dev"])]
            if int(dev) != r["gpu"]:
                errors.append(f"{where}: DPT_CUDA_DEVICE={t['cuda_dev']} selects GPU {dev}, the plan says {r['gpu']}")
        except (ValueError, IndexError):
            errors.append(f"{where}: DPT_CUDA_DEVICE={t.get('cuda_dev')} is not an index into {t.get('step_gpus')}")
        # binding: the plan's cpuset within Slurm's, or Slurm's when they do not meet
        if base is None:
            errors.append(f"{where}: no task at this place in the run without --dpt")
            continue
        slurm = cpus(base["affinity"])
        want = cpus(r["cpuset"]) & slurm or slurm
        have = cpus(t["affinity"])
        if have != want:
            errors.append(f"{where}: affinity {t['affinity']} but plan {r['cpuset']} within Slurm's "
                          f"{base['affinity']} is {sorted(want)}")
    if seen != set(range(plan["n_ranks"])):
        errors.append(f"ring ranks seen: {sorted(seen)}")
    for e in errors:
        print("FAIL:", e)
    print(f"spank_check: {len(got)} tasks, {len(errors)} mismatches against plan {plan['digest']}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
