#!/usr/bin/env bash
# prove-kit.sh [NORMAL_BUILD]: what can be proved about the GPU kit without a GPU (run by .ci/run).
#
#  1. bench/gpu-kit.sh builds the kit (its own build tree, Release, only vitc and the runtime) and
#     checks its size (<= 40 MiB) and every ELF's NEEDED (libc, libm, libdl, libpthread, libgcc_s,
#     the loader); where nvcc is, the kit's gemm-gpu (the GEMM kernels alone) compiles for sm_90a
#     and sm_80;
#  2. in a mount namespace where LLVM, protobuf-c, cmocka and /usr/include (every -dev package) are
#     covered, as on the GPU machines: the kit's vitc compiles a seed fixture to a CUDA .so (NVRTC
#     from the CUDA toolkit stays visible, as it is there), and gpu-check says there is no GPU and
#     exits 2 without a traceback;
#  3. with /usr/local/cuda covered: vitc of the normal build (NORMAL_BUILD, default build/) still
#     compiles for the CPU, and --target cuda fails with exit 2 and says why.
# Needs root (unshare -m); exits 0 when all holds.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
normal=$(cd "${1:-$repo/build}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/vitc-prove-kit.XXXXXX")
trap 'rm -rf "$work"' EXIT
kit=$work/kit
model=$repo/tests/models/timm-ts17.onnx

echo "== 1. the kit"
VITC_KIT_BUILD=${VITC_KIT_BUILD:-$work/build} "$repo/bench/gpu-kit.sh" "$kit"
if command -v nvcc > /dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  "$kit/gemm-gpu" --build-only # the GEMM kernels alone, compiled as on the GPU machine (sm_90a, sm_80)
  rm -f "$kit/bin/gemm-gpu"
else
  echo "gemm-gpu: no nvcc here, not built"
fi

if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2> /dev/null; then
  echo "prove-kit: unshare -m is not allowed here (needs root): steps 2 and 3 not run" >&2
  exit 1
fi

# hide PATH...: mounts, inside the namespace, an empty tmpfs over directories and /dev/null over files
# (links are left alone: what they point to is hidden, or is kept)
hide='hide() { for p in "$@"; do
    if [ -L "$p" ] || [ ! -e "$p" ]; then continue
    elif [ -d "$p" ]; then mount -t tmpfs -o ro,size=4k none "$p"
    else mount --bind /dev/null "$p"; fi; done; }'

# The headers of every installed -dev package except the C library's and the compiler's own, which
# the GPU machines have (their nvcc compiles host code, and vitc packages a CUDA .so with cc):
# each top-level entry of /usr/include that only hidden packages own.
devs=$(dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' '*-dev' 2> /dev/null | awk '$1 == "ii" {print $2}')
keep_re='^(libc6-dev|linux-libc-dev|libgcc-[0-9]+-dev|libstdc\+\+-[0-9]+-dev|libcrypt-dev|libnsl-dev|libtirpc-dev)(:.*)?$'
tops() { xargs -r dpkg -L 2> /dev/null | sed -n 's|^\(/usr/include/[^/]*\).*|\1|p' | sort -u; }
keep=$(grep -E "$keep_re" <<< "$devs" | tops)
headers=$(grep -vE "$keep_re" <<< "$devs" | tops | grep -vxF -f <(echo "$keep") || true)

echo "== 2. the kit where the GPU machine's missing packages are hidden"
unshare -m --propagation private bash -euo pipefail -c "$hide"'
  kit=$1 work=$2 model=$3
  hide $4 /usr/lib/llvm-* /usr/lib/*-linux-gnu/libprotobuf-c* /usr/lib/*-linux-gnu/libLLVM* /usr/lib/*-linux-gnu/libcmocka*
  echo "hidden: the headers of every -dev package but libc/gcc ($(wc -w <<< "$4") entries of /usr/include;" \
       "llvm-c: $(ls /usr/include/llvm-c-19 2> /dev/null | wc -l) files, onnx.proto: $(ls /usr/include/onnx 2> /dev/null | wc -l)," \
       "protobuf-c: $(ls /usr/include/protobuf-c 2> /dev/null | wc -l)), /usr/lib/llvm-*, libLLVM, libprotobuf-c, libcmocka"
  "$kit/bin/vitc" "$model" --target cuda --precision bf16 -o "$work/timm.cuda.so"
  "$kit/bin/vitc" inspect "$work/timm.cuda.so" | grep -E "^(target|cuda|gpu code):"
  echo "kit vitc: compiled $(basename "$model") to a CUDA .so ($(stat -c %s "$work/timm.cuda.so") bytes)"
  set +e
  "$kit/gpu-check" --quick --out "$work/out" > "$work/gpu-check.txt" 2>&1
  rc=$?
  set -e
  cat "$work/gpu-check.txt"
  if [ $rc -ne 2 ] || grep -q Traceback "$work/gpu-check.txt" || ! grep -q "no GPU" "$work/gpu-check.txt"; then
    echo "FAIL: gpu-check without a GPU exited $rc (want 2, \"no GPU\", no traceback)"; exit 1
  fi
  echo "gpu-check without a GPU: exit $rc, no traceback"
' prove "$kit" "$work" "$model" "$headers"

echo "== 3. the normal build's vitc without the CUDA toolkit"
unshare -m --propagation private bash -euo pipefail -c "$hide"'
  hide /usr/local/cuda-* /usr/local/cuda
  vitc=$1/vitc work=$2 model=$3
  "$vitc" "$model" -o "$work/timm.cpu.so"
  echo "normal vitc, /usr/local/cuda hidden: compiled $(basename "$model") for the CPU ($(stat -c %s "$work/timm.cpu.so") bytes)"
  set +e
  "$vitc" "$model" --target cuda -o "$work/timm.nocuda.so" > "$work/nocuda.txt" 2>&1
  rc=$?
  set -e
  cat "$work/nocuda.txt"
  if [ $rc -ne 2 ] || [ -e "$work/timm.nocuda.so" ]; then echo "FAIL: --target cuda without NVRTC exited $rc (want 2)"; exit 1; fi
  echo "--target cuda without NVRTC: exit $rc"
' prove "$normal" "$work" "$model"
echo "== prove-kit: all holds"
