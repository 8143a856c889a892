#!/usr/bin/env python3
"""Writes the small models of tests/data/fusion/: patterns the fusion passes
must recognise beyond the fixtures, and near misses they must leave alone.

Each near miss differs from a fusible pattern in one condition, and
`vitc dump FILE --explain-fusion` must name that condition.  EXPECT.tsv
lists, per file, op counts the optimised graph must have and a fragment of
the explanation ("-" where every candidate fuses).  Every model is checked
with ONNX Runtime here, so each is a valid model computing what it says.

    .venv/bin/python tests/data/make_fusion_cases.py   # needs onnx, onnxruntime, numpy
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fusion")
N, C, H, D = 5, 8, 2, 4  # tokens, width, heads, head size
EXPECT = []
rng = np.random.default_rng(20240611)


class Graph:
    """A tiny builder: every op returns its output name."""

    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def const(self, value, name=None):
        self.count += 1
        name = name or "c%d" % self.count
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32
                                                             if np.asarray(value).dtype.kind == "f" else np.int64),
                                                  name))
        return name

    def op(self, op_type, inputs, name, **attrs):
        out = name + "_out"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def linear(self, x, k, n, name):
        w = self.const(rng.standard_normal((k, n)) / np.sqrt(k), name + ".weight")
        b = self.const(0.1 * rng.standard_normal(n), name + ".bias")
        return self.op("Add", [self.op("MatMul", [x, w], name + "/MatMul"), b], name + "/Add")

    def model(self, out, in_shape, out_shape, opset=17):
        g = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def batch_mask(g, x, keep):
    """What HF models through the dynamo exporter add to the logits: a boolean
    [N, N] mask expanded to [B, 1, N, N] from x's batch, then Where(mask, 0,
    -3.4e38).  keep: the mask's values (all True masks nothing)."""
    b = g.op("Gather", [g.op("Shape", [x], "mask/Shape"), g.const(np.int64(0))], "mask/Gather", axis=0)
    b = g.op("Unsqueeze", [b, g.const(np.array([0]))], "mask/Unsqueeze")
    shape = g.op("Concat", [b, g.const(np.array([1, N, N]))], "mask/Concat", axis=0)
    g.count += 1
    name = "mask%d" % g.count
    g.inits.append(numpy_helper.from_array(np.asarray(keep, dtype=bool).reshape(1, 1, N, N), name))
    m = g.op("Expand", [name, shape], "mask/Expand")
    return g.op("Where", [m, g.const(np.float32(0)), g.const(np.float32(-3.4e38))], "mask/Where")


