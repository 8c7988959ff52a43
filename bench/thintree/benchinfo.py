"""What every benchmark result records: the machine, the software versions, the date.

Used by bench/thintree/summarize.py, bench/peers/*.py and bench/run-all.sh
(`python3 bench/thintree/benchinfo.py` prints the JSON)."""
import datetime
import json
import os
import re
import subprocess
import sys


def _run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def isa():
    """The widest x86 vector ISA of this CPU (from /proc/cpuinfo's flags) and what oneDNN may use:
    its kernels differ per ISA (AVX2 vs AVX-512), so every CPU figure names both."""
    try:
        flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
    except OSError:
        flags = []
    best = ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "AVX" if "avx" in flags
            else "SSE4.1" if "sse4_1" in flags else "unknown")
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
    return {"isa": best, "onednn_max_cpu_isa": cap or None}


def machine():
    lscpu = _run(["lscpu"])
    field = lambda name: next((l.split(":", 1)[1].strip() for l in lscpu.splitlines()
                               if l.startswith(name + ":")), "")
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1)) * 1024
    except (OSError, AttributeError):
        pass
    try:
        load = open("/proc/loadavg").read().split()[:3]
    except OSError:
        load = []
    return {"cpu_model": field("Model name"), **isa(), "cpus": int(field("CPU(s)") or 0),
            "cores_online": os.cpu_count(), "threads_per_core": int(field("Thread(s) per core") or 0),
            "memory_bytes": mem, "kernel": os.uname().release, "hostname": os.uname().nodename,
            "loadavg_at_start": [float(x) for x in load],
            "note": "2 cores shared with other jobs: absolute figures are noisy; compare ratios within one run"}


def versions():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    v = {"dpt_git": _run(["git", "-C", root, "describe", "--always", "--dirty"]),
         "slurm": _run(["slurmd", "-V"]), "open_mpi": _run(["mpirun", "--version"]).split("\n")[0],
         "python": sys.version.split()[0]}
    for py in ("python3", "/usr/bin/python3"):
        t = _run([py, "-c", "import torch; print(torch.__version__)"])
        if t:
            v["torch"] = t + " (" + py + ")"
            break
    return v


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def header():
    return {"machine": machine(), "versions": versions(), "date": now()}


def median(xs):
    s = sorted(xs)
    n = len(s)
    if not n:
        return float("nan")
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def md_machine(h):
    m, v = h["machine"], h["versions"]
    cap = m.get("onednn_max_cpu_isa")
    return (f"Machine: {m['cpu_model']} ({m.get('isa', 'ISA not recorded')}"
            + (f"; oneDNN capped to {cap} by ONEDNN_MAX_CPU_ISA" if cap else "") + f"), {m['cores_online']} cores online, "
            f"{m['memory_bytes'] / 2**30:.0f} GiB, Linux {m['kernel']}; load at start "
            f"{' '.join(str(x) for x in m['loadavg_at_start'])} (shared with other jobs).  "
            f"Software: dpt {v['dpt_git']}, {v['slurm']}, {v['open_mpi']}"
            + (f", torch {v['torch']}" if "torch" in v else "") + f".  Date: {h['date']}.")


if __name__ == "__main__":
    print(json.dumps(header(), indent=2))
