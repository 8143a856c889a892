#!/usr/bin/env python3
"""Writes tests/data/resize/: Resize models of opset 18 and 19 with what
ONNX 1.12's node tests do not have (antialias, axes, keep_aspect_ratio_policy,
half_pixel_symmetric), each with the output ONNX's reference implementation
gives in double precision.  test_interp runs each model through the importer,
shape inference and the interpreter against it.

    table.npy      the input: a position table, f32 [1, 2, 7, 9]
    CASE.onnx      Resize(x) with its sizes or scales as an initializer
    CASE.npy       the expected output, f64

The expected outputs come from onnx.reference's own resize code
(onnx.reference.ops.op_resize) run on the table in float64 with cubic_coeff_a
a Python float: its Resize op reads the attribute as float32 and computes the
cubic weights partly in float32 (about 1e-7 off).  The script checks that
they agree within 1e-5 with the float32 outputs of onnx's ReferenceEvaluator
and of ONNX Runtime, and stops otherwise.

    python3 tests/data/resize/make_resize.py   # needs onnx, onnxruntime, numpy
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.ops import op_resize

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPE = (1, 2, 7, 9)

# name, attributes, sizes or scales (one entry per axis of `axes`), opset
TIMM = dict(mode="cubic", cubic_coeff_a=-0.5, antialias=1, exclude_outside=1,
            keep_aspect_ratio_policy="stretch", coordinate_transformation_mode="half_pixel")
CASES = [
    # timm's dynamic_img_size through the dynamo exporter: down (filters of 8 and 6 taps), up
    ("cubic_aa_down", TIMM, dict(sizes=[1, 2, 3, 4]), 18),
    ("cubic_aa_up", TIMM, dict(sizes=[1, 2, 12, 16]), 18),
    # linear, edges read (not excluded), by scales: 0.3 x 0.45 down, 1.6 x 1.5 up
    ("linear_aa_down", dict(mode="linear", antialias=1), dict(scales=[1, 1, 0.3, 0.45]), 18),
    ("linear_aa_up", dict(mode="linear", antialias=1), dict(scales=[1, 1, 1.6, 1.5]), 18),
    # cubic A=-0.75 with antialias, edges read, shrunk on one axis and grown on the other
    ("cubic_aa_mixed", dict(mode="cubic", antialias=1), dict(sizes=[1, 2, 4, 14]), 18),
    # axes and keep_aspect_ratio_policy: one scale, the least (5/7) or the largest (4/9)
    ("axes_not_larger", dict(mode="cubic", antialias=1, axes=[2, 3], keep_aspect_ratio_policy="not_larger"),
     dict(sizes=[5, 20]), 18),
    ("axes_not_smaller", dict(mode="linear", antialias=1, axes=[3, 2], keep_aspect_ratio_policy="not_smaller"),
     dict(sizes=[4, 3]), 18),
    ("axes_scales", dict(mode="linear", axes=[3]), dict(scales=[0.5]), 18),
    # opset 19's half_pixel_symmetric, where flooring makes the output smaller than scale * input
    ("half_pixel_symmetric", dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric"),
     dict(scales=[1, 1, 0.6, 1.7]), 19),
]


def model(attrs, given, opset):
    key = "sizes" if "sizes" in given else "scales"
    vals = np.array(given[key], np.int64 if key == "sizes" else np.float32)
    inputs = ["x", "", "", "sizes"] if key == "sizes" else ["x", "", "scales"]
    node = helper.make_node("Resize", inputs, ["y"], name="resize", **attrs)
    g = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(SHAPE))],
                          [numpy_helper.from_array(vals, key)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m, key, vals


def reference_f64(x, attrs, key, vals):
    """op_resize's interpolation in float64, the way its Resize op calls it."""
    mode, aa = attrs.get("mode", "nearest"), attrs.get("antialias", 0)
    a = float(attrs.get("cubic_coeff_a", -0.75))
    if mode == "cubic":
        f = op_resize._cubic_coeffs_antialias if aa else op_resize._cubic_coeffs
        coeffs = lambda r, s: f(r, s, A=a)  # noqa: E731
    else:
        coeffs = op_resize._linear_coeffs_antialias if aa else op_resize._linear_coeffs
    vals = [float(v) for v in vals] if key == "scales" else [int(v) for v in vals]
    return op_resize._interpolate_nd(
        x.astype(np.float64), coeffs, axes=attrs.get("axes"),
        scale_factors=vals if key == "scales" else None, output_size=vals if key == "sizes" else None,
        keep_aspect_ratio_policy=attrs.get("keep_aspect_ratio_policy", "stretch"),
        exclude_outside=attrs.get("exclude_outside", 0),
        coordinate_transformation_mode=attrs.get("coordinate_transformation_mode", "half_pixel"))


def main():
    x = np.random.default_rng(18).standard_normal(SHAPE).astype(np.float32)
    np.save(os.path.join(HERE, "table.npy"), x)
    for name, attrs, given, opset in CASES:
        m, key, vals = model(attrs, given, opset)
        want = reference_f64(x, attrs, key, vals)
        evaluated = ReferenceEvaluator(m).run(None, {"x": x})[0]
        runtime = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        for who, got in (("ReferenceEvaluator", evaluated), ("ONNX Runtime", runtime)):
            err = np.abs(got - want).max() if got.shape == want.shape else np.inf
            print(f"{name}: {list(want.shape)}, {who} within {err:.2g}")
            if not err <= 1e-5:
                raise SystemExit(f"{name}: {who} gives {list(got.shape)}, {err:.3g} from the float64 reference")
        onnx.save(m, os.path.join(HERE, name + ".onnx"))
        np.save(os.path.join(HERE, name + ".npy"), want)


if __name__ == "__main__":
    main()
