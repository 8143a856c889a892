#!/usr/bin/env bash
# setup.sh: installs what vitc needs to build and test on a fresh Debian 12
# machine, then configures and builds it into build/ (or $VITC_BUILD_DIR).
#
#   ./setup.sh                 install packages, build
#   VITC_CMAKE_ARGS="-DVITC_SANITIZE=ON" VITC_BUILD_DIR=build-asan ./setup.sh
#
# Debian packages (why each is there is in README.md), and a Python venv in
# .venv with the test-time references from PyPI (onnxruntime, onnx, numpy).
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(
  build-essential cmake pkg-config
  llvm-19-dev                                   # CPU code generation through the LLVM C API
  lld                                           # links a model .so with its weights fast (used when present)
  libprotobuf-c-dev protobuf-c-compiler libonnx-dev  # ONNX protobuf: runtime, generator, schema
  libcmocka-dev                                 # unit tests
  libonnx-testdata                              # ONNX's own backend node tests
  graphviz                                      # renders `vitc dump --format dot` in the tests
  libstb-dev                                    # stb_image: reads image files in examples/classify.c
  python3 python3-venv                          # test-time references (ONNX Runtime)
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" > /dev/null
fi

VENV=.venv
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  /usr/bin/python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import onnxruntime, onnx, numpy" 2>/dev/null; then
  echo "setup: installing Python test references into $VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r tests/requirements.txt
fi

BUILD=${VITC_BUILD_DIR:-build}
mkdir -p "$BUILD"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD" -DVITC_PYTHON="$PWD/$VENV/bin/python" ${VITC_CMAKE_ARGS:-} > "$BUILD/configure.log" 2>&1 \
  || { cat "$BUILD/configure.log"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)"
echo "setup: built $BUILD/vitc"
