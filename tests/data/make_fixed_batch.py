#!/usr/bin/env python3
"""Writes tests/data/fixed-batch-1.onnx: a small model as an export without
dynamic_axes leaves it, its input's first dimension the number 1 (x [1, 4, 6]
-> MatMul -> Softmax -> + x -> Reshape [0, 24] -> MatMul -> y [1, 5]).  The
Python package's tests compile it: the .so runs batch 1 only, and says so.

    python3 tests/data/make_fixed_batch.py      # needs the `onnx` package
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    rng = np.random.default_rng(29)
    w = rng.standard_normal((6, 6)).astype(np.float32)
    w2 = (rng.standard_normal((24, 5)) / 4).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Softmax", ["h"], ["p"], name="sm", axis=-1),
             helper.make_node("Add", ["p", "x"], ["r"], name="res"),
             helper.make_node("Reshape", ["r", "shape"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "W2"], ["y"], name="head")]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(w2, "W2"),
             numpy_helper.from_array(np.array([0, 24], np.int64), "shape")]
    g = helper.make_graph(nodes, "fixed_batch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(HERE, "fixed-batch-1.onnx"))


if __name__ == "__main__":
    main()
