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
         "unsupported operators: Mish x1 (node 'mish0'), HardSwish x1 (node 'hswish0')")
    save("unsupported-op-readers.onnx",
         model([helper.make_node("Mish", ["x"], ["a"], name="mish0"),
                helper.make_node("Relu", ["a"], ["b"], name="relu0"),
                helper.make_node("Add", ["b", "x"], ["y"], name="add0")]),
         "unsupported operator: Mish x1 (node 'mish0')")
    save("custom-domain.onnx",
         model([helper.make_node("FusedThing", ["x"], ["y"], name="fz", domain="com.example")]),
         "unsupported operator: FusedThing (domain 'com.example') x1 (node 'fz')")
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
    hostile(rng)
    with open(os.path.join(HERE, "EXPECT.tsv"), "w") as f:
        f.write("file\tmessage fragment\n")
        for name, expect in EXPECT:
            f.write(f"{name}\t{expect}\n")


def i64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def f32(name, shape):
    return numpy_helper.from_array(np.ones(shape, np.float32), name)


def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([b])
        out += bytes([b | 0x80])


def nested_subgraphs(depth):
    """A ModelProto whose graph's node has an attribute holding a graph whose
    node has an attribute... depth times, written as raw protobuf fields
    (GraphProto.node = 1, NodeProto.attribute = 5, AttributeProto.g = 6,
    ModelProto.graph = 7): a parser that recurses per message runs out of stack."""
    def field(num, payload):
        return varint(num << 3 | 2) + varint(len(payload)) + payload
    inner = b""
    for _ in range(depth):
        inner = field(1, field(5, field(6, inner)))
    return varint(1 << 3) + varint(8) + field(7, inner)


