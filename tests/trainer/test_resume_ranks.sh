#!/bin/sh
# test_resume_ranks: --resume auto with 2 ranks (dpt-launch).  Rank 0 picks the
# checkpoint (the newest that verifies) and sends it to the other ranks, so a
# rank whose view of --checkpoint-dir differs (here: rank 1 is given an empty
# one) still resumes from the same step with the same bits: after the newest
# checkpoint is corrupted, the resumed run falls back to the previous one and
# ends byte-identical to a straight run.  The learning curve continues: the
# resumed run's report (accuracy_curve and learning_curve) holds the epochs
# before the stop and after it, in order, each once — also when the stop falls
# on an epoch's end (its checkpoint is written before that epoch's validation).
# usage: test_resume_ranks.sh dpt-launch dpt-train dpt-report REPORT_DIR
L=$1 T=$2 R=$3 RD=$4
tmp=$(mktemp -d /tmp/dpt-test-resume-ranks.XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
mkdir -p "$RD" && rm -f "$RD"/resume-ranks-*.json* || fail "cannot use the report directory '$RD'"
# 2 ranks x batch 8 of 128 images: 8 steps per epoch, validation at steps 8, 16, 24
common="--dataset synthetic --synthetic-images 128 --image-size 32 --width 0.0625 --batch-size 8
        --iterations 24 --seed 5 --log-every 100 --prefetch 1 --checkpoint-every 4"
final=ckpt-0000000024.dpt
# rank 1 sees another checkpoint directory (empty): only rank 0's view may count
mkdir -p "$tmp/empty"
cat >"$tmp/rank1-elsewhere" <<EOF
#!/bin/sh
if [ "\$DPT_RANK" = 1 ]; then exec "$T" "\$@" --checkpoint-dir "$tmp/empty"; fi
exec "$T" "\$@"
EOF
chmod +x "$tmp/rank1-elsewhere"
launch() { # launch LOG ARGS...: 2 ranks; sets $st
  log=$1
  shift
  "$L" -n 2 --threads 1 -- "$@" >"$log" 2>&1
  st=$?
}
# curve_steps REPORT: "accuracy_curve steps / learning_curve steps", e.g. "8 16 24 / 8 16 24"
curve_steps() {
  python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
a = [p["step"] for p in d["results"]["train"]["accuracy_curve"]]
l = [p["step"] for p in d["learning_curve"]]
print(" ".join(map(str, a)), "/", " ".join(map(str, l)))' "$1" 2>&1
}

launch "$tmp/ref.log" "$T" $common --checkpoint-dir "$tmp/ref" --report "$RD/resume-ranks-ref.json"
[ "$st" = 0 ] && [ -s "$tmp/ref/$final" ] || fail "straight run: exit $st: $(tail -5 "$tmp/ref.log")"
[ "$(curve_steps "$RD/resume-ranks-ref.json")" = "8 16 24 / 8 16 24" ] ||
  fail "straight run: curve steps $(curve_steps "$RD/resume-ranks-ref.json"), want 8 16 24"

# stop after 20 steps (checkpoints 16 and 20 kept, validated epochs 8 and 16), corrupt
# checkpoint 20, resume with rank 1 looking at an empty directory
launch "$tmp/a1.log" "$T" $common --checkpoint-dir "$tmp/a" --stop-after 20 --report "$RD/resume-ranks-a1.json"
[ "$st" = 0 ] && [ -s "$tmp/a/ckpt-0000000020.dpt" ] || fail "stop after 20: exit $st: $(tail -5 "$tmp/a1.log")"
printf 'X' | dd of="$tmp/a/ckpt-0000000020.dpt" bs=1 seek=300 conv=notrunc 2>/dev/null
launch "$tmp/a2.log" "$tmp/rank1-elsewhere" $common --checkpoint-dir "$tmp/a" --resume auto \
    --report "$RD/resume-ranks-a2.json"
[ "$st" = 0 ] || fail "resume: exit $st: $(tail -5 "$tmp/a2.log")"
grep -q "ckpt-0000000020.dpt: checksum mismatch" "$tmp/a2.log" || fail "resume: the corrupt checkpoint was not reported"
[ "$(grep -c 'checksum mismatch' "$tmp/a2.log")" = 1 ] || fail "resume: more than rank 0 looked at the directory"
grep -q "^dpt-train: resumed from $tmp/a/ckpt-0000000016.dpt at step 16 (epoch 3)$" "$tmp/a2.log" ||
  fail "resume: does not say it resumed from checkpoint 16: $(grep '^dpt-train' "$tmp/a2.log")"
grep -q "^dpt-train: learning curve: 2 point(s) up to step 16 carried over$" "$tmp/a2.log" ||
  fail "resume: the learning curve was not carried over: $(grep '^dpt-train' "$tmp/a2.log")"
grep -q "^dpt-train: done: 8 steps" "$tmp/a2.log" || fail "resume: did not run steps 17-24"
grep -q "RANKS DISAGREE" "$tmp/a2.log" && fail "resume: the ranks' parameters disagree"
cmp -s "$tmp/ref/$final" "$tmp/a/$final" ||
  fail "resume on 2 ranks from the older checkpoint does not end byte-identical to the straight run"
[ "$(curve_steps "$RD/resume-ranks-a2.json")" = "8 16 24 / 8 16 24" ] ||
  fail "resume: report curve steps $(curve_steps "$RD/resume-ranks-a2.json"), want 8 16 24 (before and after the stop)"
# the carried points are the first run's, not recomputed
python3 -c 'import json, sys
a = json.load(open(sys.argv[1]))["learning_curve"][:2]
b = json.load(open(sys.argv[2]))["learning_curve"][:2]
sys.exit(0 if [(p["val_top1"], p["val_loss"], p["train_loss"]) for p in a] ==
              [(p["val_top1"], p["val_loss"], p["train_loss"]) for p in b] else 1)' \
    "$RD/resume-ranks-a1.json" "$RD/resume-ranks-a2.json" ||
  fail "resume: the carried points differ from those the stopped run reported"

# a stop at an epoch's end (step 8: its checkpoint comes before its validation)
launch "$tmp/b1.log" "$T" $common --checkpoint-dir "$tmp/b" --stop-after 8 --report "$RD/resume-ranks-b1.json"
[ "$st" = 0 ] || fail "stop after 8: exit $st: $(tail -5 "$tmp/b1.log")"
launch "$tmp/b2.log" "$T" $common --checkpoint-dir "$tmp/b" --resume auto --report "$RD/resume-ranks-b2.json"
[ "$st" = 0 ] && grep -q "resumed from .*ckpt-0000000008.dpt at step 8 " "$tmp/b2.log" ||
  fail "resume at step 8: exit $st: $(grep '^dpt-train' "$tmp/b2.log")"
[ "$(curve_steps "$RD/resume-ranks-b2.json")" = "8 16 24 / 8 16 24" ] ||
  fail "resume at an epoch's end: report curve steps $(curve_steps "$RD/resume-ranks-b2.json"), want 8 16 24"
cmp -s "$tmp/ref/$final" "$tmp/b/$final" || fail "resume at step 8 does not end byte-identical to the straight run"

"$R" --check "$RD"/resume-ranks-*.json >"$tmp/check" 2>&1 || fail "invalid report: $(cat "$tmp/check")"
if [ $fails = 0 ]; then echo "ok: 2-rank resume from rank 0's choice (newest corrupt -> previous, rank 1's directory empty): byte-identical to a straight run; learning curve 8 16 24 across the stop"; rm -rf "$tmp"; fi
[ $fails = 0 ]
