#!/usr/bin/env python3
"""Writes tests/data/quantized/: every seed family of tests/models (timm, torchvision, einops,
face_ln, face_bn; their TorchScript opset-17 exports <family>-ts17.onnx) quantized as users
quantize a model for the CPU, with ONNX Runtime's own tools:

  <family>-qdq.onnx      onnxruntime.quantization.quantize_static, QDQ format: weights int8 per
                         output channel (DequantizeLinear of constants), activations uint8 per
                         tensor (QuantizeLinear -> DequantizeLinear pairs), calibrated (MinMax)
                         on 8 seeded standard-normal images
  <family>-dynamic.onnx  onnxruntime.quantization.quantize_dynamic: weights int8 per tensor;
                         each activation quantized at run time (DynamicQuantizeLinear ->
                         MatMulInteger / ConvInteger, then the scales multiplied in)
  <family>-qop.onnx      quantize_static as for QDQ, in the QOperator format: integer ops that
                         requantize their results (QLinearMatMul, QLinearConv, and of ONNX
                         Runtime's domain com.microsoft QGemm, QLinearAdd, QLinearMul,
                         QLinearSoftmax, QLinearConcat), quantized tensors moved by Reshape,
                         Transpose, Split, ...; for QOP_FAMILIES only (the face families' would
                         add about 740 KB each to the repository)

and, for each export, ONNX Runtime's outputs on the family's inputs (tests/models/<family>.b1
.input.npy and .b3), one CPU thread:

  <name>.b<N>.ort.npy     graph optimizations off (ORT_DISABLE_ALL): each node run as ONNX
                          defines it, the reference of the exact (fp32) path
  <name>.b<N>.ortopt.npy  every graph optimization (ORT_ENABLE_ALL): ONNX Runtime's own int8
                          kernels (QDQ pairs fused into QLinear*/MatMulIntegerToFloat, dynamic
                          quantization into DynamicQuantizeMatMul), what its users get

README.md (written too) lists what each export quantized and left in fp32, its size, and ONNX
Runtime's errors against PyTorch's fp32 outputs (tests/models/<family>.b<N>.output.npy); an export
ONNX Runtime cannot make is listed there with the reason, and no file is written for it.

The .ortopt.npy outputs depend on the CPU's int8 instructions (ONNX Runtime's MLAS picks kernels
by CPUID: AVX512-VNNI, AVX-VNNI, AMX, or AVX2's 16-bit pair sums, which can saturate); README.md
records the CPU flags of the machine that wrote them.  The tests that use these files:
tests/test_quantized.c (timm's exports against .ort.npy), tests/test_qop.c (the QOperator exports)
and tests/quantized/test_int8.py (every export: vitc against PyTorch, .ort.npy and .ortopt.npy).

    .venv/bin/python tests/data/make_quantized.py [--only timm,face_bn]   # onnxruntime, onnx, numpy
"""
import argparse
import os
import platform
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = os.path.join(ROOT, "tests", "models")
OUT = os.path.join(HERE, "quantized")
FAMILIES = ["timm", "torchvision", "einops", "face_ln", "face_bn"]
KINDS = ["qdq", "dynamic", "qop"]
QOP_FAMILIES = ["timm", "torchvision", "einops"]
QLINEAR = ("QLinearMatMul", "QLinearConv", "QGemm")  # integer products of the QOperator format: B is input 3
BATCHES = (1, 3)
COMPUTE = ("MatMul", "Gemm", "Conv", "Einsum")


class SeededImages(CalibrationDataReader):
    """8 standard-normal images of the fixture's shape, one at a time, from a fixed seed."""

    def __init__(self, name, shape, count=8, seed=2024):
        rng = np.random.default_rng(seed)
        self.items = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(count)])

    def get_next(self):
        return next(self.items, None)


def session(path, level):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # the QDQ exports of the face ViTs leave Clip's bounds unused: ORT warns
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def ort_outputs(path, family, level):
    sess = session(path, level)
    name = sess.get_inputs()[0].name
    return {b: sess.run(None, {name: np.load(os.path.join(MODELS, f"{family}.b{b}.input.npy"))})[0] for b in BATCHES}


def quantize(kind, source, dest):
    if kind in ("qdq", "qop"):
        model = onnx.load(source)
        inp = model.graph.input[0]
        shape = [1] + [d.dim_value for d in inp.type.tensor_type.shape.dim[1:]]
        fmt = QuantFormat.QDQ if kind == "qdq" else QuantFormat.QOperator
        quantize_static(source, dest, SeededImages(inp.name, shape), quant_format=fmt, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax, extra_options={"CalibTensorRangeSymmetric": False},
                        calibration_providers=["CPUExecutionProvider"])
    else:
        quantize_dynamic(source, dest, weight_type=QuantType.QInt8, per_channel=False)