def hostile(rng):
    """Models that are wrong in one way each, beyond parsing: arity, types,
    shapes, attribute values and kinds, external data, ranks and sizes."""
    save("nested-subgraphs.onnx", nested_subgraphs(5000), "protobuf messages nest more than 64 deep")
    # Wrong input or output counts, per op.
    save("arity-matmul-3-inputs.onnx",
         model([helper.make_node("MatMul", ["x", "w", "w"], ["y"], name="mm3")], inits=[f32("w", (4, 4))]),
         "node 'mm3' (MatMul): has 3 inputs and 1 outputs; MatMul takes 2 inputs")
    save("arity-relu-2-inputs.onnx", model([helper.make_node("Relu", ["x", "x"], ["y"], name="relu2")]),
         "node 'relu2' (Relu): has 2 inputs")
    save("arity-where-2-inputs.onnx", model([helper.make_node("Where", ["c", "x"], ["y"], name="where2")],
                                             inputs=[vi("x", ["B", 4]), vi("c", ["B", 4], TensorProto.BOOL)]),
         "node 'where2' (Where): has 2 inputs and 1 outputs; Where takes 3 inputs")
    save("arity-concat-0-inputs.onnx", model([helper.make_node("Concat", [], ["y"], name="cat0", axis=0)]),
         "node 'cat0' (Concat): has 0 inputs and 1 outputs; Concat takes 1 or more inputs")
    save("arity-relu-2-outputs.onnx", model([helper.make_node("Relu", ["x"], ["y", "z"], name="relu_o2")]),
         "node 'relu_o2' (Relu): has 1 inputs and 2 outputs")
    save("omitted-required-input.onnx", model([helper.make_node("MatMul", ["x", ""], ["y"], name="mm_omit")]),
         "node 'mm_omit' (MatMul): input 1 is required but its name is empty")
    save("arity-gemm-1-input.onnx", model([helper.make_node("Gemm", ["x"], ["y"], name="gemm1")]),
         "node 'gemm1' (Gemm): has 1 inputs")
    # Types and shapes that do not fit together.
    save("dtype-add-f32-i64.onnx",
         model([helper.make_node("Add", ["x", "k"], ["y"], name="add_mixed")], inits=[i64("k", [1, 2, 3, 4])]),
         "node 'add_mixed' (Add): input 1 is i64 but input 0 is f32")
    save("concat-rank-mismatch.onnx",
         model([helper.make_node("Concat", ["x", "t"], ["y"], name="cat_r", axis=1)], inits=[f32("t", (2, 2, 2))]),
         "node 'cat_r' (Concat): input 1 is f32 of rank 3; input 0 is f32 of rank 2")
    save("gather-index-out-of-range.onnx",
         model([helper.make_node("Gather", ["x", "i"], ["y"], name="gather_oob", axis=1)],
               inits=[i64("i", [0, 9])]),
         "node 'gather_oob' (Gather): index 9 is out of range for dimension 1 of size 4")
    save("transpose-perm-invalid.onnx",
         model([helper.make_node("Transpose", ["x"], ["y"], name="tr", perm=[0, 0])]),
         "node 'tr' (Transpose): perm is not a permutation")
    save("transpose-perm-float.onnx",
         model([helper.make_node("Transpose", ["x"], ["y"], name="trf", perm=[1.0, 0.0])]),
         "node 'trf' (Transpose): attribute 'perm' must be ints, not floats")
    save("softmax-axis-float.onnx",
         model([helper.make_node("Softmax", ["x"], ["y"], name="smf", axis=1.0)]),
         "node 'smf' (Softmax): attribute 'axis' must be an int, not a float")
    n = helper.make_node("Softmax", ["x"], ["y"], name="sm2", axis=1)
    n.attribute.extend([helper.make_attribute("axis", 0)])
    save("attribute-twice.onnx", model([n]), "node 'sm2' (Softmax): attribute 'axis' is given twice")
    save("reshape-two-minus-one.onnx",
         model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs2")], inits=[i64("s", [-1, -1])]),
         "node 'rs2' (Reshape): more than one -1 in the target shape")
    save("reshape-product-overflow.onnx",
         model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs_ovf")],
               inits=[i64("s", [1 << 40, 1 << 40, -1])]),
         "node 'rs_ovf' (Reshape): element count overflows")
    save("slice-step-0.onnx",
         model([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"], name="sl0")],
               inits=[i64("st", [0]), i64("en", [2]), i64("ax", [1]), i64("sp", [0])]),
         "node 'sl0' (Slice): step is 0")
    save("split-sizes-wrong-sum.onnx",
         model([helper.make_node("Split", ["x", "sz"], ["y", "z"], name="split_bad", axis=1)],
               inits=[i64("sz", [1, 2])]),
         "node 'split_bad' (Split): split sizes add up to 3, not 4")
    save("conv-channel-mismatch.onnx",
         model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv_c", kernel_shape=[2, 2])],
               inputs=[vi("x", ["B", 3, 8, 8])], outputs=[vi("y", ["B", 8, 7, 7])], inits=[f32("w", (8, 4, 2, 2))]),
         "node 'conv_c' (Conv): input has 3 channels; weight expects 4")
    save("conv-kernel-too-big.onnx",
         model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv_k")],
               inputs=[vi("x", ["B", 1, 4, 4])], outputs=[vi("y", ["B", 1, 1, 1])], inits=[f32("w", (1, 1, 9, 9))]),
         "node 'conv_k' (Conv): spatial dimension 0 (input 4, kernel 9): the kernel is larger than the padded input")
    save("constant-without-value.onnx",
         model([helper.make_node("Constant", [], ["k"], name="const_empty"),
                helper.make_node("Add", ["x", "k"], ["y"], name="add_k")]),
         "node 'const_empty' (Constant): a Constant needs one output and one value attribute")
    save("squeeze-not-one.onnx",
         model([helper.make_node("Squeeze", ["x", "ax"], ["y"], name="sq")], inits=[i64("ax", [1])]),
         "node 'sq' (Squeeze): axis 1 is out of range or not of size 1")
    save("expand-not-broadcastable.onnx",
         model([helper.make_node("Expand", ["x", "s"], ["y"], name="ex")], inits=[i64("s", [3, 5])]),
         "node 'ex' (Expand): shapes cannot be broadcast together")
    save("matmul-dtype-mismatch.onnx",
         model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm_t")],
               inits=[numpy_helper.from_array(np.ones((4, 4), np.float16), "w")]),
         "node 'mm_t' (MatMul): MatMul operands differ in type (f32 vs f16)")
    save("cast-to-string.onnx", model([helper.make_node("Cast", ["x"], ["y"], name="cast_s", to=8)]),
         "node 'cast_s' (Cast): Cast to an unsupported type (to=8)")
    save("range-delta-0.onnx",
         model([helper.make_node("Range", ["a", "b", "d"], ["y"], name="range0")],
               outputs=[vi("y", [None], TensorProto.INT64)],
               inits=[i64("a", 0), i64("b", 5), i64("d", 0)]),
         "node 'range0' (Range): delta is 0")
    save("einsum-equation-mismatch.onnx",
         model([helper.make_node("Einsum", ["x", "x"], ["y"], name="es", equation="ij,ij,ij->ij")]),
         "node 'es' (Einsum): equation 'ij,ij,ij->ij' does not match")
    save("softmax-axis-out-of-range.onnx", model([helper.make_node("Softmax", ["x"], ["y"], name="sm9", axis=9)]),
         "node 'sm9' (Softmax): axis is out of range")
    # Names: initializers shadowing inputs, defined twice, empty op types.
    save("initializer-shadows-input.onnx",
         model([helper.make_node("Add", ["x", "x"], ["y"], name="a")], inits=[f32("x", (3,))]),
         "graph input 'x' does not match the initializer of that name (f32[3])")
    save("initializer-twice.onnx",
         model([helper.make_node("Add", ["x", "w"], ["y"], name="a")], inits=[f32("w", (4,)), f32("w", (4,))]),
         "tensor name 'w' is defined twice")
    save("empty-op-type.onnx", model([helper.make_node("", ["x"], ["y"], name="noop")]),
         "unsupported operator: (empty op_type) x1 (node 'noop')")
    # Ranks and sizes.
    save("input-rank-9.onnx",
         model([helper.make_node("Relu", ["x"], ["y"], name="r")], inputs=[vi("x", ["B"] + [1] * 8)]),
         "graph input 'x' has rank 9, more than 8")
    chain = [helper.make_node("Unsqueeze", ["x" if i == 0 else f"u{i}", f"ax"], [f"u{i + 1}" if i < 7 else "y"],
                              name=f"unsq{i}") for i in range(8)]
    save("unsqueeze-rank-9.onnx",
         model(chain, inputs=[vi("x", ["B"])], outputs=[vi("y", None)], inits=[i64("ax", [0])]),
         "node 'unsq7' (Unsqueeze): result rank 9 exceeds 8")
    save("input-dim-huge.onnx",
         model([helper.make_node("Relu", ["x"], ["y"], name="r")], inputs=[vi("x", ["B", 1 << 40])]),
         "graph input 'x': dimension 1 is 1099511627776")
    save("constant-of-shape-huge.onnx",
         model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")], inits=[i64("s", [1 << 31, 1 << 31, 1 << 31])]),
         "node 'cos' (ConstantOfShape): output 'y' would hold more than 4 GiB for one image")
    # If: a condition computed from data, branches that are not an If's, names that clash.
    relu_g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="then_relu")], "then", [], [vi("r", None)])
    neg_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [], [vi("e", None)])
    save("if-condition-from-data.onnx",
         model([helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
                helper.make_node("Greater", ["s", "z"], ["c"], name="gt"),
                helper.make_node("If", ["c"], ["y"], name="if_data", then_branch=relu_g, else_branch=neg_g)],
               inits=[numpy_helper.from_array(np.array(0, np.float32), "z")]),
         "node 'if_data' (If): If whose condition is computed at run time is not supported")
    cond = numpy_helper.from_array(np.array(True), "c")
    save("if-condition-two-elements.onnx",
         model([helper.make_node("If", ["c"], ["y"], name="if_two", then_branch=relu_g, else_branch=neg_g)],
               inits=[numpy_helper.from_array(np.array([True, False]), "c")]),
         "node 'if_two' (If): its condition has 2 elements")
    save("if-one-branch.onnx", model([helper.make_node("If", ["c"], ["y"], name="if_one", then_branch=relu_g)],
                                     inits=[cond]),
         "node 'if_one' (If): needs both branches")
    with_input = helper.make_graph([helper.make_node("Relu", ["i"], ["r"], name="then_relu")], "then", [vi("i", [4])],
                                   [vi("r", None)])
    save("if-branch-with-input.onnx",
         model([helper.make_node("If", ["c"], ["y"], name="if_in", then_branch=with_input, else_branch=neg_g)],
               inits=[cond]),
         "node 'if_in' (If): its then_branch has 1 inputs")
    nowhere = helper.make_graph([], "then", [], [vi("nowhere", None)])
    save("if-branch-output-undefined.onnx",
         model([helper.make_node("If", ["c"], ["y"], name="if_out", then_branch=nowhere, else_branch=neg_g)],
               inits=[cond]),
         "output 0 of its then_branch, 'nowhere', is neither computed in it nor a value of the graph around it")
    shadow = helper.make_graph([helper.make_node("Relu", ["x"], ["x"], name="then_shadow")], "then", [], [vi("x", None)])
    save("if-branch-shadows.onnx",
         model([helper.make_node("If", ["c"], ["y"], name="if_sh", then_branch=shadow, else_branch=neg_g)],
               inits=[cond]),
         "node 'then_shadow' (Relu): output 'x' is already defined earlier")
    # External data: a huge offset, an offset that is not a number, a location that is a directory.
    for name, loc, off, expect in [("external-huge-offset.onnx", "small.bin", str((1 << 63) - 1), "lies outside it"),
                                   ("external-bad-offset.onnx", "small.bin", "12abc", "is not a valid size"),
                                   ("external-directory.onnx", ".", "0", "external data '.' resolves outside")]:
        t = TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[1])
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", loc), ("offset", off)):
            e = t.external_data.add()
            e.key, e.value = k, v
        save(name, model([helper.make_node("Add", ["x", "t"], ["y"], name="a")], inits=[t]), expect)


if __name__ == "__main__":
    main()
