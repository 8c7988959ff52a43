#!/usr/bin/python3
"""bench/train/bench.py — dpt-train (oneDNN CPU backend) vs PyTorch 1.13 vs ChainerMN
(chainer 7.8.1), ResNet-50 v1.5 training on synthetic data, batch B per rank, 1 and 2
ranks (threads per rank = cores / ranks), 32 px (small stem, 10 classes) and 224 px
(ImageNet stem, 1000 classes).  Run through bench/train/run.sh (which installs what is
missing); writes OUT.json (dpt.bench.train/2) and OUT.md.

One launch per framework and configuration, interleaved (dpt, torch, chainer; the order
rotates with --repeat).  Every framework is measured the same way, by this harness:
  * step times: rank 0 prints one line per step (dpt-train --log-every 1: "epoch .. step
    i/N ..."; torch_train.py / chainer_train.py: "STEP i ..."), each line is timestamped
    when it arrives here; a step's time is the gap between consecutive lines.  Steady
    state = the steps after the first --warmup ones; images/s = ranks * batch / median
    step time; spread = p25..p75 and min..max over those steps.  Cross-checks: dpt's job
    report (phases.step p50 of every rank, --report) and the scripts' in-process timers.
  * time to first step: from just before the launch (process start) to the first step's
    line: start-up, model construction, first (slowest) step.
  * peak memory: GNU time (/usr/bin/time -f %M) around every rank's process; the figure
    compared is the largest rank's.
"""
import argparse
import json
import os
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(here), "thintree"))
import benchinfo  # noqa: E402

PY = "/usr/bin/python3"
CHILD = None  # the running launch (Popen list), killed on INT/TERM


def kill_children(*_):
    for p in CHILD or []:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except OSError:
            pass
    time.sleep(0.5)
    for p in CHILD or []:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass


def on_signal(sig, _frame):
    kill_children()
    sys.exit(128 + sig)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pct(xs, q):
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def wrap_time(rss_prefix, rank_var):
    """argv prefix: run the program under GNU time, peak RSS to <prefix>.<rank>."""
    return ["sh", "-c", 'exec /usr/bin/time -f %M -o "$0.${' + rank_var + ':-0}" "$@"', rss_prefix]


def read_rss(prefix, ranks):
    out = []
    for r in range(ranks):
        try:
            lines = [l for l in open(f"{prefix}.{r}").read().split("\n") if l.strip()]
            out.append(int(lines[-1]) * 1024)
        except (OSError, ValueError, IndexError):
            out.append(None)
    return out


def launch(argvs, envs, log, step_re, timeout):
    """Start every argv (its own process group), timestamp rank 0's stdout lines.
    Returns (t_launch, [(t, line)], rc list)."""
    global CHILD
    lines = []
    t0 = time.time()
    procs = []
    for i, (argv, env) in enumerate(zip(argvs, envs)):
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE if i == 0 else open(log + f".rank{i}", "w"),
                                      stderr=subprocess.STDOUT, start_new_session=True, text=True, bufsize=1))
    CHILD = procs
    timer = threading.Timer(timeout, kill_children)
    timer.start()
    with open(log, "w") as lf:
        for line in procs[0].stdout:
            t = time.time()
            lines.append((t, line.rstrip("\n")))
            lf.write(f"{t - t0:10.3f} {line}")
    rcs = [p.wait() for p in procs]
    timer.cancel()
    CHILD = None
    return t0, lines, rcs


