#!/usr/bin/env python3
"""test_cli_export.py: exports the compiler must not take silently, on small
models made here with the onnx package.

- An export that fixed the batch (its input's first dimension the number 1,
  or 3, not symbolic): the compile warns, naming the input and how to
  re-export it (dynamic_axes, dynamic_shapes) or --dynamic-batch; `vitc
  inspect` (text and --json), the runtime's check and the Python package say
  the one batch it runs; it runs that batch (against ONNX Runtime, 1e-4) and
  refuses another with a message naming the compiled batch (exit 2).
- --dynamic-batch: the same export compiled with a symbolic batch runs batch
  3 within 1e-4 of ONNX Runtime (on the model with its batch made symbolic);
  where a node holds the exported batch as a number (a Reshape to [1, 24] or
  to [1, -1]), exit 2 with an error naming that node, and no .so.
- Unsupported operators: one error grouping them by op type with a count and
  the first node, then one next-step line (compile and dump exit 2); `vitc
  dump` prints the graph all the same, the unsupported nodes marked in their
  place (text, --stats, dot).
- If: a condition computed from shapes picks the branch that is compiled
  (reading the graph around it, an If nested in it; the branches not taken
  would not infer), within 1e-4 of ONNX Runtime; a condition computed from
  data is refused naming the node, an unsupported operator in a branch is
  reported as itself (exit 2).
- --explain-fusion names every Softmax, Sigmoid, Pow, Sqrt, Reciprocal or
  MatMul left outside fused ops, with the candidate near it that did not fuse.
Run by ctest with VITC_BIN and VITC_SOURCE_DIR set.
"""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile

from pyrefs import require

np, onnx, ort, helper, numpy_helper = require("numpy", "onnx", "onnxruntime", "onnx.helper", "onnx.numpy_helper")
TensorProto = onnx.TensorProto

