#!/usr/bin/env python3
"""bench/gpu/cudnn_pick.py WANT — the folder of a libcudnn.so.9 at least as new as WANT (e.g. 91900,
the headers dpt was built with) for bench/gpu/device.sh: nothing when the first one on
LD_LIBRARY_PATH (the machine's, as .gpu/env.sh set it) is new enough or none is; else the first new
enough among the system's, this Python's site-packages and /opt's (PyTorch's wheel: nvidia/cudnn/lib
under /opt/torch/.venv on the H200 kind, a hidden folder that glob's ** never enters, so the second
visit's dpt ran on the machine's older 9.14).  Each is asked its version (cudnnGetVersion)."""
import ctypes
import os
import site
import sys


def version(path):
    try:
        f = ctypes.CDLL(path).cudnnGetVersion
    except (OSError, AttributeError):
        return -1
    f.restype = ctypes.c_size_t
    return int(f())


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
