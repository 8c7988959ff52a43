#!/bin/sh
# Benchmark (results file, not a timed test): ResNet-50 v1.5 training images/s
# and peak memory, dpt-train (oneDNN CPU backend) vs PyTorch 1.13 on this
# machine, same batch, threads, input sizes, one run, interleaved.
# usage: bench.sh DPT_TRAIN OUT.json [threads] [steps]
T=$1 OUT=$2 TH=${3:-2} STEPS=${4:-4}
tmp=$(mktemp -d /tmp/dpt-bench.XXXXXX)
here=$(dirname "$0")
echo "[" > "$OUT"
first=1
for size in 32 224; do
  classes=$([ $size = 224 ] && echo 1000 || echo 10)
  OMP_NUM_THREADS=$TH /usr/bin/time -f "%M" -o "$tmp/rss" "$T" --dataset synthetic --synthetic-images 64 \
      --image-size $size --num-classes $classes --width 1 --batch-size 32 --iterations $((STEPS + 1)) \
      --no-val --threads $TH --log-every 1 --prefetch 1 --report "$tmp/r.json" > "$tmp/log" 2>&1
  # steady state: median of the per-step rates after the first (warm-up) step
  dpt_ips=$(grep '^epoch' "$tmp/log" | tail -n +2 | sed 's/.* \([0-9.]*\) img\/s.*/\1/' | sort -n |
            awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
  dpt_rss=$(( $(cat "$tmp/rss") * 1024 ))
  torch=$(/usr/bin/python3 "$here/bench_torch.py" --image-size $size --batch 32 --threads $TH --steps $STEPS \
          --classes $classes)
  [ $first = 1 ] || echo "," >> "$OUT"
  first=0
  printf '{"schema": "dpt.bench-train/1", "image_size": %s, "batch": 32, "threads": %s, "dpt": {"images_per_s": %s, "peak_rss_bytes": %s}, "torch": %s}\n' \
      $size $TH "$dpt_ips" $dpt_rss "$torch" >> "$OUT"
done
echo "]" >> "$OUT"
rm -rf "$tmp"
cat "$OUT"
