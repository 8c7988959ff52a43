#!/bin/sh
# test_recipe: dpt-train --recipe NAME --dry-run prints each record run's published schedule.
# The values below are taken from the sources (not from dpt), each cited where it is checked;
# a row is "epoch global-batch steps lr-at-its-first-step lr-at-its-last-step", and rates are
# compared with a relative tolerance of 1e-5 (the table prints 6 significant digits: half a unit of
# the 6th is at most 5e-6 of the value) except where a source's rule differs from dpt's by a derived
# amount (mlperf's poly span).
# Then: options given with a recipe override it (by group), bad recipes and dry-run-only options
# are refused, and a real run with a recipe says so on its start line and in its report.
# usage: test_recipe.sh PATH/TO/dpt-train
T=$1
tmp=$(mktemp -d /tmp/dpt-test-recipe.XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# row FILE EPOCH GLOBAL STEPS LR_FIRST LR_LAST [TOL]: the table row of 1-based EPOCH
row() {
  awk -v e="$2" -v g="$3" -v s="$4" -v a="$5" -v b="$6" -v tol="${7:-1e-5}" '
    function off(x, y) { d = x - y; if (d < 0) d = -d; return d > tol * (y < 0 ? -y : y) + 1e-300 }
    $1 == e && NF >= 5 && $2 ~ /^[0-9]+$/ { found = 1
      if ($2 != g || $3 != s || off($4, a) || off($5, b)) { print "epoch " e ": got " $2 " " $3 " " $4 " " $5 ", want " g " " s " " a " " b; exit 1 } }
    END { if (!found) { print "no row for epoch " e; exit 1 } }' "$1" || fail "$(basename "$1"): row $2"
}
dry() { # dry NAME [options]: the dry run into $tmp/NAME
  n=$1; shift
  "$T" --dry-run "$@" >"$tmp/$n" 2>"$tmp/$n.err" || fail "$n: dry run failed: $(cat "$tmp/$n.err")"
}

# ImageNet-1k: 1,281,167 training images; steps per epoch = floor(1281167 / global batch).
# Goyal et al. 2017 (arXiv 1706.02677): 256 GPUs x 32 = 8,192 (sec. 5.2: "k = 256 and n = 32");
# "gradual warmup which starts with eta = 0.1 and is linearly increased to eta = 3.2 over 5 epochs"
# (sec. 5.2); "reduce it by 1/10 at the 30-th, 60-th, and 80-th epoch" (sec. 5.1); 90 epochs.
dry goyal --recipe goyal
row "$tmp/goyal" 1 8192 156 0.1 0.716025641025641   # 0.1 + 3.1 x (155/156)/5
row "$tmp/goyal" 3 8192 156 1.34 1.956025641025641  # epoch 2.5 (mid epoch 3): 0.1 + 3.1/2 = 1.65 lies between
row "$tmp/goyal" 6 8192 156 3.2 3.2
row "$tmp/goyal" 30 8192 156 3.2 3.2
row "$tmp/goyal" 31 8192 156 0.32 0.32
row "$tmp/goyal" 61 8192 156 0.032 0.032
row "$tmp/goyal" 81 8192 156 0.0032 0.0032
row "$tmp/goyal" 90 8192 156 0.0032 0.0032
grep -q "sgd m 0.9 nesterov" "$tmp/goyal" || fail "goyal: not Nesterov momentum 0.9 (sec. 5.1)"
grep -q "weight decay 0.0001 (not on BN and bias), last BN gamma of residual branches 0" "$tmp/goyal" ||
  fail "goyal: weight decay 1e-4 off BN, zero-init residual gamma (sec. 5.1): $(grep 'weight decay' "$tmp/goyal")"
[ "$(grep -c '^ *[0-9]* *8192 ' "$tmp/goyal")" = 90 ] || fail "goyal: not 90 epochs"

# ChainerMN v1.3 post (Chainer blog, 2018-05-25), appendix: 32 GPUs, "Batch size: 64 per GPU until the
# 30th epoch, 128 afterwards" (2,048 then 4,096), "Gradual warmup until the 5th epoch", "0.2 time at
# the 30th epoch, and 0.1 time at the 60th and 80th epochs".  Its rate 0.1 per 256 is dpt's inference
# (the post: "based on Goyal et al."): 0.8 at 2,048.
dry cmn --recipe chainermn-90
row "$tmp/cmn" 6 2048 625 0.8 0.8
row "$tmp/cmn" 30 2048 625 0.8 0.8
row "$tmp/cmn" 31 4096 312 0.16 0.16    # x0.2 and the batch doubled; not rescaled
row "$tmp/cmn" 60 4096 312 0.16 0.16
row "$tmp/cmn" 61 4096 312 0.016 0.016
row "$tmp/cmn" 81 4096 312 0.0016 0.0016
row "$tmp/cmn" 90 4096 312 0.0016 0.0016
grep -q "37470 steps (90.00 epochs)" "$tmp/cmn" || fail "chainermn-90: not 30 x 625 + 60 x 312 steps"

# Akiba, Suzuki, Fukuda 2017 (arXiv 1711.04325), abstract: 1,024 GPUs, 32k, 90 epochs, BN without
# moving averages; the slow-start table (secondary sources, see dpt_train_recipe.c): 0.5, 0.075, 0.01,
# 0.001 x eta_base, eta_base = 0.1 x 32768/256 = 12.8, from epochs 0, 40, 70, 85; beta_center 10.
dry akiba --recipe akiba
row "$tmp/akiba" 1 32768 39 6.4 6.4
row "$tmp/akiba" 40 32768 39 6.4 6.4
row "$tmp/akiba" 41 32768 39 0.96 0.96
row "$tmp/akiba" 70 32768 39 0.96 0.96
row "$tmp/akiba" 71 32768 39 0.128 0.128
row "$tmp/akiba" 85 32768 39 0.128 0.128
row "$tmp/akiba" 86 32768 39 0.0128 0.0128
row "$tmp/akiba" 90 32768 39 0.0128 0.0128
grep -q "^ *11 .*SGD share 0.5000\.\." "$tmp/akiba" || fail "akiba: SGD share not 1/2 at beta_center = 10"
grep -q "^ *14 .*SGD share 1.0000\.\.1.0000" "$tmp/akiba" || fail "akiba: not momentum SGD from epoch 12.5"
grep -q "^ *1 .*last batch, averaged over ranks" "$tmp/akiba" || fail "akiba: BN not last-batch"

# MLPerf reference (mlcommons/training image_classification/tensorflow2, README.md's TPU-v3-64 command:
# 4,096, base LR 10.0, 5 warm-up epochs, 42 epochs; lars_util.py: poly power 2 to 0.0001 over
# train_steps - warmup_steps + 1 = 11,545 steps).  Its rate at step s = 312 e after warm-up:
# (10 - 1e-4)(1 - (s - 1560)/11545)^2 + 1e-4, warm-up 10 s / 1560 (the values: that formula at the
# epoch's first and last step).  dpt decays over 11,544 steps: the relative difference is
# 2 (s - 1560) / (11544 (13104 - s)) (+ 1e-5 printing): 3e-5 at epoch 10, 4e-4 at 30, 6e-3 at 41.
dry mlperf --recipe mlperf
row "$tmp/mlperf" 1 4096 312 0 1.99359
row "$tmp/mlperf" 6 4096 312 10 9.4685 2e-5
row "$tmp/mlperf" 11 4096 312 7.48014 7.02144 5e-5
row "$tmp/mlperf" 31 4096 312 1.05233 0.884825 5e-4
row "$tmp/mlperf" 41 4096 312 0.0294068 0.0074972 7e-3
row "$tmp/mlperf" 42 4096 312 0.00745015 0.0001003 7e-3  # the last: 1e-4 + 3e-7 (dpt: + 7.5e-8)
grep -q "lars eta 0.001, m 0.9" "$tmp/mlperf" && grep -q "label smoothing 0.1, weight decay 0.0002" "$tmp/mlperf" ||
  fail "mlperf: LARS eta 0.001, momentum 0.9, label smoothing 0.1, weight decay 2e-4"

# explicit options win, by group
dry o1 --recipe goyal --batch-size 64 --ranks 128      # same global batch: same rates
row "$tmp/o1" 31 8192 156 0.32 0.32
dry o2 --recipe chainermn-90 --batch-size 64            # the batch schedule goes with --batch-size
row "$tmp/o2" 31 2048 625 0.16 0.16
dry o3 --recipe mlperf --optimizer sgd                  # LARS's parameters go with --optimizer
grep -q "sgd m 0.9" "$tmp/o3" || fail "--optimizer sgd did not replace mlperf's LARS"
dry o4 --recipe akiba --schedule cosine --lr 0.1        # the piecewise table goes with --schedule
row "$tmp/o4" 1 32768 39 12.8 12.7961 1e-4
dry o5 --recipe goyal --dataset cifar10 --ranks 1 --epochs 2 # global 32 < 256: 0.1 x 32/256, and the
row "$tmp/o5" 1 32 1562 0.0125 0.0125                         # warm-up from the unscaled rate (above it)
row "$tmp/o5" 2 32 1562 0.0125 0.0125                         # is flat
"$T" --recipe akiba --lr 0.2 --dry-run >"$tmp/out" 2>&1
[ $? = 2 ] && grep -q -- "--lr with --schedule piecewise" "$tmp/out" || fail "akiba + --lr not refused: $(cat "$tmp/out")"
"$T" --recipe resnet-in-1-second --dry-run >"$tmp/out" 2>&1
[ $? = 2 ] && grep -q "recipe 'resnet-in-1-second' is unknown; known: chainermn-90, goyal, akiba, mlperf" "$tmp/out" ||
  fail "unknown recipe: $(cat "$tmp/out")"
"$T" --ranks 4 >"$tmp/out" 2>&1
[ $? = 2 ] && grep -q -- "--ranks only applies to --dry-run" "$tmp/out" || fail "--ranks without --dry-run: $(cat "$tmp/out")"
"$T" --warmup-start half >"$tmp/out" 2>&1
[ $? = 2 ] && grep -q -- "--warmup-start 'half': zero or base" "$tmp/out" || fail "--warmup-start half: $(cat "$tmp/out")"
"$T" --recipe goyal --iterations 1 >"$tmp/out" 2>&1
[ $? = 2 ] && grep -q "imagenet needs --data-dir" "$tmp/out" || fail "a recipe run without data: $(cat "$tmp/out")"

# a real (tiny) run with a recipe: its start line and report say so
"$T" --recipe akiba --dataset synthetic --synthetic-images 32 --width 0.0625 --batch-size 4 --iterations 2 --no-val \
    --threads 1 --report "$tmp/r.json" >"$tmp/out" 2>&1 &&
  grep -q "dpt-train: recipe akiba: Akiba, Suzuki, Fukuda 2017" "$tmp/out" && grep -q '"recipe": "akiba"' "$tmp/r.json" &&
  grep -q "optimizer: RMSprop warm-up" "$tmp/out" || fail "run with --recipe akiba: $(tail -5 "$tmp/out")"

if [ $fails = 0 ]; then echo "ok: --recipe chainermn-90, goyal, akiba, mlperf dry runs print the published schedules; overrides; bad input"; rm -rf "$tmp"; fi
[ $fails = 0 ]
