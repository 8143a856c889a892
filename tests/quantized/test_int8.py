#!/usr/bin/env python3
"""test_int8: vitc's int8 path on the seed fixtures, held to the int8 issue's bars.

1. Every quantized export in tests/data/quantized (tests/data/make_quantized.py: each seed family's
   -ts17 export as ONNX Runtime's quantize_static QDQ and quantize_dynamic write it, and for timm,
   torchvision and einops quantize_static's QOperator format, <family>-qop) is compiled
   (`vitc compile X.onnx -o X.so --batch 3`) and run (`vitc run X.so --input ... --output-dir ...`)
   at batch 1 and 3 on the family's inputs (tests/models/<family>.b<N>.input.npy), and must meet:
     (i)   max-rel error (max|out - ref| / max|ref|) against PyTorch's fp32 output
           (tests/models/<family>.b<N>.output.npy) within 1.25 x ONNX Runtime's with all its graph
           optimizations (<export>.b<N>.ortopt.npy: its int8 kernels) + 2e-3; waived (listed as
           such) where ONNX Runtime unoptimized, the export as ONNX defines it, misses it too and
           vitc is no further from PyTorch than that + 2e-3 (torchvision-qdq at batch 1: 1.6e-1
           against ONNX Runtime optimized's 7.7e-2), unless --strict;
     (ii)  cosine with ONNX Runtime's output with its optimizations off (<export>.b<N>.ort.npy:
           each Q/DQ op as ONNX defines it) >= 0.999 for a dynamic export, >= 0.995 for a static one
           (QDQ or QOperator);
     (iii) `vitc inspect --json X.so` lists int8 GEMM kernels (int8_common.int8_kernels: a word
           such as int8 in kernels[].first_launch before the node's name, "GEMM int8 64x192 ...").
2. Every seed family's fp32 export (tests/models/<family>-ts17.onnx) compiled with
   `vitc compile X.onnx -o X.so --batch 8 --precision int8` must give a cosine >= 0.999 with the
   fp32 output on the committed inputs (PyTorch's outputs) and on 8 seeded standard-normal images
   (ONNX Runtime fp32, optimizations off, as the reference), inspect saying precision int8 and
   listing int8 GEMM kernels.
It prints a table for each part, then every bar waived and every bar missed, one line each, and
exits 1 if one was missed.

  --accuracy-only   bars (i) and (ii) alone: no int8-kernel check and no --precision int8 part
                    (what vitc's exact fp32 path for quantized models is held to)
  --strict          no waiver of bar (i)
  --only A,B        these exports / families only (timm-qdq, face_bn-dynamic, timm, ...)
  --self-test       the int8-kernel recognizer and the bars on hand-made labels and arrays (ctest
                    test_int8_selftest)

Run by ctest (test_int8) with VITC_BIN and VITC_SOURCE_DIR set; needs numpy and onnxruntime
(else exits 77, saying so).
"""
import argparse
import glob
import os
import sys
import tempfile

try:
    import numpy as np
    import onnxruntime as ort
except ImportError as e:  # the Python references are missing: ctest reports it skipped (77)
    print("skipped: %s: %s (run ./setup.sh, or configure with -DVITC_PYTHON=...)" % (sys.executable, e))
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import int8_common as c  # noqa: E402

SRC = os.environ.get("VITC_SOURCE_DIR", os.path.join(HERE, "..", ".."))
MODELS = os.path.join(SRC, "tests", "models")
QUANT = os.path.join(SRC, "tests", "data", "quantized")
FAMILIES = ["timm", "torchvision", "einops", "face_ln", "face_bn"]
SEEDED = 8  # seeded images per family for --precision int8, beside the committed ones
BATCHES = (1, 3)


