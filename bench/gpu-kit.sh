#!/usr/bin/env bash
# gpu-kit.sh DIR: builds, on this machine, the folder that checks and benchmarks vitc on a GPU
# machine which has no build dependencies (no LLVM, protobuf-c or -dev packages; see bench/README.md, "Checking
# a GPU machine"):
#
#   DIR/bin/vitc                  vitc with the CUDA backend only (-DVITC_LLVM=OFF), protobuf-c linked
#                                 statically, NVRTC loaded at run time
#   DIR/lib/libvitc_runtime.so    the runtime (libcuda loaded at run time)
#   DIR/py/gpu_check.py           the check and benchmark driver (Python, the runtime through ctypes)
#   DIR/py/gen_fixtures.py        the model builders (tests/models/gen_fixtures.py)
#   DIR/gpu-check                 the command to run there: DIR/gpu-check [--quick] [--out DIR]
#   DIR/tile-sweep                GEMM tiles and the split K measured there (times and outputs)
#   DIR/gemm-gpu, DIR/cuda/       the GEMM kernels alone, checked and timed there (built there by nvcc)
#   DIR/ab-time                   two vitc builds timed in turn on one model, outputs compared
#   DIR/VERSION                   the commit it was built from
#
# Fails unless DIR stays under 40 MiB and every ELF in it needs nothing beyond libc, libm, libdl,
# libpthread, libgcc_s and the loader (readelf -d).  The build tree is VITC_KIT_BUILD (default
# /tmp/vitc-kit-build-$UID); nothing of build/ is reused.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: bench/gpu-kit.sh DIR" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mkdir -p "$1" && cd "$1" && pwd)
build=${VITC_KIT_BUILD:-${TMPDIR:-/tmp}/vitc-kit-build-$(id -u)}
jobs=$(nproc 2> /dev/null || echo 2)

echo "== gpu-kit: building vitc (CUDA only) in $build"
cmake -S "$repo" -B "$build" -DVITC_LLVM=OFF -DVITC_TESTS=OFF -DVITC_PROTOBUF_STATIC=ON \
  -DCMAKE_BUILD_TYPE=Release > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j"$jobs" --target vitc vitc_runtime > "$build.build.log" 2>&1 \
  || { tail -50 "$build.build.log"; exit 1; }

rm -rf "$dir"/bin "$dir"/lib "$dir"/py "$dir"/cuda "$dir"/gpu-check "$dir"/tile-sweep "$dir"/gemm-gpu "$dir"/ab-time \
  "$dir"/first-call "$dir"/VERSION
mkdir -p "$dir"/bin "$dir"/lib "$dir"/py "$dir"/cuda
cp "$build/vitc" "$dir/bin/vitc"
cp -L "$build/libvitc_runtime.so" "$dir/lib/libvitc_runtime.so"
strip --strip-unneeded "$dir/bin/vitc" "$dir/lib/libvitc_runtime.so"
cp "$repo/bench/kit/gpu_check.py" "$repo/tests/models/gen_fixtures.py" "$dir/py/"
cp "$repo/bench/kit/gpu-check" "$repo/bench/kit/tile-sweep" "$repo/bench/kit/gemm-gpu" "$repo/bench/kit/ab-time" \
  "$repo/bench/kit/first-call" "$dir/"
cp "$repo/bench/kit/gemm_gpu.cu" "$repo/codegen/cuda/device/prelude.cuh" "$repo/codegen/cuda/device/gemm.cuh" \
  "$repo/codegen/cuda/device/params.h" "$repo/ir/act.def" "$dir/cuda/"
chmod +x "$dir/gpu-check"
(cd "$repo" && git describe --always --dirty 2> /dev/null || echo unknown) > "$dir/VERSION"

echo "== gpu-kit: checking $dir"
status=0
allowed='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|libgcc_s\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1)$'
while IFS= read -r -d '' f; do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  echo "  ${f#"$dir"/}: NEEDED $(echo $needed)"
  for lib in $needed; do
    if ! [[ $lib =~ $allowed ]]; then
      echo "  ERROR: ${f#"$dir"/} needs $lib (the GPU machine has only libc, libm, libdl, libpthread, libgcc_s)"
      status=1
    fi
  done
done < <(find "$dir" -type f -print0)
bytes=$(du -sb "$dir" | cut -f1)
echo "  size: $bytes bytes ($((bytes / 1024 / 1024)) MiB; limit 40 MiB)"
if [ "$bytes" -gt $((40 * 1024 * 1024)) ]; then
  echo "  ERROR: the kit is over 40 MiB"
  status=1
fi
[ $status -eq 0 ] && echo "== gpu-kit: $dir is ready: copy it to the GPU machine and run $dir/gpu-check --quick"
exit $status
