#!/bin/sh
# trainer.gpu.train_input: dpt-train --dataset imagenet --data-device gpu feeds the GPU-decoded
# batches straight into the cuda backend (issue 16).  On a JPEG folder made by dpt-loader-bench
# (512 files, 4 classes; val/ is the same folder), 20 steps of batch 32 at 64 px, --log-every 5,
# validation at each epoch's end, at mixed and fp32:
#   - the banner says "input: GPU-decoded batches straight into the backend, no host copy: NHWC
#     fp16, 8 channels (3 + 5 zero) on device 0" (fp32: "NCHW fp32, 3 channels": fp32's default layout);
#   - no batch is copied back to the host: the training loader's line says "0 GPU batch(es)
#     copied back to the host";
#   - host waits per step unchanged: "host waits (rank 0): W in 20 training step(s) and their L
#     log line(s)" says W = L, as the same run with --data-device cpu (host batches) says;
#   - the run trains: its validation lines are there and its loss is finite;
#   - the memory line says how much pinned host memory the backend holds (ops->pinned_bytes).
# Exit 77 (SKIPPED) without a GPU.
# usage: train_input.sh dpt-train dpt-loader-bench
T=$1
MK=$2
gpu_test_name=trainer.gpu.train_input
. "$(dirname "$0")/gpu_test.sh"
tmp=$(mktemp -d /tmp/dpt-test-gpu-input.XXXXXX)
"$MK" make "$tmp/d" --images 512 --classes 4 >/dev/null || { echo "FAIL: dpt-loader-bench make"; exit 1; }
ln -s "$tmp/d/train" "$tmp/d/val"
waits() { # waits LOG -> "W S L"
  sed -n 's/.*host waits (rank 0): \([0-9]*\) in \([0-9]*\) training step(s) and their \([0-9]*\) log line(s).*/\1 \2 \3/p' "$1"
}
for prec in mixed fp32; do
  for dd in gpu cpu; do
    log=$tmp/$prec-$dd.log
    "$T" --backend cuda --precision $prec --dataset imagenet --data-dir "$tmp/d" --data-device $dd --image-size 64 \
      --width 0.125 --batch-size 32 --iterations 20 --log-every 5 --no-report >"$log" 2>&1 ||
      { fail "$prec/$dd: dpt-train failed: $(tail -3 "$log")"; continue; }
    grep -q "validation: top-1" "$log" || fail "$prec/$dd: no validation line"
    grep -Eq "step [0-9]+/16 loss -?(nan|inf)" "$log" && fail "$prec/$dd: the loss is not finite"
  done
  want="GPU-decoded batches straight into the backend, no host copy: NHWC fp16, 8 channels (3 + 5 zero) on device 0"
  [ $prec = fp32 ] && want="GPU-decoded batches straight into the backend, no host copy: NCHW fp32, 3 channels on device 0"
  grep -qF "input: $want" "$tmp/$prec-gpu.log" || fail "$prec: input line: $(grep 'input:' "$tmp/$prec-gpu.log")"
  grep -q "input: host fp32 NCHW batches: --data-device cpu" "$tmp/$prec-cpu.log" ||
    fail "$prec: cpu input line: $(grep 'input:' "$tmp/$prec-cpu.log")"
  grep -q "; 0 GPU batch(es) copied back to the host" "$tmp/$prec-gpu.log" ||
    fail "$prec: host copies: $(grep 'training loader' "$tmp/$prec-gpu.log")"
  grep -q "training loader (nvJPEG" "$tmp/$prec-gpu.log" || fail "$prec: the GPU run did not decode with nvJPEG"
  grep -Eq "backend cuda memory \(rank 0\): .*; [0-9.]+ MB of pinned host memory$" "$tmp/$prec-cpu.log" ||
    fail "$prec: memory line: $(grep 'backend cuda memory' "$tmp/$prec-cpu.log")"
  g=$(waits "$tmp/$prec-gpu.log")
  c=$(waits "$tmp/$prec-cpu.log")
  set -- $g
  if [ "$#" = 3 ] && [ "$2" = 20 ] && [ "$3" -ge 4 ] && [ "$1" = "$3" ] && [ "$g" = "$c" ]; then
    echo "$prec: input straight into the backend, 0 host copies, host waits $1 in $2 steps = $3 log lines (cpu input: $c)"
  else
    fail "$prec: host waits '$g' with GPU input, '$c' with host input (want W = L, W 20 L, both the same)"
  fi
done
[ $fails = 0 ] && rm -rf "$tmp"
[ $fails = 0 ]
