#!/bin/sh
# trainer.gpu.train_large_batch: issue 23's options on the cuda backend, end to end: a batch-size
# schedule (the backend, its loaders, optimizer slabs and pending gradient made again at the
# change) with double buffering, LARS across the change, and RMSprop warm-up across its mix; each
# run straight, and stopped (checkpoint) then resumed, must end with byte-identical checkpoints,
# as trainer.cli_resume shows on the cpu backend (there at a fixed --threads; here --deterministic:
# the second GPU visit, without it, had all three differ, timed algorithm picks and cuDNN's atomic
# weight gradients being run-to-run noise).  A second straight run tells noise from a resume bug.
# Exit 77 (SKIPPED) without a GPU.
# usage: train_large_batch.sh dpt-train
T=$1
gpu_test_name=trainer.gpu.train_large_batch
. "$(dirname "$0")/gpu_test.sh"
tmp=$(mktemp -d /tmp/dpt-test-gpu-large-batch.XXXXXX)
# 96 images: 4 steps of 24 in epoch 1, then 2 steps of 48 per epoch; step 8 ends epoch 3
common="--backend cuda --precision fp32 --dataset synthetic --synthetic-images 96 --image-size 32 --width 0.0625
        --iterations 8 --no-val --no-report --seed 5 --log-every 100 --batch-schedule 0:24,1:48 --deterministic"
final=ckpt-0000000008.dpt
for mode in bsched-dbuf lars rmsw; do
  case $mode in
  bsched-dbuf) extra="--double-buffering" stop=5 ;;      # resumed after the change: the pending gradient carried
  lars) extra="--optimizer lars --nesterov --lr 4" stop=4 ;; # resumed at the change
  rmsw) extra="--optimizer rmsprop-warmup --rmsprop-center 0.3 --rmsprop-period 0.4" stop=3 ;;
  esac
  "$T" $common $extra --checkpoint-dir "$tmp/$mode-a" >"$tmp/$mode-a.log" 2>&1 ||
    { fail "$mode: straight run: $(tail -3 "$tmp/$mode-a.log")"; continue; }
  grep -q "per-rank batch 24 -> 48" "$tmp/$mode-a.log" || fail "$mode: no batch change: $(grep batch "$tmp/$mode-a.log")"
  if [ $mode = bsched-dbuf ]; then # the control: two straight runs
    "$T" $common $extra --checkpoint-dir "$tmp/$mode-a2" >"$tmp/$mode-a2.log" 2>&1 ||
      fail "$mode: second straight run: $(tail -3 "$tmp/$mode-a2.log")"
    cmp -s "$tmp/$mode-a/$final" "$tmp/$mode-a2/$final" ||
      fail "$mode: two straight --deterministic runs differ: run-to-run nondeterminism, not resume"
  fi
  "$T" $common $extra --checkpoint-dir "$tmp/$mode-b" --stop-after $stop >"$tmp/$mode-b.log" 2>&1 &&
    "$T" $common $extra --checkpoint-dir "$tmp/$mode-b" --resume auto >>"$tmp/$mode-b.log" 2>&1 ||
    { fail "$mode: stopped or resumed run: $(tail -3 "$tmp/$mode-b.log")"; continue; }
  if cmp -s "$tmp/$mode-a/$final" "$tmp/$mode-b/$final"; then echo "$mode: resumed at step $stop == straight"
  else fail "$mode: resumed at step $stop differs from the straight run"; fi
done
[ $fails = 0 ] && rm -rf "$tmp"
[ $fails = 0 ]
