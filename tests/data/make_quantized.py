#!/usr/bin/env python3
"""Writes tests/data/quantized/: the timm seed fixture (tests/models/timm-ts17.onnx)
quantized as users quantize a model for the CPU, with ONNX Runtime's own tools:

  timm-qdq.onnx      onnxruntime.quantization.quantize_static, QDQ format: weights
                     int8 per output channel (DequantizeLinear of constants),
                     activations uint8 per tensor (QuantizeLinear -> DequantizeLinear
                     pairs), calibrated (MinMax) on 8 seeded standard-normal images
  timm-dynamic.onnx  onnxruntime.quantization.quantize_dynamic: weights int8 per
                     tensor; each activation quantized at run time
                     (DynamicQuantizeLinear -> MatMulInteger / ConvInteger, then
                     the scales multiplied in)

and, for each, ONNX Runtime's output with its graph optimizations off
(ORT_DISABLE_ALL: each node run as ONNX defines it) on the fixture's inputs
(tests/models/timm.b1.input.npy and .b3): <name>.b1.ort.npy, <name>.b3.ort.npy.
The tests compare the reference interpreter (and the CPU backend) with those.

    .venv/bin/python tests/data/make_quantized.py    # onnxruntime, onnx, numpy
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SOURCE = os.path.join(ROOT, "tests", "models", "timm-ts17.onnx")
OUT = os.path.join(HERE, "quantized")
FAMILY_INPUTS = os.path.join(ROOT, "tests", "models", "timm.b{}.input.npy")


class SeededImages(CalibrationDataReader):
    """8 standard-normal images of the fixture's shape, one at a time, from a fixed seed."""

    def __init__(self, name, shape, count=8, seed=2024):
        rng = np.random.default_rng(seed)
        self.items = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(count)])

    def get_next(self):
        return next(self.items, None)


def ort_outputs(path, batches):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return {b: sess.run(None, {name: np.load(FAMILY_INPUTS.format(b))})[0] for b in batches}


def main():
    os.makedirs(OUT, exist_ok=True)
    model = onnx.load(SOURCE)
    inp = model.graph.input[0]
    shape = [1] + [d.dim_value for d in inp.type.tensor_type.shape.dim[1:]]
    qdq = os.path.join(OUT, "timm-qdq.onnx")
    quantize_static(SOURCE, qdq, SeededImages(inp.name, shape), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax, extra_options={"CalibTensorRangeSymmetric": False},
                    calibration_providers=["CPUExecutionProvider"])
    dyn = os.path.join(OUT, "timm-dynamic.onnx")
    quantize_dynamic(SOURCE, dyn, weight_type=QuantType.QInt8, per_channel=False)
    for path in (qdq, dyn):
        m = onnx.load(path)
        onnx.checker.check_model(m)
        stem = os.path.splitext(path)[0]
        for b, y in ort_outputs(path, (1, 3)).items():
            np.save(f"{stem}.b{b}.ort.npy", y)
        ops = sorted({n.op_type for n in m.graph.node})
        print(f"{os.path.relpath(path, ROOT)}: {os.path.getsize(path)} bytes, opset "
              f"{[o.version for o in m.opset_import if o.domain in ('', 'ai.onnx')]}, ops {ops}")
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
