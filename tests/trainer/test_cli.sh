#!/bin/sh
# test_cli: dpt-train's command line (exit 2 + message for bad usage, --help with
# defaults, --backend cuda refused clearly) and bit-identical resume: train N
# steps straight vs stop after k, resume, finish -> byte-identical final
# checkpoints (plain, double-buffered, LARS with Nesterov momentum and per-milestone factors,
# RMSprop warm-up across its mix, a batch-size schedule stopped before, at and after its change, with and without
# double buffering); a checkpoint of another optimizer or batch schedule is refused; with the newest checkpoint corrupted
# the resume falls back to the previous good one and still ends identical.
# Every run writes its job report into REPORT_DIR (dpt-train's default is one per
# run: DPT_REPORT names them here), all checked with dpt-report --check at the end
# (and by report.schema); --no-report writes none.
# usage: test_cli.sh PATH/TO/dpt-train PATH/TO/dpt-report REPORT_DIR
T=$1 R=$2 RD=$3
tmp=$(mktemp -d /tmp/dpt-test-cli.XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
mkdir -p "$RD" && rm -f "$RD"/cli-*.json* || fail "cannot use the report directory '$RD'"
export DPT_REPORT="$RD/cli-%p.json"

expect() { # expect STATUS PATTERN -- args...
  want=$1; pat=$2; shift 3
  "$T" "$@" >"$tmp/out" 2>"$tmp/err"; got=$?
  [ "$got" = "$want" ] || fail "dpt-train $*: exit $got, want $want ($(head -c 300 "$tmp/err"))"
  grep -q -E -- "$pat" "$tmp/out" "$tmp/err" || fail "dpt-train $*: output lacks '$pat': $(head -c 300 "$tmp/err")"
}

expect 0 "default fashion-mnist" -- --help
expect 0 "synthetic, fashion-mnist, cifar10" -- --help
expect 0 "default 32" -- --help
expect 2 "'--bogus' is unknown" -- --bogus
expect 2 "exclusive" -- --epochs 1 --iterations 5
expect 2 "needs --milestones" -- --schedule multistep
expect 2 "only applies to --schedule multistep" -- --milestones 3,6
expect 2 "batch-size" -- --batch-size 0
expect 2 "not a number" -- --lr fast
expect 2 "unknown" -- --schedule linear
expect 2 "imagenet" -- --dataset imagenet
expect 2 "unexpected argument" -- extra
expect 2 "needs --checkpoint-dir" -- --resume auto
expect 2 "/nonexistent/x" -- --data-dir /nonexistent/x --iterations 1
expect 1 "without the GPU backend|no usable CUDA device" -- --backend cuda
expect 2 "10 classes" -- --num-classes 5
expect 2 "needs --backend cuda" -- --comm nccl --backend cpu
expect 2 "comm" -- --comm carrier-pigeon
expect 2 "--no-report with --report" -- --no-report --report x.json
expect 2 "--no-report with --baseline" -- --no-report --baseline x.json
expect 0 "--no-report +write no job report" -- --help
expect 0 "--bucket-mb F .*buckets of F MiB" -- --help
expect 2 "--bucket-mb: '-1' is not a number in \[0, 1e\+06\]" -- --bucket-mb -1
expect 2 "--bucket-mb: 'big' is not a number" -- --bucket-mb big
# issue 15's switches: values, the cpu backend, the profiler's needs; the help says why they are off
expect 2 "--fuse 'maybe' is unknown: on, off or auto" -- --fuse maybe
expect 2 "--cuda-graph 'yes' is unknown: on, off or auto" -- --cuda-graph yes
expect 2 "--fuse on needs --backend cuda" -- --fuse on --backend cpu
expect 2 "--cuda-graph on needs --backend cuda" -- --cuda-graph on --backend cpu
expect 2 "--profile-out needs --profile-steps" -- --profile-out x.json
expect 2 "--profile-steps records GPU kernels: it needs --backend cuda|built without CUPTI" -- --profile-steps 3 --backend cpu
expect 2 "--profile-steps: '0' is not a number" -- --profile-steps 0
expect 0 "Default off \(\\\$DPT_CUDA_FUSE\): it becomes auto once" -- --help
expect 0 "trainer.gpu.graph has passed" -- --help
# issue 23's optimizers and schedules: values, what applies to what
expect 2 "--optimizer 'adam' is unknown: sgd, lars or rmsprop-warmup" -- --optimizer adam
expect 2 "--lars-eta / --lars-eps need --optimizer lars" -- --lars-eta 0.01
expect 2 "--lars-eps: '-1' is not a number" -- --optimizer lars --lars-eps -1
expect 2 "--decay-bn with --optimizer lars: LARS leaves BN and bias tensors out" -- --optimizer lars --decay-bn
expect 2 "--gammas only applies to --schedule multistep" -- --gammas 0.1
expect 2 "--end-lr only applies to --schedule poly or cosine \(got --schedule step\)" -- --schedule step --end-lr 0.001
expect 0 "--optimizer O +sgd .*, lars" -- --help
expect 0 "rmsprop-warmup \(Akiba et al" -- --help
expect 2 "--rmsprop-\* options need --optimizer rmsprop-warmup" -- --rmsprop-center 3
expect 2 "--nesterov with --optimizer rmsprop-warmup" -- --optimizer rmsprop-warmup --nesterov
expect 2 "--rmsprop-mu2: '1' is not a number" -- --optimizer rmsprop-warmup --rmsprop-mu2 1
expect 2 "--lr-steps only applies to --schedule piecewise" -- --lr-steps 0:0.1
expect 2 "--schedule piecewise needs --lr-steps" -- --schedule piecewise
expect 2 "--lr with --schedule piecewise" -- --schedule piecewise --lr-steps 0:0.1 --lr 0.2
expect 2 "--bn-eval-stats 'moving' is unknown: running or last-batch" -- --bn-eval-stats moving
expect 2 "--zero-init-residual 'yes': on or off" -- --zero-init-residual yes
expect 0 "--lars-eps F +LARS epsilon \(default 0, taken as 1e-7" -- --help

common="--dataset synthetic --synthetic-images 96 --image-size 32 --width 0.0625 --batch-size 8
        --iterations 8 --no-val --threads 1 --seed 5 --log-every 100 --prefetch 1"
base=$common # the options of the runs below (the batch-schedule modes: without --batch-size)
run() { "$T" $base "$@" >>"$tmp/log" 2>&1 || fail "dpt-train $* failed: $(tail -3 "$tmp/log")"; }
final=ckpt-0000000008.dpt
expect 2 "--gammas '0.1,0.2' gives 2 factors for 3 milestones" -- $common --schedule multistep --milestones 1,2,3 --gammas 0.1,0.2
expect 2 "--gammas '0.1,x': need a comma-separated list of factors > 0" -- $common --schedule multistep --milestones 1,2 --gammas 0.1,x
expect 2 "--lr-steps '5:0.1': the epochs must start at 0 and increase" -- $common --schedule piecewise --lr-steps 5:0.1
expect 2 "--lr-steps '0:0.1,x': need E:LR pairs" -- $common --schedule piecewise --lr-steps 0:0.1,x
# the piecewise table, BN's last-batch statistics and no zero-initialised residual gammas run, and
# the report says so
"$T" $common --iterations 2 --schedule piecewise --lr-steps 0:0.2,0.1:0.02 --bn-eval-stats last-batch \
    --zero-init-residual off --report "$RD/cli-recipe-parts.json" >"$tmp/out" 2>&1 &&
  grep -q '"bn_eval_stats": "last-batch"' "$RD/cli-recipe-parts.json" &&
  grep -q '"zero_init_residual": false' "$RD/cli-recipe-parts.json" &&
  grep -q '"schedule": "piecewise"' "$RD/cli-recipe-parts.json" ||
  fail "piecewise / last-batch / zero-init off: $(tail -3 "$tmp/out")"
"$T" $common --iterations 1 --optimizer lars --nesterov --lars-eta 0.01 >"$tmp/out" 2>&1 &&
  grep -q "optimizer: LARS (eta 0.01, eps 1e-07; BN and bias: plain momentum, no decay), momentum 0.9 (nesterov)" "$tmp/out" ||
  fail "--optimizer lars: no optimizer line at start: $(grep -i optimizer "$tmp/out" || tail -3 "$tmp/out")"
nob=$(echo "$common" | sed 's/--batch-size 8//')
for mode in plain dbuf lars rmsw bsched bsched-dbuf; do
  extra="" base=$common
  [ $mode = dbuf ] && extra="--double-buffering"
  [ $mode = lars ] && extra="--optimizer lars --nesterov --lr 4 --schedule multistep --milestones 0.5,0.75 --gammas 0.5,0.2"
  [ $mode = rmsw ] && extra="--optimizer rmsprop-warmup --rmsprop-center 0.3 --rmsprop-period 0.4" # the mix crosses 1/2 at step 4
  # 96 images: 4 steps of 24 in epoch 1, then 2 steps of 48 per epoch; step 8 ends epoch 3
  case $mode in bsched*) base=$nob extra="--batch-schedule 0:24,1:48";; esac
  [ $mode = bsched-dbuf ] && extra="$extra --double-buffering"
  run $extra --checkpoint-dir "$tmp/$mode-a"
  run $extra --checkpoint-dir "$tmp/$mode-b" --stop-after 3
  [ -f "$tmp/$mode-b/ckpt-0000000003.dpt" ] || fail "$mode: no checkpoint at the stop (step 3)"
  run $extra --checkpoint-dir "$tmp/$mode-b" --resume auto
  cmp -s "$tmp/$mode-a/$final" "$tmp/$mode-b/$final" || fail "$mode: resumed run differs from the straight run"
  # corrupt the newest checkpoint at the stop: resume must refuse it, use step 2, end identical
  run $extra --checkpoint-dir "$tmp/$mode-c" --stop-after 3 --checkpoint-every 2
  printf 'X' | dd of="$tmp/$mode-c/ckpt-0000000003.dpt" bs=1 seek=300 conv=notrunc 2>/dev/null
  "$T" $base $extra --checkpoint-dir "$tmp/$mode-c" --resume auto >"$tmp/out" 2>"$tmp/err" || fail "$mode: resume after corruption failed"
  grep -q "checksum mismatch" "$tmp/err" || fail "$mode: the corrupt checkpoint was not reported: $(cat "$tmp/err")"
  grep -q "resumed from .*ckpt-0000000002.dpt" "$tmp/out" || fail "$mode: did not fall back to step 2: $(cat "$tmp/out")"
  cmp -s "$tmp/$mode-a/$final" "$tmp/$mode-c/$final" || fail "$mode: run resumed from the older checkpoint differs"
  case $mode in bsched*) # stopped at the change (step 4: its checkpoint is at batch 24, the run goes on at 48), one
    for k in 4 5 6; do   # step after it and at the next epoch (both resumed at 24, then changed to 48)
      run $extra --checkpoint-dir "$tmp/$mode-s$k" --stop-after $k
      run $extra --checkpoint-dir "$tmp/$mode-s$k" --resume auto
      cmp -s "$tmp/$mode-a/$final" "$tmp/$mode-s$k/$final" || fail "$mode: resumed at step $k: differs from the straight run"
    done
    grep -q "dpt-train: epoch 2: per-rank batch 24 -> 48 (global 24 -> 48), 2 steps per epoch" "$tmp/log" ||
      fail "$mode: no batch change line: $(grep 'per-rank batch' "$tmp/log")";;
  esac
