#!/usr/bin/env bash
# bench/train/run.sh BUILD_DIR [OUT_PREFIX]
#
# Training benchmark of issue 9: dpt-train (oneDNN CPU backend) vs PyTorch 1.13 vs
# ChainerMN (chainer 7.8.1), ResNet-50 v1.5, batch 32 per rank, synthetic data, 32 px and
# 224 px, 1 rank (2 threads) and 2 ranks (1 thread each: dpt-launch -n 2 / torch DDP over
# gloo / chainermn 'naive' under mpirun -n 2).  Metrics for all three, measured the same
# way by bench.py: steady-state images/s (median over the steps after the first, with
# p25-p75), time to first step from process start, peak RSS of every rank (GNU time).
# Writes OUT_PREFIX.json (dpt.bench.train/2) and OUT_PREFIX.md (default
# bench/results/train); the raw logs of every launch go to OUT_PREFIX-logs/ when
# DPT_BENCH_KEEP=1 (else a temporary directory, removed).
#
# Installs what is missing, by package name only: python3-torch (apt); chainer 7.8.1
# (apt: its dependencies, then pip --no-build-isolation: its setup.py needs pkg_resources).
# When chainer cannot be installed the run goes on without it and the page says why.
#
# Knobs: SIZES=32,224 RANKS=1,2 FRAMEWORKS=dpt,torch,chainer STEPS=32:9,224:5
# CHAINER_STEPS=32:3,224:2 (steps per launch, the first is warm-up) CHAINER_SIZES=32 (its 224 px
# steps take minutes here) REPEAT=1 BATCH=32
# DPT_TRAIN (default BUILD_DIR/trainer/dpt-train), DPT_LAUNCH.  ~8 min here.
# ISA=AVX2 runs every framework as on an AVX2 CPU (no AVX-512) on a machine that has more:
# oneDNN capped (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA: dpt-train's kernels and PyTorch's
# mkldnn ones), PyTorch's own ATen kernels (ATEN_CPU_CAPABILITY=avx2) and OpenBLAS
# (OPENBLAS_CORETYPE=Haswell); the page's machine line says the cap.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [OUT_PREFIX]}" && pwd)
out=${2:-$root/bench/results/train}
py=/usr/bin/python3
dpt_train=${DPT_TRAIN:-$build/trainer/dpt-train}
dpt_launch=${DPT_LAUNCH:-$build/launcher/dpt-launch}
frameworks=${FRAMEWORKS:-dpt,torch,chainer}
for f in "$dpt_train" "$dpt_launch"; do
  [[ -x "$f" ]] || { echo "run.sh: $f is missing: build dpt-train and dpt-launch in $build" >&2; exit 2; }
done
notes=()
case "${ISA:-}" in
  "") ;;
  AVX2|avx2)
    export ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell
    notes+=(--note "Run with ISA=AVX2: oneDNN (dpt-train's kernels and PyTorch's mkldnn) capped to AVX2, PyTorch's ATen kernels to avx2, OpenBLAS to Haswell: both frameworks as on an AVX2 CPU without AVX-512.")
    ;;
  *) echo "run.sh: ISA=$ISA: only AVX2 (or unset: the CPU's own)" >&2; exit 2 ;;
esac
apt_install() { # apt_install PKG...: install what is missing (by name); quiet unless it fails
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  ((${#missing[@]})) || return 0
  echo "run.sh: apt-get install ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >"$work/apt.log" 2>&1 ||
    { apt-get update -q >>"$work/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >>"$work/apt.log" 2>&1; }
}
work=$(mktemp -d /tmp/dpt-train-bench.XXXXXX)
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "${DPT_BENCH_KEEP:-}" ]]; then
    rm -rf "$out-logs" && mkdir -p "$out-logs" && cp -r "$work"/. "$out-logs"/ && echo "run.sh: logs in $out-logs" >&2
  fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if ! "$py" -c 'import torch' 2>/dev/null; then
  apt_install python3-torch || { echo "run.sh: python3-torch could not be installed:" >&2; tail -5 "$work/apt.log" >&2; exit 2; }
fi
if [[ ",$frameworks," == *,chainer,* ]] && ! "$py" -c 'import chainer, chainermn' 2>/dev/null; then
  why=""
  if ! apt_install python3-setuptools python3-filelock python3-six python3-protobuf python3-typing-extensions \
      python3-mpi4py python3-numpy; then
    why="apt-get install of chainer's dependencies failed: $(tail -2 "$work/apt.log" | tr '\n' ' ')"
  elif ! "$py" -m pip install -q --no-build-isolation --break-system-packages chainer==7.8.1 >"$work/pip.log" 2>&1; then
    why="pip install --no-build-isolation chainer==7.8.1 failed: $(grep -i error "$work/pip.log" | tail -3 | tr '\n' ' ')"
  elif ! "$py" -c 'import chainer, chainermn' 2>"$work/import.log"; then
    why="chainer 7.8.1 installed but 'import chainer, chainermn' fails: $(tail -1 "$work/import.log")"
  fi
  if [[ -n "$why" ]]; then
    echo "run.sh: without ChainerMN: $why" >&2
    notes+=(--note "ChainerMN was not measured: $why")
    frameworks=$(echo ",$frameworks," | sed 's/,chainer,/,/; s/^,//; s/,$//')
  fi
fi
# the commit dpt-train was built from: the build's source tree (a git checkout, or an export
# with a .commit file, e.g. `git archive HEAD` of a shared working tree)
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
commit=$(cat "$src/.commit" 2>/dev/null || git -C "${src:-$root}" describe --always --dirty 2>/dev/null || echo unknown)
"$py" "$here/bench.py" --dpt-train "$dpt_train" --dpt-launch "$dpt_launch" --out "$out" --work "$work" \
  --sizes "${SIZES:-32,224}" --ranks "${RANKS:-1,2}" --frameworks "$frameworks" \
  --steps "${STEPS:-32:9,224:5}" --chainer-steps "${CHAINER_STEPS:-32:3,224:2}" \
  --chainer-sizes "${CHAINER_SIZES:-32}" --repeat "${REPEAT:-1}" \
  --batch "${BATCH:-32}" --build-commit "${DPT_BUILD_COMMIT:-$commit}" \
  --command "${ISA:+ISA=$ISA }bench/train/run.sh $build${2:+ $2}" ${notes[@]+"${notes[@]}"}
