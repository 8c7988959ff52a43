#!/usr/bin/env bash
# Runs the unit tests of a dpt build directory under valgrind memcheck; fails on
# any error (invalid read/write, use of uninitialised values, bad free, definite
# leak).  The tests are the build's own ctest tests, with their arguments,
# environment and working directory (from `ctest --show-only=json-v1`), so this
# list never goes out of date: a test is a unit test when its command is an
# executable of the build tree (not mpiexec, sh, bash or cmake -P); the MPI,
# Slurm, multi-process and golden-file tests are those wrappers and are not run.
#   bash tests/valgrind/memcheck.sh BUILD_DIR [EXCLUDE_REGEX]
# Registered as the ctest test "valgrind.unit" (label valgrind) when the build
# is configured with -DDPT_VALGRIND=ON.  Suppressions: tests/valgrind/dpt.supp
# (third-party libraries only, each justified there).
# The tests run DPT_VALGRIND_JOBS at a time (default: the CPUs online; memcheck runs a
# program on one core), in the order of the build's own timings, longest first (ctest's
# Testing/Temporary/CTestCostData.txt, written by the plain run before it: native times,
# only a hint of memcheck's -- trainer.test_bucket takes 0.4 s natively and 126 s under
# memcheck); a test that asks ctest to run it alone (RUN_SERIAL, RESOURCE_LOCK) runs alone
# here too, after the others.  2 cores: 598 s one at a time, 211-240 s two at a time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: memcheck.sh BUILD_DIR [EXCLUDE_REGEX]}" && pwd)
# Not run under valgrind, and why:
#  node_facts_live_machine: discovers the live machine through hwloc's PCI/OpenCL/CUDA plugins
#    (dlopen'ed vendor libraries; the XML-based node tests cover dpt's own code);
#  trainer.test_gradcheck, trainer.test_model, trainer.test_ref: ResNet-50 through oneDNN's
#    JIT kernels, hours under valgrind (their numeric code is the same as in test_optim/ckpt);
#  trainer.gpu.* but cuda_plan: load the CUDA runtime, cuBLAS(Lt) and cuDNN, whose
#    initialisers leak and read uninitialised memory inside NVIDIA's closed libraries
#    (trainer.gpu.cuda_plan, the host-side planning, needs none of them and does run);
#  trainer.cpu_isa*: a full-width ResNet-50 training step at 224 px through oneDNN's JIT kernels;
#  trainer.test_ref*.isa_*, trainer.test_ref_f64.direct, trainer.test_gradcheck.winograd: the
#    reference tests again with oneDNN capped to another ISA, or the other convolution algorithm (other JIT
#    kernels, the same dpt code as the uncapped runs, which stay in);
#  *_fuzz* deterministic mutation loops: thousands of iterations; the same parsers run under
#    valgrind through fuzz_regress.* (the committed corpus).
exclude=${2:-'^(node_facts_live_machine|trainer\.test_(gradcheck|model|ref)|trainer\.cpu_isa(\.avx2)?|trainer\.test_ref(_f64)?\.(isa_.*|direct)|trainer\.test_gradcheck\.winograd|trainer\.gpu\.(?!cuda_plan$).*|tree_fuzz_mutations|spank_opts_fuzz|node_fuzz.*)$'}
log_dir=$build/valgrind
mkdir -p "$log_dir"
exec python3 - "$build" "$here/dpt.supp" "$exclude" "$log_dir" <<'PY'
import concurrent.futures, json, os, re, subprocess, sys, threading, time
build, supp, exclude, log_dir = sys.argv[1:5]
info = json.loads(subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, check=True,
                                 capture_output=True, text=True).stdout)
sel = []
for t in info["tests"]:
    cmd = t.get("command") or []
    if not cmd or not os.path.realpath(cmd[0]).startswith(build + "/"):
        continue
    if re.search(exclude, t["name"]) or t["name"].startswith("valgrind."):
        continue
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    if "valgrind" in props.get("LABELS", []) or "fuzz" in props.get("LABELS", []):
        continue
    sel.append((t["name"], cmd, props))
vg = ["valgrind", "--tool=memcheck", "--error-exitcode=99", "--leak-check=full",
      "--errors-for-leak-kinds=definite", "--show-leak-kinds=definite", "--num-callers=30",
      "--keep-debuginfo=yes",  # frames of plugins hwloc dlclose()s keep their names
      "--suppressions=" + supp, "--gen-suppressions=all", "-q"]
def cost_hints():
    """ctest's average time per test in this build (0 for one it never ran)"""
    cost = {}
    try:
        with open(os.path.join(build, "Testing", "Temporary", "CTestCostData.txt")) as f:
            for line in f:
                parts = line.split()
                if line.startswith("---"):
                    break
                if len(parts) == 3:
                    cost[parts[0]] = float(parts[2])
    except (OSError, ValueError):
        pass
    return cost

def run_one(test):
    name, cmd, props = test
    env = dict(os.environ)
    for kv in props.get("ENVIRONMENT", []):
        k, _, v = kv.partition("=")
        env[k] = v
    env.pop("LSAN_OPTIONS", None)
    # libjpeg-turbo's SIMD decoders read (but never use) uninitialised bytes of their own
    # buffers, which memcheck follows into the pixels; its documented remedy is the plain
    # C path (the decoded images are the same; trainer.test_jpeg compares them).
    env["JSIMD_FORCENONE"] = "1"
    log = os.path.join(log_dir, name + ".log")
    start = time.time()
    with open(log, "w") as f:
        r = subprocess.run(vg + ["--log-fd=2"] + cmd, cwd=props.get("WORKING_DIRECTORY", build), env=env,
                           stdout=f, stderr=subprocess.STDOUT)
    dt = time.time() - start
    status = "ok" if r.returncode == 0 else ("MEMCHECK ERRORS" if r.returncode == 99 else "FAILED (exit %d)" % r.returncode)
    with lock:
        print("%-45s %6.1f s  %s" % (name, dt, status), flush=True)
        if r.returncode:
            bad.append(name)
            with open(log) as f:
                print(f.read()[-4000:], flush=True)

jobs_env = os.environ.get("DPT_VALGRIND_JOBS", "")
if jobs_env and (not jobs_env.isdigit() or int(jobs_env) < 1):
    sys.exit("memcheck.sh: DPT_VALGRIND_JOBS=%s: give a number of tests to run at once (1 or more)" % jobs_env)
jobs = int(jobs_env) if jobs_env else len(os.sched_getaffinity(0))
cost = cost_hints()
pool_tests, alone = [], []
for t in sel:
    (alone if t[2].get("RUN_SERIAL") or t[2].get("RESOURCE_LOCK") else pool_tests).append(t)
pool_tests.sort(key=lambda t: -cost.get(t[0], 0.0))
bad, lock, t0 = [], threading.Lock(), time.time()
print("valgrind memcheck: %d unit tests, %d at a time%s" % (len(sel), jobs,
      "" if cost else " (no CTestCostData.txt: in ctest's order)"), flush=True)
with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
    list(ex.map(run_one, pool_tests))
for t in alone:
    run_one(t)
print("valgrind memcheck: %d unit tests, %d failed, %.0f s" % (len(sel), len(bad), time.time() - t0))
if not sel:
    print("no unit test found in %s (not built?)" % build)
    sys.exit(1)
sys.exit(1 if bad else 0)
PY