SRC = os.environ.get("VITC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
VITC = os.environ.get("VITC_BIN", "vitc")
SANITIZED = os.environ.get("VITC_SANITIZED") == "1"  # the runtime built with ASan/UBSan (tests/CMakeLists.txt)
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def vitc(*args):
    p = subprocess.run([VITC, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def rel_err(out, ref):
    return float(np.max(np.abs(out.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def save(path, nodes, inputs, outputs, inits, opset=17):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


RNG = np.random.default_rng(29)
W = RNG.standard_normal((6, 6)).astype(np.float32)
W2 = (RNG.standard_normal((24, 5)) / 4).astype(np.float32)


def small_vit_head(path, batch, flat_shape):
    """x [batch, 4, 6] -> MatMul -> Softmax -> + x -> Reshape(flat_shape) -> MatMul -> y [batch, 5]."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Softmax", ["h"], ["p"], name="sm", axis=-1),
             helper.make_node("Add", ["p", "x"], ["r"], name="res"),
             helper.make_node("Reshape", ["r", "shape"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "W2"], ["y"], name="head")]
    inits = [numpy_helper.from_array(W, "W"), numpy_helper.from_array(W2, "W2"),
             numpy_helper.from_array(np.array(flat_shape, np.int64), "shape")]
    return save(path, nodes, [vi("x", [batch, 4, 6])], [vi("y", [batch, 5])], inits)


def ort_run(path, x):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def run_so(so, x, tmp, tag):
    xin = os.path.join(tmp, tag + ".npy")
    np.save(xin, x)
    od = os.path.join(tmp, "out-" + tag)
    rc, _, err = vitc("run", so, "--input", xin, "--output-dir", od)
    return rc, err, (np.load(os.path.join(od, "y.npy")) if rc == 0 else None)


def python_package(tmp):
    """The vitc package from the source tree, its binaries this build's (as `pip install` lays them out)."""
    build = os.path.dirname(os.path.abspath(VITC))
    lib = os.path.join(build, "libvitc_runtime.so.0")
    if not os.path.exists(lib):
        return None
    pkg = os.path.join(tmp, "py", "vitc")
    shutil.copytree(os.path.join(SRC, "python", "vitc"), pkg,
                    ignore=shutil.ignore_patterns("_bin", "_lib", "__pycache__"))
    os.makedirs(os.path.join(pkg, "_bin"))
    os.makedirs(os.path.join(pkg, "_lib"))
    os.symlink(os.path.abspath(VITC), os.path.join(pkg, "_bin", "vitc"))
    os.symlink(lib, os.path.join(pkg, "_lib", "libvitc_runtime.so.0"))
    sys.path.insert(0, os.path.join(tmp, "py"))
    import vitc as package
    return package


def fixed_batch(tmp):
    x1 = RNG.standard_normal((1, 4, 6)).astype(np.float32)
    x2 = RNG.standard_normal((2, 4, 6)).astype(np.float32)
    x3 = RNG.standard_normal((3, 4, 6)).astype(np.float32)

    # batch 1 fixed by the export: compiled with a warning, runs batch 1 only
    fixed = small_vit_head(os.path.join(tmp, "fixed1.onnx"), 1, [0, 24])
    so = os.path.join(tmp, "fixed1.so")
    rc, _, err = vitc(fixed, "-o", so, "--batch", "8")
    check(rc == 0, "fixed batch 1: compiles (exit 0)")
    check("warning: the batch is fixed at 1" in err and "graph input 'x' (f32[1,4,6])" in err,
          "fixed batch 1: the compile warns, naming the input: " + err.strip())
    check("--dynamic-batch" in err and "dynamic_axes={'x': {0: 'batch'}}" in err and "dynamic_shapes" in err,
          "fixed batch 1: the warning says how to re-export it or to use --dynamic-batch")
    rc, _, err = vitc(fixed, "-o", os.path.join(tmp, "quiet.so"), "--quiet")
    check(rc == 0 and "warning" not in err, "fixed batch 1: --quiet prints no warning")
    rc, out, _ = vitc("inspect", so)
    check(rc == 0 and "batch:      1 only" in out and "1 to" not in out,
          "fixed batch 1: inspect says batch 1 only: " + next((l for l in out.splitlines() if "batch:" in l), "?"))
    rc, out, _ = vitc("inspect", so, "--json")
    import json
    info = json.loads(out)
    check(info["min_batch"] == 1 and info["max_batch"] == 1 and info["inputs"][0]["shape"] == [1, 4, 6],
          "fixed batch 1: inspect --json min_batch 1, max_batch 1, input [1, 4, 6]")
    rc, err, y = run_so(so, x1, tmp, "x1")
    e = rel_err(y, ort_run(fixed, x1)) if rc == 0 else float("inf")
    check(rc == 0 and e <= 1e-4, f"fixed batch 1: batch 1 runs, {e:.2e} from ONNX Runtime (<= 1e-4)")
    rc, err, _ = run_so(so, x2, tmp, "x2")
    check(rc == 2 and "has shape [2,4,6]: batch 2; the model runs batch 1 only" in err,
          "fixed batch 1: batch 2 is refused, naming the compiled batch: " + err.strip())

    # batch 3 fixed by the export (and in its Reshape): runs batch 3 only
    fixed3 = small_vit_head(os.path.join(tmp, "fixed3.onnx"), 3, [3, 24])
    so3 = os.path.join(tmp, "fixed3.so")
    rc, _, err = vitc(fixed3, "-o", so3)
    check(rc == 0 and "warning: the batch is fixed at 3" in err, "fixed batch 3: compiles with a warning")
    rc, out, _ = vitc("inspect", so3)
    check("batch:      3 only" in out, "fixed batch 3: inspect says batch 3 only")
    info = json.loads(vitc("inspect", so3, "--json")[1])
    check(info["min_batch"] == 3 and info["max_batch"] == 3, "fixed batch 3: inspect --json min and max 3")
    rc, err, y = run_so(so3, x3, tmp, "x3")
    e = rel_err(y, ort_run(fixed3, x3)) if rc == 0 else float("inf")
    check(rc == 0 and e <= 1e-4, f"fixed batch 3: batch 3 runs, {e:.2e} from ONNX Runtime (<= 1e-4)")
    rc, err, _ = run_so(so3, x1, tmp, "x1b")
    check(rc == 2 and "batch 1; the model runs batch 3 only" in err, "fixed batch 3: batch 1 is refused: " + err.strip())

    # the Python package: the batches it runs, and the runtime's refusal as a ValueError (not where the runtime is
    # built with ASan/UBSan: it cannot be loaded into a Python built without them; the CLI checks above stand)
    vitc_py = None if SANITIZED else python_package(tmp)
    if SANITIZED:
        print("note: the Python package and the C API in this process: not in a sanitizer build")
    elif vitc_py is None:
        check(False, "the runtime library beside " + VITC)
    else:
        with vitc_py.load(so, threads=1) as m:
            check(m.min_batch == 1 and m.max_batch == 1 and "batch 1..1" in repr(m),
                  f"Python: min_batch {m.min_batch}, max_batch {m.max_batch}, {m!r}")
            check(rel_err(m(x1), ort_run(fixed, x1)) <= 1e-4, "Python: batch 1 runs")
            try:
                m(x2)
                check(False, "Python: batch 2 raises")
            except ValueError as ex:
                check("the model runs batch 1 only" in str(ex), "Python: batch 2 raises ValueError: " + str(ex))
        with vitc_py.load(so3, threads=1) as m:
            check(m.min_batch == 3 and m.max_batch == 3, "Python: the batch-3 export runs 3..3")
        # the C API's answer, as C programs see it
        rt = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(VITC)), "libvitc_runtime.so.0"))
        rt.vitc_model_read.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        for fn in (rt.vitc_model_min_batch, rt.vitc_model_max_batch):
            fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_int64
        h = ctypes.c_void_p()
        check(rt.vitc_model_read(so3.encode(), ctypes.byref(h)) == 0 and
              (rt.vitc_model_min_batch(h), rt.vitc_model_max_batch(h)) == (3, 3),
              "C: vitc_model_min_batch and vitc_model_max_batch are 3")

    # --dynamic-batch: the batch made symbolic; batch 3 against ONNX Runtime on the same graph with a symbolic batch
    dyn_so = os.path.join(tmp, "dynamic.so")
    rc, _, err = vitc(fixed, "-o", dyn_so, "--dynamic-batch", "--batch", "4")
    check(rc == 0 and "warning" not in err, "--dynamic-batch: compiles without a warning " + err.strip())
    rc, out, _ = vitc("inspect", dyn_so)
    check("batch:      1 to 4" in out and "f32[B,4,6]" in out, "--dynamic-batch: inspect says 1 to 4, x f32[B,4,6]")
    symbolic = small_vit_head(os.path.join(tmp, "symbolic.onnx"), "batch", [0, 24])
    rc, err, y = run_so(dyn_so, x3, tmp, "x3d")
    e = rel_err(y, ort_run(symbolic, x3)) if rc == 0 else float("inf")
    check(rc == 0 and y.shape == (3, 5) and e <= 1e-4,
          f"--dynamic-batch: batch 3 runs, {e:.2e} from ONNX Runtime (<= 1e-4)")

    # --dynamic-batch where a node holds the exported batch: an error naming it, no .so
    for shape, what in (([1, 24], "the input has 24*B elements"), ([1, -1], "its output f32[1,24*B] has 1 where")):
        pinned = small_vit_head(os.path.join(tmp, "pinned.onnx"), 1, shape)
        out_so = os.path.join(tmp, "pinned.so")
        rc, _, err = vitc(pinned, "-o", out_so, "--dynamic-batch")
        check(rc == 2 and "node 'flat' (Reshape): --dynamic-batch: this node fixes the batch" in err and what in err
              and "dynamic_axes" in err and not os.path.exists(out_so),
              f"--dynamic-batch, Reshape to {shape}: exit 2 naming node 'flat': " + err.strip().replace("\n", " | "))


def unsupported(tmp):
    """Three ScatterElements on constants (an index table) and a CumSum: one grouped error and a next step."""
    c = lambda name, a: numpy_helper.from_array(np.asarray(a), name)
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("ScatterElements", ["table", "i0", "u0"], ["t1"], name="/pos/ScatterElements"),
             helper.make_node("ScatterElements", ["t1", "i1", "u1"], ["t2"], name="/pos/ScatterElements_1"),
             helper.make_node("ScatterElements", ["t2", "i2", "u2"], ["t3"], name="/pos/ScatterElements_2"),
             helper.make_node("Add", ["a", "t3"], ["b"], name="add"),
             helper.make_node("CumSum", ["b", "axis"], ["y"], name="/head/CumSum")]
    inits = [c("table", np.zeros(4, np.float32)), c("axis", np.array(1, np.int64))]
    for k in range(3):
        inits += [c(f"i{k}", np.array([k], np.int64)), c(f"u{k}", np.array([k + 1.0], np.float32))]
    path = save(os.path.join(tmp, "unsupported.onnx"), nodes, [vi("x", ["B", 4])], [vi("y", ["B", 4])], inits)
    want = ("unsupported operators: ScatterElements x3 (first: node '/pos/ScatterElements'), CumSum x1 "
            "(node '/head/CumSum')")
    rc, _, err = vitc(path, "-o", os.path.join(tmp, "u.so"))
    lines = err.strip().splitlines()
    check(rc == 2 and len(lines) == 2 and lines[0].endswith(want) and "next step: `vitc dump" in lines[1],
          "compile: exit 2, one grouped error and one next step:\n  " + "\n  ".join(lines))
    rc, out, err = vitc("dump", path)
    check(rc == 2 and want in err and "next step: the graph printed marks these nodes" in err,
          "dump: exit 2 with the grouped error")
    marked = [l for l in out.splitlines() if l.endswith("!! unsupported")]
    check(len(marked) == 4 and "4 unsupported" in out.splitlines()[0],
          f"dump: the graph printed, {len(marked)} nodes marked unsupported")
    check("a: f32[B,4] = Relu(x)  # relu" in out and
          "t1: ? = ScatterElements(table, i0, u0)  # /pos/ScatterElements  !! unsupported" in out and
          "y: f32[B,4] = CumSum(b, axis)  # /head/CumSum  !! unsupported" in out,
          "dump: supported nodes typed, unsupported ones in place with what they read:\n" + out)
    order = [l.split(" = ")[1].split("(")[0] for l in out.splitlines() if " = " in l]
    check(order == ["Relu", "ScatterElements", "ScatterElements", "ScatterElements", "Add", "CumSum"],
          f"dump: in model order {order}")
    rc, out, _ = vitc("dump", path, "--stats")
    check(rc == 2 and out.splitlines() == ["Add 1", "CumSum 1  !! unsupported", "Relu 1",
                                           "ScatterElements 3  !! unsupported"],
          "dump --stats: the unsupported op types counted and marked: " + " | ".join(out.splitlines()))
    rc, out, _ = vitc("dump", path, "--format", "dot")
    check(rc == 2 and out.count("!! unsupported") == 4 and out.rstrip().endswith("}"), "dump --format dot: marked")
    if shutil.which("dot"):
        p = subprocess.run(["dot", "-Tsvg"], input=out, capture_output=True, text=True)
        check(p.returncode == 0, "dump --format dot: Graphviz renders it")


def branches(tmp):
    """If with a condition computed from shapes (a Size of a Shape, as HF DINOv3's rotary embedding exports
    it): the branch it picks is compiled, reading values of the graph around it, with an If nested in it; the
    branches not taken would not even infer for these shapes.  A condition computed from data is refused
    naming the node; an unsupported operator inside a branch is reported as itself."""
    c = lambda name, a: numpy_helper.from_array(np.asarray(a), name)
    bad = lambda: numpy_helper.from_array(np.array([-1, 5, 7], np.int64), "bad_shape")
    inner = helper.make_node(
        "If", ["small"], ["r"], name="then/If",
        then_branch=helper.make_graph([helper.make_node("Constant", [], ["bad2"], name="then/then/shape",
                                                        value=c("v", np.array([-1, 5, 7], np.int64))),
                                       helper.make_node("Reshape", ["m", "bad2"], ["rr"], name="then/then/Reshape")],
                                      "then_then", [], [vi("rr", None)]),
        else_branch=helper.make_graph([helper.make_node("Relu", ["m"], ["re"], name="then/else/Relu")],
                                      "then_else", [], [vi("re", None)]))
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["m"], name="then/Mul"),
                                helper.make_node("Less", ["n", "one"], ["small"], name="then/Less"), inner],
                               "then", [], [vi("r", None)])
    else_g = helper.make_graph([helper.make_node("Reshape", ["x", "bad_shape"], ["e"], name="else/Reshape")],
                               "else", [], [vi("e", None)], [bad()])

    def model(name, cond_nodes, else_graph=else_g):
        nodes = cond_nodes + [helper.make_node("If", ["cond"], ["t"], name="if", then_branch=then_g,
                                               else_branch=else_graph),
                              helper.make_node("Add", ["t", "x"], ["y"], name="add")]
        inits = [c("w", RNG.standard_normal(6).astype(np.float32)), c("two", np.array(2, np.int64)),
                 c("one", np.array(1, np.int64)), c("zero", np.array(0.0, np.float32))]
        return save(os.path.join(tmp, name), nodes, [vi("x", ["B", 4, 6])], [vi("y", ["B", 4, 6])], inits)

    shapes = [helper.make_node("Shape", ["x"], ["s"], name="Shape"), helper.make_node("Size", ["s"], ["n"], name="Size"),
              helper.make_node("Greater", ["n", "two"], ["cond"], name="Greater")]
    path = model("if-shapes.onnx", shapes)
    so = os.path.join(tmp, "if.so")
    rc, _, err = vitc(path, "-o", so, "--batch", "3")
    check(rc == 0, "If on shapes: compiles " + err.strip())
    x3 = RNG.standard_normal((3, 4, 6)).astype(np.float32)
    rc, err, y = run_so(so, x3, tmp, "if3") if rc == 0 else (rc, "", None)
    e = rel_err(y, ort_run(path, x3)) if rc == 0 else float("inf")
    check(rc == 0 and e <= 1e-4, f"If on shapes: batch 3 runs, {e:.2e} from ONNX Runtime (<= 1e-4) {err}")
    rc, out, err = vitc("dump", path)
    check(rc == 0 and "= If(" not in out and "= Relu(m)  # then/else/Relu" in out and "Reshape" not in out,
          "If on shapes: dump shows the branch taken in its place, the others gone:\n" + out + err)

    data = shapes[:2] + [helper.make_node("ReduceSum", ["x"], ["sum"], name="ReduceSum", keepdims=0),
            helper.make_node("Greater", ["sum", "zero"], ["cond"], name="Greater")]
    rc, _, err = vitc(model("if-data.onnx", data), "-o", os.path.join(tmp, "if-data.so"))
    check(rc == 2 and "node 'if' (If): If whose condition is computed at run time is not supported" in err,
          "If on data: exit 2 naming the node: " + err.strip())

    cum = helper.make_graph([helper.make_node("CumSum", ["x", "one"], ["e"], name="else/CumSum")], "else", [],
                            [vi("e", None)])
    rc, _, err = vitc(model("if-unsupported.onnx", shapes, cum), "-o", os.path.join(tmp, "if-u.so"))
    check(rc == 2 and "unsupported operator: CumSum x1 (node 'else/CumSum')" in err,
          "If with an unsupported operator in a branch: exit 2 naming it: " + err.strip())


