#!/usr/bin/env python3
"""bench/gpu/check_summary.py — the summary of bench/gpu/check.sh (issue 22's device check).

  check_summary.py line OUTDIR PHASE RC SECONDS LIMIT
      reads OUTDIR/logs/PHASE.log (and the harness's PHASE.json for resnet/graphs/fused/compile), appends
      one line "phase  pass|fail|timeout  seconds  limit  figure" to OUTDIR/phases.tsv, prints it
  check_summary.py write OUTDIR [--commit C] [--budget S]
      OUTDIR/phases.tsv + logs -> OUTDIR/summary.json (dpt.gpu-check/1) and OUTDIR/summary.md

Only the standard library: it runs on the GPU machine's python and in CI on canned logs."""
import argparse
import json
import os
import re
import sys


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def status_of(rc):
    rc = int(rc)
    return "pass" if rc == 0 else "timeout" if rc in (124, 137) else "fail"


def versions(log):
    v = {k: val.strip() for k, val in re.findall(r"^VERSION (\S+) (.*)$", log, re.M)}
    m = re.search(r"^(NVIDIA [^,\n]+), ([0-9.]+), (\d+ MiB)", log, re.M)  # nvidia-smi --query-gpu csv row
    if m:
        v["gpu"], v["driver"], v["memory"] = m.group(1).strip(), m.group(2), m.group(3)
    return v


def code_str(n):
    """cuDNN 9's and NCCL 2's version codes (major*10000 + minor*100 + patch) as 9.14.0; anything else as is."""
    try:
        n = int(n)
    except (TypeError, ValueError):
        return str(n)
    return f"{n // 10000}.{n // 100 % 100}.{n % 100}" if n >= 10000 else str(n)


def fig_versions(log, outdir):
    v = versions(log)
    parts = [v.get("gpu", "GPU ?"), "driver " + v.get("driver", "?"), "cuDNN " + code_str(v.get("cudnn", "?")),
             "NCCL " + code_str(v.get("nccl", "?")), "NVRTC " + v.get("nvrtc", "?")]
    t = v.get("torch", "")
    parts.append("torch " + t.split()[0] if t else "torch ?")
    return ", ".join(parts)


def fig_smoke(log, outdir):
    res = re.findall(r"^SMOKE (\S+) (ok|fail)(.*)$", log, re.M)
    if not res:
        return "no precision finished"
    return "; ".join(f"{p} ok" if s == "ok" else f"{p} FAIL{rest}" for p, s, rest in res)


def fig_ctest(log, outdir):
    """from ctest's per-test lines, so that a run stopped at the phase's limit still says what passed,
    what failed and which test was running; one or more ctest runs (check.sh runs the slow fused tests
    in a second one, or one run per test: ctestfused), each beginning with 'Test project'; a line
    'CTEST PLANNED: NAME...' names tests the phase meant to run, counted when its limit kept them
    from starting"""
    line = re.compile(r"^\s*\d+/(\d+) Test\s+#\d+: (\S+) \.*\s*(?:\*\*\*)?(.+?)\s+[0-9.]+ sec\s*$", re.M)
    total, res, running = 0, {}, []
    for run in log.split("Test project")[1:]:
        done = line.findall(run)
        started = re.findall(r"^\s*Start\s+\d+: (\S+)\s*$", run, re.M)
        total += int(done[0][0]) if done else len(started)
        res.update({n: why for _, n, why in done})
        running += [n for n in started if n not in res]
    planned = [n for ln in re.findall(r"^CTEST PLANNED:(.*)$", log, re.M) for n in ln.split()]
    unstarted = [n for n in dict.fromkeys(planned) if n not in res and n not in running]
    total += len(unstarted)
    if not res and not running:
        return "no ctest output (ended early?)" + (f"; not started: {', '.join(unstarted)}" if unstarted else "")
    passed = [n for n, w in res.items() if w == "Passed"]
    skipped = [n for n, w in res.items() if w in ("Skipped", "Not Run")]
    failed = [(n, "NUMERICAL" if w == "Exception: Numerical" else w) for n, w in res.items()
              if w not in ("Passed", "Skipped", "Not Run")]
    s = f"{len(passed)}/{total} passed, {len(skipped)} skipped"
    if failed:
        s += "; failed: " + ", ".join(f"{n} ({why})" for n, why in failed)
    if running:
        s += f"; stopped at the phase's limit in {running[0]}, {total - len(res)} not finished"
    if unstarted:
        s += f"; not started: {', '.join(unstarted)}"
    return s


