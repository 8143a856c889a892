#!/usr/bin/env python3
"""test_cli_json.py: the CLI's machine-readable output against references.

- One schema for tensors in inspect, run and compare --json: {"name",
  "dtype": "float32", "shape": [...]} (with "file" for run's outputs), the
  shape a list with "B" where the batch is symbolic.
- `vitc inspect --json`: parses; its signature is the ONNX model's (read with
  the onnx package), with the batch axis as "B"; a model whose names hold
  quotes, backslashes, newlines and non-ASCII text round-trips them.
- `vitc run --json --repeat`: parses; the output file it names holds
  PyTorch's output for the example (error <= 1e-4); the timing statistics are
  consistent (min <= median <= p90, images/s = batch / median).
- `vitc run --profile --json`: every part is timed once per run, the parts'
  time lies within the runs' wall time, each names an ONNX node of the model.
- `vitc compare --json`, against the interpreter and against ONNX Runtime:
  parses, and its max_rel equals the error computed here between ONNX
  Runtime's output and the compiled model's, run by this script;
  `--reference ort` is the same; a VITC_PYTHON that cannot import ONNX
  Runtime is exit 2 with a message saying what to set.
Run by ctest with VITC_BIN and VITC_SOURCE_DIR set; VITC_PYTHON is this Python.
"""
import json
import os
import subprocess
import sys
import tempfile

from pyrefs import require