def rotate(g, t, name, *, pairing="halves", prefix=0, wrong=False, per_head=False):
    """A rotary position embedding on t [B, H, N, D] as timm and HF write it:
    tokens from `prefix` on become t * cos + rot(t) * sin (rot: rotate-half
    cat(-x2, x1), or interleaved stack(-x[1::2], x[::2]) reshaped), joined
    to the first tokens again.  wrong: rot is cat(-x1, x2), which pairs
    nothing (a near miss); per_head: frequencies per head (tables [H, n, D])."""
    n = N - prefix
    ang = np.arange(n)[:, None] * (100.0 ** -(np.arange(D // 2) / (D // 2)))[None, :]
    ang = np.repeat(ang, 2, axis=1) if pairing == "interleaved" else np.concatenate([ang, ang], axis=1)
    if per_head:
        ang = ang[None] * (1.0 + np.arange(H))[:, None, None]
    body = t if not prefix else g.op("Slice", [t, g.const([prefix]), g.const([N]), g.const([2])], name + "/Slice_body")

    def sl(a, b, step=1):
        return g.op("Slice", [body, g.const([a]), g.const([b]), g.const([3]), g.const([step])], name + "/Slice_%d_%d" % (a, step))

    if pairing == "halves":
        x1, x2 = sl(0, D // 2), sl(D // 2, D)
        parts = [g.op("Neg", [x1], name + "/Neg"), x2] if wrong else [g.op("Neg", [x2], name + "/Neg"), x1]
        rot = g.op("Concat", parts, name + "/Concat_rot", axis=-1)
    else:
        xe, xo = sl(0, D, 2), sl(1, D, 2)
        ax = g.const([-1])
        st = g.op("Concat", [g.op("Unsqueeze", [g.op("Neg", [xo], name + "/Neg"), ax], name + "/Unsqueeze_0"),
                             g.op("Unsqueeze", [xe, ax], name + "/Unsqueeze_1")], name + "/stack", axis=-1)
        rot = g.op("Reshape", [st, g.const([-1, H, n, D])], name + "/Reshape")
    y = g.op("Add", [g.op("Mul", [body, g.const(np.cos(ang))], name + "/Mul_cos"),
                     g.op("Mul", [rot, g.const(np.sin(ang))], name + "/Mul_sin")], name + "/Add")
    if not prefix:
        return y
    pre = g.op("Slice", [t, g.const([0]), g.const([prefix]), g.const([2])], name + "/Slice_prefix")
    return g.op("Concat", [pre, y], name + "/Concat", axis=2)


def attention(g, x, *, softmax_axis=-1, scale_on="q", separate=False, q_extra_reader=False, mask=None,
              bias=None, nan_guard=False, rope=None, rope_k=True):
    """timm's attention on x [B, N, C]: packed qkv (or three Linears), q * D^-0.5
    (scale_on "v": on v; "logits": after the mask or bias is added),
    softmax(q k^T) v, heads merged, output [B, N, C].  mask: the values of a
    boolean mask added to the logits (batch_mask); bias: a constant added to
    the logits (a relative position table); nan_guard: the softmax's NaNs set
    to 0 (Where(IsNaN(p), 0, p)), as torch's sdpa export writes; rope: the
    keyword arguments of rotate() for q (and k unless rope_k is False)."""
    if separate:
        heads = []
        for part in "qkv":
            p = g.linear(x, C, C, "attn/" + part)
            r = g.op("Reshape", [p, g.const([-1, N, H, D])], "attn/%s/Reshape" % part)
            heads.append(g.op("Transpose", [r], "attn/%s/Transpose" % part, perm=[0, 2, 1, 3]))
        q, k, v = heads
    else:
        qkv = g.linear(x, C, 3 * C, "attn/qkv")
        r = g.op("Reshape", [qkv, g.const([-1, N, 3, H, D])], "attn/Reshape")
        t = g.op("Transpose", [r], "attn/Transpose", perm=[2, 0, 3, 1, 4])
        q, k, v = (g.op("Gather", [t, g.const(np.int64(i))], "attn/Gather_%d" % i, axis=0) for i in range(3))
    if rope is not None:
        q = rotate(g, q, "attn/rope_q", **rope)
        if rope_k:
            k = rotate(g, k, "attn/rope_k", **rope)
    scale = g.const(np.float32(D ** -0.5))
    if scale_on == "q":
        q = g.op("Mul", [q, scale], "attn/Mul")
    elif scale_on == "v":
        v = g.op("Mul", [v, scale], "attn/Mul")
    kt = g.op("Transpose", [k], "attn/Transpose_1", perm=[0, 1, 3, 2])
    s = g.op("MatMul", [q, kt], "attn/MatMul")
    if mask is not None:
        s = g.op("Add", [s, batch_mask(g, x, mask)], "attn/AddMask")
    if bias is not None:
        s = g.op("Add", [g.const(np.asarray(bias, dtype=np.float32)), s], "attn/AddBias")
    if scale_on == "logits":
        s = g.op("Mul", [s, scale], "attn/Mul")
    p = g.op("Softmax", [s], "attn/Softmax", axis=softmax_axis)
    if nan_guard:
        p = g.op("Where", [g.op("IsNaN", [p], "attn/IsNaN"), g.const(np.float32(0)), p], "attn/Where")
    o = g.op("MatMul", [p, v], "attn/MatMul_1")
    o = g.op("Transpose", [o], "attn/Transpose_2", perm=[0, 2, 1, 3])
    o = g.op("Reshape", [o, g.const([-1, N, C])], "attn/Reshape_1")
    o = g.linear(o, C, C, "attn/proj")
    if q_extra_reader:
        o = g.op("Add", [o, "attn/q/Add_out"], "attn/AddQ")
    return o


def window_attention(g, x, *, shifted=True, scale_after=False):
    """Swin's window attention on x [B, 16, C] (a 4x4 grid): windows of 2x2 tokens (4 per image,
    partitioned by Reshape/Transpose into [4B, 4, C]), a relative position bias [H, 4, 4] added to
    the scores and, shifted, a mask [4, 4, 4] added to their [B, 4, H, 4, 4] view; windows merged
    back to [B, 16, C].  scale_after: the scores scaled after the bias (a near miss)."""
    n, w = 4, 4  # tokens per window, windows per image
    t = g.op("Reshape", [x, g.const([-1, 2, 2, 2, 2, C])], "win/Reshape")
    t = g.op("Transpose", [t], "win/Transpose", perm=[0, 1, 3, 2, 4, 5])
    t = g.op("Reshape", [t, g.const([-1, n, C])], "win/Reshape_1")
    qkv = g.linear(t, C, 3 * C, "attn/qkv")
    r = g.op("Reshape", [qkv, g.const([-1, n, 3, H, D])], "attn/Reshape")
    r = g.op("Transpose", [r], "attn/Transpose", perm=[2, 0, 3, 1, 4])
    q, k, v = (g.op("Gather", [r, g.const(np.int64(i))], "attn/Gather_%d" % i, axis=0) for i in range(3))
    scale = g.const(np.float32(D ** -0.5))
    if not scale_after:
        q = g.op("Mul", [q, scale], "attn/Mul")
    s = g.op("MatMul", [q, g.op("Transpose", [k], "attn/Transpose_1", perm=[0, 1, 3, 2])], "attn/MatMul")
    s = g.op("Add", [s, g.const(rng.standard_normal((H, n, n)))], "attn/AddBias")
    if shifted:
        mask = np.where(rng.random((w, n, n)) < 0.3, -100.0, 0.0)
        s = g.op("Reshape", [s, g.const([-1, w, H, n, n])], "attn/Reshape_w")
        s = g.op("Add", [s, g.const(mask.reshape(1, w, 1, n, n))], "attn/AddMask")
        s = g.op("Reshape", [s, g.const([-1, H, n, n])], "attn/Reshape_m")
    if scale_after:
        s = g.op("Mul", [s, scale], "attn/Mul")
    p = g.op("Softmax", [s], "attn/Softmax", axis=-1)
    o = g.op("MatMul", [p, v], "attn/MatMul_1")
    o = g.op("Transpose", [o], "attn/Transpose_2", perm=[0, 2, 1, 3])
    o = g.linear(g.op("Reshape", [o, g.const([-1, n, C])], "attn/Reshape_1"), C, C, "attn/proj")
    o = g.op("Reshape", [o, g.const([-1, 2, 2, 2, 2, C])], "win/Reshape_2")
    o = g.op("Transpose", [o], "win/Transpose_1", perm=[0, 1, 3, 2, 4, 5])
    return g.op("Reshape", [o, g.const([-1, 16, C])], "win/Reshape_3")


def attention_pool(g, x):
    """timm's attention pooling: one query per image (here from the mean token;
    timm's is a learned latent) attends to the tokens, K and V from one packed
    projection: Q [B, H, 1, D], K, V [B, H, N, D], output [B, 1, C]."""
    q = g.linear(g.op("ReduceMean", [x], "pool/ReduceMean", axes=[1]), C, C, "pool/q")
    q = g.op("Transpose", [g.op("Reshape", [q, g.const([-1, 1, H, D])], "pool/q/Reshape")], "pool/q/Transpose",
             perm=[0, 2, 1, 3])
    kv = g.op("Reshape", [g.linear(x, C, 2 * C, "pool/kv"), g.const([-1, N, 2, H, D])], "pool/kv/Reshape")
    kv = g.op("Transpose", [kv], "pool/kv/Transpose", perm=[2, 0, 3, 1, 4])
    k, v = (g.op("Gather", [kv, g.const(np.int64(i))], "pool/Gather_%d" % i, axis=0) for i in range(2))
    s = g.op("MatMul", [g.op("Mul", [q, g.const(np.float32(D ** -0.5))], "pool/Mul"),
                        g.op("Transpose", [k], "pool/Transpose_k", perm=[0, 1, 3, 2])], "pool/MatMul")
    o = g.op("MatMul", [g.op("Softmax", [s], "pool/Softmax", axis=-1), v], "pool/MatMul_1")
    o = g.op("Transpose", [o], "pool/Transpose_o", perm=[0, 2, 1, 3])
    o = g.op("Reshape", [o, g.const([-1, 1, C])], "pool/Reshape_o")
    return o


def layernorm(g, x, *, axes=(-1,), eps_inside=True, reciprocal=False):
    """The decomposed LayerNorm of TorchScript exports at opset < 17."""
    mean = g.op("ReduceMean", [x], "ln/ReduceMean", axes=list(axes))
    d = g.op("Sub", [x, mean], "ln/Sub")
    sq = g.op("Mul", [d, d], "ln/Square") if reciprocal else g.op("Pow", [d, g.const(np.float32(2))], "ln/Pow")
    var = g.op("ReduceMean", [sq], "ln/ReduceMean_1", axes=list(axes))
    eps = g.const(np.float32(1e-5))
    if eps_inside:
        std = g.op("Sqrt", [g.op("Add", [var, eps], "ln/Add")], "ln/Sqrt")
    else:
        std = g.op("Add", [g.op("Sqrt", [var], "ln/Sqrt"), eps], "ln/Add")
    if reciprocal:
        n = g.op("Mul", [d, g.op("Reciprocal", [std], "ln/Reciprocal")], "ln/Mul_r")
    else:
        n = g.op("Div", [d, std], "ln/Div")
    n = g.op("Mul", [n, g.const(1 + 0.1 * rng.standard_normal(C))], "ln/Mul")
    return g.op("Add", [n, g.const(0.1 * rng.standard_normal(C))], "ln/Add_1")


def rmsnorm(g, x, *, reciprocal=False, eps=True, gamma=True):
    """RMSNorm as the exporters write it before opset 23: x * rsqrt(mean(x^2) + eps) * gamma."""
    sq = g.op("Mul", [x, x], "rms/Square") if reciprocal else g.op("Pow", [x, g.const(np.float32(2))], "rms/Pow")
    ms = g.op("ReduceMean", [sq], "rms/ReduceMean", axes=[-1])
    if eps:
        ms = g.op("Add", [ms, g.const(np.float32(1e-6))], "rms/Add")
    rms = g.op("Sqrt", [ms], "rms/Sqrt")
    if reciprocal:
        n = g.op("Mul", [x, g.op("Reciprocal", [rms], "rms/Reciprocal")], "rms/Mul_r")
    else:
        n = g.op("Div", [x, rms], "rms/Div")
    return g.op("Mul", [g.const(1 + 0.1 * rng.standard_normal(C)), n], "rms/Mul") if gamma else n


def gelu(g, x, *, divisor=np.sqrt(2), tanh=False):
    if tanh:
        cube = g.op("Pow", [x, g.const(np.float32(3))], "act/Pow")
        inner = g.op("Add", [x, g.op("Mul", [g.const(np.float32(0.044715)), cube], "act/Mul_c")], "act/Add_c")
        t = g.op("Tanh", [g.op("Mul", [g.const(np.float32(np.sqrt(2 / np.pi))), inner], "act/Mul_s")], "act/Tanh")
        a = g.op("Add", [g.const(np.float32(1)), t], "act/Add")
        return g.op("Mul", [g.op("Mul", [x, g.const(np.float32(0.5))], "act/Mul_h"), a], "act/Mul")
    e = g.op("Erf", [g.op("Div", [x, g.const(np.float32(divisor))], "act/Div")], "act/Erf")
    a = g.op("Add", [e, g.const(np.float32(1))], "act/Add")
    return g.op("Mul", [g.op("Mul", [x, a], "act/Mul"), g.const(np.float32(0.5))], "act/Mul_1")


def quick_gelu(g, x, *, k=1.702):
    """CLIP's activation: x * sigmoid(k x)."""
    return g.op("Mul", [x, g.op("Sigmoid", [g.op("Mul", [x, g.const(np.float32(k))], "act/Mul_k")], "act/Sigmoid")],
                "act/Mul")


def save(name, m, ops, explain):
    path = os.path.join(HERE, name)
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    shape = [2 if isinstance(d, str) else d for d in
             [dim.dim_param or dim.dim_value for dim in m.graph.input[0].type.tensor_type.shape.dim]]
    y = sess.run(None, {"x": rng.standard_normal(shape).astype(np.float32)})[0]
    assert np.all(np.isfinite(y)), name
    EXPECT.append((name, ops, explain))


def main():
    os.makedirs(HERE, exist_ok=True)
    tok, vec = ["B", N, C], ["B", C]

    # ---- patterns that must fuse ----
    g = Graph()
    save("attention_separate_qkv.onnx", g.model(attention(g, "x", separate=True), tok, tok),
         "Attention=1 Softmax=0 MatMul=0 Linear=2", "-")
    g = Graph()
    save("layernorm_reciprocal.onnx", g.model(layernorm(g, "x", reciprocal=True), tok, tok),
         "LayerNormalization=1 ReduceMean=0 Sqrt=0 Reciprocal=0", "-")
    g = Graph()
    save("gelu_tanh.onnx", g.model(gelu(g, "x", tanh=True), vec, vec), "Gelu=1 Tanh=0 Pow=0", "-")

    # ---- near misses: each must not fuse, and say why ----
    g = Graph()
    save("near_layernorm_wrong_axis.onnx", g.model(layernorm(g, "x", axes=(1,)), tok, tok),
         "LayerNormalization=0 ReduceMean=2", "ReduceMean is over axes [1], not the trailing axes")
    g = Graph()
    save("near_layernorm_eps_outside_sqrt.onnx", g.model(layernorm(g, "x", eps_inside=False), tok, tok),
         "LayerNormalization=0 Sqrt=1", "epsilon is added after the square root")
    g = Graph()
    save("near_softmax_not_last_axis.onnx", g.model(attention(g, "x", softmax_axis=2), tok, tok),
         "Attention=0 Softmax=1", "Softmax axis is 2, not the last axis")
    g = Graph()
    save("near_scale_on_v.onnx", g.model(attention(g, "x", scale_on="v"), tok, tok),
         "Attention=0 Softmax=1", "V is scaled by Mul 'attn/Mul'")
    g = Graph()
    save("near_q_projection_second_reader.onnx",
         g.model(attention(g, "x", separate=True, q_extra_reader=True), tok, tok),
         "Attention=0 Softmax=1", "the Q projection 'attn/q' has 2 readers")
    g = Graph()
    save("near_gelu_other_constant.onnx", g.model(gelu(g, "x", divisor=1.5), vec, vec),
         "Gelu=0 Erf=1", "Erf's input is x / 1.5, not x / sqrt(2)")


    # ---- masks that mask nothing fold away; a real one stays ----
    g = Graph()
    save("attention_mask_all_true_nan_guard.onnx",
         g.model(attention(g, "x", mask=np.ones((N, N)), nan_guard=True), tok, tok),
         "Attention=1 Softmax=0 Where=0 IsNaN=0 Expand=0", "-")
    g = Graph()
    save("attention_causal_mask.onnx", g.model(attention(g, "x", mask=np.tril(np.ones((N, N)))), tok, tok),
         "Attention=1 Softmax=0 MatMul=0", "-")

    # ---- QuickGELU: into the Linear before it; another constant is a near miss ----
    g = Graph()
    save("quick_gelu_linear.onnx", g.model(quick_gelu(g, g.linear("x", C, C, "fc1")), vec, vec),
         "Linear=1 Sigmoid=0 Mul=0 QuickGelu=0", "-")
    g = Graph()
    save("swish_other_constant.onnx", g.model(quick_gelu(g, "x", k=1.5), vec, vec),
         "QuickGelu=0 Swish=1 Sigmoid=0", "-")

    # ---- layer scale: a per-feature Mul after a Linear goes into it (then the residual too) ----
    g = Graph()
    y = g.op("Mul", [g.linear("x", C, C, "proj"), g.const(0.5 + 0.1 * rng.standard_normal(C))], "ls/Mul")
    save("layer_scale_linear.onnx", g.model(g.op("Add", [y, "x"], "residual/Add"), tok, tok),
         "Linear=1 Mul=0 Add=0", "-")
    g = Graph()
    y = g.op("Mul", [g.linear("x", C, C, "proj"), g.const(0.5 + 0.1 * rng.standard_normal((N, 1)))], "ls/Mul")
    save("near_layer_scale_per_token.onnx", g.model(g.op("Add", [y, "x"], "residual/Add"), tok, tok),
         "Linear=1 Mul=1", "not by one value per output feature")

    # ---- a bias on the logits becomes Attention's input; scaled after it, a near miss ----
    g = Graph()
    save("attention_relative_position_bias.onnx",
         g.model(attention(g, "x", bias=rng.standard_normal((H, N, N))), tok, tok),
         "Attention=1 Softmax=0 MatMul=0 Add=0", "-")
    g = Graph()
    save("near_attention_scaled_after_mask.onnx",
         g.model(attention(g, "x", mask=np.tril(np.ones((N, N))), scale_on="logits"), tok, tok),
         "Attention=0 Softmax=1", "the scores are scaled by 0.5 after the mask or bias")

    # ---- cross-attention: a pooling query over the tokens ----
    g = Graph()
    save("attention_pool_cross.onnx", g.model(attention_pool(g, "x"), tok, ["B", 1, C]),
         "Attention=1 Softmax=0 MatMul=0 Linear=2", "-")

    # ---- RMSNorm: x also feeds the residual Add, as in a pre-norm block ----
    g = Graph()
    save("rmsnorm_residual.onnx", g.model(g.op("Add", [rmsnorm(g, "x"), "x"], "residual/Add"), tok, tok),
         "RMSNormalization=1 ReduceMean=0 Pow=0 Sqrt=0 Div=0 Add=1", "-")
    g = Graph()
    save("rmsnorm_reciprocal_no_gamma.onnx", g.model(rmsnorm(g, "x", reciprocal=True, gamma=False), tok, tok),
         "RMSNormalization=1 ReduceMean=0 Reciprocal=0 Mul=0", "-")
    g = Graph()
    y = g.op("RMSNormalization", ["x", g.const(1 + 0.1 * rng.standard_normal(C))], "rms/RMSNormalization", epsilon=1e-6)
    save("rmsnorm_opset23.onnx", g.model(y, tok, tok, opset=23), "RMSNormalization=1", "-")
    g = Graph()
    save("near_rmsnorm_no_epsilon.onnx", g.model(rmsnorm(g, "x", eps=False), tok, tok),
         "RMSNormalization=0 Sqrt=1", "there is no epsilon added to the mean of squares")

    # ---- SiLU (x * sigmoid(x)) into the Linear before it ----
    g = Graph()
    save("silu_linear.onnx", g.model(quick_gelu(g, g.linear("x", C, C, "fc1"), k=1.0), vec, vec),
         "Linear=1 Sigmoid=0 Mul=0 Swish=0", "-")
    # ---- rotary position embeddings on Q and K go into the Attention ----
    g = Graph()
    save("attention_rope_halves_prefix.onnx", g.model(attention(g, "x", rope=dict(prefix=1)), tok, tok),
         "Attention=1 Softmax=0 MatMul=0 Neg=0 Concat=0", "-")
    g = Graph()
    save("attention_rope_interleaved_separate.onnx",
         g.model(attention(g, "x", separate=True, rope=dict(pairing="interleaved")), tok, tok),
         "Attention=1 Softmax=0 MatMul=0 Neg=0 Linear=2", "-")
    g = Graph()
    save("attention_rope_per_head.onnx", g.model(attention(g, "x", rope=dict(prefix=1, per_head=True)), tok, tok),
         "Attention=1 Softmax=0 MatMul=0 Neg=0", "-")
    g = Graph()
    save("near_rope_only_q.onnx", g.model(attention(g, "x", rope=dict(prefix=1), rope_k=False), tok, tok),
         "Attention=0 Softmax=1", "only Q is rotated")
    g = Graph()
    save("near_rope_unpaired.onnx", g.model(attention(g, "x", rope=dict(wrong=True)), tok, tok),
         "Attention=0 Softmax=1", "pairs its elements neither by halves nor interleaved")

    # ---- gated MLPs: the gate's activation and the product go into the two projections ----
    g = Graph()
    gate = quick_gelu(g, g.linear("x", C, 2 * C, "mlp/gate"), k=1.0)
    y = g.linear(g.op("Mul", [gate, g.linear("x", C, 2 * C, "mlp/up")], "mlp/Mul"), 2 * C, C, "mlp/down")
    save("swiglu_separate.onnx", g.model(y, tok, tok), "Linear=3 Sigmoid=0 Mul=0 Swish=0", "-")
    g = Graph()
    a, b = "mlp/Split_0", "mlp/Split_1"
    g.nodes.append(helper.make_node("Split", [g.linear("x", C, 4 * C, "mlp/fc1")], [a, b], name="mlp/Split", axis=-1,
                                    num_outputs=2))
    y = g.linear(g.op("Mul", [quick_gelu(g, a, k=1.0), b], "mlp/Mul"), 2 * C, C, "mlp/fc2")
    save("swiglu_packed.onnx", g.model(y, tok, tok, opset=18), "Linear=3 Split=0 Sigmoid=0 Mul=0", "-")
    g = Graph()
    g.nodes.append(helper.make_node("Split", [g.linear("x", C, 4 * C, "mlp/fc1")], [a, b], name="mlp/Split", axis=-1,
                                    num_outputs=2))
    y = g.linear(g.op("Mul", [b, gelu(g, a)], "mlp/Mul"), 2 * C, C, "mlp/fc2")
    save("geglu_packed.onnx", g.model(y, tok, tok, opset=18), "Linear=3 Split=0 Erf=0 Mul=0", "-")

    # ---- windowed attention (Swin): the relative position bias and the shift mask go into the Attention ----
    g = Graph()
    save("window_attention_shifted.onnx", g.model(window_attention(g, "x"), ["B", 16, C], ["B", 16, C]),
         "Attention=1 Softmax=0 MatMul=0 Add=0", "-")
    g = Graph()
    save("window_attention.onnx", g.model(window_attention(g, "x", shifted=False), ["B", 16, C], ["B", 16, C]),
         "Attention=1 Softmax=0 MatMul=0 Add=0", "-")
    g = Graph()
    save("near_window_attention_scaled_after_mask.onnx",
         g.model(window_attention(g, "x", scale_after=True), ["B", 16, C], ["B", 16, C]),
         "Attention=0 Softmax=1", "scaled by 0.5 after their masks or biases are added")

    with open(os.path.join(HERE, "EXPECT.tsv"), "w") as f:
        f.write("# file\top counts after the passes\texplanation fragment (- : none)\n")
        for row in EXPECT:
            f.write("\t".join(row) + "\n")


if __name__ == "__main__":
    main()
