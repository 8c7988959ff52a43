#!/bin/sh
# bench/loader/run.sh BUILD [OUT_PREFIX] — issue 16's loader benchmark.
#
# images/s of decoded 224-px training crops (random-resized crop + flip + normalise),
# and the CPU cores used, on an ImageNet-like JPEG folder this script writes itself
# (dpt-loader-bench make: ~500 x 375, quality 90, 4:2:0, $IMAGES files; no download):
#   dpt CPU path    dpt-loader-bench run --device cpu --threads T   for T in $THREADS (1..nproc)
#   dpt GPU path    --device gpu (batches stay on the GPU) for T in $GPU_THREADS: NCHW fp32 and
#                   NHWC fp16, the hardware decoder's default share (0.65), all to it (--hw-share 1),
#                   none (--no-hw); and --host-copy (batches copied back as host fp32: what a
#                   backend without device input gets; dpt-train's cuda backend reads them in
#                   place) -- only when the GPU path works here
#   torchvision     DataLoader + PIL with W workers (W in $THREADS), and decode_jpeg(device="cuda")
#                   batched + GPU transforms (GPU only), with whichever python3 has torchvision
#   trainer         dpt-train --backend cuda --precision mixed on synthetic 224-px data, img/s
#                   (GPU only): the rate the GPU loader must beat by 1.5x
# Each configuration runs $REPEAT times; the summary takes the median.  What is missing here
# (no GPU, no torchvision) is skipped with a note in the results.  Results:
# OUT_PREFIX.json / .md (default bench/results/loader-<device>, device = cpu without a GPU,
# else the GPU's name in lower case, e.g. loader-nvidia-h100-80gb-hbm3).
# Knobs: IMAGES=3000 BATCH=64 GPU_BATCH=256 STEPS=30 GPU_STEPS=40 REPEAT=3 THREADS="1 .. nproc"
#        GPU_THREADS="1 2 4" DATA=/tmp/dpt-loader-bench-data PYTHONS="python3 /usr/bin/python3"
#        TRAIN_BATCH=256 TRAIN_STEPS=60
set -u
BUILD=${1:?usage: bench/loader/run.sh BUILD [OUT_PREFIX]}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TOOL=$BUILD/trainer/dpt-loader-bench
TRAIN=$BUILD/trainer/dpt-train
[ -x "$TOOL" ] || { echo "run.sh: $TOOL missing: build first (cmake --build $BUILD)" >&2; exit 2; }
NPROC=$(nproc)
IMAGES=${IMAGES:-3000}
BATCH=${BATCH:-64}
GPU_BATCH=${GPU_BATCH:-256}
STEPS=${STEPS:-30}
GPU_STEPS=${GPU_STEPS:-40}
REPEAT=${REPEAT:-3}
THREADS=${THREADS:-$(seq 1 "$NPROC" | tr '\n' ' ')}
GPU_THREADS=${GPU_THREADS:-1 2 4}
DATA=${DATA:-/tmp/dpt-loader-bench-data}
PYTHONS=${PYTHONS:-python3 /usr/bin/python3}
TRAIN_BATCH=${TRAIN_BATCH:-256}
TRAIN_STEPS=${TRAIN_STEPS:-60}

