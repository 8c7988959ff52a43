#!/usr/bin/env bash
# bench/gpu/check.sh OUTDIR [--only P1,P2,..] [--budget SECONDS] [--dry-run]
#
# Issue 22's device check: everything a GPU visit runs, in one call, in this order, each phase
# with its own time limit, its own log and one summary line (phase, pass/fail, seconds, figure);
# a failing phase never stops the later ones.
#   versions   nvidia-smi, the driver, CUDA runtime, cuDNN, NCCL, NVRTC, PyTorch; dpt-train's start line
#   smoke      dpt-train --backend cuda, 2 steps of ResNet-50 at 64 px, fp32 / tf32 / mixed / bf16:
#              ok, or the first failing call it names
#   profile    the kernel breakdown (CUPTI) of 2 steps of ResNet-50, 224 px, batch 256, at fp32, tf32, mixed
#              and bf16 (PROFILE_PRECISIONS): the kernels that take the step's time, per step, and each
#              start's convolution choice (cudnnFind's algorithm or a cuDNN graph engine, timed: the
#              engine cache under OUTDIR keeps the graphs' for the resnet phase's launches)
#   ctest      ctest -L '^gpu$' (per-test limit), passed / failed / skipped, but the fused step's four
#   ctestfused those four: their start can take minutes (the third visit: not one finished in the
#              ctest phase), so a phase of their own, in the order fused (the support matrix), graph,
#              fused_vs_unfused, train_fused (CTESTFUSED_ORDER), one ctest each; its summary names
#              the tests its limit kept from starting
#   mnist      the main job (Fashion-MNIST, width 1/8, 3 epochs) on one GPU: top-1
#   resnet     ResNet-50, 224 px, synthetic, batch 256, the default path at each precision against
#              PyTorch eager in the same run (bench/gpu/run.sh): img/s and peak-memory ratios; the
#              kernel classes of dpt and PyTorch side by side at tf32 and fp32 (RESNET_PROFILE)
#   graphs     --cuda-graph on alone (the default step captured) at mixed / bf16, PyTorch eager beside
#              (same harness)
#   fused      --fuse on --cuda-graph on at mixed / bf16, the acceptance's (same harness; FUSED_KEYS)
#   compile    torch.compile at fp16 and bf16 (same harness; compilation needs minutes)
#   sanitize   compute-sanitizer memcheck of a 3-step dpt-train at mixed and bf16
#   jpeg       the GPU JPEG loader on a generated folder against the CPU loader (img/s, cores)
# OUTDIR gets at most 8 files: summary.md, summary.json, logs.tar.gz (every phase's log and the
# harness's .md/.json), engine-cache.tar.gz (DPT_ENGINE_CACHE lives under OUTDIR, so the next
# visit carries it back: give it as ENGINE_CACHE=FILE.tar.gz to start from it; a warm machine's next
# call starts from the last call's, kept in .gpu/engine-cache.tar.gz).
# --budget bounds the whole call (default 450 s): a phase gets min(its limit, what is left), and a
# phase with less than 20 s left is recorded as skipped.  Without a GPU it says so and exits 0.
# BUILD (default $DPT_GPU_BUILD, set by .gpu/env.sh), FMNIST (default .gpudata/fashion-mnist, else
# /usr/share/datasets/fashion-mnist), TORCH_PYTHON (default python3), CUDNN_LIB_DIR (a cuDNN for
# dpt-train put first on LD_LIBRARY_PATH: the one the build's headers name, where the machine's
# own is older; PyTorch keeps its own), RESNET_KEYS (the resnet phase's configurations).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ALL="versions smoke profile ctest mnist resnet graphs fused ctestfused compile sanitize jpeg"
declare -A LIMIT=([versions]=40 [smoke]=120 [profile]=150 [ctest]=180 [mnist]=100 [resnet]=250 [graphs]=150 [fused]=150
                  [ctestfused]=240 [compile]=300
                  [sanitize]=150 [jpeg]=100)
usage() { echo "usage: bench/gpu/check.sh OUTDIR [--only PHASES] [--budget SECONDS] [--dry-run]" \
  "(phases: ${ALL// /,})" >&2; exit 2; }