done
cmp -s "$tmp/plain-a/$final" "$tmp/bsched-a/$final" && fail "--batch-schedule changed nothing"
cmp -s "$tmp/bsched-a/$final" "$tmp/bsched-dbuf-a/$final" && fail "--batch-schedule: double buffering changed nothing"
# a checkpoint is where the run's batch schedule puts it, or refused: step 8 is epoch 4 under 0:24,1:48, epoch 3 under
# 0:24,2:48
"$T" $nob --batch-schedule 0:24,2:48 --checkpoint-dir "$tmp/bsched-a" --resume "$tmp/bsched-a/$final" >"$tmp/out" 2>"$tmp/err"
[ $? = 2 ] && grep -q "written at step 8 = epoch 4 step 1 with per-rank batch 48; this run's --batch-schedule 0:24,2:48 puts step 8 at epoch 3 step 1" "$tmp/err" ||
  fail "a checkpoint of another batch schedule was not refused: $(cat "$tmp/err")"
expect 2 "--batch-size with --batch-schedule" -- --batch-size 8 --batch-schedule 0:8,1:16
expect 2 "--batch-schedule '1:8': the epochs must be integers starting at 0" -- --batch-schedule 1:8
expect 2 "per-rank batch 200 from epoch 1: 1 \(virtual\) ranks make a global batch of 200, more than the 96" -- $nob --batch-schedule 0:8,1:200
expect 0 "--batch-schedule E0:B0,E1:B1,.. +the per-rank batch raised" -- --help
cmp -s "$tmp/plain-a/$final" "$tmp/dbuf-a/$final" && fail "double buffering changed nothing (the update should lag one step)"
cmp -s "$tmp/plain-a/$final" "$tmp/lars-a/$final" && fail "--optimizer lars changed nothing"
cmp -s "$tmp/plain-a/$final" "$tmp/rmsw-a/$final" && fail "--optimizer rmsprop-warmup changed nothing"
# its checkpoints carry the second moment: twice the momentum buffer
[ "$(stat -c %s "$tmp/rmsw-a/$final")" -gt "$(stat -c %s "$tmp/plain-a/$final")" ] ||
  fail "an rmsprop-warmup checkpoint is no larger than an sgd one (no second moment?)"