def fig_mnist(log, outdir):
    acc = re.findall(r"epoch (\d+) validation: top-1 ([0-9.]+)%", log)
    if not acc:
        return "no validation line"
    ep, top1 = acc[-1]
    m = re.findall(r"([0-9.]+) img/s", log)
    return f"top-1 {top1}% after epoch {ep}" + (f", {m[-1]} img/s" if m else "")


def bench_doc(outdir, name):
    p = os.path.join(outdir, "logs", name + ".json")
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fig_bench(name):
    def fig(log, outdir):
        doc = bench_doc(outdir, name)
        if not doc:
            m = re.findall(r"^(?:run\.sh|bench): .*$", log, re.M)
            return "no results written" + (f" ({m[-1][:200]})" if m else "")
        parts = []
        for r in doc.get("runs", []):
            if "images_per_s" in r:
                parts.append(f"{r['config']} {r['images_per_s']:.0f} img/s")
            else:
                parts.append(f"{r['config']} " + ("not run" if "not_run" in r else "FAIL: " + str(r.get("error", "?"))[:160]))
        for row in doc.get("rows", []):
            for v in row.get("vs", []):
                if "images_per_s_ratio" in v:
                    parts.append(f"{row['dpt_config']}/{v['config']} {v['images_per_s_ratio']:.2f}x"
                                 + (f" (mem {v['peak_memory_ratio']:.2f}x)" if "peak_memory_ratio" in v else ""))
        return "; ".join(parts) or "no run"
    return fig


def fig_sanitize(log, outdir):
    errs = re.findall(r"ERROR SUMMARY: (\d+) error", log)
    skip = re.findall(r"SKIPPED gpu-sanitize[^\n]*", log)
    if skip and not errs:
        return skip[0]
    return f"{len(errs)} run(s), errors: {', '.join(errs) or 'none reported'}"


def fig_jpeg(log, outdir):
    out = {}
    for dev, js in re.findall(r"^JPEG (gpu|cpu) (\{.*\})$", log, re.M):
        try:
            out[dev] = json.loads(js)
        except ValueError:
            pass
    if not out:
        last = [x for x in log.strip().splitlines() if x.strip()]
        return "no measurement" + (f" ({last[-1][:200]})" if last else "")
    parts = []
    for dev in ("gpu", "cpu"):
        d = out.get(dev)
        if d:
            ips = d.get("images_per_s")
            cores = d.get("cores_used")
            parts.append((f"{dev} {ips:.0f} img/s" if isinstance(ips, (int, float)) else f"{dev} ?")
                         + (f" on {cores:.1f} cores" if isinstance(cores, (int, float)) else ""))
    return ", ".join(parts)


def kernel_table(tsv):
    """dpt-train --profile-steps' records (step, kind, stream, start ns, end ns, name) -> steps, per-step span
    (first start to last end) and [(ms per step, launches per step, name)] by time, most first."""
    per, steps = {}, {}
    for ln in read(tsv).splitlines():
        f = ln.split("\t", 5)
        if len(f) < 6 or not f[3].isdigit() or not f[4].isdigit() or not f[0].lstrip("-").isdigit():
            continue
        st, t0, t1 = int(f[0]), int(f[3]), int(f[4])
        if st < 0:  # recorded outside the profiled steps (set-up, the last step's tail)
            continue
        a, b = steps.get(st, (t0, t1))
        steps[st] = (min(a, t0), max(b, t1))
        name = f[5] if f[1] == "kernel" else f[1]
        ms, cnt = per.get(name, (0.0, 0))
        per[name] = (ms + (t1 - t0) / 1e6, cnt + 1)
    n = max(len(steps), 1)
    span = sum(b - a for a, b in steps.values()) / 1e6 / n
    rows = sorted(((ms / n, cnt / n, name) for name, (ms, cnt) in per.items()), key=lambda r: (-r[0], r[2]))
    return len(steps), span, rows


def kernels(a):
    n, span, rows = kernel_table(a.tsv)
    if not rows:
        print(f"KERNELS {a.label}: no records in {a.tsv}")
        return 1
    busy = sum(r[0] for r in rows)
    print(f"KERNELS {a.label}: {n} step(s), span {span:.1f} ms/step, kernel time {busy:.1f} ms/step, "
          f"{sum(r[1] for r in rows):.0f} launches/step; top: "
          + "; ".join(f"{ms:.1f} ms x{c:.1f} {nm[:90]}" for ms, c, nm in rows[:3]))
    for ms, c, nm in rows[:a.top]:
        print(f"  {ms:9.2f} ms/step {100 * ms / busy if busy else 0:5.1f}% {c:6.1f}x  {nm[:160]}")
    return 0


