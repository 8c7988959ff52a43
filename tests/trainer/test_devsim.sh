#!/bin/sh
# test_devsim: dpt-train's device path (the one --backend cuda takes) on a
# machine without a GPU.  DPT_CPU_DEVICE_SLABS=1 makes the cpu backend a
# simulated device: host_slabs = 0, its public slab pointers NULL (a direct
# host access by the loop crashes) and copy_slab() a memcpy between separate
# buffers.  The loop must then reach parameters, gradients, BN state and
# momentum only through copy_slab / sgd_step / sync, and give the SAME BYTES
# as the plain cpu run: 1 rank (plain, double-buffered, 2 micro-batches),
# 2 ranks through dpt-launch (plain, double-buffered), and checkpoint/resume
# (stop after 3 steps, resume to 6 == straight; a simulated-device checkpoint
# resumed by the plain backend).  The simulated device takes the next batch ahead as the cuda
# backend does (ops->prefetch: dpt-train hands it over before it waits for a log line's loss) and
# trains on its own copy of it: a loop that gave the next forward other bytes than it prefetched
# would differ from the plain run here.
# Host waits (issue 14): the simulated device counts the calls that wait on a
# real device (sync, copy_slab, loss_totals, scaler_get, forward with a host
# output, backward with dx); dpt-train prints those of its training steps and
# their log lines.  One rank, 20 steps, --log-every 5: exactly one wait per log
# line (the loss totals), none in the steps; a loop that starts reading
# something back every step fails here.
# usage: test_devsim.sh dpt-launch dpt-train
L=$1 T=$2
tmp=$(mktemp -d /tmp/dpt-test-devsim.XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
export OMP_NUM_THREADS=1
common="--dataset synthetic --synthetic-images 128 --image-size 32 --width 0.0625 --batch-size 8
        --iterations 6 --seed 3 --log-every 100 --prefetch 1 --lr 1.0 --no-report"
final=ckpt-0000000006.dpt
# run NAME RANKS DEVSIM ARGS...: checkpoints in $tmp/NAME, log in $tmp/NAME.log
run() {
  name=$1 ranks=$2 dev=$3
  shift 3
  if [ "$ranks" = 1 ]; then
    DPT_CPU_DEVICE_SLABS=$dev "$T" $common "$@" --checkpoint-dir "$tmp/$name" >"$tmp/$name.log" 2>&1
  else
    DPT_CPU_DEVICE_SLABS=$dev "$L" -n "$ranks" --oversubscribe --threads 1 -- "$T" $common "$@" --comm ring \
      --checkpoint-dir "$tmp/$name" >"$tmp/$name.log" 2>&1
  fi || { fail "$name: dpt-train failed: $(tail -5 "$tmp/$name.log")"; return 1; }
}
# same: the two runs' final checkpoints are byte-identical and so are their checksum lines
same() {
  cmp -s "$tmp/$1/$final" "$tmp/$2/$final" || fail "$1 and $2: final checkpoints differ"
  a=$(grep -o 'parameter checksum [^ ]*' "$tmp/$1.log") b=$(grep -o 'parameter checksum [^ ]*' "$tmp/$2.log")
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "$1 '$a' vs $2 '$b'"
}
for mode in plain dbuf acc2; do
  extra=""
  [ $mode = dbuf ] && extra="--double-buffering"
  [ $mode = acc2 ] && extra="--accumulate 2"
  run "cpu-1r-$mode" 1 0 $extra && run "dev-1r-$mode" 1 1 $extra && same "cpu-1r-$mode" "dev-1r-$mode"
  grep -q "backend cpu fp32 (device slabs)" "$tmp/dev-1r-$mode.log" ||
    fail "$mode: the simulated device was not used: $(head -3 "$tmp/dev-1r-$mode.log")"
  grep -q "device slabs" "$tmp/cpu-1r-$mode.log" && fail "$mode: the plain run used device slabs"
  # the input's double buffering (ops->prefetch, which the simulated device has): every step but the
  # first takes its batch ahead (6 steps inside one epoch; --accumulate 2 ahead for its first micro-batch)
  grep -q "input: 5 of 6 training step(s) had their batch uploaded ahead" "$tmp/dev-1r-$mode.log" ||
    fail "$mode: the batches were not taken ahead: $(grep 'input:' "$tmp/dev-1r-$mode.log")"
  grep -q "uploaded ahead" "$tmp/cpu-1r-$mode.log" && fail "$mode: the plain cpu run says it prefetched"
done
for mode in plain dbuf; do
  extra=""
  [ $mode = dbuf ] && extra="--double-buffering"
  run "cpu-2r-$mode" 2 0 $extra --no-val && run "dev-2r-$mode" 2 1 $extra --no-val &&
    same "cpu-2r-$mode" "dev-2r-$mode"
done
# resume on the simulated device: 3 steps, stop, resume to 6 == the straight run (validation included)
for mode in plain dbuf; do
  extra=""
  [ $mode = dbuf ] && extra="--double-buffering"
  run "dev-res-$mode" 1 1 $extra --stop-after 3 &&
    run "dev-res-$mode" 1 1 $extra --resume auto &&
    grep -q "resumed from .* at step 3" "$tmp/dev-res-$mode.log" &&
    cmp -s "$tmp/dev-res-$mode/$final" "$tmp/cpu-1r-$mode/$final" ||
    fail "$mode: simulated device stopped at 3 and resumed != straight cpu run: $(tail -3 "$tmp/dev-res-$mode.log")"
  # a simulated-device checkpoint resumed by the plain backend (same file format, same bytes)
  mkdir -p "$tmp/mix-$mode" && cp "$tmp/dev-res-$mode/ckpt-0000000003.dpt" "$tmp/mix-$mode/" 2>/dev/null
  run "mix-$mode" 1 0 $extra --resume auto && cmp -s "$tmp/mix-$mode/$final" "$tmp/cpu-1r-$mode/$final" ||
    fail "$mode: cpu resuming a simulated-device checkpoint != straight run"
done
# waits: "host waits (rank 0): W in S training step(s) and their L log line(s)": W must be L
waits() {
  name=$1
  shift
  DPT_CPU_DEVICE_SLABS=1 "$T" $common --iterations 20 --log-every 5 --no-val "$@" >"$tmp/$name.log" 2>&1 ||
    { fail "$name: dpt-train failed: $(tail -3 "$tmp/$name.log")"; return; }
  line=$(grep "host waits (rank 0)" "$tmp/$name.log")
  w=$(echo "$line" | sed -n 's/.*: \([0-9]*\) in \([0-9]*\) training step(s) and their \([0-9]*\) log line(s).*/\1 \2 \3/p')
  set -- $w
  [ "$#" = 3 ] || { fail "$name: no host-wait line: $line"; return; }
  [ "$2" = 20 ] && [ "$3" -ge 4 ] && [ "$1" = "$3" ] ||
    fail "$name: $1 host waits in $2 steps with $3 log lines (want one per log line, none in the steps)"
  echo "$name: $1 host waits in $2 steps, $3 log lines"
}
waits waits-1r
waits waits-1r-dbuf --double-buffering --checkpoint-dir "$tmp/waits-dbuf" --checkpoint-every 1000
if [ $fails = 0 ]; then
  echo "ok: simulated device slabs == cpu, bit for bit: 1 rank (plain, double-buffered, 2 micro-batches), 2 ranks (plain, double-buffered), stop/resume, cross resume"
  rm -rf "$tmp"
fi
[ $fails = 0 ]
