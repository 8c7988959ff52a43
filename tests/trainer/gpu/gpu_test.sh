# gpu_test.sh — sourced by the GPU test scripts, after they set gpu_test_name:
#   gpu_test_name=trainer.gpu.X; . "$(dirname "$0")/gpu_test.sh"
# Without a GPU it exits 77 (ctest: SKIPPED) saying so, as gpu_test.h does for the C tests;
# else it sets fails=0 and defines fail MESSAGE, which prints "FAIL: MESSAGE" and counts it.
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED $gpu_test_name: no GPU (nvidia-smi -L fails)"
  exit 77
fi
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
