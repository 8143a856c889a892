#!/bin/sh
# test_python: what a Python user does.  A venv in the build directory
# (BUILD_DIR/pytest-venv, made on the first run and kept for the next), then
# `pip install SOURCE_DIR` into it, the package taking this build's vitc and
# libvitc_runtime (VITC_BUILD_DIR=BUILD_DIR), then tests/test_python.py run by
# that venv's pytest from outside the source tree.  The package is installed
# afresh on every run; numpy and pytest stay in the venv.
# usage: test_python.sh BUILD_DIR SOURCE_DIR PYTHON [sanitized|plain]   (exit 77: skipped, with why)
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
python=$3
if [ "${4:-plain}" = sanitized ]; then
  echo "skipped: a runtime built with ASan/UBSan cannot be loaded into a Python built without them"
  exit 77
fi
if grep -q -e __asan_init -e __ubsan_handle "$build/libvitc_runtime.so.0" 2>/dev/null; then
  echo "skipped: $build/libvitc_runtime.so.0 is built with a sanitizer; it cannot be loaded into Python"
  exit 77
fi

venv=$build/pytest-venv
pip_q="--quiet --disable-pip-version-check --no-input"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import pytest" 2>/dev/null; then
  echo "test_python: making $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install $pip_q pytest
fi
# The real install, every run: pip builds the wheel (build isolation, scikit-build-core
# from PyPI, taking this build's binaries: VITC_BUILD_DIR), pulls the declared
# dependencies, and replaces the previous vitc.
echo "test_python: pip install $src (binaries from $build)"
VITC_BUILD_DIR=$build "$venv/bin/python" -m pip install $pip_q "$src"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
printf '[pytest]\n' > pytest.ini   # no configuration from the source tree (pyproject.toml)
rc=0
VITC_SOURCE_DIR=$src "$venv/bin/python" -m pytest -v -p no:cacheprovider -c pytest.ini --rootdir "$tmp" \
  "$src/tests/test_python.py" || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "test_python: pytest collected no tests"
  exit 1
fi
exit "$rc"