out="" only="" budget=450 dry=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --only) [[ $# -ge 2 ]] || usage; only=$2; shift 2 ;;
    --budget) [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || usage; budget=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage ;;
    -*) echo "check.sh: unknown option '$1'" >&2; usage ;;
    *) [[ -z "$out" ]] || usage; out=$1; shift ;;
  esac
done
phases=$ALL
if [[ -n "$only" ]]; then
  phases=""
  for p in ${only//,/ }; do
    [[ -n "${LIMIT[$p]:-}" ]] || { echo "check.sh: unknown phase '$p' in --only (phases: ${ALL// /,})" >&2; exit 2; }
  done
  for p in $ALL; do [[ ",$only," == *",$p,"* ]] && phases+="$p "; done
fi
if [[ $dry -eq 1 ]]; then
  echo "check.sh: would run, within a budget of ${budget} s:"
  for p in $phases; do printf '  %-9s limit %4d s\n' "$p" "${LIMIT[$p]}"; done
  exit 0
fi
[[ -n "$out" ]] || usage
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "check.sh: no GPU here (nvidia-smi -L fails): nothing run, nothing written"; exit 0
fi
if [[ -n "${CUDA_VISIBLE_DEVICES+set}" && ( -z "$CUDA_VISIBLE_DEVICES" || "$CUDA_VISIBLE_DEVICES" == -* ) ]]; then
  echo "check.sh: no GPU here (CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' hides every GPU): nothing run, nothing written"
  exit 0
fi
build=${BUILD:-${DPT_GPU_BUILD:-}}
[[ -n "$build" && -x "$build/trainer/dpt-train" ]] ||
  { echo "check.sh: no dpt-train in BUILD='$build': source .gpu/env.sh (pack with ../shared/gpu/pack.sh)" >&2; exit 2; }
T=$build/trainer/dpt-train
# the commit the build was made from: pack.sh's tree has no .git there, so .gpu/commit if written
commit=$(cat "$build/../commit" 2>/dev/null || git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
export DPT_BUILD_COMMIT=$commit
py=${TORCH_PYTHON:-python3}
fm=${FMNIST:-$root/.gpudata/fashion-mnist}
[[ -d "$fm" ]] || fm=/usr/share/datasets/fashion-mnist
if [[ -n "${CUDNN_LIB_DIR:-}" ]]; then
  [[ -e "$CUDNN_LIB_DIR/libcudnn.so.9" ]] || { echo "check.sh: CUDNN_LIB_DIR=$CUDNN_LIB_DIR has no libcudnn.so.9" >&2; exit 2; }
  export LD_LIBRARY_PATH=$CUDNN_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
mkdir -p "$out/logs" || exit 2
out=$(cd "$out" && pwd)
logs=$out/logs
export DPT_ENGINE_CACHE=$out/engine-cache
mkdir -p "$DPT_ENGINE_CACHE"
# a warm machine's next call starts from this call's engines (.gpu/ is ignored: it stays between calls)
kept=$root/.gpu/engine-cache.tar.gz
[[ -z "${ENGINE_CACHE:-}" && -f "$kept" ]] && ENGINE_CACHE=$kept
[[ -n "${ENGINE_CACHE:-}" && -f "$ENGINE_CACHE" ]] && tar -xzf "$ENGINE_CACHE" -C "$DPT_ENGINE_CACHE" &&
  echo "check.sh: engine cache from $ENGINE_CACHE"
: >"$out/phases.tsv"
start=$(date +%s)

# --- the phases: each writes to stdout (its log); exit status = pass / fail -----------------------
ph_versions() {
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap --format=csv
  "$py" - <<'EOF'
import ctypes, ctypes.util
def v(lib, fn, *names):
    for n in names:
        try:
            f = getattr(ctypes.CDLL(n), fn)
        except OSError:
            continue
        return f
    return None
f = v("cudnn", "cudnnGetVersion", "libcudnn.so.9", "libcudnn.so")
if f: f.restype = ctypes.c_size_t; print("VERSION cudnn", f())
x = ctypes.c_int(0)
f = v("nccl", "ncclGetVersion", "libnccl.so.2", "libnccl.so")
if f and f(ctypes.byref(x)) == 0: print("VERSION nccl", x.value)
a, b = ctypes.c_int(0), ctypes.c_int(0)
f = v("nvrtc", "nvrtcVersion", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")
print("VERSION nvrtc", "%d.%d" % (a.value, b.value) if f and f(ctypes.byref(a), ctypes.byref(b)) == 0 else "not loadable")
f = v("cudart", "cudaRuntimeGetVersion", "libcudart.so.13", "libcudart.so")
if f and f(ctypes.byref(x)) == 0: print("VERSION cudart", x.value)
f = v("cuda", "cuDriverGetVersion", "libcuda.so.1")
if f and f(ctypes.byref(x)) == 0: print("VERSION cuda_driver_api", x.value)
EOF
  # the peer as run.sh runs it, without dpt's LD_LIBRARY_PATH (an older cuDNN there stops PyTorch's import)
  env -u LD_LIBRARY_PATH "$py" - <<'EOF'
try:  # the peer: what it reports is informative, never a failure of this phase
    import torch
    t = [torch.__version__, "cuda", str(torch.version.cuda), "cudnn", str(torch.backends.cudnn.version())]
    try:
        t += ["nccl", ".".join(map(str, torch.cuda.nccl.version())), "device", torch.cuda.get_device_name(0)]
    except Exception as e:
        t += ["(%s)" % e]
    print("VERSION torch", " ".join(t))
except Exception as e:
    print("VERSION torch unavailable:", e)
EOF
  echo "--- dpt-train's start"
  "$T" --backend cuda --dataset synthetic --synthetic-images 16 --batch-size 8 --image-size 32 --iterations 1 \
    --no-val --no-report 2>&1 | head -20
}

ph_smoke() {
  local rc=0 p
  for p in fp32 tf32 mixed bf16; do
    "$T" --backend cuda --precision "$p" --dataset synthetic --synthetic-images 64 --image-size 64 --batch-size 16 \
      --iterations 2 --log-every 1 --no-val --no-report >"$logs/smoke-$p.log" 2>&1
    local r=$?
    sed "s/^/[$p] /" "$logs/smoke-$p.log"
    if [[ $r -eq 0 ]]; then echo "SMOKE $p ok"
    else
      rc=1
      echo "SMOKE $p fail exit $r: $(grep -m1 -iE 'error|fail|refus|cannot|abort|illegal' "$logs/smoke-$p.log" | cut -c1-240)"
    fi
  done
  return $rc
}

ph_profile() {
  local p rc=0
  for p in ${PROFILE_PRECISIONS:-fp32 tf32 mixed bf16}; do
    "$T" --backend cuda --precision "$p" --dataset synthetic --image-size 224 --num-classes 1000 --width 1 \
      --synthetic-images 1280 --batch-size 256 --iterations 5 --log-every 1 --no-val --no-flip --no-report \
      --profile-steps 2 --profile-out "$logs/profile-$p.json" || rc=1
    "$py" "$here/check_summary.py" kernels "$logs/profile-$p.tsv" --label "$p" || rc=1
  done
  return $rc
}

SLOW='gpu[.](train_fused|fused_vs_unfused|graph|fused)$' # the fused step's tests (ctestfused)
ph_ctest() {
  (cd "$build" && ctest -L '^gpu$' -E "$SLOW" --timeout "${CTEST_TIMEOUT:-90}" --output-on-failure)
}
# one ctest run each, the quick and telling first (ctest runs by test number: the fourth visit's phase
# spent 214 s in train_fused and stopped inside fused_vs_unfused, fused's support matrix not reached)
FUSED_ORDER=${CTESTFUSED_ORDER:-fused graph fused_vs_unfused train_fused}
ph_ctestfused() {
  local t rc=0
  # the tests this phase means to run, so that the summary counts those the phase's limit kept from starting
  echo "CTEST PLANNED:$(for t in $FUSED_ORDER; do printf ' trainer.gpu.%s' "$t"; done)"
  for t in $FUSED_ORDER; do
    (cd "$build" && ctest -L '^gpu$' -R "^trainer[.]gpu[.]$t\$" --timeout "${CTEST_FUSED_TIMEOUT:-120}" \
      --output-on-failure) || rc=1
  done
  return $rc
}

ph_mnist() {
  "$T" --backend cuda --data-dir "$fm" --report "$logs/mnist-report.json"
}

bench() { # bench KEYS BUDGET NAME
  ONLY=$1 BATCHES=256 WARMUP=${WARMUP:-3} STEPS=${STEPS:-12} BUDGET=$2 PROFILE_STEPS=${PROFILE_STEPS:-0} \
    DPT_BENCH_KEEP=1 bash "$here/run.sh" "$build" "$logs/$3"
}
ph_resnet() { # the two furthest from PyTorch (the third visit: tf32 0.90x, fp32 0.92x) profiled beside it
  PROFILE_STEPS=${RESNET_PROFILE_STEPS:-2} PROFILE=${RESNET_PROFILE:-dpt-tf32,torch-tf32-cl,dpt-fp32,torch-fp32} \
    bench "${RESNET_KEYS:-dpt-fp32,torch-fp32,dpt-tf32,torch-tf32-cl,dpt-fp16,torch-fp16-cl,dpt-bf16,torch-bf16-cl}" \
    "$(($1 - 10))" resnet
}
ph_graphs() { bench dpt-fp16-graph,torch-fp16-cl,dpt-bf16-graph,torch-bf16-cl "$(($1 - 10))" graphs; } # peers: same run
ph_fused() { PROFILE_STEPS=3 bench "${FUSED_KEYS:-dpt-fp16-fused,dpt-bf16-fused}" "$(($1 - 10))" fused; }
ph_compile() { bench torch-fp16-compile,torch-bf16-compile "$(($1 - 10))" compile; }

ph_sanitize() {
  local rc=0 p
  for p in mixed bf16; do
    sh "$root/tests/trainer/gpu/sanitize.sh" memcheck "$T" --backend cuda --precision "$p" --dataset synthetic \
      --synthetic-images 48 --image-size 32 --batch-size 16 --iterations 3 --no-val --no-report || rc=1
  done
  return $rc
}

ph_jpeg() {
  local lb=$build/trainer/dpt-loader-bench d=/tmp/dpt-check-jpeg
  [[ -x "$lb" ]] || { echo "no dpt-loader-bench in $build/trainer"; return 1; }
  rm -rf "$d"; "$lb" make "$d" --images 1536 --classes 8 || return 1
  "$lb" probe || return 1
  echo "JPEG gpu $("$lb" run --data-dir "$d" --device gpu --threads 4 --batch 256 --steps 12 --layout nhwc --dtype fp16)"
  echo "JPEG cpu $("$lb" run --data-dir "$d" --device cpu --threads 4 --batch 256 --steps 6)"
}

# --- the driver -------------------------------------------------------------------------------------
for p in $phases; do
  left=$((budget - ($(date +%s) - start)))
  lim=${LIMIT[$p]}; ((lim > left - 5)) && lim=$((left - 5))
  if ((lim < 20)); then
    printf '%s\tskipped\t0\t%d\tno time left in the %d-s budget\n' "$p" "${LIMIT[$p]}" "$budget" >>"$out/phases.tsv"
    echo "== $p: skipped (no time left)"; continue
  fi
  echo "== $p (limit ${lim} s)"
  t0=$(date +%s)
  # timeout runs the phase as its own process group and signals the whole group: children end too
  timeout -k 5 "$lim" bash -c "$(declare -f ph_$p bench); $(declare -p T py fm logs build here root SLOW FUSED_ORDER); ph_$p $lim" \
    >"$logs/$p.log" 2>&1
  rc=$?
  "$py" "$here/check_summary.py" line "$out" "$p" "$rc" "$(($(date +%s) - t0))" "$lim" ||
    printf '%s\t%s\t%d\t%d\t(figure not parsed)\n' "$p" "$([[ $rc == 0 ]] && echo pass || echo fail)" \
      "$(($(date +%s) - t0))" "$lim" >>"$out/phases.tsv"
done
"$py" "$here/check_summary.py" write "$out" --commit "$commit" --budget "$budget"
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$logs"
tar -czf "$out/engine-cache.tar.gz" -C "$DPT_ENGINE_CACHE" . && rm -rf "$DPT_ENGINE_CACHE" &&
  mkdir -p "$root/.gpu" && cp "$out/engine-cache.tar.gz" "$kept"
cat "$out/summary.md"
