#!/usr/bin/env bash
# bench/gpu/prepare.sh — here, before a GPU visit (issue 22): builds and packs the project for the GPU
# machine (../shared/gpu/pack.sh: Release, sm_90, the libraries it lacks), compresses the build to
# fit the 64-MiB carry, notes the commit and the cuDNN the build's headers name, and prints the
# device call.  On the GPU machine bench/gpu/device.sh takes it from there.
# usage: bash bench/gpu/prepare.sh [PHASES]   (default versions,ctest,ctestfused,mnist: what the fourth
# visit left unproven; then a second call at once: fused,compile with --budget 300, starting from the
# first's engine cache; with mnist the Fashion-MNIST files are packed too, .gpudata/fmnist.tar.xz.  The
# fourth visit's default, for a rerun of the speed figures: versions,smoke,profile,ctest,resnet)
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
phases=${1:-versions,ctest,ctestfused,mnist}
bash "$root/../shared/gpu/pack.sh"
(cd .gpu && rm -f build.txz && tar -cJf build.txz build)
git describe --always --dirty >.gpu/commit
inc=$(sed -n 's/^CUDNN_INCLUDE_DIR:[A-Z]*=//p' .gpu/build/CMakeCache.txt)
ver() { sed -n "s/^#define CUDNN_$1 *\([0-9]*\).*/\1/p" "$inc/cudnn_version.h"; }
echo $(($(ver MAJOR) * 10000 + $(ver MINOR) * 100 + $(ver PATCHLEVEL))) >.gpu/cudnn-headers
carry=(.gpu/build.txz .gpu/libs.tar.xz .gpu/ompi-root.tar.xz .gpu/env.sh .gpu/origin .gpu/commit .gpu/cudnn-headers)
if [[ ",$phases," == *",mnist,"* ]]; then # the main job's data: no dataset there, nothing to download
  fm=/usr/share/datasets/fashion-mnist
  grep -qx '/.gpudata/' .git/info/exclude 2>/dev/null || echo '/.gpudata/' >>.git/info/exclude
  if [[ ! -s .gpudata/fmnist.tar.xz ]]; then # raw IDX under xz: 26 MB, the gzip files 30
    mkdir -p .gpudata && tmp=$(mktemp -d)
    for f in "$fm"/*-ubyte.gz; do zcat "$f" >"$tmp/$(basename "$f" .gz)"; done
    (cd "$tmp" && tar -cf - ./*-ubyte | xz -9e -T0) >.gpudata/fmnist.tar.xz && rm -rf "$tmp"
  fi
  carry+=(.gpudata)
fi
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
untracked=$(git ls-files -z -o --exclude-standard | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)
packed=$(du -cb "${carry[@]}" | tail -1 | cut -f1)
total=$((tree + ${untracked:-0} + packed))
echo "prepare.sh: dpt $(cat .gpu/commit), cuDNN headers $(cat .gpu/cudnn-headers); the call carries $((total >> 20)) MiB" \
  "of the 64 (tree $((tree >> 20)), untracked $((${untracked:-0} >> 20)), packed $((packed >> 20)))"
((total < 64 << 20)) || { echo "prepare.sh: over the device's 64-MiB limit" >&2; exit 1; }
printf 'device run:\n  command: WARMUP=2 STEPS=8 CTEST_TIMEOUT=60 bash bench/gpu/device.sh $OUT --only %s --budget 430\n  carry: [' "$phases"
printf '"%s", ' "${carry[@]}" | sed 's/, $//'
printf ']\n  timeout_s: 470\n'
printf 'then at once (the machine stays warm 30 s): the same carry, timeout_s 340,\n  command: WARMUP=2 STEPS=8 bash bench/gpu/device.sh $OUT --only fused,compile --budget 300\n'