def measure(fw, size, ranks, a, work, tag):
    cores = os.cpu_count()
    threads = max(1, cores // ranks)
    classes = 10 if size <= 64 else 1000
    steps = a.steps[size] if fw != "chainer" else a.chainer_steps[size]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    rss = os.path.join(work, f"rss-{tag}")
    out = os.path.join(work, f"out-{tag}")
    log = os.path.join(work, f"log-{tag}.txt")
    report = os.path.join(work, f"report-{tag}.json")
    if fw == "dpt":
        prog = [a.dpt_train, "--dataset", "synthetic", "--synthetic-images", str(a.batch * ranks * 4),
                "--image-size", str(size), "--num-classes", str(classes), "--width", "1",
                "--batch-size", str(a.batch), "--iterations", str(steps), "--no-val", "--threads", str(threads),
                "--log-every", "1", "--prefetch", "1", "--report", report]
        if ranks == 1:
            argvs = [wrap_time(rss, "DPT_NO_RANK") + prog]
        else:
            argvs = [[a.dpt_launch, "-n", str(ranks), "--threads", str(threads), "--"]
                     + wrap_time(rss, "OMPI_COMM_WORLD_RANK") + prog]
        envs = [env]
        step_re = re.compile(r"^epoch \d+/\d+ step \d+/\d+ ")
    elif fw == "torch":
        script = [PY, os.path.join(here, "torch_train.py"), "--image-size", str(size), "--batch", str(a.batch),
                  "--threads", str(threads), "--steps", str(steps), "--classes", str(classes), "--out", out]
        argvs, envs = [], []
        port = str(free_port())
        for r in range(ranks):
            e = dict(env)
            pin = []
            if ranks > 1:  # the same placement as dpt-launch's and mpirun's: one core per rank
                e.update(RANK=str(r), WORLD_SIZE=str(ranks), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                         MASTER_PORT=port)
                pin = ["taskset", "-c", ",".join(str(c) for c in range(r * threads, (r + 1) * threads))]
            argvs.append(pin + wrap_time(rss, "RANK") + script)
            envs.append(e)
        step_re = re.compile(r"^STEP \d+ ")
    else:
        script = [PY, os.path.join(here, "chainer_train.py"), "--image-size", str(size), "--batch", str(a.batch),
                  "--threads", str(threads), "--steps", str(steps), "--classes", str(classes), "--out", out]
        if ranks == 1:
            argvs = [wrap_time(rss, "OMPI_COMM_WORLD_RANK") + script]
        else:
            argvs = [["mpirun", "-n", str(ranks), "--bind-to", "core", "-x", "OMP_NUM_THREADS", "-x",
                      "OPENBLAS_NUM_THREADS"] + wrap_time(rss, "OMPI_COMM_WORLD_RANK") + script]
        envs = [env]
        step_re = re.compile(r"^STEP \d+ ")
    command = shlex.join(argvs[0]) if len(argvs) == 1 else " & ".join(
        " ".join(f"{k}={envs[i][k]}" for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k in envs[i])
        + " " + shlex.join(v) for i, v in enumerate(argvs))
    t_wall = time.time()
    print(f"bench: {tag}: {fw} {size}px {ranks} rank(s) x {threads} thread(s), {steps} steps", file=sys.stderr,
          flush=True)
    t0, lines, rcs = launch(argvs, envs, log, step_re, a.timeout)
    stamps = [t for t, l in lines if step_re.match(l)]
    rec = {"framework": fw, "image_size": size, "classes": classes, "ranks": ranks, "threads_per_rank": threads,
           "batch_per_rank": a.batch, "steps": steps, "warmup_steps": a.warmup, "command": command,
           "env": {k: env[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
           "exit_status": rcs, "wall_s": time.time() - t_wall, "log": os.path.basename(log)}
    if any(rcs) or len(stamps) < steps:
        rec["error"] = f"exit {rcs}, {len(stamps)} of {steps} step lines; log tail: " + \
            " | ".join(l for _, l in lines[-8:])
        print(f"bench: {tag}: FAILED: {rec['error']}", file=sys.stderr, flush=True)
        return rec
    gaps = [b - a_ for a_, b in zip(stamps, stamps[1:])]
    steady = gaps[a.warmup - 1:] if a.warmup >= 1 else gaps
    imgs = ranks * a.batch
    med = statistics.median(steady)
    rec.update({"time_to_first_step_s": stamps[0] - t0, "step_s": steady, "step_s_median": med,
                "images_per_s": imgs / med,
                "images_per_s_p25_p75": [imgs / pct(steady, 0.75), imgs / pct(steady, 0.25)],
                "images_per_s_min_max": [imgs / max(steady), imgs / min(steady)],
                "peak_rss_bytes_per_rank": read_rss(rss, ranks)})
    rec["peak_rss_bytes"] = max(x for x in rec["peak_rss_bytes_per_rank"] if x) \
        if any(rec["peak_rss_bytes_per_rank"]) else None
    if fw == "dpt":
        try:
            rep = json.load(open(report))
            rec["report"] = {
                "step_p50_s_per_rank": [r["phases"]["step"]["p50_s"] for r in rep["ranks"]],
                "step_max_s_per_rank": [r["phases"]["step"]["max_s"] for r in rep["ranks"]],
                "allreduce_p50_s_per_rank": [r["phases"].get("allreduce", {}).get("p50_s") for r in rep["ranks"]],
                "peak_rss_bytes_per_rank": [r["peak_rss_bytes"] for r in rep["ranks"]],
                "throughput_images_per_s": rep["throughput"]["images_per_s"],
                "software": rep.get("software"), "parameters": rep.get("config", {}).get("parameters"),
                "binding": [r.get("binding", {}).get("applied") for r in rep["ranks"]]}
            rec["framework_version"] = "dpt-train " + str((rep.get("software") or {}).get("dpt"))
            p50 = max(rec["report"]["step_p50_s_per_rank"])
            rec["report_vs_harness_step_p50"] = p50 / med
        except (OSError, ValueError, KeyError, TypeError) as e:
            rec["report_error"] = str(e)
        m = next((l for _, l in lines if "parameters," in l), "")
        mm = re.search(r"([0-9]+) parameters", m)
        if mm:
            rec["parameters"] = int(mm.group(1))
    else:
        try:
            o = json.load(open(out + ".0"))
            rec["framework_version"] = o["framework"]
            rec["parameters"] = o["parameters"]
            rec["comm"] = o.get("comm")
            rec["inprocess_step_s_rank0"] = o["step_s"]
            rec["inprocess_vs_harness_step_median"] = statistics.median(o["step_s"][a.warmup:]) / med
        except (OSError, ValueError, KeyError, statistics.StatisticsError) as e:
            rec["out_error"] = str(e)
    print(f"bench: {tag}: {rec['images_per_s']:.2f} img/s (median of {len(steady)} steps, "
          f"{rec['step_s_median']:.2f} s/step), first step at {rec['time_to_first_step_s']:.1f} s, "
          f"peak RSS {rec['peak_rss_bytes'] / 2**30:.2f} GiB", file=sys.stderr, flush=True)
    return rec


GMAC = {32: 1.298, 224: 4.089}  # ResNet-50 v1.5 per image: small stem at 32 px, ImageNet stem at 224 px


def chainer_skip_reason(runs, size, ranks, a):
    done = [r for r in runs if r["framework"] == "chainer" and r["ranks"] == ranks and "step_s_median" in r]
    if not done:
        return f"not run at {size} px (--chainer-sizes {','.join(map(str, a.chainer_sizes))})"
    r = done[0]
    est = r["step_s_median"] * GMAC.get(size, 1) / GMAC.get(r["image_size"], 1)
    launch = est * a.chainer_steps.get(size, 2) + r["time_to_first_step_s"] - r["step_s_median"]
    return (f"not run at {size} px: one ChainerMN step at {r['image_size']} px took {r['step_s_median']:.0f} s here "
            f"({ranks} rank{'s' if ranks > 1 else ''}); {size} px costs {GMAC.get(size, 1) / GMAC.get(r['image_size'], 1):.2f}x the "
            f"MACs, so ~{est:.0f} s per step and ~{launch / 60:.1f} min for a launch of {a.chainer_steps.get(size, 2)} steps "
            "(1 warm-up + 1 timed: no spread); left out of run-all to keep the suite within its 20-minute budget. "
            "CHAINER_SIZES=32,224 bench/train/run.sh runs it (bench/results/train-chainer224.md when present)")


def summarize(runs, a):
    """One row per (size, ranks): per framework the median over its launches; ratios."""
    rows, goals = [], []
    for size in a.sizes:
        for ranks in a.ranks:
            row = {"image_size": size, "ranks": ranks, "frameworks": {}}
            for fw in a.frameworks:
                rs = [r for r in runs if r["framework"] == fw and r["image_size"] == size and r["ranks"] == ranks]
                ok = [r for r in rs if "images_per_s" in r]
                if not rs and fw == "chainer":
                    row["frameworks"][fw] = {"not_run": chainer_skip_reason(runs, size, ranks, a)}
                    continue
                if not ok:
                    row["frameworks"][fw] = {"error": rs[0].get("error") if rs else "not run"}
                    continue
                allsteps = [s for r in ok for s in r["step_s"]]
                imgs = ranks * a.batch
                row["frameworks"][fw] = {
                    "version": ok[0].get("framework_version"), "parameters": ok[0].get("parameters"),
                    "launches": len(ok), "steady_steps": len(allsteps),
                    "images_per_s": statistics.median(r["images_per_s"] for r in ok),
                    "images_per_s_p25_p75": [imgs / pct(allsteps, 0.75), imgs / pct(allsteps, 0.25)],
                    "images_per_s_min_max": [imgs / max(allsteps), imgs / min(allsteps)],
                    "step_s_median": statistics.median(allsteps),
                    "time_to_first_step_s": statistics.median(r["time_to_first_step_s"] for r in ok),
                    "peak_rss_bytes": statistics.median(r["peak_rss_bytes"] for r in ok),
                    "peak_rss_bytes_per_rank": ok[0]["peak_rss_bytes_per_rank"]}
            f = row["frameworks"]
            for peer in ("torch", "chainer"):
                if "images_per_s" in f.get("dpt", {}) and "images_per_s" in f.get(peer, {}):
                    d, p = f["dpt"], f[peer]
                    row[f"dpt_vs_{peer}"] = {
                        "images_per_s": d["images_per_s"] / p["images_per_s"],
                        "images_per_s_iqr_range": [d["images_per_s_p25_p75"][0] / p["images_per_s_p25_p75"][1],
                                                   d["images_per_s_p25_p75"][1] / p["images_per_s_p25_p75"][0]],
                        "peak_rss": d["peak_rss_bytes"] / p["peak_rss_bytes"],
                        "time_to_first_step": d["time_to_first_step_s"] / p["time_to_first_step_s"]}
            if "dpt_vs_torch" in row:
                r = row["dpt_vs_torch"]
                lbl = f"{size}x{size}, {ranks} rank{'s' if ranks > 1 else ''} x {max(1, os.cpu_count() // ranks)} threads"
                goals.append({"goal": f"dpt-train CPU images/s vs PyTorch 1.13 ({'DDP gloo, ' if ranks > 1 else ''}{lbl}, batch {a.batch}/rank)",
                              "target": ">= 1.5x (floor 1x)", "measured": round(r["images_per_s"], 3),
                              "range": [round(x, 3) for x in r["images_per_s_iqr_range"]],
                              "met": r["images_per_s"] >= 1.5, "floor_met": r["images_per_s"] >= 1.0})
                goals.append({"goal": f"dpt-train peak memory (largest rank) vs PyTorch's, {lbl}",
                              "target": "<= 1x", "measured": round(r["peak_rss"], 3), "met": r["peak_rss"] <= 1.0})
            rows.append(row)
    return rows, goals


def fmt_ips(f):
    if "images_per_s" not in f:
        return "failed"
    lo, hi = f["images_per_s_p25_p75"]
    return f"{f['images_per_s']:.2f} ({lo:.2f}-{hi:.2f})"


def write_md(doc, path):
    h = doc["header"]
    L = ["# Training: dpt-train vs PyTorch 1.13 vs ChainerMN (CPU)\n",
         f"Produced by `{doc['command']}` in {doc['elapsed_s']:.0f} s.  {benchinfo.md_machine(h)}  "
         f"dpt-train built from commit {doc.get('dpt_build_commit') or '?'}.\n",
         "ResNet-50 v1.5 (torchvision's definition in all three; 32 px: 3x3/1 stem without max pool, "
         "10 classes, 23,520,842 parameters; 224 px: ImageNet stem, 1000 classes, 25,557,032 parameters), "
         f"synthetic data, batch {doc['batch_per_rank']} per rank, momentum SGD, fp32; threads per rank = "
         f"{os.cpu_count()} cores / ranks; 2 ranks: dpt-launch -n 2 (ring all-reduce) / PyTorch "
         "DistributedDataParallel over gloo (one process per rank, pinned to its core like the others) / "
         "ChainerMN `naive` communicator (mpirun -n 2, mpi4py).\n",
         "**How it is measured** (the same for all three, by `bench/train/bench.py`): rank 0 prints a line per "
         "step and the harness timestamps each line on arrival; a step's time is the gap between two lines.  "
         f"images/s = ranks x batch / median step time over the steps after the first {doc['warmup']} "
         "(steady state); in brackets the p25-p75 range over those steps.  Time to first step: from the launch "
         "(process start) to the first step's line.  Peak memory: GNU time `%M` of every rank's process, the "
         "largest rank.  Cross-checks in train.json: dpt's job report (`phases.step.p50_s` per rank; "
         "`report_vs_harness_step_p50`) and the Python scripts' in-process step timers.  "
         "Launches are interleaved per configuration (dpt, torch, chainer).\n",
         "## Results\n",
         "| px | ranks | framework | steady steps | images/s median (p25-p75) | s/step | time to first step | peak RSS (largest rank) |",
         "|---:|---:|---|---:|---|---:|---:|---:|"]
    for row in doc["rows"]:
        for fw, f in row["frameworks"].items():
            if "not_run" in f:
                L.append(f"| {row['image_size']} | {row['ranks']} | {fw} | - | {f['not_run']} | | | |")
                continue
            if "images_per_s" not in f:
                L.append(f"| {row['image_size']} | {row['ranks']} | {fw} | - | failed: {f.get('error', '')[:200]} | | | |")
                continue
            L.append(f"| {row['image_size']} | {row['ranks']} | {fw} ({f['version']}) | {f['steady_steps']} | "
                     f"{fmt_ips(f)} | {f['step_s_median']:.2f} | {f['time_to_first_step_s']:.1f} s | "
                     f"{f['peak_rss_bytes'] / 2**30:.2f} GiB |")
    L += ["", "## Ratios (dpt-train / peer, same run)\n",
          "| px | ranks | vs | images/s ratio (IQR range) | peak memory ratio | time to first step ratio |",
          "|---:|---:|---|---|---:|---:|"]
    for row in doc["rows"]:
        for peer in ("torch", "chainer"):
            r = row.get(f"dpt_vs_{peer}")
            if r:
                lo, hi = r["images_per_s_iqr_range"]
                L.append(f"| {row['image_size']} | {row['ranks']} | {peer} | **{r['images_per_s']:.2f}x** ({lo:.2f}-{hi:.2f}) | "
                         f"{r['peak_rss']:.2f}x | {r['time_to_first_step']:.2f}x |")
    L += ["", "## Goals\n", "| goal | target | measured | met |", "|---|---|---:|---|"]
    for g in doc["goals"]:
        met = "**met**" if g["met"] else ("**not met** (floor 1x met)" if g.get("floor_met") else "**not met**")
        rng = f" ({g['range'][0]}-{g['range'][1]})" if "range" in g else ""
        L.append(f"| {g['goal']} | {g['target']} | {g['measured']}{rng} | {met} |")
    L += ["", "## Notes\n"] + [f"- {n}" for n in doc["notes"]]
    L += ["", "## Commands (first launch of each)\n"]
    seen = set()
    for r in doc["runs"]:
        k = (r["framework"], r["image_size"], r["ranks"])
        if k not in seen:
            seen.add(k)
            L.append(f"- {r['framework']} {r['image_size']} px, {r['ranks']} rank(s), env "
                     f"{' '.join(f'{k_}={v}' for k_, v in r['env'].items())}: `{r['command']}`")
    open(path, "w").write("\n".join(L) + "\n")


def parse_steps(s):
    d = {}
    for item in s.split(","):
        k, v = item.split(":")
        d[int(k)] = int(v)
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dpt-train", required=True)
    ap.add_argument("--dpt-launch", required=True)
    ap.add_argument("--out", required=True, help="OUT prefix: OUT.json, OUT.md")
    ap.add_argument("--sizes", default="32,224")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--frameworks", default="dpt,torch,chainer")
    ap.add_argument("--steps", default="32:9,224:5", help="steps per launch for dpt and torch, per size")
    ap.add_argument("--chainer-steps", default="32:3,224:2", help="steps per launch for chainer, per size")
    ap.add_argument("--chainer-sizes", default="32", help="sizes chainer runs at (its 224 px steps take minutes)")
    ap.add_argument("--warmup", type=int, default=1, help="first steps left out of the steady state")
    ap.add_argument("--repeat", type=int, default=1, help="launches per framework and configuration")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--work", default=None)
    ap.add_argument("--command", default=None)
    ap.add_argument("--build-commit", default=None)
    ap.add_argument("--note", action="append", default=[])
    a = ap.parse_args()
    a.sizes = [int(x) for x in a.sizes.split(",")]
    a.ranks = [int(x) for x in a.ranks.split(",")]
    a.frameworks = a.frameworks.split(",")
    a.steps = parse_steps(a.steps)
    a.chainer_steps = parse_steps(a.chainer_steps)
    a.chainer_sizes = [int(x) for x in a.chainer_sizes.split(",")]
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    work = a.work or os.path.dirname(a.out)
    os.makedirs(work, exist_ok=True)
    # OUT's folder now, not after the launches: a run of many minutes once lost its page to a
    # missing folder at the end
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    h = benchinfo.header()
    t_start = time.time()
    runs = []
    i = 0
    for size in a.sizes:
        for ranks in a.ranks:
            for rep in range(a.repeat):
                order = a.frameworks[rep % len(a.frameworks):] + a.frameworks[:rep % len(a.frameworks)]
                for fw in order:
                    if fw == "chainer" and size not in a.chainer_sizes:
                        continue
                    i += 1
                    runs.append(measure(fw, size, ranks, a, work, f"{i:02d}-{fw}-{size}-{ranks}"))
    rows, goals = summarize(runs, a)
    notes = list(a.note)
    notes += [
        "ChainerMN runs fewer steps (--chainer-steps) than dpt and PyTorch (--steps), and by default only at 32 px "
        "(--chainer-sizes; the 224 px rows say why): one of its steps takes tens of seconds on this machine "
        "(numpy/OpenBLAS im2col convolutions; the iDeep CPU acceleration, ideep4py, has no build for this "
        "Python 3.11 and is not a Debian package), so its figures rest on fewer steps; the goals compare dpt with "
        "PyTorch only.",
        "PyTorch's DDP ranks are started directly (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, what torchrun sets) "
        "so that GNU time wraps each rank; torchrun's own start-up cost is measured in peers.md.",
        "dpt-train's synthetic data go through its loader (prefetch 1); the Python scripts reuse one random "
        "batch in memory, which favours them slightly.",
    ]
    doc = {"schema": "dpt.bench.train/2", "command": a.command or " ".join(sys.argv), "header": h,
           "dpt_build_commit": a.build_commit, "elapsed_s": time.time() - t_start, "batch_per_rank": a.batch,
           "warmup": a.warmup, "steps": a.steps, "chainer_steps": a.chainer_steps, "repeat": a.repeat,
           "rows": rows, "goals": goals, "notes": notes, "runs": runs}
    json.dump(doc, open(a.out + ".json", "w"), indent=1)
    write_md(doc, a.out + ".md")
    print(f"bench: wrote {a.out}.json and {a.out}.md in {doc['elapsed_s']:.0f} s", file=sys.stderr)
    failed = [r for r in runs if "error" in r]
    return 1 if failed and len(failed) == len(runs) else 0


if __name__ == "__main__":
    sys.exit(main())
