#!/usr/bin/env bash
# run.sh: builds vitc's libFuzzer harnesses (clang, ASan+UBSan, in build-fuzz/)
# and runs them, one after another, each for a bounded time on one core.
#
#   tests/fuzz/run.sh [-t SECONDS] [HARNESS...]
#
# HARNESS is one of model, model_struct, interp, interp_struct, npy, so
# (default: all six); -t is the time per harness (default 60).  CI runs
# `tests/fuzz/run.sh -t 12` (about a minute); a longer run is e.g.
# `VITC_FUZZ_CORPUS=~/vitc-corpus tests/fuzz/run.sh -t 3600 model_struct`.
#
# The seed corpus is built at run time in a temporary directory: the fixtures
# (tests/models), the broken corpus (tests/data/broken), the Resize models
# (tests/data/resize), the fuzz regressions and, when installed, the models
# and tensors of ONNX's node tests.  Set VITC_FUZZ_CORPUS to a directory to
# keep what the fuzzer learns between runs.
# Findings (crash-*, leak-*, timeout-*, oom-*) are written to
# build-fuzz/findings/; the script exits 1 if there is any.  A harness stops
# at its first finding, unless VITC_FUZZ_KEEP_GOING=1 (libFuzzer's fork mode:
# it records the finding and goes on, for long unattended runs).  Each one, once
# fixed, goes into tests/data/fuzz-regressions/ (see the README there).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
SECONDS_EACH=60
if [ "${1:-}" = "-t" ]; then
  SECONDS_EACH=$2
  shift 2
fi
HARNESSES=("$@")
[ ${#HARNESSES[@]} -gt 0 ] || HARNESSES=(model model_struct interp interp_struct npy so)
BUILD=${VITC_FUZZ_BUILD:-$ROOT/build-fuzz}
NODE_TESTS=${VITC_ONNX_NODE_TESTS:-/usr/share/libonnx-testdata/data/node}

echo "== building the fuzz harnesses in $BUILD (clang, libFuzzer, ASan+UBSan)"
mkdir -p "$BUILD"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_C_COMPILER=clang -DVITC_FUZZ=ON -DVITC_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$BUILD/cmake.log" 2>&1 || { cat "$BUILD/cmake.log"; exit 3; }
targets=()
for h in "${HARNESSES[@]}"; do targets+=(--target "fuzz_$h"); done
cmake --build "$BUILD" -j2 "${targets[@]}" > "$BUILD/build.log" 2>&1 || { tail -50 "$BUILD/build.log"; exit 3; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vitc-fuzz-run.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FINDINGS=$BUILD/findings
mkdir -p "$FINDINGS"

# Seeds, by kind.  File names are made unique with a prefix.
mkdir -p "$WORK/seeds-model" "$WORK/seeds-npy"
for f in tests/models/*.onnx tests/data/broken/*.onnx tests/data/resize/*.onnx tests/data/fuzz-regressions/*.onnx; do
  [ -f "$f" ] && cp "$f" "$WORK/seeds-model/$(basename "$(dirname "$f")")-$(basename "$f")"
done
for f in tests/models/*.npy tests/data/fuzz-regressions/*.npy tests/data/fuzz-regressions/*.pb; do
  [ -f "$f" ] && cp "$f" "$WORK/seeds-npy/$(basename "$f")"
done
if [ -d "$NODE_TESTS" ]; then
  for d in "$NODE_TESTS"/*/; do
    n=$(basename "$d")
    [ -f "$d/model.onnx" ] && cp "$d/model.onnx" "$WORK/seeds-model/node-$n.onnx"
    [ -f "$d/test_data_set_0/input_0.pb" ] && cp "$d/test_data_set_0/input_0.pb" "$WORK/seeds-npy/node-$n.pb"
  done
fi

# Compiled models: the hand-written ones of the runtime tests, in their variants.
mkdir -p "$WORK/seeds-so"
for v in "" -DTOY_EXTERNAL -DTOY_SINGLE_OUTPUT -DTOY_UNALIGNED -DTOY_FOREIGN_CPU -DTOY_NO_DESCRIPTOR; do
  cc -shared -fPIC -O1 -I"$ROOT" $v tests/data/runtime/toy_model.c -o "$WORK/seeds-so/toy${v#-D}.so" 2> /dev/null || true
done

# A dictionary of the strings that matter in a model: op types and attribute names.
{
  sed -n 's/^OP([A-Z_0-9]*, *\("[A-Za-z]*"\).*/\1/p' ir/ops.def
  sed -n 's/^AT([A-Z_0-9]*, *\("[A-Za-z_]*"\).*/\1/p' ir/attrs.def
  printf '"%s"\n' ai.onnx location offset length weights.bin ../ /etc/passwd "'shape': (" "'descr': '<f4'" \
    "'fortran_order': False" NUMPY
} > "$WORK/onnx.dict"

total_execs=0
status=0
printf '%-14s %8s %12s %s\n' harness seconds executions findings > "$WORK/summary"
for h in "${HARNESSES[@]}"; do
  case $h in
    npy) seeds=$WORK/seeds-npy; maxlen=1100000 ;;
    so) seeds=$WORK/seeds-so; maxlen=200000 ;;
    *) seeds=$WORK/seeds-model; maxlen=3000000 ;;
  esac
  corpus=${VITC_FUZZ_CORPUS:+$VITC_FUZZ_CORPUS/$h}
  corpus=${corpus:-$WORK/corpus-$h}
  mkdir -p "$corpus"
  before=$(ls "$FINDINGS" | wc -l)
  echo "== fuzz_$h for ${SECONDS_EACH}s (corpus $corpus)"
  keep_going=()
  [ "${VITC_FUZZ_KEEP_GOING:-0}" = 1 ] && keep_going=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  set +e
  # TMPDIR: the harnesses' scratch model directories go where the trap removes them
  TMPDIR=$WORK ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1 \
    "$BUILD/tests/fuzz/fuzz_$h" "$corpus" "$seeds" -dict="$WORK/onnx.dict" -max_len=$maxlen \
    -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$FINDINGS/$h-" "${keep_going[@]}" > "$WORK/log-$h" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/log-$h" | tail -1)
  [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9]*\): cov:.*/\1/p' "$WORK/log-$h" | tail -1) # fork mode
  found=$(( $(ls "$FINDINGS" | wc -l) - before ))
  total_execs=$(( total_execs + ${execs:-0} ))
  printf '%-14s %8s %12s %s\n' "$h" "$SECONDS_EACH" "${execs:-?}" "$found" >> "$WORK/summary"
  if [ $rc -ne 0 ] || [ "$found" -ne 0 ]; then
    status=1
    grep -E -A12 "FUZZ FINDING" "$WORK/log-$h" | head -40 || true
    grep -E "ERROR|SUMMARY|Test unit written" "$WORK/log-$h" | head -20 || true
    tail -40 "$WORK/log-$h"
    # The finding itself, so that a run whose findings folder is gone (a CI
    # machine) can still be replayed: tests/fuzz/replay with the decoded file.
    for f in $(ls -t "$FINDINGS" | head -n "$found"); do
      if [ "$(stat -c %s "$FINDINGS/$f")" -le 200000 ]; then
        echo "== $f, gzip then base64 (decode with: base64 -d | gunzip > $f)"
        gzip -9c "$FINDINGS/$f" | base64 -w 120
        echo "== end of $f (gzip, then base64)"
      fi
    done
  fi
done
echo "== fuzzing summary"
cat "$WORK/summary"
echo "total executions: $total_execs; findings in $FINDINGS: $(ls "$FINDINGS" | wc -l)"
exit $status