def fig_profile(log, outdir):
    ks = re.findall(r"^KERNELS (.*)$", log, re.M)
    return " || ".join(k[:400] for k in ks) if ks else "no kernel records"


FIGURES = {"versions": fig_versions, "smoke": fig_smoke, "profile": fig_profile, "ctest": fig_ctest,
           "ctestfused": fig_ctest, "mnist": fig_mnist,
           "resnet": fig_bench("resnet"), "graphs": fig_bench("graphs"), "fused": fig_bench("fused"),
           "compile": fig_bench("compile"),
           "sanitize": fig_sanitize, "jpeg": fig_jpeg}


def line(a):
    log = read(os.path.join(a.outdir, "logs", a.phase + ".log"))
    try:
        fig = FIGURES[a.phase](log, a.outdir)
    except Exception as e:  # a figure that cannot be read must not lose the phase's line
        fig = f"(figure not parsed: {type(e).__name__}: {e})"
    st = status_of(a.rc)
    if st == "timeout":
        fig = f"stopped at its {a.limit}-s limit; " + fig
    fig = " ".join(fig.split())
    row = f"{a.phase}\t{st}\t{int(a.seconds)}\t{int(a.limit)}\t{fig}"
    with open(os.path.join(a.outdir, "phases.tsv"), "a") as f:
        f.write(row + "\n")
    print(f"== {a.phase}: {st} in {int(a.seconds)} s: {fig}", flush=True)
    return 0


def write(a):
    phases = []
    for ln in read(os.path.join(a.outdir, "phases.tsv")).splitlines():
        f = ln.split("\t")
        if len(f) >= 5:
            phases.append({"phase": f[0], "status": f[1], "seconds": int(f[2]), "limit_s": int(f[3]),
                           "figure": "\t".join(f[4:])})
    v = versions(read(os.path.join(a.outdir, "logs", "versions.log")))
    benches = {n: bench_doc(a.outdir, n) for n in ("resnet", "graphs", "fused", "compile")}
    doc = {"schema": "dpt.gpu-check/1", "commit": a.commit, "budget_s": a.budget, "versions": v, "phases": phases,
           "bench": {n: {"rows": d.get("rows"), "goals": d.get("goals"), "runs": [
               {k: r.get(k) for k in ("config", "batch", "images_per_s", "peak_bytes", "error", "not_run") if k in r}
               for r in d.get("runs", [])]} for n, d in benches.items() if d}}
    with open(os.path.join(a.outdir, "summary.json"), "w") as f:
        json.dump(doc, f, indent=1)
    L = ["# dpt GPU device check (bench/gpu/check.sh)", "",
         f"- dpt commit: {a.commit}",
         f"- device: {v.get('gpu', '?')}, driver {v.get('driver', '?')}, {v.get('memory', '?')}",
         f"- cuDNN {code_str(v.get('cudnn', '?'))}, NCCL {code_str(v.get('nccl', '?'))}, "
         f"NVRTC {v.get('nvrtc', '?')}, CUDA runtime {v.get('cudart', '?')}, torch {v.get('torch', '?')}",
         f"- budget: {a.budget} s", "",
         "| phase | result | seconds (limit) | figure |", "|---|---|---|---|"]
    for p in phases:
        L.append(f"| {p['phase']} | {p['status']} | {p['seconds']} ({p['limit_s']}) | {p['figure'].replace('|', '/')} |")
    for n, d in benches.items():
        if d and d.get("goals"):
            L += ["", f"## {n}: goals", "", "| goal | target | measured | met |", "|---|---|---|---|"]
            L += [f"| {g['goal']} | {g['target']} | {g['measured']} | {'met' if g['met'] else 'NOT met'} |"
                  for g in d["goals"]]
    with open(os.path.join(a.outdir, "summary.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("line")
    p.add_argument("outdir")
    p.add_argument("phase", choices=sorted(FIGURES))
    p.add_argument("rc", type=int)
    p.add_argument("seconds", type=int)
    p.add_argument("limit", type=int)
    p = sub.add_parser("write")
    p.add_argument("outdir")
    p.add_argument("--commit", default="unknown")
    p.add_argument("--budget", type=int, default=0)
    p = sub.add_parser("kernels")
    p.add_argument("tsv")
    p.add_argument("--label", default="")
    p.add_argument("--top", type=int, default=25)
    a = ap.parse_args(argv)
    return {"line": line, "write": write, "kernels": kernels}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
