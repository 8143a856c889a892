#!/usr/bin/env python3
"""test_qop_ops: ONNX Runtime's QOperator ops on hand-made models, against ONNX Runtime itself.

Each case is a small model written here with onnx.helper: f32 inputs quantized by QuantizeLinear,
one or more QOperator ops (QLinearAdd, QLinearMul, QLinearSoftmax, QLinearConcat, QGemm of the
domain com.microsoft; QLinearMatMul, QLinearConv of ONNX), their outputs dequantized (or QGemm's
f32 output as it is).  The inputs are chosen so that the quantized operands cover every pair of
8-bit values where the op is element-wise (256 x 256 of them), with scales that make ties and
near-ties common (0.1, 0.3, 0.7, 1/255, ...), u8 and i8, each way ONNX Runtime broadcasts.

  1. `vitc run MODEL.onnx` (the reference interpreter) must give ONNX Runtime's output with its
     graph optimizations off (ORT_DISABLE_ALL), to the bit: the interpreter follows its kernels'
     rounding (ir/interp_qop.c).  QLinearMatMul and QLinearConv are ONNX's own ops, which the
     interpreter computes as ONNX's reference does (the integer result times the multiplier in
     double, where ONNX Runtime multiplies in f32): those may be one step away at a near-tie, and
     the count is printed.
  2. The model compiled for the CPU (`vitc compile`: lower-quant rewrites each op as
     DequantizeLinear -> the f32 op -> QuantizeLinear, passes/qop.c) must be within one
     quantization step of ONNX Runtime on every element (QGemm's f32 outputs: within 1e-5 of the
     largest); the count of elements one step away is printed: the rewrite rounds the f32 result
     of the float op where ONNX Runtime rounds the integer result scaled once, so it is not
     bit-exact.
  3. An op of com.microsoft other than those, and QLinearAdd in the default domain, are refused
     (exit 2), the message naming what vitc takes of that domain.

ONNX Runtime's u8 x s8 products on x86 without VNNI (AVX2, AVX-512 without VNNI) add each pair of
products into 16 bits with saturation (VPMADDUBSW), so with full-range weights its QGemm,
QLinearMatMul and QLinearConv are not the ops' exact result there (vitc's are).  A probe says whether
this ONNX Runtime does that (`ort_saturates`); where it does, the u8-activation cases take int8
weights in -64..64, whose pair sums fit 16 bits (255 * 128 = 32640), and the line says so.

Prints one line per case and exits 1 if one fails.  Run by ctest (test_qop_ops) with VITC_BIN and
VITC_SOURCE_DIR set; needs numpy, onnx and onnxruntime (else exits 77, saying so).
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pyrefs import require  # noqa: E402

np, onnx, ort = require("numpy", "onnx", "onnxruntime")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper  # noqa: E402

VITC = os.environ.get("VITC_BIN", "vitc")
f32 = np.float32
RANGE = {np.uint8: (0, 255), np.int8: (-128, 127)}
W_MAX = 127  # the int8 weights' magnitude at most (64 where ONNX Runtime saturates: main)
ONNX_TYPE = {np.uint8: TP.UINT8, np.int8: TP.INT8}


class Model:
    """A graph under construction: f32 inputs (first dimension the batch), initializers, nodes."""

    def __init__(self, name, compile_too=True):
        self.name, self.nodes, self.inputs, self.inits, self.outputs, self.feeds = name, [], [], [], [], {}
        self.compile_too = compile_too  # False: the interpreter alone (the batch is not the first dimension)
        self.onnx_op = False  # an ONNX op (QLinearMatMul, QLinearConv): the interpreter computes it as ONNX does
        self.steps = {}  # output name -> its quantization step (0: an f32 output)

    def const(self, name, value, dtype=None):
        a = np.asarray(value, dtype=dtype)
        self.inits.append(onnx.numpy_helper.from_array(a, name))
        return name

    def quantized_input(self, name, q, scale, zp):
        """An f32 input whose QuantizeLinear gives exactly the integers q (first axis: the batch)."""
        dt = q.dtype.type
        x = (q.astype(np.int32) - int(zp)).astype(f32) * f32(scale)
        self.feeds[name] = x.astype(f32)
        dims = (["batch"] if self.compile_too else [q.shape[0]]) + list(q.shape[1:])
        self.inputs.append(helper.make_tensor_value_info(name, TP.FLOAT, dims))
        s, z = self.const(name + "_scale", f32(scale)), self.const(name + "_zp", np.array(zp, dt))
        self.nodes.append(helper.make_node("QuantizeLinear", [name, s, z], [name + "_q"]))
        return name + "_q", s, z

    def qparams(self, name, scale, zp, dt):
        return self.const(name + "_scale", f32(scale)), self.const(name + "_zp", np.array(zp, dt))

    def op(self, op_type, inputs, output, microsoft=True, **attrs):
        self.nodes.append(helper.make_node(op_type, inputs, [output], domain="com.microsoft" if microsoft else "",
                                           name=output, **attrs))
        return output

    def output_dq(self, q, s, z, step):
        self.nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [q + "_out"]))
        self.outputs.append(helper.make_tensor_value_info(q + "_out", TP.FLOAT, None))
        self.steps[q + "_out"] = float(step)

    def output_f32(self, y):
        self.outputs.append(helper.make_tensor_value_info(y, TP.FLOAT, None))
        self.steps[y] = 0.0

    def build(self):
        g = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
        m.ir_version = 8
        return m


def grid_pairs(dt):
    """Every pair of values of type dt: a [256, 256] (rows) and b [256, 256] (columns)."""
    lo, hi = RANGE[dt]
    v = np.arange(lo, hi + 1).astype(dt)
    return np.repeat(v[:, None], 256, 1), np.repeat(v[None, :], 256, 0)


def binary_case(dt, sa, sb, sc, za, zb, zc):
    """QLinearAdd and QLinearMul of every pair, with a scalar operand either side and a column [B, 1]."""
    name = "binary_%s_%g_%g_%g" % (dt.__name__, sa, sb, sc)
    m = Model(name)
    qa, qb = grid_pairs(dt)
    a, a_s, a_z = m.quantized_input("a", qa, sa, za)
    b, b_s, b_z = m.quantized_input("b", qb, sb, zb)
    col, c_s, c_z = m.quantized_input("col", qa[:, :1], sa, za)  # [B, 1]: one value per row
    lo, hi = RANGE[dt]
    scalar = m.const("scalar_q", np.array((lo + hi) // 3, dt))
    y_s, y_z = m.qparams("y", sc, zc, dt)
    for op in ("QLinearAdd", "QLinearMul"):
        short = op[7:].lower()
        for label, (x0, s0, z0), (x1, s1, z1) in (
                ("", (a, a_s, a_z), (b, b_s, b_z)),
                ("_scalar_b", (a, a_s, a_z), (scalar, b_s, b_z)),
                ("_scalar_a", (scalar, a_s, a_z), (b, b_s, b_z)),
                ("_column_a", (col, c_s, c_z), (b, b_s, b_z)),
                ("_column_b", (b, b_s, b_z), (col, c_s, c_z))):
            y = m.op(op, [x0, s0, z0, x1, s1, z1, y_s, y_z], short + label)
            m.output_dq(y, y_s, y_z, sc)
    return m


def softmax_case(dt, shape, axis, opset, xs, ys, seed):
    m = Model("softmax_%s_axis%s_opset%d" % (dt.__name__, axis, opset))
    lo, hi = RANGE[dt]
    q = np.random.default_rng(seed).integers(lo, hi + 1, shape).astype(dt)
    x, s, z = m.quantized_input("x", q, xs, lo + 3)
    y_s, y_z = m.qparams("y", ys, lo, dt)
    attrs = {"opset": opset} if axis is None else {"opset": opset, "axis": axis}
    m.output_dq(m.op("QLinearSoftmax", [x, s, z, y_s, y_z], "softmax", **attrs), y_s, y_z, ys)
    return m


def concat_case(dt, same):
    m = Model("concat_%s_%s" % (dt.__name__, "copy" if same else "requantized"))
    lo, hi = RANGE[dt]
    rng = np.random.default_rng(11)
    ys, yz = 0.03, lo + 7
    x1, s1, z1 = m.quantized_input("x1", rng.integers(lo, hi + 1, [3, 1, 256]).astype(dt), 0.021, lo + 200)
    q2 = np.repeat(np.arange(lo, hi + 1).astype(dt)[None, None, :], 3, 0).repeat(16, 1)
    x2, s2, z2 = m.quantized_input("x2", q2, ys if same else 0.047, yz if same else lo + 11)
    y_s, y_z = m.qparams("y", ys, yz, dt)
    y = m.op("QLinearConcat", [y_s, y_z, x1, s1, z1, x2, s2, z2], "concat", axis=1)
    m.output_dq(y, y_s, y_z, ys)
    return m


def qgemm_case(adt, trans_b, per_column, bias_shape, y, alpha=1.0, seed=5, trans_a=0):
    """QGemm of A [B, 64] (transA: [64, 5], the interpreter alone) by a constant B: y 'q' quantized, 'f32'
    (no y_scale), 'scaled' (y_scale alone)."""
    K, N = 64, 24
    rng = np.random.default_rng(seed)
    bias = "nobias" if bias_shape is None else "bias" + ("x".join(map(str, bias_shape)) or "scalar")
    m = Model("qgemm_%s_t%d%d_%s_%s_%s" % (adt.__name__, trans_a, trans_b, "col" if per_column else "tensor", bias, y),
              compile_too=not trans_a)
    lo, hi = RANGE[adt]
    a, a_s, a_z = m.quantized_input("a", rng.integers(lo, hi + 1, [K, 5] if trans_a else [5, K]).astype(adt), 0.02,
                                    lo + 3)
    wmax = W_MAX if adt is np.uint8 else 127
    w = rng.integers(-wmax, wmax + 1, [N, K] if trans_b else [K, N]).astype(np.int8)
    ws = rng.uniform(0.001, 0.01, N).astype(f32) if per_column else f32(0.004)
    inputs = [a, a_s, a_z, m.const("w", w), m.const("w_scale", ws), m.const("w_zp", np.zeros(np.shape(ws), np.int8))]
    c = None if bias_shape is None else rng.integers(-5000, 5000, bias_shape).astype(np.int32)
    inputs.append("" if c is None else m.const("c", c))
    if y == "q":
        y_s, y_z = m.qparams("y", 0.05, (lo + hi + 1) // 2, adt)
        out = m.op("QGemm", inputs + [y_s, y_z], "qgemm", alpha=alpha, transA=trans_a, transB=trans_b)
        m.output_dq(out, y_s, y_z, 0.05)
    else:
        if y == "scaled":
            inputs.append(m.const("y_scale", f32(0.05)))
        while inputs[-1] == "":
            inputs.pop()
        m.output_f32(m.op("QGemm", inputs, "qgemm", alpha=alpha, transA=trans_a, transB=trans_b))
    return m


def qlinear_matmul_case():
    """QLinearMatMul by a constant int8 weight per column, and of two activations (attention's)."""
    m = Model("qlinearmatmul")
    m.onnx_op = True
    rng = np.random.default_rng(3)
    a, a_s, a_z = m.quantized_input("a", rng.integers(0, 256, [16, 49, 64]).astype(np.uint8), 0.02, 128)
    b, b_s, b_z = m.quantized_input("b", rng.integers(0, 256, [16, 64, 49]).astype(np.uint8), 0.03, 100)
    w = m.const("w", rng.integers(-W_MAX, W_MAX + 1, [64, 64]).astype(np.int8))
    ws, wz = m.const("w_scale", rng.uniform(0.002, 0.01, 64).astype(f32)), m.const("w_zp", np.zeros(64, np.int8))
    y_s, y_z = m.qparams("y", 0.1, 120, np.uint8)
    m.output_dq(m.op("QLinearMatMul", [a, a_s, a_z, w, ws, wz, y_s, y_z], "linear", microsoft=False), y_s, y_z, 0.1)
    p_s, p_z = m.qparams("p", 0.7, 128, np.uint8)
    m.output_dq(m.op("QLinearMatMul", [a, a_s, a_z, b, b_s, b_z, p_s, p_z], "scores", microsoft=False), p_s, p_z, 0.7)
    return m


def qlinear_conv_case():
    """A patch embedding: QLinearConv with kernel = stride, weights per output channel, an i32 bias."""
    m = Model("qlinearconv")
    m.onnx_op = True
    rng = np.random.default_rng(4)
    x, x_s, x_z = m.quantized_input("x", rng.integers(0, 256, [4, 3, 32, 32]).astype(np.uint8), 0.02, 120)
    w = m.const("w", rng.integers(-W_MAX, W_MAX + 1, [16, 3, 4, 4]).astype(np.int8))
    ws, wz = m.const("w_scale", rng.uniform(0.002, 0.01, 16).astype(f32)), m.const("w_zp", np.zeros(16, np.int8))
    bias = m.const("bias", rng.integers(-3000, 3000, 16).astype(np.int32))
    y_s, y_z = m.qparams("y", 0.06, 128, np.uint8)
    y = m.op("QLinearConv", [x, x_s, x_z, w, ws, wz, y_s, y_z, bias], "conv", microsoft=False, kernel_shape=[4, 4],
             strides=[4, 4])
    m.output_dq(y, y_s, y_z, 0.06)
    return m


def cases():
    out = []
    for dt in (np.uint8, np.int8):
        lo, hi = RANGE[dt]
        for sa, sb, sc in ((0.1, 0.3, 0.7), (1 / 255, 3 / 255, 0.0123), (0.02, 0.05, 0.1), (0.0173, 0.0091, 0.0245),
                           (0.0371, 0.113, 0.0527), (1.0, 0.001, 0.002)):
            out.append(binary_case(dt, sa, sb, sc, lo + 13, lo + 200, lo + 128))
        out.append(softmax_case(dt, [3, 2, 17, 17], -1, 13, 0.05, 1 / 255, 1))
        out.append(softmax_case(dt, [3, 2, 17, 17], 2, 17, 0.11, 0.0031, 2))
        out.append(softmax_case(dt, [3, 2, 5, 7], 1, 11, 0.07, 1 / 250, 3))
        out.append(softmax_case(dt, [3, 300], None, 11, 0.2, 0.9 / 255, 4))
        out.append(concat_case(dt, True))
        out.append(concat_case(dt, False))
    out.append(qgemm_case(np.uint8, 1, True, [24], "q"))
    out.append(qgemm_case(np.uint8, 0, False, None, "f32", alpha=0.5))
    out.append(qgemm_case(np.uint8, 1, True, [1, 24], "scaled", alpha=1.5))
    out.append(qgemm_case(np.int8, 1, True, [], "q"))
    out.append(qgemm_case(np.int8, 0, True, [24], "f32"))
    out.append(qgemm_case(np.uint8, 0, True, [5, 1], "q", trans_a=1))
    out.append(qgemm_case(np.uint8, 1, False, [5, 24], "f32", alpha=2.0, trans_a=1))
    out.append(qlinear_matmul_case())
    out.append(qlinear_conv_case())
    return out


def ort_run(path, feeds):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def vitc_run(target, feeds, d, what):
    args = [VITC, "run", target, "--output-dir", os.path.join(d, what)]
    for k, v in feeds.items():
        np.save(os.path.join(d, k + ".npy"), v)
        args += ["--input", "%s=%s" % (k, os.path.join(d, k + ".npy"))]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return None, "vitc run %s exited %d: %s" % (what, r.returncode, r.stderr.strip()[-2000:])
    return {k[:-4]: np.load(os.path.join(d, what, k)) for k in os.listdir(os.path.join(d, what))}, None


def check(m, d):
    """The failures of one case, and its line."""
    path = os.path.join(d, m.name + ".onnx")
    onnx.save(m.build(), path)
    ref = ort_run(path, m.feeds)
    fails, exact_bad, steps_off, total, worst = [], 0, 0, 0, 0.0
    interp, err = vitc_run(path, m.feeds, d, "interpreter")
    if err:
        return [m.name + ": " + err], m.name + ": FAIL"
    for name, y in ref.items():
        got = interp.get(name)
        bad = y.size if got is None or got.shape != y.shape else int(np.sum(got != y))
        exact_bad += bad
        step = m.steps[name]
        near = got is not None and got.shape == y.shape and np.abs(got - y.astype(np.float64)).max() <= 1.5 * step
        if bad and m.onnx_op and near:
            continue  # ONNX's requantization in double against ONNX Runtime's in f32: a near-tie can go either way
        if bad:
            i = 0 if got is None or got.shape != y.shape else int(np.argmax(got != y))
            fails.append("%s: output %s: the interpreter differs from ONNX Runtime on %d of %d elements (first at %d: "
                         "%r vs %r)" % (m.name, name, bad, y.size, i, None if got is None else got.ravel()[i],
                                        y.ravel()[i]))
    if not m.compile_too:
        return fails, "%-38s %8d elements  interpreter: %s  (not compiled)" % (
            m.name, sum(y.size for y in ref.values()), "exact" if not exact_bad else "%d differ" % exact_bad)
    batch = next(iter(m.feeds.values())).shape[0]
    so = os.path.join(d, m.name + ".so")
    r = subprocess.run([VITC, "compile", path, "-o", so, "--batch", str(batch), "--quiet"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        fails.append("%s: vitc compile exited %d: %s" % (m.name, r.returncode, r.stderr.strip()[-2000:]))
        return fails, "%-38s interpreter: %s  compiled: FAIL" % (m.name, "exact" if not exact_bad else "FAIL")
    compiled, err = vitc_run(so, m.feeds, d, "compiled")
    if err:
        return fails + [m.name + ": " + err], m.name + ": FAIL"
    for name, y in ref.items():
        comp, step = compiled.get(name), m.steps[name]
        if comp is None or comp.shape != y.shape:
            fails.append("%s: output %s of the compiled model missing or of another shape" % (m.name, name))
            continue
        total += y.size
        if step:  # quantized: how many steps away
            k = np.abs(comp.astype(np.float64) - y) / step
            steps_off += int(np.sum(k > 0.5))
            worst = max(worst, float(k.max()))
            if k.max() > 1.5:
                fails.append("%s: output %s compiled is %.0f steps from ONNX Runtime (bar 1)" % (m.name, name, k.max()))
        else:
            e = float(np.abs(comp.astype(np.float64) - y).max() / max(np.abs(y).max(), 1e-30))
            worst = max(worst, e)
            if e > 1e-5:
                fails.append("%s: output %s compiled: max-rel %.3g from ONNX Runtime (bar 1e-5)" % (m.name, name, e))
    interp_text = "exact" if not exact_bad else "%d one step away (ONNX's rounding)" % exact_bad
    line = "%-38s %8d elements  interpreter: %s  compiled: %d one step away (%.2g%%), worst %.3g" % (
        m.name, total, interp_text, steps_off, 100.0 * steps_off / total, worst)
    return fails, line


def ort_saturates(d):
    """Whether ONNX Runtime's QGemm of u8 by s8 saturates pairs of products to 16 bits: a row of 64 times
    255 by a column of 127 is 2072640 exactly, 32 * 32767 so."""
    m = Model("probe")
    a, a_s, a_z = m.quantized_input("a", np.full([1, 64], 255, np.uint8), 1.0, 0)
    w = [m.const("w", np.full([64, 1], 127, np.int8)), m.const("w_scale", f32(1.0)), m.const("w_zp", np.int8(0))]
    m.output_f32(m.op("QGemm", [a, a_s, a_z] + w, "qgemm"))
    path = os.path.join(d, "probe.onnx")
    onnx.save(m.build(), path)
    y = float(next(iter(ort_run(path, m.feeds).values())).ravel()[0])
    return y != 64 * 255 * 127


def check_refusals(d):
    """Another op of com.microsoft, and QLinearAdd in the default domain, are refused, saying what is taken."""
    x = helper.make_tensor_value_info("x", TP.FLOAT, ["batch", 4])
    nodes = [helper.make_node("FusedMatMul", ["x", "x"], ["y"], domain="com.microsoft", name="fused"),
             helper.make_node("QLinearAdd", ["x", "x", "x", "x", "x", "x", "x"], ["z"], name="default_domain")]
    g = helper.make_graph(nodes, "refused", [x], [helper.make_tensor_value_info(n, TP.FLOAT, None) for n in "yz"])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    path = os.path.join(d, "refused.onnx")
    onnx.save(m, path)
    r = subprocess.run([VITC, "compile", path, "-o", os.path.join(d, "refused.so")], capture_output=True, text=True)
    want = ["FusedMatMul (domain 'com.microsoft') x1 (node 'fused')", "QLinearAdd x1 (node 'default_domain')",
            "vitc imports only the ops of its QOperator format (QGemm, QLinearAdd, QLinearConcat, QLinearMul and "
            "QLinearSoftmax)"]
    missing = [w for w in want if w not in r.stderr]
    print("%-38s exit %d%s" % ("refusals", r.returncode, "" if not missing else ", missing: %s" % missing))
    if r.returncode != 2 or missing:
        return ["refusals: exit %d (want 2), the message lacks %s:\n%s" % (r.returncode, missing, r.stderr)]
    return []


def main():
    fails = []
    global W_MAX
    with tempfile.TemporaryDirectory(prefix="vitc-qop-") as d:
        if ort_saturates(d):
            W_MAX = 64
            print("ONNX Runtime adds u8 x s8 products in saturated 16-bit pairs on this CPU (no VNNI): "
                  "the u8 cases' int8 weights in -64..64")
        for m in cases():
            f, line = check(m, d)
            print(line, flush=True)
            fails += f
        fails += check_refusals(d)
    for f in fails:
        print("FAIL " + f)
    print("%s" % ("all cases pass" if not fails else "%d failures" % len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
