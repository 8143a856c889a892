#!/usr/bin/env python3
"""make_toy_onnx.py: writes the ONNX twins of toy_model.c's single-output
variant (TOY_SINGLE_OUTPUT), so that `vitc compare` can be tested on a model
whose compiled form is hand-written:

    toy_y.onnx        y = x * scale + bias + shift   (the same weights as toy_model.c)
    toy_y_wrong.onnx  the same with bias[2] changed: compare must fail on it

x is f32[B,4] with a symbolic batch, shift f32[4].  Needs the onnx package
(setup.sh's .venv):  .venv/bin/python tests/data/runtime/make_toy_onnx.py
"""
import os

import onnx
from onnx import TensorProto, helper

SCALE = [2.0, -1.0, 0.5, 3.0]
BIAS = [1.0, 0.0, -2.0, 0.25]


def model(bias):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])
    shift = helper.make_tensor_value_info("shift", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])
    inits = [helper.make_tensor("scale", TensorProto.FLOAT, [4], SCALE),
             helper.make_tensor("bias", TensorProto.FLOAT, [4], bias)]
    nodes = [helper.make_node("Mul", ["x", "scale"], ["scaled"], name="scale_x"),
             helper.make_node("Add", ["scaled", "bias"], ["biased"], name="add_bias"),
             helper.make_node("Add", ["biased", "shift"], ["y"], name="add_shift")]
    graph = helper.make_graph(nodes, "toy_y", [x, shift], [y], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="make_toy_onnx.py")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    onnx.save(model(BIAS), os.path.join(here, "toy_y.onnx"))
    wrong = list(BIAS)
    wrong[2] += 0.01
    onnx.save(model(wrong), os.path.join(here, "toy_y_wrong.onnx"))
    print("wrote toy_y.onnx, toy_y_wrong.onnx")


if __name__ == "__main__":
    main()