def coverage(model, kind):
    """What the export runs in int8: {"linear": (int8, all), "act": (int8, all)} over the matrix
    products (MatMul, Gemm, Conv, Einsum and their integer forms) with a constant operand
    ("linear": Linear layers and the patch embedding) and between two computed tensors ("act":
    attention), a node counted int8 when it is MatMulInteger/ConvInteger/QLinearMatMul/
    QLinearConv/QGemm or (QDQ) every float operand comes out of a DequantizeLinear; in the
    QOperator format a float product is a float product (it runs on dequantized values)."""
    g = model.graph
    consts = {t.name for t in g.initializer}
    producer = {}
    for n in g.node:
        if n.op_type == "Constant":
            consts.update(n.output)
        for o in n.output:
            producer[o] = n

    def is_const(v):  # a constant, or a DequantizeLinear/Transpose/Reshape of one
        while v not in consts:
            p = producer.get(v)
            if p is None or p.op_type not in ("DequantizeLinear", "Transpose", "Reshape", "Cast"):
                return False
            v = p.input[0]
        return True

    counts = {"linear": [0, 0], "act": [0, 0]}
    for n in g.node:
        if n.op_type in ("MatMulInteger", "ConvInteger"):
            key, int8 = ("linear" if is_const(n.input[1]) else "act"), True
        elif n.op_type in QLINEAR:
            key, int8 = ("linear" if is_const(n.input[3]) else "act"), True
        elif n.op_type in COMPUTE and kind == "qop":
            key, int8 = ("linear" if any(is_const(v) for v in n.input[:2]) else "act"), False
        elif n.op_type in COMPUTE:
            ops = list(n.input[:2])
            key = "linear" if any(is_const(v) for v in ops) else "act"
            int8 = all(producer.get(v) is not None and producer[v].op_type == "DequantizeLinear" for v in ops)
        else:
            continue
        counts[key][0] += int8
        counts[key][1] += 1
    return {k: tuple(v) for k, v in counts.items()}


def rel_err(y, ref):
    return float(np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max())