if "$TOOL" probe >/tmp/dpt-loader-probe.$$ 2>&1; then
  GPU=1
  NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  DEV=$(echo "${NAME:-gpu}" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
else
  GPU=0
  DEV=cpu
fi
GPU_WHY=$(cat /tmp/dpt-loader-probe.$$)
rm -f /tmp/dpt-loader-probe.$$
OUT=${2:-$ROOT/bench/results/loader-$DEV}
mkdir -p "$(dirname "$OUT")"
RAW=$OUT.raw.jsonl
: >"$RAW"
note() { printf '{"note": "%s"}\n' "$*" >>"$RAW"; echo "run.sh: $*" >&2; }
printf '{"load_before": "%s"}\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW"

# the data set (kept between runs: $DATA/.made records how it was made)
if [ "$(cat "$DATA/.made" 2>/dev/null)" != "images=$IMAGES" ]; then
  rm -rf "$DATA"
  echo "run.sh: writing $IMAGES JPEGs to $DATA" >&2
  "$TOOL" make "$DATA" --images "$IMAGES" >"$DATA.make.json" || exit 1
  echo "images=$IMAGES" >"$DATA/.made"
fi
cat "$DATA.make.json" 2>/dev/null | sed 's/^/{"dataset": /; s/$/}/' >>"$RAW"
cat "$DATA"/train/*/* >/dev/null # page cache: every run reads from memory

# which python has torchvision
PY=
for p in $PYTHONS; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch, torchvision' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || note "torchvision peers skipped: no python3 with torch + torchvision among: $PYTHONS"
SMI=$(command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>&1 | head -1 | tr -d '"' || echo "not installed")
[ "$GPU" = 1 ] || note "GPU rows skipped: $GPU_WHY; nvidia-smi: ${SMI:-no output}"

tag() { sed "s/^{/{\"row\": \"$1\", \"rep\": $2, /" >>"$RAW"; }
for r in $(seq 1 "$REPEAT"); do
  for t in $THREADS; do
    "$TOOL" run --data-dir "$DATA" --device cpu --threads "$t" --batch "$BATCH" --steps "$STEPS" | tag "dpt-cpu" "$r"
    if [ -n "$PY" ]; then
      "$PY" "$HERE/peer_torchvision.py" --data "$DATA" --mode cpu --workers "$t" --batch "$BATCH" \
        --steps "$STEPS" | tag "torchvision-cpu" "$r"
    fi
  done
  if [ "$GPU" = 1 ]; then
    for t in $GPU_THREADS; do
      "$TOOL" run --data-dir "$DATA" --device gpu --threads "$t" --batch "$GPU_BATCH" --steps "$GPU_STEPS" |
        tag "dpt-gpu" "$r"
      "$TOOL" run --data-dir "$DATA" --device gpu --threads "$t" --batch "$GPU_BATCH" --steps "$GPU_STEPS" \
        --layout nhwc --dtype fp16 | tag "dpt-gpu-nhwc-fp16" "$r"
      "$TOOL" run --data-dir "$DATA" --device gpu --threads "$t" --batch "$GPU_BATCH" --steps "$GPU_STEPS" \
        --hw-share 1 | tag "dpt-gpu-hw-only" "$r"
      "$TOOL" run --data-dir "$DATA" --device gpu --threads "$t" --batch "$GPU_BATCH" --steps "$GPU_STEPS" \
        --no-hw | tag "dpt-gpu-cuda-only" "$r"
      if [ -n "$PY" ]; then
        "$PY" "$HERE/peer_torchvision.py" --data "$DATA" --mode gpu --workers "$t" --batch "$GPU_BATCH" \
          --steps "$GPU_STEPS" | tag "torchvision-gpu" "$r"
      fi
    done
    "$TOOL" run --data-dir "$DATA" --device gpu --threads 4 --batch "$GPU_BATCH" --steps "$GPU_STEPS" --host-copy |
      tag "dpt-gpu-host-copy" "$r"
  fi
done
if [ "$GPU" = 1 ] && [ -x "$TRAIN" ]; then # the trainer's own mixed-precision rate (synthetic data, 224 px)
  for r in $(seq 1 "$REPEAT"); do
    "$TRAIN" --backend cuda --precision mixed --dataset synthetic --image-size 224 --synthetic-images 2048 \
      --num-classes 1000 --batch-size "$TRAIN_BATCH" --iterations "$TRAIN_STEPS" --no-val --no-report \
      --log-every 10 >"$OUT.train.log" 2>&1
    # the rate of the logged intervals after the first (start-up, algorithm search), median
    ips=$(grep -o '[0-9.]* img/s ETA' "$OUT.train.log" | cut -d' ' -f1 | tail -n +2 | sort -g |
          awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}')
    [ -n "$ips" ] && printf '{"row": "trainer-mixed", "rep": %s, "images_per_s": %s}\n' "$r" "$ips" >>"$RAW"
  done
fi
printf '{"load_after": "%s"}\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW"
python3 "$HERE/summarize.py" "$RAW" "$OUT" "$BUILD" "$DATA" "$*" || exit 1
echo "run.sh: $OUT.md, $OUT.json" >&2
