#!/bin/sh
# test_imagenet_cli: dpt-train --dataset imagenet end to end on a tiny JPEG set made
# by trainer_test_jpeg --make: folders and list files train 2 steps with validation;
# usage errors exit 2; a corrupt JPEG stops the run (exit 2) naming the file and the
# record; --skip-bad finishes and reports the skipped count (stderr and the report);
# --data-device: unknown values, non-imagenet sets and the cpu backend are usage errors
# (exit 2); a build without nvJPEG says the GPU path is unavailable (exit 2); auto
# decodes on the CPU here (no GPU) and says which decoder it used.
# usage: test_imagenet_cli.sh PATH/TO/dpt-train PATH/TO/trainer_test_jpeg nvjpeg|no-nvjpeg
T=$1
MK=$2
NVJPEG=${3:-no-nvjpeg}
tmp=$(mktemp -d /tmp/dpt-test-inet.XXXXXX)
cd "$tmp" || exit 1
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
"$MK" --make "$tmp/d" || { echo "cannot make the dataset" >&2; exit 1; }

common="--dataset imagenet --image-size 32 --width 0.0625 --batch-size 4 --iterations 2 --threads 1
        --log-every 1 --seed 3 --data-threads 2"
run() { # run STATUS NAME args...
  want=$1; name=$2; shift 2
  "$T" $common "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; got=$?
  [ "$got" = "$want" ] || fail "$name: exit $got, want $want: $(tail -5 "$tmp/$name.err")"
}

run 0 dirs --data-dir "$tmp/d" --report "$tmp/dirs.json"
grep -q "imagenet 24 train / 4 val images" "$tmp/dirs.out" || fail "dirs: no dataset line: $(cat "$tmp/dirs.out")"
grep -q "3x32x32 k3" "$tmp/dirs.out" || fail "dirs: model is not 3x32x32 with 3 classes: $(head -3 "$tmp/dirs.out")"
grep -q "validation: top-1" "$tmp/dirs.out" || fail "dirs: no validation line"
grep -q "step 2/6" "$tmp/dirs.out" || fail "dirs: did not run 2 steps of 6: $(cat "$tmp/dirs.out")"
if [ -f "$tmp/dirs.json" ]; then
  grep -q '"dataset": *"imagenet"' "$tmp/dirs.json" || fail "report lacks the dataset"
  grep -q '"data_wait' "$tmp/dirs.json" || fail "report lacks the data-wait time"
fi
# list files, grayscale, synchronous loader
run 0 lists --train-list "$tmp/d/train.txt" --val-list "$tmp/d/val.txt" --in-channels 1 --prefetch 0
grep -q "1x32x32 k3" "$tmp/lists.out" || fail "lists: not a 1-channel model: $(head -3 "$tmp/lists.out")"
# the same checksum from folders and lists (same records, same order, same seed)
run 0 lists3 --train-list "$tmp/d/train.txt" --val-list "$tmp/d/val.txt"
a=$(grep -o "checksum [^ ]*" "$tmp/dirs.out"); b=$(grep -o "checksum [^ ]*" "$tmp/lists3.out")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "folders ($a) and lists ($b) trained differently"
# usage errors
run 2 nodir
grep -q "needs --data-dir" "$tmp/nodir.err" || fail "nodir: $(cat "$tmp/nodir.err")"
run 2 noval --train-list "$tmp/d/train.txt"
grep -q "needs --val-list" "$tmp/noval.err" || fail "noval: $(cat "$tmp/noval.err")"
run 2 chan --data-dir "$tmp/d" --in-channels 2
run 2 listother --train-list x --dataset cifar10
grep -q "only applies to --dataset imagenet" "$tmp/listother.err" || fail "listother: $(cat "$tmp/listother.err")"
run 2 missing --data-dir "$tmp/nonexistent"
grep -q "$tmp/nonexistent/train" "$tmp/missing.err" || fail "missing: $(cat "$tmp/missing.err")"
# a bad label in a list names file:line
printf 'train/n01_apple/img_00.JPEG 0\ntrain/n01_apple/img_01.JPEG one\n' >"$tmp/d/badlabel.txt"
run 2 badlabel --train-list "$tmp/d/badlabel.txt" --no-val
grep -q "badlabel.txt:2: label 'one'" "$tmp/badlabel.err" || fail "badlabel: $(cat "$tmp/badlabel.err")"
# corrupt JPEGs: one epoch (6 steps of 4 = 24 of 27 records) meets at least one of the 3
run 2 corrupt --data-dir "$tmp/d/bad" --no-val --iterations 6
grep -Eq "bad/train/n01_apple/(x_truncated|y_magic|z_empty).jpg \(record (8|9|10)\)" "$tmp/corrupt.err" ||
  fail "corrupt: no file and record named: $(cat "$tmp/corrupt.err")"
