#!/usr/bin/env python3
"""test_cli_json.py: the CLI's machine-readable output against references.

- `vitc inspect --json`: parses; its signature is the ONNX model's (read with
  the onnx package), with the batch axis as "B"; a model whose names hold
  quotes, backslashes, newlines and non-ASCII text round-trips them.
- `vitc run --json --repeat`: parses; the output file it names holds
  PyTorch's output for the example (error <= 1e-4); the timing statistics are
  consistent (min <= median <= p90, images/s = batch / median).
- `vitc compare --json`, against the interpreter and against ONNX Runtime:
  parses, and its max_rel equals the error computed here between ONNX
  Runtime's output and the compiled model's, run by this script.
Run by ctest with VITC_BIN and VITC_SOURCE_DIR set; VITC_PYTHON is this Python.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

SRC = os.environ.get("VITC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
VITC = os.environ.get("VITC_BIN", "vitc")
EXAMPLE = os.path.join(SRC, "examples", "vit-tiny.onnx")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def vitc_json(*args, rc=0):
    p = subprocess.run([VITC, *args], capture_output=True, text=True,
                       env=dict(os.environ, VITC_PYTHON=sys.executable))
    if p.returncode != rc:
        sys.exit(f"vitc {' '.join(args)} exited {p.returncode}, not {rc}:\n{p.stderr}")
    return json.loads(p.stdout)


def rel_err(out, ref):
    return float(np.max(np.abs(out.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def signature(model_path):
    g = onnx.load(model_path).graph
    inits = {t.name for t in g.initializer}
    def one(v):
        dims = [d.dim_value if d.HasField("dim_value") else "B" for d in v.type.tensor_type.shape.dim]
        return v.name, dims
    return [one(v) for v in g.input if v.name not in inits], [one(v) for v in g.output]


def main():
    tmp = tempfile.mkdtemp(prefix="vitc-json-")
    so = os.path.join(tmp, "vit-tiny.so")
    subprocess.run([VITC, EXAMPLE, "-o", so, "--batch", "4", "--quiet"], check=True)

    # inspect: the signature is the ONNX model's
    info = vitc_json("inspect", "--json", so)
    ins, outs = signature(EXAMPLE)
    check([(t["name"], t["shape"]) for t in info["inputs"]] == ins, f"inspect inputs {info['inputs']} == {ins}")
    check([(t["name"], t["shape"]) for t in info["outputs"]] == outs, f"inspect outputs == {outs}")
    check(info["max_batch"] == 4 and info["target"] == "cpu", "inspect max_batch 4, target cpu")
    check(info["weights"]["embedded"] and info["weights"]["bytes"] > 0, "inspect weights embedded")
    check(sum(k["launches"] for k in info["kernels"]) >= len(info["kernels"]) > 3, "inspect kernels")

    # names that need escaping round-trip
    odd_in, odd_out = 'in "x"\\y', "out\n\t\u00e9\u4e2d"
    g = helper.make_graph([helper.make_node("Relu", [odd_in], [odd_out], name="relu")], "odd",
                          [helper.make_tensor_value_info(odd_in, TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info(odd_out, TensorProto.FLOAT, ["N", 4])])
    odd = os.path.join(tmp, "odd.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), odd)
    odd_so = os.path.join(tmp, "odd.so")
    subprocess.run([VITC, odd, "-o", odd_so, "--quiet"], check=True)
    info = vitc_json("inspect", "--json", odd_so)
    check(info["inputs"][0]["name"] == odd_in and info["outputs"][0]["name"] == odd_out,
          "names with quotes, backslash, newline, tab and non-ASCII round-trip")

    # run: the output file holds PyTorch's output; timings are consistent
    x = os.path.join(SRC, "examples", "vit-tiny.input.npy")
    ref = np.load(os.path.join(SRC, "examples", "vit-tiny.output.npy"))
    r = vitc_json("run", so, "--input", x, "--output-dir", os.path.join(tmp, "out"), "--repeat", "7", "--json")
    out = np.load(r["outputs"][0]["file"])
    err = rel_err(out, ref)
    check(err <= 1e-4, f"run --json: output vs PyTorch {err:.2e} <= 1e-4")
    t = r["timing"]
    check(t["runs"] == 7 and 0 < t["min_ms"] <= t["median_ms"] <= t["p90_ms"], f"run timing ordered {t}")
    ips = r["batch"] * 1e3 / t["median_ms"]
    check(abs(t["images_per_s"] - ips) <= 1e-6 * ips, "run images/s = batch / median")

    # compare: against the interpreter, and against ONNX Runtime as computed here
    c = vitc_json("compare", EXAMPLE, so, "--input", x, "--json")
    check(c["pass"] and c["reference"] == "interpreter" and c["outputs"][0]["max_rel"] <= 1e-4,
          f"compare --json vs interpreter: {c['outputs'][0]['max_rel']:.2e}")
    c = vitc_json("compare", EXAMPLE, so, "--input", x, "--json", "--reference", "onnxruntime")
    sess = ort.InferenceSession(EXAMPLE, providers=["CPUExecutionProvider"])
    ort_out = sess.run(None, {sess.get_inputs()[0].name: np.load(x)})[0]
    mine = rel_err(out, ort_out)
    got = c["outputs"][0]["max_rel"]
    check(c["reference"].startswith("onnxruntime ") and abs(got - mine) <= 1e-3 * mine + 1e-12,
          f"compare --reference onnxruntime max_rel {got:.6e} == {mine:.6e} computed here")
    # element-wise tolerance as numpy's allclose means it
    tight = vitc_json("compare", EXAMPLE, so, "--input", x, "--json", "--reference", "onnxruntime",
                      "--rtol", "0", "--atol", "1e-12", rc=1)
    beyond = int(np.sum(~np.isclose(out, ort_out, rtol=0, atol=1e-12)))
    check(not tight["pass"] and tight["outputs"][0]["beyond_elementwise"] == beyond,
          f"--rtol 0 --atol 1e-12: {tight['outputs'][0]['beyond_elementwise']} beyond == numpy's {beyond}")

    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("all checks passed")


if __name__ == "__main__":
    main()