def leftovers(tmp):
    """An RMSNorm without epsilon (a near miss), and beside it a Sigmoid and an activation MatMul no rule takes."""
    c = lambda name, a: numpy_helper.from_array(np.asarray(a), name)
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"], name="rms/Pow"),
             helper.make_node("ReduceMean", ["sq"], ["ms"], name="rms/ReduceMean", axes=[-1]),
             helper.make_node("Sqrt", ["ms"], ["rt"], name="rms/Sqrt"),
             helper.make_node("Reciprocal", ["rt"], ["inv"], name="rms/Reciprocal"),
             helper.make_node("Mul", ["x", "inv"], ["n"], name="rms/Mul"),
             helper.make_node("Sigmoid", ["x"], ["s"], name="gate/Sigmoid"),
             helper.make_node("Transpose", ["s"], ["st"], name="tr", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["s", "st"], ["y"], name="gram/MatMul")]
    path = save(os.path.join(tmp, "leftover.onnx"), nodes, [vi("x", ["B", 3, 8])],
                [vi("n", ["B", 3, 8]), vi("y", ["B", 3, 3])], [c("two", np.array(2.0, np.float32))], opset=17)
    rc, out, err = vitc("dump", path, "--explain-fusion")
    left = dict(re.findall(r"^left over: node '([^']*)' \(\w+\): (.*)$", out, re.M))
    check(rc == 0 and re.search(r"^5 ops left outside fused ops", out, re.M) is not None,
          "explain: 5 ops left outside fused ops:\n" + out + err)
    check(set(left) == {"rms/Pow", "rms/Sqrt", "rms/Reciprocal", "gate/Sigmoid", "gram/MatMul"},
          f"explain: every leftover named {sorted(left)}")
    check(all("fuse-layernorm did not fuse" in left.get(n, "") for n in ("rms/Pow", "rms/Sqrt", "rms/Reciprocal")),
          "explain: the RMSNorm's leftovers point at the candidate that did not fuse")
    check(left.get("gate/Sigmoid") == "no fusion took it as a candidate" and
          left.get("gram/MatMul") == "no fusion took it as a candidate",
          "explain: a Sigmoid and a MatMul no rule took are named as such")


