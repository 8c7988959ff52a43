#!/bin/sh
# test_loader_bench: bench/loader's tool works end to end on a tiny folder: make writes
# N decodable ImageNet-like JPEGs in K classes; run (CPU path, 2 threads) reports
# images/s, cores used and decoder counts that add up; probe says why the GPU path is
# unavailable without a device; bad usage exits 2.
# usage: test_loader_bench.sh PATH/TO/dpt-loader-bench
B=$1
tmp=$(mktemp -d /tmp/dpt-test-lbench.XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
"$B" make "$tmp/d" --images 24 --classes 3 >"$tmp/make.json" || fail "make: exit $?"
grep -q '"images": 24, "classes": 3' "$tmp/make.json" || fail "make: $(cat "$tmp/make.json")"
n=$(find "$tmp/d/train" -name '*.JPEG' | wc -l)
[ "$n" = 24 ] || fail "make wrote $n files, want 24"
"$B" run --data-dir "$tmp/d" --threads 2 --batch 4 --steps 5 >"$tmp/run.json" || fail "run: exit $?"
python3 - "$tmp/run.json" <<'PY' || fail "run: $(cat "$tmp/run.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["device"] == "cpu" and d["decoder"] == "libturbojpeg" and d["threads"] == 2, d
assert d["images"] == 20 and d["images_per_s"] > 0 and d["cores_used"] > 0, d
assert d["decoded_cpu"] >= 20 and d["decoded_hw"] == 0 and d["failed"] == 0, d
PY
CUDA_VISIBLE_DEVICES=-1 "$B" probe >"$tmp/probe.out"
[ $? = 1 ] && [ -s "$tmp/probe.out" ] || fail "probe without a device: $(cat "$tmp/probe.out")"
"$B" run --threads 2 >/dev/null 2>&1
[ $? = 2 ] || fail "run without --data-dir: not exit 2"
rm -rf "$tmp"
[ $fails = 0 ] && echo "ok: dpt-loader-bench make / run / probe"
[ $fails = 0 ]
