#!/bin/sh
# test_cli: dpt-train's command line (exit 2 + message for bad usage, --help with
# defaults, --backend cuda refused clearly) and bit-identical resume: train N
# steps straight vs stop after k, resume, finish -> byte-identical final
# checkpoints (plain and double-buffered); with the newest checkpoint corrupted
# the resume falls back to the previous good one and still ends identical.
# usage: test_cli.sh PATH/TO/dpt-train
T=$1
tmp=$(mktemp -d /tmp/dpt-test-cli.XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

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

common="--dataset synthetic --synthetic-images 96 --image-size 32 --width 0.0625 --batch-size 8
        --iterations 8 --no-val --threads 1 --seed 5 --log-every 100 --prefetch 1"
run() { "$T" $common "$@" >>"$tmp/log" 2>&1 || fail "dpt-train $* failed: $(tail -3 "$tmp/log")"; }
final=ckpt-0000000008.dpt
for mode in plain dbuf; do
  extra=""
  [ $mode = dbuf ] && extra="--double-buffering"
  run $extra --checkpoint-dir "$tmp/$mode-a"
  run $extra --checkpoint-dir "$tmp/$mode-b" --stop-after 3
  [ -f "$tmp/$mode-b/ckpt-0000000003.dpt" ] || fail "$mode: no checkpoint at the stop (step 3)"
  run $extra --checkpoint-dir "$tmp/$mode-b" --resume auto
  cmp -s "$tmp/$mode-a/$final" "$tmp/$mode-b/$final" || fail "$mode: resumed run differs from the straight run"
  # corrupt the newest checkpoint at the stop: resume must refuse it, use step 2, end identical
  run $extra --checkpoint-dir "$tmp/$mode-c" --stop-after 3 --checkpoint-every 2
  printf 'X' | dd of="$tmp/$mode-c/ckpt-0000000003.dpt" bs=1 seek=300 conv=notrunc 2>/dev/null
  "$T" $common $extra --checkpoint-dir "$tmp/$mode-c" --resume auto >"$tmp/out" 2>"$tmp/err" || fail "$mode: resume after corruption failed"
  grep -q "checksum mismatch" "$tmp/err" || fail "$mode: the corrupt checkpoint was not reported: $(cat "$tmp/err")"
  grep -q "resumed from .*ckpt-0000000002.dpt" "$tmp/out" || fail "$mode: did not fall back to step 2: $(cat "$tmp/out")"
  cmp -s "$tmp/$mode-a/$final" "$tmp/$mode-c/$final" || fail "$mode: run resumed from the older checkpoint differs"
done
cmp -s "$tmp/plain-a/$final" "$tmp/dbuf-a/$final" && fail "double buffering changed nothing (the update should lag one step)"
# a checkpoint from another model is refused
"$T" $common --width 0.125 --checkpoint-dir "$tmp/plain-a" --resume "$tmp/plain-a/$final" >"$tmp/out" 2>"$tmp/err"
[ $? = 2 ] && grep -q "same model" "$tmp/err" || fail "model mismatch not refused: $(cat "$tmp/err")"

if [ $fails = 0 ]; then echo "ok: CLI errors, --help, --backend cuda, bit-identical resume (plain, double-buffered, after corruption)"; rm -rf "$tmp"; fi
[ $fails = 0 ]