def refused_by_backend(tmp):
    """Three GatherNDs and a ScatterND whose indices are computed at run time (a graph input), which no
    backend runs: the backend's refusal is one line per op type and reason, naming the first node and how
    many more."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("GatherND", ["r", "i"], ["g1"], name="gnd_a"),
             helper.make_node("GatherND", ["g1", "i"], ["g2"], name="gnd_b"),
             helper.make_node("GatherND", ["g2", "i"], ["g3"], name="gnd_c"),
             helper.make_node("ScatterND", ["g3", "i", "g3"], ["y"], name="snd")]
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [2, 1])
    path = save(os.path.join(tmp, "indices.onnx"), nodes, [vi("x", ["B", 4]), i], [vi("y", [2, 4])], [])
    rc, _, err = vitc(path, "-o", os.path.join(tmp, "indices.so"))
    lines = [l for l in err.splitlines() if "not supported by the CPU backend" in l]
    check(rc == 2 and len(lines) == 2 and "node 'gnd_a' (GatherND): not supported by the CPU backend (nor 2 more "
          "GatherND nodes)" in lines[0] and "computed at run time" in lines[0] and "node 'snd' (ScatterND)" in lines[1],
          "the backend's refusals grouped: " + " | ".join(lines) + " | " + err)


def main():
    tmp = tempfile.mkdtemp(prefix="vitc-export-")
    try:
        fixed_batch(tmp)
        unsupported(tmp)
        refused_by_backend(tmp)
        branches(tmp)
        leftovers(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d check(s) failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
