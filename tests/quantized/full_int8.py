#!/usr/bin/env python3
"""test_int8_full: the int8 bars of test_int8.py on full-size ViTs: ViT-S/16 and ViT-B/16 (timm-style,
seeded random weights, tests/models/gen_fixtures.py --full).

For each model:
  1. export it (gen_fixtures.py --full WORK --only NAME: TorchScript opset 17) and compute PyTorch's
     fp32 outputs at batch 1 and 3 and on 64 seeded images;
  2. quantize it with ONNX Runtime as tests/data/make_quantized.py does: quantize_static, QDQ
     (per-channel int8 weights, uint8 activations, MinMax on 8 seeded images), and quantize_dynamic;
     run each through ONNX Runtime with its graph optimizations off and with all of them, at batch 1
     and 3;
  3. compile each quantized export (`vitc compile X.onnx -o X.so --batch 3`) and hold it to the bars
     (int8_common.py): (i) max-rel error against PyTorch within 1.25 x ONNX Runtime's optimized
     error + 2e-3, decided on the mean over the 64 seeded images of each image's max-rel (ONNX
     Runtime's optimized outputs on them too: one image's error is too noisy a measure, a few in 64
     missing the bar with ONNX Runtime unoptimized itself), batch 1 and 3 reported beside it (and
     waived, unless --strict, where ONNX Runtime unoptimized misses it too and vitc is no further
     from PyTorch than that), (ii) cosine with ONNX Runtime unoptimized >= 0.999 (dynamic) / 0.995
     (QDQ), (iii) int8 GEMM kernels in `vitc inspect --json`;
  4. compile the fp32 export with `--precision int8 --batch 16`: cosine with PyTorch's fp32 output
     >= 0.999 at batch 1, 3 and on the 64 seeded images, inspect saying precision int8 with int8
     GEMM kernels.
Tables as test_int8.py's, then each missed bar; exit 1 if any.

Everything but the .so files is cached in the work folder (VITC_INT8_WORK, else a temporary one
removed at the end); delete it to start over.  Measured on a 2-core VM with nothing cached (vitc's
exact fp32 path for quantized models, --precision int8 refused): 70 s in all for ViT-B/16 (export 17 s,
PyTorch on 64 images 11 s, quantize_static 19 s, quantize_dynamic 4 s, each export's compile and two
runs 6 s), 20 s for ViT-S/16.

Needs torch, timm, onnx, onnxruntime and numpy: this Python if it has them, else VITC_GEN_PYTHON,
else the source tree's .venv-gen (tests/models/setup-gen-env.sh), which it runs itself under; exits
77 (skipped) saying so when none has them.

    VITC_BIN=build/vitc .venv-gen/bin/python tests/quantized/full_int8.py [--models vit_s16_timm]
        [--accuracy-only] [--seeded 64]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("VITC_SOURCE_DIR", os.path.join(HERE, "..", ".."))
MODELS = ["vit_s16_timm", "vit_b16_timm"]
NEEDS = ("numpy", "onnx", "onnxruntime", "torch", "timm")


def missing_modules():
    import importlib.util
    return [m for m in NEEDS if importlib.util.find_spec(m) is None]


def find_python():
    """This Python if it has every module needed; else re-run under VITC_GEN_PYTHON or .venv-gen;
    else exit 77 saying why."""
    lacking = missing_modules()
    if not lacking:
        return
    tried = []
    if not os.environ.get("VITC_INT8_REEXEC"):
        for cand in (os.environ.get("VITC_GEN_PYTHON"), os.path.join(SRC, ".venv-gen", "bin", "python")):
            if not cand:
                continue
            if not os.access(cand, os.X_OK):
                tried.append("%s (not there)" % cand)
                continue
            env = dict(os.environ, VITC_INT8_REEXEC="1")
            sys.stdout.flush()
            os.execve(cand, [cand, os.path.abspath(__file__)] + sys.argv[1:], env)
    print("skipped: %s lacks %s%s; set VITC_GEN_PYTHON to a Python with %s (tests/models/setup-gen-env.sh "
          ".venv-gen makes one)" % (sys.executable, ", ".join(lacking), "; tried " + ", ".join(tried) if tried else "",
                                    ", ".join(NEEDS)))
    sys.exit(77)


find_python()

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRC, "tests", "models"))
sys.path.insert(0, os.path.join(SRC, "tests", "data"))
import gen_fixtures as gf  # noqa: E402
import int8_common as c  # noqa: E402
import make_quantized as mq  # noqa: E402

BATCHES = (1, 3)
INT8_BATCH = 16  # the --precision int8 build runs the seeded images 16 at a time


def log(msg):
    print("[%6.0f s] %s" % (time.perf_counter() - T0, msg), flush=True)


def cached(path, make):
    """np.load(path), made by make() and saved first if it is not there."""
    if not os.path.exists(path):
        np.save(path, np.ascontiguousarray(make(), np.float32))
    return np.load(path)


def torch_outputs(model, x, chunk=8):
    with torch.inference_mode():
        return np.concatenate([model(torch.from_numpy(x[k:k + chunk])).numpy() for k in range(0, len(x), chunk)])


def ort_run(path, x, level):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.log_severity_level = 3
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def prepare(name, work, seeded):
    """Exports, quantizes and runs the references of one model (each step skipped where its files are
    in work).  Returns (fp32 export, {kind: quantized export}, {batch: input}, {batch: PyTorch output},
    {kind: {batch: ORT off}}, {kind: {batch: ORT all}}, seeded inputs, their PyTorch outputs)."""
    builder, wseed, image = gf.FULL[name]
    fp32 = os.path.join(work, name + ".onnx")
    if not os.path.exists(fp32):
        log("%s: exporting (gen_fixtures.py --full)" % name)
        subprocess.run([sys.executable, os.path.join(SRC, "tests", "models", "gen_fixtures.py"), "--full", work,
                        "--only", name], check=True)
    model = None

    def torch_model():
        nonlocal model
        if model is None:
            torch.set_num_threads(os.cpu_count() or 1)
            model = gf.make_model(builder, wseed)
        return model
    xs = {b: cached(os.path.join(work, "%s.b%d.input.npy" % (name, b)), lambda b=b: gf.make_input(wseed, b, image))
          for b in BATCHES}
    refs = {b: cached(os.path.join(work, "%s.b%d.output.npy" % (name, b)),
                      lambda b=b: torch_outputs(torch_model(), xs[b])) for b in BATCHES}
    xs_seeded = cached(os.path.join(work, "%s.s%d.input.npy" % (name, seeded)),
                       lambda: gf.make_input(wseed + 3000, seeded, image))
    seeded_out = os.path.join(work, "%s.s%d.output.npy" % (name, seeded))
    if not os.path.exists(seeded_out):
        log("%s: PyTorch's fp32 outputs on %d seeded images" % (name, seeded))
    ref_seeded = cached(seeded_out, lambda: torch_outputs(torch_model(), xs_seeded))
    quant, off, opt = {}, {}, {}
    for kind in ("qdq", "dynamic"):
        path = os.path.join(work, "%s-%s.onnx" % (name, kind))
        if not os.path.exists(path):
            log("%s: quantize_%s" % (name, "static (QDQ)" if kind == "qdq" else "dynamic"))
            mq.quantize(kind, fp32, path + ".part.onnx")
            os.replace(path + ".part.onnx", path)
        quant[kind] = path
        off[kind], opt[kind] = {}, {}
        for b in BATCHES:
            off[kind][b] = cached(os.path.join(work, "%s-%s.b%d.ort.npy" % (name, kind, b)),
                                  lambda: ort_run(path, xs[b], ort.GraphOptimizationLevel.ORT_DISABLE_ALL))
            opt[kind][b] = cached(os.path.join(work, "%s-%s.b%d.ortopt.npy" % (name, kind, b)),
                                  lambda: ort_run(path, xs[b], ort.GraphOptimizationLevel.ORT_ENABLE_ALL))
    opt_seeded = {kind: cached(os.path.join(work, "%s-%s.s%d.ortopt.npy" % (name, kind, seeded)),
                               lambda kind=kind: ort_run(quant[kind], xs_seeded, ort.GraphOptimizationLevel.ORT_ENABLE_ALL))
                  for kind in quant}
    log("%s: references ready" % name)
    return fp32, quant, xs, refs, off, opt, xs_seeded, ref_seeded, opt_seeded


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--seeded", type=int, default=64, help="seeded images for --precision int8 (default 64)")
    ap.add_argument("--strict", action="store_true",
                    help="no waiver of bar (i) where ONNX Runtime unoptimized misses it too")
    ap.add_argument("--accuracy-only", action="store_true",
                    help="bars (i) and (ii) alone: no int8-kernel check and no --precision int8 part")
    args = ap.parse_args()
    names = args.models.split(",")
    unknown = [n for n in names if n not in gf.FULL]
    if unknown:
        raise SystemExit("unknown models %s; known: %s" % (unknown, ", ".join(gf.FULL)))
    ort.set_default_logger_severity(3)
    work = os.environ.get("VITC_INT8_WORK")
    temporary = not work
    work = work or tempfile.mkdtemp(prefix="vitc-int8-full-")
    os.makedirs(work, exist_ok=True)
    log("work folder %s%s; vitc %s; onnxruntime %s, torch %s" % (work, " (temporary)" if temporary else "", c.VITC,
                                                                   ort.__version__, torch.__version__))
    failures, waivers, rows, prows, means, noted = [], [], [], [], [], []
    try:
        with tempfile.TemporaryDirectory(prefix="vitc-int8-so-") as tmp:
            for name in names:
                fp32, quant, xs, refs, off, opt, xs_seeded, ref_seeded, opt_seeded = prepare(name, work, args.seeded)
                for kind, path in quant.items():
                    cases = [(b, xs[b], refs[b], off[kind][b], opt[kind][b]) for b in BATCHES]
                    r, f, w = c.check_export("%s-%s" % (name, kind), kind, path, cases, tmp,
                                             kernels=not args.accuracy_only, strict=args.strict)
                    mean, fm = seeded_bar_i("%s-%s" % (name, kind), path, xs_seeded, ref_seeded, opt_seeded[kind],
                                            tmp)
                    means.append(mean)
                    rows += r
                    failures += fm + ([x for x in f if ": (i) " not in x] if mean and mean["ok"] else f)
                    noted += [x for x in f if ": (i) " in x] if mean and mean["ok"] else []
                    waivers += w
                    log("%s-%s: %s" % (name, kind, "ok" if not f else "%d bar(s) missed" % len(f)))
                if not args.accuracy_only:
                    sets = [("b%d" % b, xs[b], refs[b], "PyTorch fp32") for b in BATCHES]
                    sets.append(("%d seeded" % args.seeded, xs_seeded, ref_seeded, "PyTorch fp32"))
                    r, f = c.check_precision_int8(name, fp32, sets, tmp, batch=INT8_BATCH)
                    prows += r
                    failures += f
                    log("%s --precision int8: %s" % (name, "ok" if not f else "%d bar(s) missed" % len(f)))
    finally:
        if temporary:
            shutil.rmtree(work, ignore_errors=True)
    c.print_export_table(rows, "Full-size quantized exports (ONNX Runtime's quantize_static QDQ and "
                         "quantize_dynamic), `vitc compile X.onnx -o X.so --batch 3`: (i) err vitc <= %.2f x err "
                         "ORT-opt + %.0e, errors against PyTorch fp32; (ii) cosine with ORT-off >= %g dynamic, >= %g "
                         "QDQ; (iii) int8 GEMM kernels listed by `vitc inspect --json`%s" %
                         (c.MAXREL_FACTOR, c.MAXREL_FLOOR, c.COS_DYNAMIC, c.COS_QDQ,
                          " (not checked: --accuracy-only)" if args.accuracy_only else ""))
    if prows:
        c.print_precision_table(prows, "`vitc compile X.onnx -o X.so --batch %d --precision int8` of the fp32 export: "
                                "cosine with PyTorch's fp32 output >= %g on each input set" %
                                (INT8_BATCH, c.COS_PRECISION_INT8))
    print("\nBar (i) on the %d seeded images: the mean over the images of each one's max-rel error against "
          "PyTorch's fp32, vitc's within %.2f x ONNX Runtime's (optimized) + %.0e; it decides bar (i), one "
          "image's max-rel being too noisy a measure (on these models a few images in 64 miss 1.25 x ONNX "
          "Runtime's optimized error with ONNX Runtime unoptimized, each op as ONNX defines it)\n" %
          (args.seeded, c.MAXREL_FACTOR, c.MAXREL_FLOOR))
    print("| export | mean err vitc | mean err ORT-opt | limit | (i) | images over 1.25 x ORT-opt + floor |")
    print("|---|---|---|---|---|---|")
    for m in means:
        if m:
            print("| %s | %.3e | %.3e | %.3e | %s | %d |" % (m["name"], m["vitc"], m["ort"], m["limit"],
                                                          "ok" if m["ok"] else "FAIL", m["over"]))
    print()
    for x in noted:
        print("NOTED (bar (i) met on the seeded mean):", x)
    for w in waivers:
        print("WAIVED:", w)
    for f in failures:
        print("FAIL:", f)
    print("test_int8_full: %s, %d bar(s) missed, %d waived" % (", ".join(names), len(failures), len(waivers)))
    return 1 if failures else 0


def per_image_rel(y, ref):
    """max |y_i - ref_i| / max |ref_i| for each image i."""
    y, ref = np.asarray(y, np.float64).reshape(len(y), -1), np.asarray(ref, np.float64).reshape(len(ref), -1)
    return np.abs(y - ref).max(axis=1) / np.maximum(np.abs(ref).max(axis=1), 1e-30)


def seeded_bar_i(name, path, xs, ref, ort_opt, tmp):
    """Bar (i) on the seeded images: ({name, vitc, ort, limit, ok, over}, failures)."""
    so = os.path.join(tmp, os.path.basename(path) + ".seeded.so")
    ok, why = c.compile_so(path, so, INT8_BATCH)
    if not ok:
        return None, ["%s (seeded images): %s" % (name, why)]
    ys = []
    for k in range(0, len(xs), INT8_BATCH):
        y, why = c.run_so(so, xs[k:k + INT8_BATCH], tmp, "%s.s%d" % (name, k))
        if y is None:
            return None, ["%s (seeded images %d..): %s" % (name, k, why)]
        ys.append(y)
    ev, eo = per_image_rel(np.concatenate(ys), ref), per_image_rel(ort_opt, ref)
    if not (np.isfinite(ev).all() and np.isfinite(eo).all()):
        return None, ["%s (seeded images): (i) cannot be measured: NaN or infinite errors" % name]
    limit = c.MAXREL_FACTOR * float(eo.mean()) + c.MAXREL_FLOOR
    m = {"name": name, "vitc": float(ev.mean()), "ort": float(eo.mean()), "limit": limit,
         "ok": float(ev.mean()) <= limit, "over": int((ev > c.MAXREL_FACTOR * eo + c.MAXREL_FLOOR).sum())}
    return m, [] if m["ok"] else ["%s (%d seeded images): (i) mean max-rel %.3e > %.3e" %
                                  (name, len(xs), m["vitc"], limit)]


T0 = time.perf_counter()
if __name__ == "__main__":
    sys.exit(main())