run 0 skip --data-dir "$tmp/d/bad" --no-val --iterations 6 --skip-bad --report "$tmp/skip.json"
grep -Eq "skipped [123] training and 0 validation images" "$tmp/skip.err" || fail "skip: no count: $(cat "$tmp/skip.err")"
if [ -f "$tmp/skip.json" ]; then
  grep -Eq '"skipped_records": *[123]' "$tmp/skip.json" || fail "skip: report lacks skipped_records"
fi
# --data-device (issue 16); no GPU is visible to these runs
export CUDA_VISIBLE_DEVICES=-1
run 2 ddev_bad --data-dir "$tmp/d" --data-device tpu
grep -q "data-device 'tpu' is unknown" "$tmp/ddev_bad.err" || fail "ddev_bad: $(cat "$tmp/ddev_bad.err")"
run 2 ddev_set --dataset synthetic --data-device gpu
grep -q "needs --dataset imagenet" "$tmp/ddev_set.err" || fail "ddev_set: $(cat "$tmp/ddev_set.err")"
run 2 ddev_cpu --data-dir "$tmp/d" --data-device gpu --backend cpu
grep -q "needs --backend cuda" "$tmp/ddev_cpu.err" || fail "ddev_cpu: $(cat "$tmp/ddev_cpu.err")"
if [ "$NVJPEG" = no-nvjpeg ]; then
  run 2 ddev_gpu --data-dir "$tmp/d" --data-device gpu
  grep -q "no GPU input path: nvJPEG was not found" "$tmp/ddev_gpu.err" || fail "ddev_gpu: $(cat "$tmp/ddev_gpu.err")"
else # nvJPEG built in, no device: auto picks the cpu backend, which cannot take GPU batches
  run 2 ddev_gpu --data-dir "$tmp/d" --data-device gpu
  grep -q "data-device gpu: the backend is cpu" "$tmp/ddev_gpu.err" || fail "ddev_gpu: $(cat "$tmp/ddev_gpu.err")"
fi
run 0 ddev_auto --data-dir "$tmp/d" --data-device auto --no-val
grep -q "training loader (libturbojpeg)" "$tmp/ddev_auto.out" || fail "ddev_auto: $(cat "$tmp/ddev_auto.out")"
a=$(grep -o "checksum [^ ]*" "$tmp/ddev_auto.out"); b=$(grep -o "checksum [^ ]*" "$tmp/dirs.out")
run 0 ddev_cpu0 --data-dir "$tmp/d" --data-device cpu --no-val
c=$(grep -o "checksum [^ ]*" "$tmp/ddev_cpu0.out")
[ -n "$a" ] && [ "$a" = "$c" ] || fail "--data-device auto ($a) and cpu ($c) trained differently without a GPU"
rm -rf "$tmp"
[ $fails = 0 ] && echo "ok: dpt-train --dataset imagenet (folders, lists, gray, errors, corrupt, --skip-bad, --data-device)"
[ $fails = 0 ]
