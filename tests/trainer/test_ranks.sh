#!/bin/sh
# test_ranks: 2 ranks (dpt-launch -n 2, ring all-reduce) with batch B each
# equal 1 rank accumulating the same two micro-batches of B, to float
# tolerance (summation order differs: ring reduce-scatter vs local sum);
# the same with double buffering, with LARS (its trust ratios come from the
# averaged gradient's norms), with RMSprop warm-up (its second moment too) and across a batch-size change (the
# backend and loaders made again mid-run, the buckets with them); fp16 on the wire stays within the fp16
# all-reduce bound's neighbourhood of the fp32 result; gradient buckets all-reduced
# during backward give the result of one all-reduce after it.  Every run writes its job
# report into REPORT_DIR (the build tree, where report.schema validates them too),
# each checked here with dpt-report --check; the 2-rank runs record the binding
# dpt-launch applied, the fp16 run its scaling efficiency against a 1-rank run.
# usage: test_ranks.sh dpt-launch dpt-train ckpt_compare dpt-report REPORT_DIR
L=$1 T=$2 C=$3 R=$4 RD=$5
tmp=$(mktemp -d /tmp/dpt-test-ranks.XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
mkdir -p "$RD" && rm -f "$RD"/ranks-*.json* || fail "cannot use the report directory '$RD'"
export DPT_REPORT="$RD/ranks-%p.json" # runs without --report
common="--dataset synthetic --synthetic-images 128 --image-size 32 --width 0.0625 --batch-size 8
        --iterations 6 --no-val --seed 3 --log-every 100 --prefetch 1 --lr 1.0"
final=ckpt-0000000006.dpt
for mode in plain dbuf lars rmsw bsched; do
  extra="" base=$common
  [ $mode = dbuf ] && extra="--double-buffering"
  [ $mode = lars ] && extra="--optimizer lars --lr 8" # per-tensor norms of the averaged gradient
  [ $mode = rmsw ] && extra="--optimizer rmsprop-warmup --rmsprop-center 0.2 --rmsprop-period 0.4"
  # 128 images over 2 (virtual) ranks: 4 steps of 16 per rank, then 2 steps of 32: the change at step 4
  [ $mode = bsched ] && base=$(echo "$common" | sed 's/--batch-size 8//') extra="--batch-schedule 0:16,1:32"
  "$L" -n 2 --threads 1 -- "$T" $base $extra --comm ring --checkpoint-dir "$tmp/$mode-2r" \
      --report "$RD/ranks-$mode-2r.json" >"$tmp/log" 2>&1 || fail "$mode: 2 ranks failed: $(tail -5 "$tmp/log")"
  case $mode in # double buffering already overlaps the whole all-reduce: no buckets, and it says why
  plain|lars|rmsw|bsched) grep -q "gradients all-reduced in 1 bucket(s) of 25 MiB during backward" "$tmp/log" ;;
  dbuf) grep -q "after backward (no buckets: double buffering overlaps" "$tmp/log" ;;
  esac || fail "$mode: bucket line: $(grep gradients "$tmp/log")"
  [ $mode = bsched ] && ! grep -q "epoch 2: per-rank batch 16 -> 32 (global 32 -> 64), 2 steps per epoch" "$tmp/log" &&
    fail "bsched: no batch change line: $(grep 'per-rank batch' "$tmp/log")"
  # the job report (runtime's dpt.report/1 writer): both ranks, every step, the config,
  # the binding dpt-launch applied to each rank
  rep="$RD/ranks-$mode-2r.json"
  grep -q '"schema": "dpt.report/1"' "$rep" || fail "$mode: no dpt.report/1 report"
  grep -q '"parameters": 96302' "$rep" || fail "$mode: report lacks the parameter count"
  [ "$(grep -c '"rank":' "$rep")" -ge 2 ] || fail "$mode: report does not hold 2 ranks"
  [ "$(grep -c '"applied": "by dpt-launch; binder: cpus' "$rep")" = 2 ] ||
    fail "$mode: report lacks the binding dpt-launch applied to each rank: $(grep '"applied"' "$rep")"
  OMP_NUM_THREADS=1 "$T" $base $extra --accumulate 2 --checkpoint-dir "$tmp/$mode-1r" \
      --report "$RD/ranks-$mode-1r.json" >>"$tmp/log" 2>&1 ||
    fail "$mode: 1 rank x 2 micro-batches failed: $(tail -5 "$tmp/log")"
  "$C" "$tmp/$mode-2r/$final" "$tmp/$mode-1r/$final" 1e-5 || fail "$mode: 2 ranks != 1 rank accumulating 2 micro-batches"
done
"$L" -n 2 --threads 1 -- "$T" $common --comm ring --fp16-allreduce --checkpoint-dir "$tmp/fp16" >"$tmp/log" 2>&1 ||
  fail "fp16: 2 ranks failed: $(tail -5 "$tmp/log")"
# --baseline: the written report states e = t / (t0 * n / n0) against the 1-rank run
"$L" -n 2 --threads 1 -- "$T" $common --comm ring --iterations 2 --report "$RD/ranks-scaling.json" \
    --baseline "$RD/ranks-plain-1r.json" >"$tmp/log" 2>&1 || fail "--baseline: 2 ranks failed: $(tail -5 "$tmp/log")"
grep -q '"baseline_ranks": 1' "$RD/ranks-scaling.json" && grep -q '"efficiency": [0-9]' "$RD/ranks-scaling.json" ||
  fail "--baseline: no scaling efficiency in the report: $(grep -A8 '"scaling"' "$RD/ranks-scaling.json")"
"$T" $common --baseline "$tmp/none.json" >"$tmp/out" 2>&1
[ $? = 2 ] && grep -q -- "--baseline: $tmp/none.json: cannot read" "$tmp/out" ||
  fail "a missing --baseline is not refused at start (exit 2): $(cat "$tmp/out")"
"$C" "$tmp/fp16/$final" "$tmp/plain-2r/$final" 5e-2 || fail "fp16 on the wire drifts more than 5e-2 from fp32 after 6 steps"
# gradient buckets all-reduced during backward (--bucket-mb): 0.05 MiB gives 7 buckets of this
# model; with 2 ranks a+b is exact in any order, so the result is bit-equal to one all-reduce
# after backward (--bucket-mb 0); 3 ranks: same up to summation order
for n in 2 3; do
  for mb in 0 0.05; do
    "$L" -n $n --oversubscribe --threads 1 -- "$T" $common --comm ring --bucket-mb $mb --no-report \
        --checkpoint-dir "$tmp/bk$n-$mb" >"$tmp/log-bk$n-$mb" 2>&1 || fail "buckets: $n ranks --bucket-mb $mb failed: $(tail -5 "$tmp/log-bk$n-$mb")"
  done
  grep -q "gradients all-reduced in 7 bucket(s) of 0.05 MiB during backward" "$tmp/log-bk$n-0.05" ||
    fail "buckets: $n ranks did not use 7 buckets: $(grep gradients "$tmp/log-bk$n-0.05")"
  grep -q "gradients all-reduced after backward (no buckets: --bucket-mb 0)" "$tmp/log-bk$n-0" ||
    fail "buckets: --bucket-mb 0 not reported: $(grep gradients "$tmp/log-bk$n-0")"
done
"$C" "$tmp/bk2-0.05/$final" "$tmp/bk2-0/$final" 0 || fail "buckets: 2 ranks with 7 buckets != one all-reduce after backward"
"$C" "$tmp/bk3-0.05/$final" "$tmp/bk3-0/$final" 1e-5 || fail "buckets: 3 ranks with 7 buckets drift from one all-reduce"
"$C" "$tmp/bk2-0/$final" "$tmp/plain-2r/$final" 0 || fail "buckets: the default (one 25 MiB bucket) != --bucket-mb 0"
"$C" "$tmp/fp16/$final" "$tmp/plain-2r/$final" 1e-7 && fail "fp16 on the wire is bit-equal to fp32: was it used?"
# every report these runs wrote is valid (report.schema checks them against the JSON Schema too)
n=$(ls "$RD"/ranks-*.json | wc -l)
[ "$n" -ge 6 ] || fail "only $n reports in $RD: $(ls "$RD")"
"$R" --check "$RD"/ranks-*.json >"$tmp/check" 2>&1 || fail "invalid report: $(cat "$tmp/check")"
if [ $fails = 0 ]; then echo "ok: 2 ranks == 1 rank x 2 micro-batches (plain, double-buffered, LARS, RMSprop warm-up, batch schedule); fp16 wire close; 7 gradient buckets during backward == one all-reduce after it (2 ranks bit-equal, 3 ranks 1e-5); $n valid reports with binding and scaling"; rm -rf "$tmp"; fi
[ $fails = 0 ]
