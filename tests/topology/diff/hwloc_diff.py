#!/usr/bin/env python3
"""Differential test: dpt-topo reads every hwloc XML the way hwloc's own tools do.

usage: hwloc_diff.py --dpt-topo PATH [--min-loaded N] [--manifest FILE] [-v] PATH...

Every PATH is an hwloc XML file or a directory searched for them (*.xml, and hwloc's
*.output files that are XML exports).  For each file, with Debian's hwloc 2.9 tools
(package `hwloc`) loading it the way dpt_node does (--input FILE, I/O filter
`important` = HWLOC_TYPE_FILTER_KEEP_IMPORTANT):

  refusal   `dpt-topo --input F --json` exits 2 only where `lstopo --input F` fails too
            (where lstopo crashes on a file, dpt may read it: see topology/dpt_node_load.c,
            xml_for_hwloc());
  CPU side  machine.packages / numa_nodes / cores / pus == `hwloc-calc -N package|numa|
            core|pu all`;
  GPUs      the bus ids of dpt's gpus[], in order == the NVIDIA (vendor 10de) PCI devices
            of a display class (03xx: VGA, 3D, other display) that `hwloc-info
            'pci[10de:]:all'` lists, sorted by bus id (CUDA_DEVICE_ORDER=PCI_BUS_ID);
  HCAs      len(hcas) == the OpenFabrics OS devices `hwloc-info 'os[openfabrics]:all'` lists.

Differences that are intended are listed in INTENDED below, each with its reason; a
listed difference that no longer happens fails the test too (the list stays true).
With --manifest, files copied from hwloc's repository must still be byte-identical to
the blobs listed there (git blob ids), so that no editor or commit hook changed them.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# file name -> {check: reason}.  Keyed by file name: the same dump under several names
# (hwloc's tests, ../shared/fixtures) gets the same verdict where it has the same name.
CUDA_SUBSET = ("the dump has a CUDA OS device (cuda0) on only one of its three NVIDIA boards: "
               "dpt counts the GPUs CUDA showed when the dump was taken (CUDA_VISIBLE_DEVICES), "
               "and its warnings name the other two as ignored")
INTENDED = {
    "32em64t-2n8c2t-pci-normalio.xml": {"gpus": CUDA_SUBSET},
    "32em64t-2n8c2t-pci-wholeio.xml": {"gpus": CUDA_SUBSET},
    "x86-2socket-k40-mlx5.xml": {"gpus": CUDA_SUBSET},
    # tests/fuzz/corpus/node_xml: the K40 dump without the complete_cpuset of its PUs and the
    # complete_nodeset of its NUMA nodes
    "hwloc-crash-no-complete-sets.xml": {
        "lenient": "lstopo 2.9 dies with SIGSEGV on it (its 2.x importer dereferences the missing set); "
                   "dpt hands hwloc the sets hwloc's core completes where it survives (complete_cpuset = "
                   "cpuset), and reads the K40 node"},
}

TOOL_TIMEOUT = 60


def run(cmd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWLOC_")}
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                       timeout=TOOL_TIMEOUT)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def is_hwloc_xml(path):
    with open(path, "rb") as f:
        head = f.read(512)
    return b"<topology" in head or path.endswith(".xml")


def collect(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            for d, _, names in os.walk(p):
                for n in sorted(names):
                    f = os.path.join(d, n)
                    if (n.endswith(".xml") or n.endswith(".output")) and is_hwloc_xml(f):
                        files.append(f)
        else:
            files.append(p)
    return sorted(set(files))


def git_blob_id(path):
    data = open(path, "rb").read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def hwloc_calc_count(f, typ):
    rc, so, err = run(["hwloc-calc", "--input", f, "-N", typ, "all"])
    if rc == 0 and not so.strip() and "unavailable --number-of type" in err:
        return 0  # hwloc-calc's word for a type the topology does not have
    if rc == 0 and so.strip().isdigit():
        return int(so.strip())
    raise RuntimeError("%s: hwloc-calc -N %s: exit %d, printed %r, stderr %r" % (f, typ, rc, so, err))


def hwloc_side(f):
    """What hwloc's tools say about f: None when lstopo refuses it."""
    io = ["--filter", "io:important"]
    rc, _, err = run(["lstopo", "--input", f] + io + ["--of", "console", "-"])
    if rc != 0:
        return None, "lstopo exit %d: %s" % (rc, err.strip().splitlines()[-1] if err.strip() else "")
    # objects of the topology, by type: hwloc-info's level summary
    rc, so, err = run(["hwloc-info", "--input", f] + io)
    if rc != 0:
        raise RuntimeError("%s: hwloc-info failed (%d): %s" % (f, rc, err))
    levels = {}
    for m in re.finditer(r"depth -?\d+:\s+(\d+) (\w+) \(type #\d+\)", so):
        levels[m.group(2)] = levels.get(m.group(2), 0) + int(m.group(1))
    out = {"packages": levels.get("Package", 0), "numa_nodes": levels.get("NUMANode", 0),
           "cores": hwloc_calc_count(f, "core"), "pus": hwloc_calc_count(f, "pu")}
    # hwloc-calc -N counts the objects that intersect the allowed PUs: without the
    # packages and NUMA nodes that have none (CPU-less NUMA nodes, cgroup-restricted
    # dumps), which dpt counts as hwloc-info does (docs/schema-node.md: numa_nodes
    # includes CPU-less nodes).  Kept to be reported where it differs.
    out["calc_packages"] = hwloc_calc_count(f, "package")
    out["calc_numa_nodes"] = hwloc_calc_count(f, "numa")
    if (levels.get("Core", 0), levels.get("PU", 0)) != (out["cores"], out["pus"]):
        raise RuntimeError("%s: hwloc-info (%s cores, %s PUs) and hwloc-calc (%d, %d) disagree"
                           % (f, levels.get("Core"), levels.get("PU"), out["cores"], out["pus"]))
    rc, so, err = run(["hwloc-info", "--input", f] + io + ["pci[10de:]:all"])
    if rc != 0:
        raise RuntimeError("%s: hwloc-info pci[10de:] failed (%d): %s" % (f, rc, err))
    gpus = []
    for block in re.split(r"\n(?=\S)", so):
        cls = re.search(r"attr PCI class = ([0-9a-f]{4})", block)
        bus = re.search(r"attr PCI bus id = (\S+)", block)
        if cls and bus and cls.group(1).startswith("03"):
            gpus.append(bus.group(1))
    out["gpus"] = sorted(gpus, key=lambda b: [int(x, 16) for x in re.split(r"[:.]", b)])
    rc, so, err = run(["hwloc-info", "--input", f] + io + ["-s", "os[openfabrics]:all"])
    if rc != 0:
        raise RuntimeError("%s: hwloc-info os[openfabrics] failed (%d): %s" % (f, rc, err))
    out["hcas"] = len([l for l in so.splitlines() if l.strip()])
    return out, ""


