#!/usr/bin/env python3
"""bench/gpu/cudnn_pick.py WANT — the folder of a libcudnn.so.9 at least as new as WANT (e.g. 91900,
the headers dpt was built with) for bench/gpu/device.sh: nothing when the first one on
LD_LIBRARY_PATH (the machine's, as .gpu/env.sh set it) is new enough or none is; else the first new
enough among the system's and /opt's (PyTorch's wheel).  Each is asked its version (cudnnGetVersion)."""
import ctypes
import glob
import os
import sys


def version(path):
    try:
        f = ctypes.CDLL(path).cudnnGetVersion
    except (OSError, AttributeError):
        return -1
    f.restype = ctypes.c_size_t
    return int(f())


want = int(sys.argv[1]) if len(sys.argv) > 1 else 0
first = [os.path.join(d, "libcudnn.so.9") for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
first = [p for p in first if os.path.exists(p)][:1]
if first and version(first[0]) >= want:
    sys.exit(0)
for p in glob.glob("/usr/lib/x86_64-linux-gnu/libcudnn.so.9") + sorted(glob.glob("/opt/**/libcudnn.so.9", recursive=True)):
    if version(p) >= want:
        print(os.path.dirname(os.path.realpath(p)))
        break