# a checkpoint's momentum buffer belongs to its optimizer: sgd's is refused by a lars run
"$T" $common --optimizer lars --checkpoint-dir "$tmp/plain-a" --resume "$tmp/plain-a/$final" >"$tmp/out" 2>"$tmp/err"
[ $? = 2 ] && grep -q "written with --optimizer sgd, this run has --optimizer lars" "$tmp/err" ||
  fail "sgd checkpoint resumed by a lars run: $(cat "$tmp/err")"
# the default report name (no --report, no DPT_REPORT) in the working directory; --no-report: none
mkdir -p "$tmp/cwd" && (cd "$tmp/cwd" && env -u DPT_REPORT "$T" $common --iterations 1 >"$tmp/out" 2>&1) ||
  fail "run without --report failed: $(tail -3 "$tmp/out")"
f=$(ls "$tmp/cwd"/dpt-report-dpt-train-*.json 2>/dev/null)
[ -n "$f" ] && grep -q "^dpt-train: report dpt-report-dpt-train-[0-9]*.json" "$tmp/out" &&
  "$R" --check $f >/dev/null 2>&1 || fail "no valid default report dpt-report-dpt-train-<pid>.json: $(ls "$tmp/cwd")"
mv $f "$RD/cli-default.json" 2>/dev/null
# (count this test's own reports: other tests write theirs into the same directory meanwhile)
n0=$(ls "$RD"/cli-*.json | wc -l)
"$T" $common --iterations 1 --no-report >"$tmp/out" 2>&1 || fail "--no-report run failed: $(tail -3 "$tmp/out")"
[ "$(ls "$RD"/cli-*.json | wc -l)" = "$n0" ] && ! grep -q "report" "$tmp/out" || fail "--no-report wrote a report"
# a checkpoint from another model is refused
"$T" $common --width 0.125 --checkpoint-dir "$tmp/plain-a" --resume "$tmp/plain-a/$final" >"$tmp/out" 2>"$tmp/err"
[ $? = 2 ] && grep -q "same model" "$tmp/err" || fail "model mismatch not refused: $(cat "$tmp/err")"

# the failed runs' reports too (exit status and error recorded)
grep -l '"exit_status": 2' "$RD"/cli-*.json >/dev/null 2>&1 || fail "no report of a failed run (exit 2) in $RD"
"$R" --check "$RD"/cli-*.json >"$tmp/check" 2>&1 || fail "invalid report: $(cat "$tmp/check")"
if [ $fails = 0 ]; then echo "ok: CLI errors, --help, --backend cuda, bit-identical resume (plain, double-buffered, LARS, RMSprop warm-up, batch schedule at and after its change, after corruption); $(ls "$RD"/cli-*.json | wc -l) valid reports"; rm -rf "$tmp"; fi
[ $fails = 0 ]
