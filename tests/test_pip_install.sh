#!/bin/sh
# test_pip_install: `pip install .` as a user does it on a fresh clone, with
# nothing built before: `git clone` of the source directory (with the working
# tree's uncommitted changes laid over it, so that what is tested is what a
# commit of it would hold), a new venv, then `pip install CLONE`, which has
# scikit-build-core configure and build vitc and libvitc_runtime with CMake
# (its build tools and numpy from PyPI).  Then, from outside the clone: the
# `vitc` command and `python -m vitc`, the package's binaries inside the
# venv and its runtime the one loaded, and the example model compiled and
# run through the package against PyTorch's output.  Prints how long the
# install took (under half a minute on 2 idle cores).
# usage: test_pip_install.sh SOURCE_DIR PYTHON [sanitized|plain]   (exit 77: skipped, with why)
set -eu
src=$(cd "$1" && pwd)
python=$2
if [ "${3:-plain}" = sanitized ]; then
  echo "skipped: the wheel pip builds has no sanitizer; the plain build's suite runs this test"
  exit 77
fi
if ! git -C "$src" rev-parse --git-dir > /dev/null 2>&1; then
  echo "skipped: $src is not a git repository, so there is nothing to clone"
  exit 77
fi
if ! "$python" -m venv --help > /dev/null 2>&1; then
  echo "skipped: $python has no venv module (Debian python3-venv)"
  exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
clone=$tmp/vitc
git clone -q "$src" "$clone"
# the working tree as a commit of it would hold it: changed and new files (not
# ignored ones) copied over the clone, deleted ones removed
(cd "$src" && git ls-files -z --modified --others --exclude-standard) > "$tmp/changed"
if [ -s "$tmp/changed" ]; then
  (cd "$src" && xargs -0 sh -c 'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' sh < "$tmp/changed") \
    > "$tmp/present"
  (cd "$src" && tar --null -T "$tmp/present" -cf -) | tar -xf - -C "$clone"
  (cd "$src" && git ls-files -z --deleted) | (cd "$clone" && xargs -0 rm -f)
  echo "test_pip_install: HEAD cloned, $(tr -cd '\0' < "$tmp/present" | wc -c) uncommitted file(s) laid over it"
fi
[ ! -e "$clone/build" ]

venv=$tmp/venv
"$python" -m venv "$venv"
echo "test_pip_install: pip install $clone (builds vitc with CMake)"
start=$(date +%s)
# 2 build jobs unless asked otherwise (the CI machine has 2 cores); nothing prebuilt
rc=0
env -u VITC_BUILD_DIR CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
  "$venv/bin/python" -m pip install --disable-pip-version-check --no-input "$clone" > "$tmp/pip.log" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
  cat "$tmp/pip.log"
  echo "test_pip_install: pip install failed (exit $rc)"
  exit 1
fi
echo "test_pip_install: pip install took $(($(date +%s) - start)) s"
grep -E "^Successfully installed|scikit-build-core|Generator|Build files have been written" "$tmp/pip.log" || true

cd "$tmp"
version=$(sed -n 's/^project(vitc VERSION \([0-9.]*\).*/\1/p' "$clone/CMakeLists.txt")
# the console command on the venv's PATH, and python -m vitc
[ "$("$venv/bin/vitc" --version | head -n 1)" = "vitc $version" ]
[ "$("$venv/bin/python" -m vitc --help | head -n 1)" = "usage: vitc <command> [options]" ]
rc=0
"$venv/bin/vitc" run > /dev/null 2> "$tmp/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "^vitc: run: no model given" "$tmp/err"

# the package: its own binaries, the example model compiled and run through it
"$venv/bin/python" - "$clone" "$venv" "$version" <<'PY'
import os, sys
import numpy as np
import vitc

clone, venv, version = sys.argv[1:]
pkg = os.path.dirname(os.path.realpath(vitc.__file__))
assert pkg.startswith(os.path.realpath(venv)), f"vitc imported from {pkg}"
for path in (vitc.CLI_PATH, vitc.RUNTIME_PATH):
    assert os.path.dirname(os.path.dirname(path)) == pkg and os.path.isfile(path), path
assert vitc.__version__ == version, (vitc.__version__, version)
x = np.load(os.path.join(clone, "examples", "vit-tiny.input.npy"))
ref = np.load(os.path.join(clone, "examples", "vit-tiny.output.npy"))
with vitc.load(os.path.join(clone, "examples", "vit-tiny.onnx"), batch=4, cache_dir="cache") as m:
    out = m(x)
    with open("/proc/self/maps") as f:
        assert any(line.split()[-1] == os.path.realpath(vitc.RUNTIME_PATH) for line in f if len(line.split()) >= 6)
err = float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))
print(f"test_pip_install: vitc {vitc.__version__} from {pkg}; vit-tiny at batch {x.shape[0]}: "
      f"max|out-ref|/max|ref| = {err:.3g}")
assert err <= 1e-4
PY
echo "test_pip_install: passed"