def ort_fp32(path, x):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def exports(only):
    """(name, family, kind, path) of every committed export, in the families' order."""
    found = []
    for path in sorted(glob.glob(os.path.join(QUANT, "*.onnx"))):
        name = os.path.basename(path)[:-5]
        family, _, kind = name.rpartition("-")
        if only and name not in only and family not in only:
            continue
        found.append((FAMILIES.index(family) if family in FAMILIES else 99, name, family, kind, path))
    return [r[1:] for r in sorted(found)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strict", action="store_true",
                    help="no waiver of bar (i) where ONNX Runtime unoptimized misses it too")
    ap.add_argument("--accuracy-only", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return c.self_test()
    only = set(filter(None, args.only.split(",")))
    failures, waivers, rows, prows = [], [], [], []
    todo = exports(only)
    missing = [f"{f}-{k}" for f in FAMILIES for k in ("qdq", "dynamic")
               if (not only or f in only or f"{f}-{k}" in only)
               and not os.path.exists(os.path.join(QUANT, f"{f}-{k}.onnx"))]
    failures += ["%s: no export in tests/data/quantized (make_quantized.py writes it)" % m for m in missing]
    with tempfile.TemporaryDirectory(prefix="vitc-int8-") as tmp:
        for name, family, kind, path in todo:
            cases = []
            for b in BATCHES:
                files = [os.path.join(MODELS, f"{family}.b{b}.input.npy"),
                         os.path.join(MODELS, f"{family}.b{b}.output.npy"),
                         os.path.join(QUANT, f"{name}.b{b}.ort.npy"), os.path.join(QUANT, f"{name}.b{b}.ortopt.npy")]
                absent = [os.path.relpath(p, SRC) for p in files if not os.path.exists(p)]
                if absent:
                    failures.append("%s b%d: missing %s" % (name, b, ", ".join(absent)))
                    continue
                cases.append((b, *[np.load(p) for p in files]))
            r, f, w = c.check_export(name, kind, path, cases, tmp, kernels=not args.accuracy_only,
                                     strict=args.strict)
            rows += r
            failures += f
            waivers += w
            print("%-22s %s" % (name, "ok" if not f else "%d bar(s) missed" % len(f)), flush=True)
        if not args.accuracy_only:
            for i, family in enumerate(FAMILIES):
                if only and family not in only:
                    continue
                path = os.path.join(MODELS, f"{family}-ts17.onnx")
                sets = [(f"b{b}", np.load(os.path.join(MODELS, f"{family}.b{b}.input.npy")),
                         np.load(os.path.join(MODELS, f"{family}.b{b}.output.npy")), "PyTorch fp32") for b in BATCHES]
                shape = sets[0][1].shape[1:]
                x = np.random.default_rng([2025, i]).standard_normal((SEEDED, *shape)).astype(np.float32)
                sets.append((f"{SEEDED} seeded", x, ort_fp32(path, x), "ONNX Runtime fp32"))
                r, f = c.check_precision_int8(family, path, sets, tmp, batch=SEEDED)
                prows += r
                failures += f
                print("%-22s %s" % (family + " --precision int8", "ok" if not f else "%d bar(s) missed" % len(f)),
                      flush=True)
    c.print_export_table(rows, "Quantized exports (tests/data/quantized), `vitc compile X.onnx -o X.so --batch 3`: "
                         "(i) err vitc <= %.2f x err ORT-opt + %.0e, errors against PyTorch fp32; (ii) cosine with "
                         "ORT-off >= %g dynamic, >= %g QDQ; (iii) int8 GEMM kernels listed by `vitc inspect --json`%s"
                         % (c.MAXREL_FACTOR, c.MAXREL_FLOOR, c.COS_DYNAMIC, c.COS_QDQ,
                            " (not checked: --accuracy-only)" if args.accuracy_only else ""))
    if prows:
        c.print_precision_table(prows, "`vitc compile X-ts17.onnx -o X.so --batch %d --precision int8`: cosine with "
                                "the fp32 output >= %g on each input set" % (SEEDED, c.COS_PRECISION_INT8))
    print()
    for w in waivers:
        print("WAIVED:", w)
    for f in failures:
        print("FAIL:", f)
    print("test_int8: %d exports%s, %d bar(s) missed, %d waived" % (
        len(todo), "" if args.accuracy_only else " and %d --precision int8 builds" % len({r[0] for r in prows}),
        len(failures), len(waivers)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
