#!/bin/sh
# test_triton: the vitc backend (BUILD_DIR/backends/vitc/libtriton_vitc.so)
# in a real Triton Inference Server.  A venv in the build directory
# (BUILD_DIR/triton-venv, made on the first run from requirements.txt, about
# 400 MB from PyPI, and kept while requirements.txt is unchanged) holds the
# server that the nvidia-pytriton wheel ships and Triton's clients; then
# test_triton.py runs the checks.
# usage: test_triton.sh BUILD_DIR SOURCE_DIR PYTHON [sanitized|plain]   (exit 77: skipped, with why)
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
python=$3
backend=$build/backends/vitc/libtriton_vitc.so
if [ "${4:-plain}" = sanitized ]; then
  echo "test_triton skipped: a backend built with ASan/UBSan cannot be loaded into tritonserver, which is built without them"
  exit 77
fi
if grep -q -e __asan_init -e __ubsan_handle "$backend" 2>/dev/null; then
  echo "test_triton skipped: $backend is built with a sanitizer; tritonserver cannot load it"
  exit 77
fi
if [ "$(uname -s)" != Linux ]; then
  echo "test_triton skipped: the tritonserver of nvidia-pytriton runs on Linux only"
  exit 77
fi

req=$src/tests/triton/requirements.txt
venv=$build/triton-venv
pip_q="--quiet --disable-pip-version-check --no-input"
if ! cmp -s "$req" "$venv/vitc-requirements.txt" 2>/dev/null || ! "$venv/bin/python" -c "import pytriton, tritonclient.grpc" 2>/dev/null; then
  echo "test_triton: making $venv (nvidia-pytriton and tritonclient from PyPI, about 400 MB; kept for the next runs)"
  rm -rf "$venv"
  if ! "$python" -m venv "$venv" > "$build/triton-venv.log" 2>&1; then
    echo "test_triton skipped: $python cannot make a venv:"
    tail -5 "$build/triton-venv.log"
    rm -rf "$venv"
    exit 77
  fi
  if ! "$venv/bin/python" -m pip install $pip_q -r "$req" >> "$build/triton-venv.log" 2>&1; then
    echo "test_triton skipped: pip could not install $req (is PyPI reachable?); the last of its output:"
    tail -8 "$build/triton-venv.log"
    rm -rf "$venv"
    exit 77
  fi
  cp "$req" "$venv/vitc-requirements.txt"
fi
exec "$venv/bin/python" "$src/tests/triton/test_triton.py" --build "$build" --source "$src"
