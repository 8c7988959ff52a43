#!/bin/sh
# test_ranks: 2 ranks (dpt-launch -n 2, ring all-reduce) with batch B each
# equal 1 rank accumulating the same two micro-batches of B, to float
# tolerance (summation order differs: ring reduce-scatter vs local sum);
# the same with double buffering; fp16 on the wire stays within the fp16
# all-reduce bound's neighbourhood of the fp32 result.
# usage: test_ranks.sh dpt-launch dpt-train ckpt_compare
L=$1 T=$2 C=$3
tmp=$(mktemp -d /tmp/dpt-test-ranks.XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
common="--dataset synthetic --synthetic-images 128 --image-size 32 --width 0.0625 --batch-size 8
        --iterations 6 --no-val --seed 3 --log-every 100 --prefetch 1 --lr 1.0"
final=ckpt-0000000006.dpt
for mode in plain dbuf; do
  extra=""
  [ $mode = dbuf ] && extra="--double-buffering"
  "$L" -n 2 --threads 1 -- "$T" $common $extra --comm ring --checkpoint-dir "$tmp/$mode-2r" \
      --report "$tmp/$mode-report.json" >"$tmp/log" 2>&1 || fail "$mode: 2 ranks failed: $(tail -5 "$tmp/log")"
  # the job report (runtime's dpt.report/1 writer): both ranks, every step, the config
  grep -q '"schema": "dpt.report/1"' "$tmp/$mode-report.json" || fail "$mode: no dpt.report/1 report"
  grep -q '"parameters": 96302' "$tmp/$mode-report.json" || fail "$mode: report lacks the parameter count"
  [ "$(grep -c '"rank":' "$tmp/$mode-report.json")" -ge 2 ] || fail "$mode: report does not hold 2 ranks"
  OMP_NUM_THREADS=1 "$T" $common $extra --accumulate 2 --checkpoint-dir "$tmp/$mode-1r" >>"$tmp/log" 2>&1 ||
    fail "$mode: 1 rank x 2 micro-batches failed: $(tail -5 "$tmp/log")"
  "$C" "$tmp/$mode-2r/$final" "$tmp/$mode-1r/$final" 1e-5 || fail "$mode: 2 ranks != 1 rank accumulating 2 micro-batches"
done
"$L" -n 2 --threads 1 -- "$T" $common --comm ring --fp16-allreduce --checkpoint-dir "$tmp/fp16" >"$tmp/log" 2>&1 ||
  fail "fp16: 2 ranks failed: $(tail -5 "$tmp/log")"
"$C" "$tmp/fp16/$final" "$tmp/plain-2r/$final" 5e-2 || fail "fp16 on the wire drifts more than 5e-2 from fp32 after 6 steps"
"$C" "$tmp/fp16/$final" "$tmp/plain-2r/$final" 1e-7 && fail "fp16 on the wire is bit-equal to fp32: was it used?"
if [ $fails = 0 ]; then echo "ok: 2 ranks == 1 rank x 2 micro-batches (plain, double-buffered); fp16 wire close"; rm -rf "$tmp"; fi
[ $fails = 0 ]
