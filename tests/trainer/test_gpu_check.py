#!/usr/bin/env python3
"""bench.gpu.check: bench/gpu/check.sh's summary writer on the canned logs of a real device visit
(tests/trainer/gpu-check/logs: an H200, 2026-11-28), and check.sh's usage paths without a GPU.
  - `check_summary.py line` turns each phase's log into one line with the figure a reader needs:
    the versions, every precision of the smoke run, ctest's counts and failed tests, the main job's
    top-1, the harness's img/s and ratios, the kernel table; exit status 124 reads as a timeout;
    an empty log still gives its line;
  - `check_summary.py write` makes summary.md / summary.json (schema dpt.gpu-check/1) from them;
  - `check_summary.py kernels` on hand-made records: per-step times, launches, out-of-step
    records left out;
  - ctestfused stopped at its limit (check.sh's own phase function, a stand-in ctest): the tests
    it never started are counted and named;
  - check.sh --dry-run lists the phases, an unknown phase or option exits 2, and without a GPU it
    says so, exits 0 and writes nothing.
usage: test_gpu_check.py BENCH_GPU_DIR CANNED_LOGS_DIR"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

bench, canned = sys.argv[1], sys.argv[2]
summ = os.path.join(bench, "check_summary.py")
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(*args, env=None):
    return subprocess.run(list(args), capture_output=True, text=True, env=env)


tmp = tempfile.mkdtemp(prefix="dpt-test-gpu-check.")
try:
    out = os.path.join(tmp, "out")
    shutil.copytree(canned, os.path.join(out, "logs"))
    open(os.path.join(out, "logs", "jpeg.log"), "w").close()  # a phase that printed nothing
    # kernels: two steps, one record outside the steps, a copy; 3 and 1 ms per step
    tsv = os.path.join(tmp, "k.tsv")
    with open(tsv, "w") as f:
        f.write("0\tkernel\t7\t0\t2000000\tconv_a\n0\tkernel\t7\t2000000\t3000000\tbn_b\n"
                "1\tkernel\t7\t10000000\t14000000\tconv_a\n1\tmemcpy\t7\t14000000\t15000000\t\n"
                "-1\tkernel\t7\t20000000\t90000000\tsetup\nnot a record\n")
    r = run(sys.executable, summ, "kernels", tsv, "--label", "t")
    check(r.returncode == 0, f"kernels: exit {r.returncode}")
    first = r.stdout.splitlines()[0] if r.stdout else ""
    check(first.startswith("KERNELS t: 2 step(s), span 4.0 ms/step, kernel time 4.0 ms/step, 2 launches/step"),
          f"kernels: '{first}'")
    check(" 3.00 ms/step" in r.stdout and "conv_a" in r.stdout and "setup" not in r.stdout,
          f"kernels table: {r.stdout}")
    with open(os.path.join(out, "logs", "profile.log"), "w") as f:  # the profile phase's log: two tables
        for label in ("fp32", "mixed"):
            f.write(run(sys.executable, summ, "kernels", tsv, "--label", label).stdout)

    for phase, rc in [("versions", 0), ("smoke", 0), ("profile", 0), ("ctest", 8), ("mnist", 0), ("resnet", 0),
                      ("jpeg", 124)]:
        r = run(sys.executable, summ, "line", out, phase, str(rc), "12", "90")
        check(r.returncode == 0, f"line {phase}: exit {r.returncode}: {r.stderr}")
    rows = {ln.split("\t")[0]: ln.split("\t") for ln in open(os.path.join(out, "phases.tsv")).read().splitlines()}
    check(len(rows) == 7, f"phases.tsv has {len(rows)} phases, want 7")
    want = {
        "versions": ("pass", ["NVIDIA H200", "driver 580.159.04", "cuDNN 9.14.0", "NCCL 2.28.3", "NVRTC 13.0"]),
        "smoke": ("pass", ["fp32 ok; tf32 ok; mixed ok; bf16 ok"]),
        "profile": ("pass", ["fp32: 2 step(s), span 4.0 ms/step", " || mixed: 2 step(s), span 4.0 ms/step",
                             "top: 3.0 ms x1.0 conv_a; 0.5 ms x0.5 bn_b; 0.5 ms x0.5 memcpy"]),
        "ctest": ("fail", ["7/16 passed, 1 skipped", "trainer.gpu.shared_gpu (Failed)",
                           "trainer.gpu.fused_vs_unfused (NUMERICAL)", "trainer.gpu.fused (Failed)"]),
        "mnist": ("pass", ["top-1 91.91% after epoch 3", "2879.5 img/s"]),
        "resnet": ("pass", ["torch-fp32 1054 img/s", "dpt-fp16 364 img/s", "torch-bf16-cl not run",
                            "dpt-fp16/torch-fp16-cl 0.07x (mem 1.03x)"]),
        "jpeg": ("timeout", ["stopped at its 90-s limit", "no measurement"]),
    }
    for phase, (status, parts) in want.items():
        f = rows.get(phase, ["", "", "", "", ""])
        check(f[1] == status, f"{phase}: status '{f[1]}', want '{status}'")
        for p in parts:
            check(p in f[4], f"{phase}: '{p}' not in the figure '{f[4]}'")
    r = run(sys.executable, summ, "write", out, "--commit", "b12a521", "--budget", "345")
    check(r.returncode == 0, f"write: exit {r.returncode}: {r.stderr}")
    doc = json.load(open(os.path.join(out, "summary.json")))
    check(doc.get("schema") == "dpt.gpu-check/1", f"schema {doc.get('schema')}")
    check([p["phase"] for p in doc["phases"]] == list(want), f"phases {[p['phase'] for p in doc['phases']]}")
    check(doc["versions"].get("gpu") == "NVIDIA H200" and doc["versions"].get("cudnn") == "91400",
          f"versions {doc['versions']}")
    check("resnet" in doc["bench"] and any(x["config"] == "torch-tf32-cl" and round(x["images_per_s"]) == 3116
                                           for x in doc["bench"]["resnet"]["runs"]), "bench.resnet runs")
    md = open(os.path.join(out, "summary.md")).read()
    check("| ctest | fail | 12 (90) | 7/16 passed" in md, "summary.md: the ctest row")
    check("- dpt commit: b12a521" in md and "cuDNN 9.14.0" in md, "summary.md: commit / versions")
    check("## resnet: goals" in md and "| dpt-train fp16 runs at batch 256 | runs | 364 img/s | met |" in md,
          "summary.md: the harness's goals")

    # every phase check.sh runs has a summary line (the third visit: 'graphs' was no choice of `line`, so
    # its figure was lost from the summary)
    m = re.search(r'^ALL="([^"]+)"', open(os.path.join(bench, "check.sh")).read(), re.M)
    check(m is not None, "check.sh: no ALL= phase list")
    for ph in (m.group(1).split() if m else []):
        o = os.path.join(tmp, "phase-" + ph)
        os.makedirs(os.path.join(o, "logs"))
        r = run(sys.executable, summ, "line", o, ph, "0", "1", "10")
        check(r.returncode == 0 and f"== {ph}: pass" in r.stdout, f"check_summary.py line {ph}: {r.returncode} {r.stderr}")
    # ctestfused stopped at its limit: check.sh's own ph_ctestfused, run with a stand-in ctest (fused
    # passes, graph never ends), must leave a log whose line counts the two tests never started (the
    # fourth visit's count missed them)
    m = re.search(r"^FUSED_ORDER=.*?^}\n", open(os.path.join(bench, "check.sh")).read(), re.M | re.S)
    check(m is not None, "check.sh: no FUSED_ORDER= / ph_ctestfused")
    if m:
        o, fake = os.path.join(tmp, "stopped"), os.path.join(tmp, "fakebin")
        os.makedirs(os.path.join(o, "logs"))
        os.makedirs(fake)
        with open(os.path.join(fake, "ctest"), "w") as f:
            f.write('#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -R ] && re=$2; shift; done\n'
                    'n=$(echo "$re" | sed "s/^.*gpu\\[\\.\\]//; s/\\$$//")\n'
                    'echo "Test project /fake/build"; echo "    Start 57: trainer.gpu.$n"\n'
                    '[ "$n" = graph ] && exec sleep 30\n'
                    'echo "1/1 Test #57: trainer.gpu.$n ......   Passed   1.50 sec"\n')
        os.chmod(os.path.join(fake, "ctest"), 0o755)
        env = {k: v for k, v in os.environ.items() if k != "CTESTFUSED_ORDER"}
        env["PATH"] = fake + os.pathsep + env.get("PATH", "")
        with open(os.path.join(o, "logs", "ctestfused.log"), "w") as f:
            r = subprocess.run(["timeout", "-k", "1", "2", "bash", "-c", f"build={tmp}; {m.group(0)} ph_ctestfused"],
                               stdout=f, stderr=subprocess.STDOUT, env=env)
        check(r.returncode == 124, f"ph_ctestfused under a 2-s limit: exit {r.returncode}, want 124")
        r = run(sys.executable, summ, "line", o, "ctestfused", "124", "2", "2")
        fig = r.stdout.strip()
        for part in ("1/4 passed, 0 skipped", "stopped at the phase's limit in trainer.gpu.graph, 3 not finished",
                     "not started: trainer.gpu.fused_vs_unfused, trainer.gpu.train_fused"):
            check(part in fig, f"ctestfused stopped: '{part}' not in '{fig}'")
    # check.sh without a GPU, and its usage errors
    sh = os.path.join(bench, "check.sh")
    r = run("bash", sh, "--dry-run")
    check(r.returncode == 0 and "versions  limit" in r.stdout and "jpeg      limit" in r.stdout,
          f"--dry-run: {r.returncode} {r.stdout}")
    r = run("bash", sh, "--dry-run", "--only", "ctest,resnet")
    check(r.returncode == 0 and len([x for x in r.stdout.splitlines() if "limit" in x]) == 2, f"--only: {r.stdout}")
    r = run("bash", sh, os.path.join(tmp, "x"), "--only", "nope")
    check(r.returncode == 2 and "unknown phase 'nope'" in r.stderr, f"bad phase: {r.returncode} {r.stderr}")
    r = run("bash", sh, os.path.join(tmp, "x"), "--budget", "ten")
    check(r.returncode == 2, f"bad budget: exit {r.returncode}")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1")
    r = run("bash", sh, os.path.join(tmp, "nogpu"), env=env)
    check(r.returncode == 0 and "no GPU here" in r.stdout, f"no GPU: {r.returncode} {r.stdout} {r.stderr}")
    check(not os.path.exists(os.path.join(tmp, "nogpu")), "no GPU: wrote its OUTDIR")
    # cudnn_pick.py finds a cuDNN in a hidden folder (PyTorch's wheel under /opt/torch/.venv; glob's **
    # skipped it, so the second visit ran dpt on the machine's older cuDNN); a file that is no library
    # is asked its version and refused
    sys.path.insert(0, bench)
    import cudnn_pick
    lib = os.path.join(tmp, "opt", "torch", ".venv", "lib", "nvidia", "cudnn", "lib", "libcudnn.so.9")
    os.makedirs(os.path.dirname(lib))
    with open(lib, "w") as f:
        f.write("not a library\n")
    check(list(cudnn_pick.found([os.path.join(tmp, "opt")])) == [lib], "cudnn_pick: the .venv cuDNN not found")
    check(cudnn_pick.version(lib) == -1, "cudnn_pick: a non-library was given a version")
    os.environ["LD_LIBRARY_PATH"] = ""
    check(cudnn_pick.main(1 << 30, [os.path.join(tmp, "opt")]) is None, "cudnn_pick: picked a cuDNN older than asked")
    # two cuDNNs built as the real one is split: libcudnn.so.9 answers cudnnGetVersion from a part it loads
    # by name (libcudnn_graph.so.9).  The older on LD_LIBRARY_PATH (the machine's), the newer in a .venv:
    # the newer must be found and its own version read (the third visit: asked in one process after the
    # older, PyTorch's 9.19 answered 91400 and was passed over)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        print("bench.gpu.check: no C compiler: the two-cuDNN case not run")
    else:
        def fake(d, v):
            os.makedirs(d, exist_ok=True)
            g, m = os.path.join(d, "graph.c"), os.path.join(d, "main.c")
            with open(g, "w") as f:
                f.write("unsigned long part_version(void) { return %dUL; }\n" % v)
            with open(m, "w") as f:
                f.write("unsigned long part_version(void);\n"
                        "unsigned long cudnnGetVersion(void) { return part_version(); }\n")
            gl = os.path.join(d, "libcudnn_graph.so.9")
            r1 = run(cc, "-shared", "-fPIC", "-Wl,-soname,libcudnn_graph.so.9", "-o", gl, g)
            r2 = run(cc, "-shared", "-fPIC", "-Wl,-soname,libcudnn.so.9", "-o", os.path.join(d, "libcudnn.so.9"), m,
                     "-L" + d, "-l:libcudnn_graph.so.9")
            check(r1.returncode == 0 and r2.returncode == 0, f"fake cuDNN in {d}: {r1.stderr} {r2.stderr}")
        old_d = os.path.join(tmp, "machine", "lib")
        new_root = os.path.join(tmp, "opt2")
        new_d = os.path.join(new_root, "torch", ".venv", "site-packages", "nvidia", "cudnn", "lib")
        fake(old_d, 500000)
        fake(new_d, 600000)
        os.environ["LD_LIBRARY_PATH"] = old_d
        check(cudnn_pick.version(os.path.join(new_d, "libcudnn.so.9")) == 600000,
              "cudnn_pick: the newer cuDNN's version read through the older's parts")
        got = cudnn_pick.main(600000, [new_root])
        check(got == os.path.realpath(new_d), f"cudnn_pick: picked {got}, not the newer {new_d}")
        check(cudnn_pick.main(500000, [new_root]) is None, "cudnn_pick: the first on LD_LIBRARY_PATH was new enough")
        os.environ["LD_LIBRARY_PATH"] = ""
finally:
    shutil.rmtree(tmp, ignore_errors=True)
print(f"bench.gpu.check: {len(fails)} failure(s)")
sys.exit(1 if fails else 0)
