#!/usr/bin/env bash
# gpu_check.sh: the one command for a machine with an NVIDIA GPU (H100/H200, or any sm_80+):
# builds vitc with the CUDA backend, runs the CUDA tests (test_cuda_compile, then test_cuda_gpu:
# every fixture in fp32/tf32/fp16/bf16 on the GPU against the reference interpreter, graphs replayed
# and compared bit for bit, `vitc run` and `vitc compare`), then the GPU benchmark against PyTorch
# (bench/gpu_bench.py), which writes bench/results-gpu.md.  test_cuda_emu, the CPU emulation of the
# same, is CI's (no GPU needed); add it with VITC_GPU_CHECK_EMU=1.
#
# Each phase stays well under 10 minutes on an H100 machine; where a runner limits one command's
# time, run the phases one by one (the build directory is reused).
#
#   bench/gpu_check.sh              everything
#   bench/gpu_check.sh build        configure and build only
#   bench/gpu_check.sh test         build, then the CUDA tests
#   bench/gpu_check.sh bench [ARGS] build, then the benchmark (ARGS go to bench/gpu_bench.py)
#
# Environment: VITC_BUILD_DIR (default build-gpu), VITC_CUDA_HOME (default /usr/local/cuda),
# PYTHON (default: .venv/bin/python if present, else python3).  Needs the build tools of setup.sh
# (cmake, a C compiler, LLVM 19, protobuf-c, cmocka) and the CUDA toolkit's NVRTC; the GPU's
# driver provides libcuda at run time.  PyTorch is optional (its columns are left out without it).
set -euo pipefail
cd "$(dirname "$0")/.."

phase=${1:-all}
[ $# -gt 0 ] && shift
BUILD=${VITC_BUILD_DIR:-build-gpu}
CUDA_HOME=${VITC_CUDA_HOME:-/usr/local/cuda}
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
JOBS=$(nproc 2> /dev/null || echo 4)

say() { printf '\n== %s\n' "$*"; }

build() {
  say "machine"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv || true
  else
    echo "nvidia-smi not found (the GPU tests say whether a device is usable)"
  fi
  [ -f "$CUDA_HOME/include/nvrtc.h" ] || { echo "no NVRTC under $CUDA_HOME (set VITC_CUDA_HOME)"; exit 2; }
  say "build ($BUILD, CUDA backend from $CUDA_HOME)"
  local py_arg=()
  if "$PYTHON" -c "import onnxruntime, numpy" 2> /dev/null; then
    py_arg=(-DVITC_PYTHON="$(command -v "$PYTHON" || echo "$PYTHON")")
  fi
  cmake -S . -B "$BUILD" -DVITC_CUDA=ON -DVITC_CUDA_HOME="$CUDA_HOME" "${py_arg[@]}" > "$BUILD.configure.log" 2>&1 \
    || { cat "$BUILD.configure.log"; exit 1; }
  grep -q "CUDA backend: NVRTC" "$BUILD.configure.log" || { cat "$BUILD.configure.log"; exit 1; }
  cmake --build "$BUILD" -j"$JOBS"
}

tests() {
  say "CUDA tests"
  # sequential: test_cuda_gpu reuses the NVRTC images test_cuda_compile leaves in the test cache;
  # -V prints test_cuda_gpu's table (the device, then one line per fixture and precision)
  local pattern='test_cuda_compile|test_cuda_gpu'
  [ "${VITC_GPU_CHECK_EMU:-0}" = 1 ] && pattern="$pattern|test_cuda_emu"
  ctest --test-dir "$BUILD" -R "$pattern" --output-on-failure -V
}

bench() {
  say "GPU benchmark (bench/gpu_bench.py $*)"
  "$PYTHON" bench/gpu_bench.py --build "$BUILD" "$@"
}

case "$phase" in
  build) build ;;
  test) build && tests ;;
  bench) build && bench "$@" ;;
  all) build && tests && bench "$@" ;;
  *) echo "usage: bench/gpu_check.sh [all|build|test|bench [ARGS]]"; exit 2 ;;
esac
