#!/usr/bin/env python3
"""test_breakdown.py -- bench/gpu/breakdown.py, and the same rules on both sides.

  test_breakdown.py BREAKDOWN_PY C_TOOL NAMES_TSV

  - the golden kernel names (tests/trainer/kprof/kernel-names.tsv) get their classes through
    --classify, the table being bench/gpu/kernel-classes.tsv (the one dpt compiles in);
  - a small hand-made torch.profiler (Kineto) trace with known answers: kernels attributed to
    ProfilerStep#N by the correlation id of the runtime call that launched them, two streams
    overlapping, a gap inside a step and one between steps, a memcpy, a kernel launched
    outside any step, flow and CPU events ignored; --skip-steps; the JSON and Markdown files;
  - without launch records, steps from the GPU-side ProfilerStep annotations;
  - C and Python agree: a seeded random record set (12 steps, 3 streams, overlaps, copies,
    the golden names) through dpt's C breakdown (C_TOOL --records, dpt_kprof.c) and through
    breakdown.py --records: the same JSON numbers (relative 1e-9; the C side prints 12 digits);
  - a broken table line and a missing trace fail with exit 2 and the file in the message.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL {msg}", file=sys.stderr)


def run(args, stdin=None):
    p = subprocess.run(args, input=stdin, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def golden(script, names_tsv):
    names, want = [], []
    with open(names_tsv) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            cls, name = line.split("\t", 1)
            want.append(cls)
            names.append(name)
    rc, out, err = run([sys.executable, script, "--classify"], "\n".join(names) + "\n")
    got = out.split("\n")[:-1]
    check(rc == 0 and len(got) == len(want), f"--classify: rc {rc}, {len(got)} of {len(want)} lines: {err}")
    for n, g, w in zip(names, got, want):
        check(g == w, f"'{n[:80]}': {g}, expected {w}")
    print(f"{len(want)} golden names classified as expected by breakdown.py")


def x(name, cat, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def kineto_trace():
    """Times in microseconds.  CPU: ProfilerStep#5 [0, 1000], #6 [1000, 2000].
    Launches: corr 1..3 in step 5, 4..6 in step 6, corr 9 at 2500 (no step).
    GPU step 5: conv [100, 500] s7, norm [400, 600] s8 (overlap 100), gemm [700, 800] s7,
    memcpy [800, 900]; step 6 starts at 1100 (gap 900..1100 is step 5's).
    GPU step 6: elementwise [1100, 1200] s7, [1150, 1300] s7, optimizer [1500, 1600] s8 (gap 200).
    A kernel of corr 9 at [2600, 2700] belongs to no step."""
    ev = [
        x("ProfilerStep#5", "user_annotation", 0, 1000),
        x("ProfilerStep#6", "user_annotation", 1000, 1000),
        x("aten::conv2d", "cpu_op", 10, 50),
        {"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "ts": 20, "pid": 1, "tid": 1},
    ]
    for corr, ts in ((1, 20), (2, 30), (3, 40), (10, 45), (4, 1020), (5, 1030), (6, 1040), (9, 2500)):
        ev.append(x("cudaLaunchKernel" if corr != 10 else "cudaMemcpyAsync", "cuda_runtime", ts, 5, correlation=corr))
    ev += [
        x("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc", "kernel", 100, 400, stream=7, correlation=1),
        x("void at::native::batch_norm_collect_statistics_channels_last_kernel<float>", "kernel", 400, 200, stream=8,
          correlation=2),
        x("ampere_sgemm_128x64_nn", "kernel", 700, 100, stream=7, correlation=3),
        x("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 800, 100, stream=7, correlation=10),
        x("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "kernel", 1100, 100,
          stream=7, correlation=4),
        x("void at::native::elementwise_kernel<128, 2, at::native::relu>", "kernel", 1150, 150, stream=7, correlation=5),
        x("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedSgdMathFunctor<float, 3>>", "kernel",
          1500, 100, stream=8, correlation=6),
        x("void at::native::reduce_kernel<512, 1>", "kernel", 2600, 100, stream=7, correlation=9),
    ]
    return {"schemaVersion": 1, "traceEvents": ev}


def kineto(script, tmp):
    path = os.path.join(tmp, "trace.json")
    with open(path, "w") as f:
        json.dump(kineto_trace(), f)
    js, md = os.path.join(tmp, "out.json"), os.path.join(tmp, "out.md")
    rc, out, err = run([sys.executable, script, "--trace", path, "--label", "hand-made", "--json", js, "--md", md])
    check(rc == 0, f"--trace: rc {rc}: {err}")
    if rc:
        return
    with open(js) as f:
        d = json.load(f)
    s5, s6 = d["steps"]
    check(d["format"] == "dpt.kernel-breakdown/1" and d["label"] == "hand-made", "format / label")
    check([s5["step"], s6["step"]] == [5, 6], f"steps {[s['step'] for s in d['steps']]}")
    # step 5: span 100..1100 = 1 ms, busy [100,600]+[700,800] = 0.6, idle 0.4 (0.2 of it between
    # steps: the memcpy ends at 900, step 6 starts at 1100), 3 kernels, 1 copy 0.1 ms
    check((s5["kernels"], s5["copies"]) == (3, 1), f"step 5 counts {s5['kernels']} {s5['copies']}")
    for k, v in (("span_ms", 1.0), ("busy_ms", 0.6), ("idle_ms", 0.4), ("idle_pct", 40.0), ("gap_ms", 0.2),
                 ("gap_pct", 20.0), ("copy_ms", 0.1)):
        check(abs(s5[k] - v) < 1e-9, f"step 5 {k} {s5[k]}, expected {v}")
    check(abs(s5["class_ms"]["conv"] - 0.4) < 1e-9 and abs(s5["class_ms"]["norm"] - 0.2) < 1e-9 and
          abs(s5["class_ms"]["gemm"] - 0.1) < 1e-9, f"step 5 classes {s5['class_ms']}")
    # step 6 (last): span 1100..1600 = 0.5, busy [1100,1300] + [1500,1600] = 0.3, idle 0.2, all inside
    for k, v in (("span_ms", 0.5), ("busy_ms", 0.3), ("idle_ms", 0.2), ("gap_ms", 0.0)):
        check(abs(s6[k] - v) < 1e-9, f"step 6 {k} {s6[k]}, expected {v}")
    check(s6["class_kernels"]["elementwise"] == 2 and abs(s6["class_ms"]["optimizer"] - 0.1) < 1e-9,
          f"step 6 classes {s6['class_kernels']} {s6['class_ms']}")
    m = d["median"]
    check(abs(m["kernels"] - 3.0) < 1e-9 and abs(m["idle_ms"] - 0.3) < 1e-9, f"median {m['kernels']} {m['idle_ms']}")
    with open(md) as f:
        text = f.read()
    check("3 kernels per step" in text and "| conv |" in text and "idle between kernels 0.30 ms" in text and
          "between steps 0.10 ms" in text,
          f"markdown: {text}")
    rc, out, err = run([sys.executable, script, "--trace", path, "--skip-steps", "1", "--json", "-"])
    check(rc == 0 and [s["step"] for s in json.loads(out)["steps"]] == [6], f"--skip-steps 1: {rc} {err}")
    # GPU-side annotations only (no launch records): the same steps
    t = kineto_trace()
    t["traceEvents"] = [e for e in t["traceEvents"] if e.get("cat") not in ("cuda_runtime", "user_annotation")]
    t["traceEvents"] += [x("ProfilerStep#5", "gpu_user_annotation", 100, 950),
                         x("ProfilerStep#6", "gpu_user_annotation", 1100, 600)]
    with open(path, "w") as f:
        json.dump(t, f)
    rc, out, err = run([sys.executable, script, "--trace", path, "--json", "-"])
    d2 = json.loads(out) if rc == 0 else {"steps": []}
    check(rc == 0 and [(s["step"], s["kernels"]) for s in d2["steps"]] == [(5, 3), (6, 3)],
          f"GPU annotations: {rc} {err} {[(s['step'], s['kernels']) for s in d2['steps']]}")
    print("hand-made Kineto trace: the expected steps, spans, idle time and classes")


def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def cross_check(script, ctool, names_tsv, tmp):
    names = [line.rstrip("\n").split("\t", 1)[1] for line in open(names_tsv) if line[0] not in "#\n"]
    rng = random.Random(15)
    recs, t = [], 1000
    for step in range(12):
        for _ in range(rng.randrange(5, 40)):
            start = t + rng.randrange(0, 3000)
            kind = rng.choice(["kernel"] * 8 + ["memcpy", "memset"])
            name = rng.choice(names) if kind == "kernel" else "Memcpy DtoD"
            recs.append((step if rng.random() > 0.03 else -1, kind, rng.randrange(1, 4), start,
                         start + rng.randrange(0, 900), name))
            t += rng.randrange(0, 600)
        t += rng.randrange(0, 5000)
    path = os.path.join(tmp, "records.tsv")
    with open(path, "w") as f:
        for r in recs:
            f.write("\t".join(str(v) for v in r) + "\n")
    rc, cout, err = run([ctool, "--records", path])
    check(rc == 0, f"C --records: rc {rc}: {err}")
    rc2, pout, err2 = run([sys.executable, script, "--records", path, "--label", "records", "--json", "-"])
    check(rc2 == 0, f"python --records: rc {rc2}: {err2}")
    if rc or rc2:
        return
    c, p = json.loads(cout), json.loads(pout)
    check(c["classes"] == p["classes"], f"classes {c['classes']} vs {p['classes']}")
    check(len(c["steps"]) == len(p["steps"]) == 12, f"steps {len(c['steps'])} vs {len(p['steps'])}")
    bad = 0
    for cs, ps in list(zip(c["steps"], p["steps"])) + [(c["median"], p["median"])]:
        for k in ("kernels", "copies", "span_ms", "busy_ms", "idle_ms", "idle_pct", "gap_ms", "gap_pct", "copy_ms"):
            bad += not close(cs[k], ps[k])
        for cl in c["classes"]:
            bad += not close(cs["class_ms"][cl], ps["class_ms"][cl]) or not close(cs["class_kernels"][cl],
                                                                                ps["class_kernels"][cl])
    check(bad == 0, f"{bad} numbers differ between dpt_kprof.c and breakdown.py")
    if not bad:
        print(f"C and Python agree on {len(recs)} random records over 12 steps")


def errors(script, tmp):
    bad = os.path.join(tmp, "bad.tsv")
    with open(bad, "w") as f:
        f.write("# c\nconv\tfprop\nnorm bn\n")
    rc, out, err = run([sys.executable, script, "--classes", bad, "--classify"], "x\n")
    check(rc == 2 and f"{bad}:3" in err, f"broken table: rc {rc}: {err}")
    rc, out, err = run([sys.executable, script, "--trace", os.path.join(tmp, "missing.json")])
    check(rc == 2 and "missing.json" in err, f"missing trace: rc {rc}: {err}")


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    script, ctool, names = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        golden(script, names)
        kineto(script, tmp)
        cross_check(script, ctool, names, tmp)
        errors(script, tmp)
    if not failures:
        print("test_breakdown: all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
