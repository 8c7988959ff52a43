#!/usr/bin/env python3
"""bench/gpu/cudnn_pick.py WANT — the folder of a libcudnn.so.9 at least as new as WANT (e.g. 91900,
the headers dpt was built with) for bench/gpu/device.sh: nothing when the first one on
LD_LIBRARY_PATH (the machine's, as .gpu/env.sh set it) is new enough or none is; else the first new
enough among the system's, this Python's site-packages and /opt's (PyTorch's wheel: nvidia/cudnn/lib
under /opt/torch/.venv on the H200 kind, a hidden folder that glob's ** never enters, so the second
visit's dpt ran on the machine's older 9.14).  Each is asked its version (cudnnGetVersion) in a
process of its own with its folder first on LD_LIBRARY_PATH, as dpt-train will load it: libcudnn.so.9
loads its parts (libcudnn_graph.so.9, ...) by name, and in one process the first cuDNN's parts answer
for every later one (the third visit: PyTorch's 9.19 was asked after the machine's 9.14, reported
91400, and was passed over)."""
import os
import site
import subprocess
import sys

_ASK = "import ctypes,sys; f=ctypes.CDLL(sys.argv[1]).cudnnGetVersion; f.restype=ctypes.c_size_t; print(f())"


def version(path):
    """cudnnGetVersion() of the libcudnn.so.9 at path, loaded as dpt-train would load it; -1 if it fails"""
    d = os.path.dirname(os.path.abspath(path))
    old = os.environ.get("LD_LIBRARY_PATH", "")
    env = dict(os.environ, LD_LIBRARY_PATH=d + (":" + old if old else ""))
    try:
        r = subprocess.run([sys.executable, "-c", _ASK, path], env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return -1
    out = r.stdout.strip()
    return int(out) if r.returncode == 0 and out.isdigit() else -1


def found(roots):
    """every libcudnn.so.9 under roots, hidden folders (.venv) included, each file once"""
    seen = set()
    for r in roots:
        for d, _, files in sorted(os.walk(r)):
            p = os.path.join(d, "libcudnn.so.9")
            if "libcudnn.so.9" in files and os.path.realpath(p) not in seen:
                seen.add(os.path.realpath(p))
                yield p


def main(want, roots):
    first = [os.path.join(d, "libcudnn.so.9") for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    first = [p for p in first if os.path.exists(p)][:1]
    if first and version(first[0]) >= want:
        return None
    system = [p for p in ["/usr/lib/x86_64-linux-gnu/libcudnn.so.9"] if os.path.exists(p)]
    for p in system + list(found(roots)):
        if version(p) >= want:
            return os.path.dirname(os.path.realpath(p))
    return None


if __name__ == "__main__":
    d = main(int(sys.argv[1]) if len(sys.argv) > 1 else 0, [*site.getsitepackages(), "/opt"])
    if d:
        print(d)
