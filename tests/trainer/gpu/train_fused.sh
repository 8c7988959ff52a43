#!/bin/sh
# trainer.gpu.train_fused: dpt-train with issue 15's switches on, end to end, on one GPU: --fuse on
# --cuda-graph on at tf32, mixed and bf16 (and --fuse on at fp32, where the fused plan may fall back
# to legacy calls entirely), ResNet-50 width 1/8 at 64 px (channels 8..256: the fusion engines'
# multiples), 20 steps, --log-every 5, a validation pass, --profile-steps 3:
#   - it trains (exit 0, finite loss lines) and says what the backend decided at start: the fused
#     step's line (ops through cuDNN graphs, engines from the cache / timed) and "CUDA graphs: on";
#   - the second run with the same engine cache times nothing ("0 timed"): the cache works;
#   - host waits W = L (the captured steps wait for nothing, as trainer.gpu.train_waits requires of
#     the uncaptured ones);
#   - the kernel breakdown line, and its JSON (dpt.kernel-breakdown/1, 3 steps) and TSV written.
# Exit 77 (SKIPPED) without a GPU.
# usage: train_fused.sh dpt-train
T=$1
gpu_test_name=trainer.gpu.train_fused
. "$(dirname "$0")/gpu_test.sh"
tmp=$(mktemp -d /tmp/dpt-test-gpu-fused.XXXXXX)
export DPT_ENGINE_CACHE="$tmp/engines"
for prec in tf32 mixed bf16 fp32; do
  graph="--cuda-graph on"
  [ $prec = fp32 ] && graph=""
  for run in 1 2; do
    log="$tmp/$prec-$run.log"
    "$T" --backend cuda --precision $prec --fuse on $graph --dataset synthetic --synthetic-images 512 \
      --image-size 64 --width 0.125 --batch-size 16 --iterations 20 --log-every 5 --no-report \
      --profile-steps 3 --profile-out "$tmp/$prec-$run.kernels.json" >"$log" 2>&1 ||
      { fail "$prec run $run: dpt-train failed: $(tail -3 "$log")"; continue; }
    grep -q "fused step: [0-9]* of [0-9]* ops through cuDNN graphs" "$log" || fail "$prec: no fused-step line: $(head -5 "$log")"
    [ -n "$graph" ] && ! grep -q "CUDA graphs: on" "$log" && fail "$prec: no CUDA-graphs line"
    grep -q "fused step: engine search [0-9.]* s: " "$log" || fail "$prec: no engine-search line"
    [ $run = 2 ] && ! grep -q "engines: [0-9]* from the cache .*, 0 timed" "$log" &&
      fail "$prec: the second run timed engines again: $(grep 'fused step:' "$log")"
    grep -q "loss nan\|loss inf" "$log" && fail "$prec: non-finite loss: $(grep loss "$log" | tail -2)"
    w=$(sed -n 's/.*host waits (rank 0): \([0-9]*\) in \([0-9]*\) training step(s) and their \([0-9]*\) log line(s).*/\1 \3/p' "$log")
    set -- $w
    # --profile-steps synchronises twice (before its first and after its last recorded step)
    [ "$#" = 2 ] && [ "$1" -le $(($2 + 2)) ] || fail "$prec: host waits '$w' (want W <= L + 2): $(grep 'host waits' "$log")"
    grep -q "kernel breakdown of 3 step(s)" "$log" || fail "$prec: no kernel breakdown line"
    grep -q '"format": "dpt.kernel-breakdown/1"' "$tmp/$prec-$run.kernels.json" 2>/dev/null ||
      fail "$prec: no breakdown JSON"
    [ -s "$tmp/$prec-$run.kernels.tsv" ] || fail "$prec: no records TSV"
    echo "$prec run $run: $(grep 'fused step:' "$log" | head -1 | cut -c1-160); waits $w"
  done
done
[ $fails = 0 ] && rm -rf "$tmp"
[ $fails = 0 ]