def cosine(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def make(family, kind):
    """Writes one export and its outputs; a README row, or (None, why) when ONNX Runtime cannot make it."""
    source = os.path.join(MODELS, f"{family}-ts17.onnx")
    name = f"{family}-{kind}"
    path = os.path.join(OUT, name + ".onnx")
    for old in [path] + [os.path.join(OUT, f"{name}.b{b}.{s}.npy") for b in BATCHES for s in ("ort", "ortopt")]:
        if os.path.exists(old):
            os.remove(old)
    try:
        quantize(kind, source, path)
        m = onnx.load(path)
        onnx.checker.check_model(m)
        plain = ort_outputs(path, family, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        opt = ort_outputs(path, family, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    except Exception as e:  # noqa: BLE001 (ONNX Runtime raises many kinds)
        if os.path.exists(path):
            os.remove(path)
        why = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        print(f"{name}: ONNX Runtime cannot make it: {why}")
        return name, None, why
    stem = os.path.join(OUT, name)
    ops = sorted({n.domain + "." * bool(n.domain) + n.op_type for n in m.graph.node})  # com.microsoft.QGemm
    row = {"bytes": os.path.getsize(path), "cover": coverage(m, kind), "ops": ops, "err": {}, "cos": {}}
    for b in BATCHES:
        np.save(f"{stem}.b{b}.ort.npy", plain[b])
        np.save(f"{stem}.b{b}.ortopt.npy", opt[b])
        ref = np.load(os.path.join(MODELS, f"{family}.b{b}.output.npy"))
        row["err"][b] = (rel_err(plain[b], ref), rel_err(opt[b], ref))
        row["cos"][b] = cosine(opt[b], plain[b])
    print(f"{os.path.relpath(path, ROOT)}: {row['bytes']} bytes, Linear/Conv int8 {row['cover']['linear'][0]} of "
          f"{row['cover']['linear'][1]}, attention int8 {row['cover']['act'][0]} of {row['cover']['act'][1]}; "
          "ORT vs PyTorch (unoptimized, optimized): " +
          ", ".join(f"b{b} {e[0]:.2e}, {e[1]:.2e}" for b, e in row["err"].items()))
    return name, row, None


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [x for x in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8") if x in have]
    except OSError:
        pass
    return []


def write_readme(results):
    w = []
    w.append("# Quantized seed fixtures\n")
    w.append("Written by `tests/data/make_quantized.py` (its docstring says how); do not edit by hand.\n")
    w.append(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}; the `.ortopt.npy` "
             f"outputs on a CPU with {', '.join(cpu_flags()) or 'unknown flags'} ({platform.machine()}).\n")
    w.append("Per export: its size; the matrix products it runs in int8 (Linear layers and the patch "
             "embedding, i.e. a constant operand; attention, two computed operands), out of all; ONNX Runtime's "
             "error against PyTorch's fp32 output (max|out - ref| / max|ref|) with its graph optimizations off "
             "(`.ort.npy`) and with all of them (`.ortopt.npy`); and the cosine between those two outputs.\n")
    w.append("| export | bytes | Linear/Conv int8 | attention int8 | err b1 off / all | err b3 off / all | "
             "cos(all, off) b1 / b3 |")
    w.append("|---|---|---|---|---|---|---|")
    missing = []
    for name, row, why in results:
        if row is None:
            missing.append(f"- `{name}`: not made: {why}")
            continue
        li, act = row["cover"]["linear"], row["cover"]["act"]
        w.append(f"| `{name}.onnx` | {row['bytes']} | {li[0]} of {li[1]} | {act[0]} of {act[1]} | "
                 f"{row['err'][1][0]:.2e} / {row['err'][1][1]:.2e} | {row['err'][3][0]:.2e} / {row['err'][3][1]:.2e} | "
                 f"{row['cos'][1]:.6f} / {row['cos'][3]:.6f} |")
    w.append("")
    if missing:
        w.append("Exports ONNX Runtime could not make:\n")
        w += missing
    else:
        w.append("ONNX Runtime made every export: static QDQ and dynamic of every family, QOperator of "
                 + ", ".join(QOP_FAMILIES) + ".")
    w.append("")
    w.append("What the quantizers leave in fp32: `quantize_dynamic` quantizes MatMul with a constant weight "
             "(MatMulInteger) and Conv (ConvInteger) only, so attention's MatMuls, and Einsum everywhere (the "
             "einops family's attention) stay fp32. Gemm is quantized as MatMulInteger + Add. `quantize_static` "
             "(QDQ) puts QuantizeLinear -> DequantizeLinear pairs on both operands of MatMul, so attention's "
             "products are int8 in the timm, torchvision and face exports. It has no quantizer for Einsum: an "
             "Einsum operand carries a pair where its producer's output is quantized, which holds for both "
             "operands of the einops export's q.k^T but not for the probabilities of its second product (a Div "
             "after the Softmax, left fp32), hence 2 of 4. In the face exports the QDQ "
             "quantizer folds ReLU6 (Clip) into the quantization of its input, leaving Clip's two bounds as unused "
             "initializers (ONNX Runtime warns when it loads them).")
    w.append("")
    w.append("The QOperator exports (`-qop`) hold the QDQ exports' quantization as integer ops that requantize "
             "their results: QLinearMatMul (the Linear layers and attention's two products), QLinearConv (the "
             "patch embedding), `com.microsoft.QGemm` (the head's Gemm), `com.microsoft.QLinearAdd` and "
             "`QLinearMul` (biases, residuals, GELU's arithmetic, the attention scale), `QLinearSoftmax`, "
             "`QLinearConcat` (the class token); quantized tensors move through Reshape, Transpose, Split and "
             "Squeeze as they are. What has no such op (LayerNormalization, Erf, Div, Einsum) runs in fp32 "
             "between a DequantizeLinear and a QuantizeLinear, hence 0 of 4 for the einops export's attention "
             "(Einsum). ONNX Runtime's graph optimizations leave this format as it is: its outputs with and "
             "without them are the same. The face families' QOperator exports (ONNX Runtime makes them) are "
             "not written, to keep the repository small (about 740 KB each).")
    w.append("")
    w.append("ops per export:\n")
    for name, row, _ in results:
        if row is not None:
            w.append(f"- `{name}.onnx`: {' '.join(row['ops'])}")
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("\n".join(w) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated families (default: all; README.md lists only these then)")
    args = ap.parse_args()
    families = args.only.split(",") if args.only else FAMILIES
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise SystemExit(f"unknown families {unknown}; known: {FAMILIES}")
    ort.set_default_logger_severity(3)
    os.makedirs(OUT, exist_ok=True)
    results = [make(f, k) for f in families for k in KINDS if k != "qop" or f in QOP_FAMILIES]
    write_readme(results)
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
