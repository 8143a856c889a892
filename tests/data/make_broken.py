#!/usr/bin/env python3
"""Writes the corpus of broken and hostile models in tests/data/broken/.

Each file is small and says in its name what is wrong with it.  The tests
expect `vitc dump FILE` to exit 2 with a message naming the file (and the
node, where there is one), and never to crash.  The expected message
fragment for each file is in broken/EXPECT.tsv.

    python3 tests/data/make_broken.py      # needs the `onnx` package
"""
import os
import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "broken")
EXPECT = []


def vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs=None, outputs=None, inits=(), opset=17, check=False):
    g = helper.make_graph(nodes, "g", inputs if inputs is not None else [vi("x", ["B", 4])],
                          outputs if outputs is not None else [vi("y", ["B", 4])], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    if check:
        onnx.checker.check_model(m)
    return m


def save(name, m, expect):
    path = os.path.join(HERE, name)
    if isinstance(m, (bytes, bytearray)):
        with open(path, "wb") as f:
            f.write(m)
    else:
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
    EXPECT.append((name, expect))


def main():
    os.makedirs(HERE, exist_ok=True)
    rng = random.Random(1234)
    good = model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], check=True)
    good_bytes = good.SerializeToString()

    save("empty.onnx", b"", "has no graph")
    save("random-bytes.onnx", bytes(rng.randrange(256) for _ in range(4096)), "not a valid ONNX model")
    save("truncated.onnx", good_bytes[: len(good_bytes) // 2], "not a valid ONNX model")
    save("no-graph.onnx", helper.make_model(helper.make_graph([], "g", [], [])).SerializeToString()[:0] +
         onnx.ModelProto(ir_version=8, opset_import=[helper.make_opsetid("", 17)]).SerializeToString(),
         "has no graph")
    save("no-opset.onnx", onnx.ModelProto(ir_version=8, graph=good.graph), "no default-domain")
    save("opset-too-new.onnx", model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], opset=99),
         "opset 99 is not supported")
    save("opset-too-old.onnx", model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], opset=7),
         "opset 7 is not supported")
    save("unsupported-ops.onnx",
         model([helper.make_node("Relu", ["x"], ["a"], name="ok0"),
                helper.make_node("Mish", ["a"], ["b"], name="mish0"),
                helper.make_node("HardSwish", ["b"], ["y"], name="hswish0")]),
         "node 'hswish0' (HardSwish): unsupported operator")
    save("custom-domain.onnx",
         model([helper.make_node("FusedThing", ["x"], ["y"], name="fz", domain="com.example")]),
         "unsupported operator domain")
    save("dangling-input.onnx", model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add0")]),
         "input 'nowhere' is not")
    save("cycle.onnx",
         model([helper.make_node("Add", ["x", "b"], ["a"], name="add_a"),
                helper.make_node("Relu", ["a"], ["b"], name="relu_b"),
                helper.make_node("Identity", ["b"], ["y"], name="id")]),
         "node 'add_a' (Add): input 'b' is not")
    save("duplicate-output.onnx",
         model([helper.make_node("Relu", ["x"], ["y"], name="r1"),
                helper.make_node("Relu", ["x"], ["y"], name="r2")]),
         "node 'r2' (Relu): output 'y' is already defined")
    save("wrong-arity.onnx", model([helper.make_node("Add", ["x"], ["y"], name="add1")]),
         "node 'add1' (Add): has 1 inputs")
    save("missing-output.onnx", model([helper.make_node("Relu", ["x"], ["a"], name="r")]),
         "graph output 'y' is not produced")
    w = numpy_helper.from_array(np.ones((5, 4), np.float32), "w")
    save("matmul-mismatch.onnx",
         model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm0")], inits=[w]),
         "node 'mm0' (MatMul): MatMul inner dimensions differ: 4 vs 5")
    shape = numpy_helper.from_array(np.array([7, 3], np.int64), "shape")
    save("reshape-mismatch.onnx",
         model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="rs0")], inits=[shape]),
         "node 'rs0' (Reshape): the input has 4*B elements but the target shape holds 21")
    t = numpy_helper.from_array(np.ones((4,), np.float32), "t")
    t.raw_data = t.raw_data[:6]
    save("raw-data-short.onnx", model([helper.make_node("Add", ["x", "t"], ["y"], name="a")], inits=[t]),
         "raw_data has 6 bytes but its shape needs 16")
    t = TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[-3])
    save("negative-dim.onnx", model([helper.make_node("Add", ["x", "t"], ["y"], name="a")], inits=[t]),
         "dimension 0 is negative")
    t = TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[1 << 30, 1 << 30, 1 << 30])
    save("huge-dims.onnx", model([helper.make_node("Add", ["x", "t"], ["y"], name="a")], inits=[t]),
         "overflows")
    t = TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[1 << 20, 1 << 10])
    save("huge-tensor.onnx", model([helper.make_node("Add", ["x", "t"], ["y"], name="a")], inits=[t]),
         "float_data has 0 elements but its shape needs 1073741824")
    for name, loc, expect in [("external-escape.onnx", "../../etc/passwd", "must be a relative path inside"),
                              ("external-absolute.onnx", "/etc/passwd", "must be a relative path inside"),
                              ("external-missing.onnx", "no-such-file.bin", "cannot open external data"),
                              ("external-out-of-range.onnx", "small.bin", "lies outside it")]:
        t = TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[4])
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", loc), ("offset", "8"), ("length", "16")):
            e = t.external_data.add()
            e.key, e.value = k, v
        save(name, model([helper.make_node("Add", ["x", "t"], ["y"], name="a")], inits=[t]), expect)
    with open(os.path.join(HERE, "small.bin"), "wb") as f:
        f.write(b"\0" * 12)
    os.symlink("/etc/hostname", os.path.join(HERE, "link.bin")) if not os.path.lexists(
        os.path.join(HERE, "link.bin")) else None
    t = TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[1])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "link.bin"), ("length", "4")):
        e = t.external_data.add()
        e.key, e.value = k, v
    save("external-symlink-out.onnx", model([helper.make_node("Add", ["x", "t"], ["y"], name="a")], inits=[t]),
         "resolves outside the model's directory")
    save("unsupported-attribute.onnx",
         model([helper.make_node("Relu", ["x"], ["y"], name="r", frobnicate=3)]),
         "node 'r' (Relu): unsupported attribute 'frobnicate'")
    save("symbolic-inner-dim.onnx",
         model([helper.make_node("Relu", ["x"], ["y"], name="r")], inputs=[vi("x", ["B", "N"])]),
         "dimension 1 is symbolic ('N')")
    save("string-input.onnx",
         model([helper.make_node("Identity", ["x"], ["y"], name="r")], inputs=[vi("x", ["B"], TensorProto.STRING)]),
         "unsupported element type 8")
    with open(os.path.join(HERE, "EXPECT.tsv"), "w") as f:
        f.write("file\tmessage fragment\n")
        for name, expect in EXPECT:
            f.write(f"{name}\t{expect}\n")


if __name__ == "__main__":
    main()