def dpt_side(dpt, f):
    rc, so, err = run([dpt, "--input", f, "--json"])
    if rc == 2 and not so:
        return None, err.strip()
    if rc != 0:
        raise RuntimeError("%s: dpt-topo exit %d (not 0 or 2: a crash?):\n%s" % (f, rc, err))
    d = json.loads(so)
    out = {k: d["machine"][k] for k in ("packages", "numa_nodes", "cores", "pus")}
    out["gpus"] = [g["busid"] for g in d["gpus"]]
    out["hcas"] = len(d["hcas"])
    return out, err


def check(dpt, f):
    """(verdict, problems, intended-used): verdict in loaded/refused/lenient."""
    name = os.path.basename(f)
    want = INTENDED.get(name, {})
    ref, why_ref = hwloc_side(f)
    got, why_dpt = dpt_side(dpt, f)
    problems, used = [], set()
    if got is None and ref is not None:
        return "loaded", ["dpt-topo refuses a file lstopo loads: " + why_dpt], used
    if got is None:
        return "refused", [], used
    if ref is None:  # lstopo refuses (or crashes on) a file dpt reads
        if "lenient" in want:
            used.add("lenient")
            return "lenient", [], used
        return "lenient", ["dpt-topo reads a file lstopo refuses (%s): list it in INTENDED with the reason"
                           % why_ref], used
    for k in ("packages", "numa_nodes"):
        if got[k] == ref[k] and got[k] != ref["calc_" + k]:
            used.add("calc_" + k)  # see hwloc_side(): an explained difference, reported
    for k in ("packages", "numa_nodes", "cores", "pus", "gpus", "hcas"):
        if got[k] != ref[k]:
            if k in want:
                used.add(k)
            else:
                problems.append("%s: dpt-topo %s, hwloc %s" % (k, got[k], ref[k]))
    return "loaded", problems, used


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dpt-topo", required=True)
    ap.add_argument("--min-loaded", type=int, default=0,
                    help="fail unless at least N files are read by both dpt-topo and lstopo")
    ap.add_argument("--manifest", action="append", default=[],
                    help="BLOB-ID PATH lines (PATH relative to the manifest's folder)")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("-v", action="store_true")
    ap.add_argument("paths", nargs="+")
    a = ap.parse_args()

    missing = [t for t in ("lstopo", "hwloc-calc", "hwloc-info") if not shutil.which(t)]
    if missing:
        print("FAIL %s not found: install Debian's hwloc package (.ci/install-deps lists it)" % ", ".join(missing))
        return 1
    failures = []
    for m in a.manifest:
        base = os.path.dirname(os.path.abspath(m))
        n = 0
        for line in open(m):
            if not line.strip() or line.startswith("#"):
                continue
            blob, rel = line.split(None, 1)
            rel = rel.strip()
            got = git_blob_id(os.path.join(base, rel))
            n += 1
            if got != blob:
                failures.append("%s: blob %s, hwloc's is %s: the copy was altered" % (rel, got, blob))
        print("hwloc_diff: %s: %d files byte-identical to hwloc's blobs" % (m, n - len(failures)))

    files = collect(a.paths)
    with ThreadPoolExecutor(max_workers=max(1, a.j)) as pool:
        results = list(pool.map(lambda f: (f, check(a.dpt_topo, f)), files))
    counts = {"loaded": 0, "refused": 0, "lenient": 0}
    used_all = {}
    for f, (verdict, problems, used) in results:
        counts[verdict] += 1
        for u in used:
            used_all.setdefault(os.path.basename(f), set()).add(u)
        for p in problems:
            failures.append("%s: %s" % (f, p))
        if a.v:
            print("%-8s %s%s" % (verdict, f, " (intended: %s)" % ", ".join(sorted(used)) if used else ""))
    seen = {os.path.basename(f) for f in files}
    for name, checks in sorted(INTENDED.items()):
        for k, reason in sorted(checks.items()):
            if name in seen and k not in used_all.get(name, set()):
                failures.append("%s: INTENDED lists a %s difference that no longer happens: remove it" % (name, k))
    for name, checks in sorted(INTENDED.items()):
        for k, reason in sorted(checks.items()):
            if k in used_all.get(name, set()):
                print("hwloc_diff: intended difference, %s %s: %s" % (name, k, reason))
    calc = sorted("%s (%s)" % (n, ", ".join(sorted(u[5:] for u in used if u.startswith("calc_"))))
                  for n, used in used_all.items() if any(u.startswith("calc_") for u in used))
    if calc:
        print("hwloc_diff: `hwloc-calc -N package|numa all` counts only objects with allowed PUs; dpt-topo "
              "counts them all, as hwloc-info does, on: " + "; ".join(calc))
    if counts["loaded"] < a.min_loaded:
        failures.append("only %d files read by both (at least %d expected)" % (counts["loaded"], a.min_loaded))
    for p in failures:
        print("FAIL " + p)
    print("hwloc_diff: %d files: %d read by both and compared, %d refused by both, %d read by dpt-topo only"
          % (len(files), counts["loaded"], counts["refused"], counts["lenient"]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
