#!/bin/sh
# test_comm_default (issue 14: GPU-first defaults): which communicator dpt-train uses when none
# is named (--comm auto unless $DPT_COMM), under dpt-launch as under srun --dpt.
#   cpu: every GPU hidden: --help says the default; 2 ranks without --comm and without
#        DPT_COMM take the plan's ring with gradient buckets during backward (report:
#        software.comm ring); DPT_COMM=mpi is still honoured.
#   gpu: two ranks on one GPU (dpt-launch --oversubscribe on a 1-GPU node description, so both
#        get GPU 0 whatever this machine has): --comm auto picks the ring and says why once,
#        naming the GPU's PCI bus id; --comm nccl is refused on every rank before NCCL is called
#        (exit 2, the bus id, --comm ring, each rank naming itself); --comm ring gives the
#        parameters of 1 rank with --accumulate 2 within 1e-5 at fp32 (both --deterministic: the
#        same kernels); 1 rank with --comm nccl runs.  Exit 77 (SKIPPED) without a GPU or without
#        the cuda backend.
# usage: test_comm_default.sh cpu|gpu dpt-launch dpt-train ckpt_compare NODE_1GPU_XML
mode=$1 L=$2 T=$3 C=$4 X=$5
tmp=$(mktemp -d /tmp/dpt-test-comm-default.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
unset DPT_COMM
export OMP_NUM_THREADS=1
common="--dataset synthetic --synthetic-images 128 --image-size 32 --width 0.0625 --batch-size 8
        --iterations 6 --no-val --seed 3 --log-every 100 --prefetch 1 --lr 1.0"

if [ "$mode" = cpu ]; then
  export CUDA_VISIBLE_DEVICES=-1
  "$T" --help | grep -q "(default \$DPT_COMM or auto; auto = nccl when the backend keeps its" ||
    fail "--help does not say the default communicator is auto"
  "$L" -n 2 --threads 1 -- "$T" $common --report "$tmp/auto.json" >"$tmp/log" 2>&1 ||
    fail "2 ranks, default communicator: $(tail -5 "$tmp/log")"
  grep -q "backend cpu fp32, comm ring," "$tmp/log" || fail "default communicator on host gradients is not the ring: $(grep 'rank(s)' "$tmp/log")"
  grep -q "gradients all-reduced in 1 bucket(s) of 25 MiB during backward" "$tmp/log" ||
    fail "default: no gradient buckets during backward: $(grep gradients "$tmp/log")"
  grep -q -- "--comm auto:" "$tmp/log" && fail "auto on host gradients printed a note: $(grep -- '--comm auto' "$tmp/log")"
  grep -q '"comm": "ring"' "$tmp/auto.json" || fail "the report's software.comm is not ring"
  DPT_COMM=mpi "$L" -n 2 --threads 1 -- "$T" $common --no-report >"$tmp/log" 2>&1 ||
    fail "DPT_COMM=mpi: $(tail -5 "$tmp/log")"
  grep -q "comm mpi," "$tmp/log" || fail "DPT_COMM=mpi not honoured: $(grep 'rank(s)' "$tmp/log")"
  [ $fails = 0 ] && echo "ok: default --comm auto = the ring with buckets on host gradients; DPT_COMM honoured"
  [ $fails = 0 ]
  exit
fi

# gpu
"$T" --help | grep -q "this build has: cpu,cuda" || { echo "SKIPPED: dpt-train has no cuda backend"; exit 77; }
nvidia-smi -L >/dev/null 2>&1 || { echo "SKIPPED: no GPU (nvidia-smi -L fails)"; exit 77; }
unset CUDA_VISIBLE_DEVICES SLURM_STEP_GPUS # the plan's GPU 0 for both ranks
shared="$L -n 2 --oversubscribe --input $X --threads 1 --"
gpu="--backend cuda --precision fp32"

$shared "$T" $common $gpu --no-report >"$tmp/log" 2>&1 || fail "2 ranks on one GPU, --comm auto: $(tail -5 "$tmp/log")"
[ "$(grep -c -- '--comm auto: ranks 0 and 1 share one GPU (PCI bus id [0-9A-Fa-f:.]* on ' "$tmp/log")" = 1 ] ||
  fail "--comm auto on one GPU: not said once with the bus id: $(grep -- '--comm auto' "$tmp/log")"
grep -q "comm ring," "$tmp/log" || fail "--comm auto on one GPU did not pick the ring: $(grep 'rank(s)' "$tmp/log")"

start=$(date +%s)
$shared "$T" $common $gpu --comm nccl --no-report >"$tmp/log" 2>&1
rc=$?
took=$(($(date +%s) - start))
[ $rc = 2 ] || fail "--comm nccl on one GPU: exit $rc, expected 2: $(tail -5 "$tmp/log")"
for r in 0 1; do
  grep -q "dpt-train: rank $r: communicator nccl: ranks 0 and 1 share one GPU (PCI bus id .*use --comm ring" "$tmp/log" ||
    fail "--comm nccl on one GPU: rank $r's message: $(grep 'dpt-train: rank' "$tmp/log")"
done
# NCCL's own words, not our refusal (which names ncclCommInitRank: the first GPU run matched it)
grep -v "communicator nccl: ranks 0 and 1 share one GPU" "$tmp/log" | grep -Eq "ncclCommInitRank|NCCL (WARN|INFO)" &&
  fail "--comm nccl on one GPU reached NCCL: $(grep -i nccl "$tmp/log")"
[ $took -le 60 ] || fail "--comm nccl on one GPU took $took s to be refused"

# The two runs compared must run the same convolution kernels: by default each launch times its
# algorithms and cuDNN graph engines (cudnnFind, the engine search), and two launches, or two ranks
# timing side by side on one GPU, may pick different ones for a shape (the fourth GPU visit: the
# momentum 1.3e-5 apart, the parameters 1.4e-7).  --deterministic takes cuDNN's heuristic order,
# untimed, in both, so what is left to differ is where each step's two micro-batch gradients are
# summed and halved (the ring on the host, the accumulation on the GPU): <= 1 ulp of fp32
# (6e-8 relative) per element per step, well inside 1e-5 after 6 steps (the cpu backend, whose
# kernels are fixed, gives the two runs bit for bit: max diff 0).
det="--deterministic"
$shared "$T" $common $gpu $det --comm ring --checkpoint-dir "$tmp/ring" --no-report >"$tmp/log" 2>&1 ||
  fail "2 ranks on one GPU, --comm ring: $(tail -5 "$tmp/log")"
"$T" $common $gpu $det --accumulate 2 --checkpoint-dir "$tmp/acc" --no-report >"$tmp/log1" 2>&1 ||
  fail "1 rank --accumulate 2: $(tail -5 "$tmp/log1")"
"$C" "$tmp/ring/ckpt-0000000006.dpt" "$tmp/acc/ckpt-0000000006.dpt" 1e-5 ||
  fail "2 ranks on one GPU (ring) != 1 rank with --accumulate 2 within 1e-5 (fp32, $det); their convolutions:
$(grep -h 'convolutions:' "$tmp/log" "$tmp/log1")"

"$L" -n 1 -- "$T" $common $gpu --comm nccl --no-report >"$tmp/log" 2>&1 || fail "1 rank with --comm nccl: $(tail -5 "$tmp/log")"
[ $fails = 0 ] && echo "ok: one GPU, 2 ranks: auto -> ring (said once, bus id), nccl refused in ${took} s, ring == --accumulate 2 (1e-5); 1 rank with nccl runs"
[ $fails = 0 ]
