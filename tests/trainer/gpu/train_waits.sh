#!/bin/sh
# trainer.gpu.train_waits: dpt-train --backend cuda waits for the GPU once per log line and
# never inside a step (issue 14 item 4), at every precision: one rank, 20 steps, --log-every 5,
# no validation; its line "host waits (rank 0): W in S training step(s) and their L log
# line(s)" (the backend's stream synchronisations) must say W = L.  trainer.devsim holds the
# same loop to the same count on the CPU backend's simulated device.  Exit 77 (SKIPPED)
# without a GPU.
# usage: train_waits.sh dpt-train
T=$1
gpu_test_name=trainer.gpu.train_waits
. "$(dirname "$0")/gpu_test.sh"
tmp=$(mktemp -d /tmp/dpt-test-gpu-waits.XXXXXX)
for prec in fp32 tf32 mixed bf16; do
  "$T" --backend cuda --precision $prec --dataset synthetic --synthetic-images 256 --image-size 32 \
    --batch-size 8 --iterations 20 --log-every 5 --no-val --no-report >"$tmp/$prec.log" 2>&1 ||
    { fail "$prec: dpt-train failed: $(tail -3 "$tmp/$prec.log")"; continue; }
  w=$(sed -n 's/.*host waits (rank 0): \([0-9]*\) in \([0-9]*\) training step(s) and their \([0-9]*\) log line(s).*/\1 \2 \3/p' "$tmp/$prec.log")
  set -- $w
  if [ "$#" = 3 ] && [ "$2" = 20 ] && [ "$3" -ge 4 ] && [ "$1" = "$3" ]; then
    echo "$prec: $1 host waits in $2 steps, $3 log lines"
  else
    fail "$prec: host waits '$w' (want W = L in 'W 20 L'): $(grep 'host waits' "$tmp/$prec.log")"
  fi
done
[ $fails = 0 ] && rm -rf "$tmp"
[ $fails = 0 ]
