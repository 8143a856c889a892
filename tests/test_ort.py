#!/usr/bin/env python3
"""test_ort.py: the fixtures against ONNX Runtime, the industry reference.

For every model in tests/models/fixtures.tsv, at batch 1 and 3:
  - ONNX Runtime reproduces the committed PyTorch output (checks the fixtures);
  - `vitc run` (the reference interpreter) matches ONNX Runtime within 1e-5.
Error = max |out - ref| / max |ref|.  Run by ctest with VITC_BIN and
VITC_SOURCE_DIR set.
"""
import csv
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

SRC = os.environ.get("VITC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
VITC = os.environ.get("VITC_BIN", "vitc")
MODELS = os.path.join(SRC, "tests", "models")


def rel_err(out, ref):
    return float(np.max(np.abs(out.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


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
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
