#!/usr/bin/env python3
"""test_ort.py: the fixtures against ONNX Runtime, the industry reference.

For every model in tests/models/fixtures.tsv, at batch 1 and 3:
  - ONNX Runtime reproduces the committed PyTorch output (checks the fixtures);
  - `vitc run` (the reference interpreter) matches ONNX Runtime within 1e-5.
For the RMSNorm models of tests/data/fusion (decomposed, and opset 23's own
RMSNormalization), on seeded random inputs at batch 3: the interpreter within
1e-5 of ONNX Runtime, and the model compiled for the CPU within 1e-4.
Error = max |out - ref| / max |ref|.  Run by ctest with VITC_BIN and
VITC_SOURCE_DIR set.
"""
import csv
import os
import subprocess
import sys
import tempfile

from pyrefs import require

np, ort = require("numpy", "onnxruntime")

SRC = os.environ.get("VITC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
VITC = os.environ.get("VITC_BIN", "vitc")
MODELS = os.path.join(SRC, "tests", "models")
FUSION = os.path.join(SRC, "tests", "data", "fusion")


def rel_err(out, ref):
    return float(np.max(np.abs(out.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def check_op_model(model, opts):
    """The interpreter and the compiled model against ONNX Runtime on one seeded input."""
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(7).standard_normal([3 if isinstance(d, str) else d for d in inp.shape]).astype(np.float32)
    (y_ort,) = sess.run(None, {inp.name: x})
    errs = []
    with tempfile.TemporaryDirectory() as d:
        np.save(os.path.join(d, "x.npy"), x)
        so = os.path.join(d, "model.so")
        r = subprocess.run([VITC, model, "-o", so, "--batch", "3"], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL {os.path.basename(model)}: vitc compile exited {r.returncode}: {r.stderr.strip()}")
            return False
        for what, path in (("interpreter", model), ("compiled", so)):
            out = os.path.join(d, what)
            r = subprocess.run([VITC, "run", path, "--input", os.path.join(d, "x.npy"), "--output-dir", out],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {os.path.basename(model)} {what}: vitc exited {r.returncode}: {r.stderr.strip()}")
                return False
            (out_file,) = os.listdir(out)
            errs.append(rel_err(np.load(os.path.join(out, out_file)), y_ort))
    ok = errs[0] <= 1e-5 and errs[1] <= 1e-4
    print(f"{os.path.basename(model):32} interpreter {errs[0]:9.3g} compiled {errs[1]:9.3g} {'ok' if ok else 'FAIL'}")
    return ok


def main():
    with open(os.path.join(MODELS, "fixtures.tsv")) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    passed = failed = 0
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    print(f"{'fixture':24} {'batch':>5} {'ORT vs torch':>13} {'vitc vs ORT':>12}")
    for row in rows:
        model = os.path.join(MODELS, row["model"])
        sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        for b in (1, 3):
            x = np.load(os.path.join(MODELS, f"{row['family']}.b{b}.input.npy"))
            ref = np.load(os.path.join(MODELS, f"{row['family']}.b{b}.output.npy"))
            (y_ort,) = sess.run(None, {sess.get_inputs()[0].name: x})
            with tempfile.TemporaryDirectory() as d:
                r = subprocess.run([VITC, "run", model, "--input", os.path.join(MODELS, f"{row['family']}.b{b}.input.npy"),
                                    "--output-dir", d], capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"FAIL {row['model']} b{b}: vitc run exited {r.returncode}: {r.stderr.strip()}")
                    failed += 1
                    continue
                y = np.load(os.path.join(d, "output.npy"))
            e_fix, e_vitc = rel_err(y_ort, ref), rel_err(y, y_ort)
            ok = e_fix <= 1e-4 and e_vitc <= 1e-5 and y.shape == y_ort.shape
            print(f"{row['model']:24} {b:5} {e_fix:13.3g} {e_vitc:12.3g} {'ok' if ok else 'FAIL'}")
            passed += ok
            failed += not ok
    for name in sorted(os.listdir(FUSION)):
        if not name.startswith("rmsnorm") or not name.endswith(".onnx"):
            continue
        ok = check_op_model(os.path.join(FUSION, name), opts)
        passed += ok
        failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