np, onnx, ort, helper = require("numpy", "onnx", "onnxruntime", "onnx.helper")
TensorProto = onnx.TensorProto

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
    check(all(set(t) == {"name", "dtype", "shape"} and t["dtype"] == "float32" for t in info["inputs"] + info["outputs"]),
          f"inspect: tensors as {{name, dtype, shape}}, dtype float32: {info['inputs']} {info['outputs']}")
    check(info["weights"]["embedded"] and info["weights"]["bytes"] > 0, "inspect weights embedded")
    check(sum(k["launches"] for k in info["kernels"]) >= len(info["kernels"]) > 3, "inspect kernels")
    # the vector level follows the features the model was compiled with
    want_isa = "AVX-512" if "+avx512f" in info["features"] else "AVX2" if "+avx2" in info["features"] else ""
    check(info["isa"].startswith(want_isa), f"inspect isa {info['isa']!r} for its features")
    check(any("+Gelu" in k["function"] or "+Gelu" in k.get("first_launch", "") for k in info["kernels"]),
          f"inspect names the GEMM's GELU epilogue: {[k['first_launch'] for k in info['kernels']][:8]}")

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
    r = vitc_json("run", so, "--input", x, "--output-dir", os.path.join(tmp, "out"), "--repeat", "7", "--warmup", "0",
                  "--json")
    check(r["outputs"] == [{"name": "output", "dtype": "float32", "shape": [3, 10],
                            "file": os.path.join(tmp, "out", "output.npy")}],
          f"run --json: outputs as {{name, dtype, shape, file}}, the shape a list: {r['outputs']}")
    out = np.load(r["outputs"][0]["file"])
    ri = vitc_json("run", EXAMPLE, "--input", x, "--output-dir", os.path.join(tmp, "out-interp"), "--json")
    check(ri["outputs"] == [{"name": "output", "dtype": "float32", "shape": [3, 10],
                             "file": os.path.join(tmp, "out-interp", "output.npy")}],
          f"run --json on the interpreter: the same schema: {ri['outputs']}")
    err = rel_err(out, ref)
    check(err <= 1e-4, f"run --json: output vs PyTorch {err:.2e} <= 1e-4")
    t = r["timing"]
    check(t["runs"] == 7 and 0 < t["min_ms"] <= t["median_ms"] <= t["p90_ms"], f"run timing ordered {t}")
    check(t["warmup_runs"] == 0, "run --warmup 0: no untimed run")
    ips = r["batch"] * 1e3 / t["median_ms"]
    check(abs(t["images_per_s"] - ips) <= 1e-6 * ips, "run images/s = batch / median")

    # run --profile: every part timed once per run, the parts' time within the
    # runs' wall time, each part naming ONNX nodes of the model, an op per part
    runs = 20
    r = vitc_json("run", so, "--input", x, "--output-dir", os.path.join(tmp, "out"), "--repeat", str(runs),
                  "--profile", "--json")
    prof = r["profile"]
    parts = prof["parts"]
    check(r["timing"]["warmup_runs"] == 1, "run --repeat: one untimed warm-up run by default")
    check(prof["runs"] == runs and len(parts) > 10, f"profile: {len(parts)} parts over {prof['runs']} runs")
    check(all(p["calls"] == runs for p in parts), "profile: every part called once per run")
    check(sorted(p["index"] for p in parts) == list(range(len(parts))), "profile: part indices 0..n-1")
    check(all(parts[i]["total_ms"] >= parts[i + 1]["total_ms"] for i in range(len(parts) - 1)),
          "profile: parts longest first")
    in_parts = sum(p["total_ms"] for p in parts)
    wall = r["timing"]["mean_ms"] * runs
    check(0.5 * wall <= in_parts <= wall, f"profile: {in_parts:.3f} ms in parts within the runs' {wall:.3f} ms")
    check(abs(sum(p["share"] for p in parts) - 1) < 1e-6, "profile: shares add up to 1")
    node_names = {n.name for n in onnx.load(EXAMPLE).graph.node}
    # a fused node is named by its ONNX nodes' common scope ("/blocks/blocks.0/attn/qkv" for .../MatMul, .../Add)
    def names_nodes(src):
        name = src.split(" (")[0]
        return name in node_names or any(n.startswith(name + "/") for n in node_names)
    named = [p for p in parts if names_nodes(p["source"])]
    check(len(named) == len(parts), f"profile: {len(named)} of {len(parts)} parts name ONNX nodes of the model")
    ops = {p["op"] for p in parts}
    check({"Linear", "Attention", "LayerNormalization"} <= ops, f"profile ops {sorted(ops)}")
    by_op = {o["op"]: o["total_ms"] for o in prof["ops"]}
    check(all(abs(by_op[o] - sum(p["total_ms"] for p in parts if p["op"] == o)) < 1e-6 for o in ops),
          "profile: time per op is the sum of its parts")
    text = subprocess.run([VITC, "run", so, "--input", x, "--output-dir", os.path.join(tmp, "out"), "--profile"],
                          capture_output=True, text=True)
    check(text.returncode == 0 and "by op: " in text.stdout and "/blocks/blocks.0/attn" in text.stdout,
          "run --profile prints the table")
    bad = subprocess.run([VITC, "run", EXAMPLE, "--input", x, "--profile"], capture_output=True, text=True)
    check(bad.returncode == 2 and "compiled models" in bad.stderr, "run --profile on an ONNX file: exit 2")
    # --top N: the N longest parts, the rest in one line; the time per op still counts every part
    top = vitc_json("run", so, "--input", x, "--output-dir", os.path.join(tmp, "out"), "--repeat", "3",
                    "--profile", "--top", "3", "--json")["profile"]
    check(len(top["parts"]) == 3 and top["parts_total"] == len(parts), f"run --profile --top 3: {len(top['parts'])} "
          f"of {top['parts_total']} parts")
    check(abs(sum(o["share"] for o in top["ops"]) - 1) < 1e-6, "run --profile --top 3: the ops' shares add up to 1")
    text = subprocess.run([VITC, "run", so, "--input", x, "--output-dir", os.path.join(tmp, "out"), "--profile",
                           "--top", "2"], capture_output=True, text=True)
    check(text.returncode == 0 and "the other %d parts" % (len(parts) - 2) in text.stdout,
          "run --profile --top 2 prints one line for the other parts")
    bad = subprocess.run([VITC, "run", so, "--input", x, "--top", "2"], capture_output=True, text=True)
    check(bad.returncode == 2 and "give --profile too" in bad.stderr, "run --top without --profile: exit 2")

    # compare: against the interpreter, and against ONNX Runtime as computed here
    c = vitc_json("compare", EXAMPLE, so, "--input", x, "--json")
    check(c["pass"] and c["reference"] == "interpreter" and c["outputs"][0]["max_rel"] <= 1e-4,
          f"compare --json vs interpreter: {c['outputs'][0]['max_rel']:.2e}")
    o0 = c["outputs"][0]
    check((o0["name"], o0["dtype"], o0["shape"]) == ("output", "float32", [3, 10]) and "type" not in o0,
          f"compare --json: outputs with name, dtype float32 and the shape as a list: {o0}")
    c = vitc_json("compare", EXAMPLE, so, "--input", x, "--json", "--reference", "onnxruntime")
    sess = ort.InferenceSession(EXAMPLE, providers=["CPUExecutionProvider"])
    ort_out = sess.run(None, {sess.get_inputs()[0].name: np.load(x)})[0]
    mine = rel_err(out, ort_out)
    got = c["outputs"][0]["max_rel"]
    check(c["reference"].startswith("onnxruntime ") and abs(got - mine) <= 1e-3 * mine + 1e-12,
          f"compare --reference onnxruntime max_rel {got:.6e} == {mine:.6e} computed here")
    # --reference ort is --reference onnxruntime
    c_ort = vitc_json("compare", EXAMPLE, so, "--input", x, "--json", "--reference", "ort")
    check(c_ort["reference"] == c["reference"] and c_ort["outputs"][0]["max_rel"] == got,
          f"--reference ort: {c_ort['reference']} == {c['reference']}, the same max_rel")
    # a Python that cannot import ONNX Runtime: what to set, exit 2
    nopy = os.path.join(tmp, "python-without-site")
    with open(nopy, "w") as f:
        f.write(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    os.chmod(nopy, 0o755)
    p = subprocess.run([VITC, "compare", EXAMPLE, so, "--input", x, "--reference", "ort"], capture_output=True,
                       text=True, env=dict(os.environ, VITC_PYTHON=nopy))
    last = p.stderr.splitlines()[-1] if p.stderr else ""
    check(p.returncode == 2 and last.startswith("vitc: --reference onnxruntime: ")
          and last.endswith(" cannot import onnxruntime: No module named 'numpy' (set VITC_PYTHON to a python with "
                            "onnxruntime and numpy)"), f"no onnxruntime in VITC_PYTHON: exit {p.returncode}, {last!r}")
    p = subprocess.run([VITC, "compare", EXAMPLE, so, "--reference", "onnx"], capture_output=True, text=True)
    check(p.returncode == 2 and p.stderr == "vitc: compare: --reference takes 'interpreter', 'onnxruntime' or "
          "'ort', not 'onnx'\n(run 'vitc compare --help' for usage)\n", f"--reference onnx: {p.stderr!r}")

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
