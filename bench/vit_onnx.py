"""bench/vit_onnx.py: full-size timm-style ViTs as ONNX files and their weights, with nothing but
the Python standard library.

The GPU benchmark has to run on machines that have a GPU and little else (no network, perhaps no
numpy, onnx or torch), so the models are written here directly: seeded weights in array('f'), and a
minimal protobuf writer for the handful of ONNX messages a model needs.  The graph is the one
torch.onnx.export (TorchScript, opset 17) produces for timm's VisionTransformer: Conv patchify,
class token through Expand of a shape computed from the input, LayerNormalization, qkv MatMul+Add,
Reshape [B,N,3,H,D] / Transpose / Split / Squeeze, q*scale @ k^T, Softmax, @ v, the erf GELU, the
class token into the head.  vitc's passes fuse it into Linear, Attention and LayerNormalization
exactly as they fuse the exported fixtures (tests/models/timm-ts17.onnx is the tiny twin).

    from vit_onnx import CONFIGS, vit_weights, write_vit_onnx
    w = vit_weights(CONFIGS["vit_b16"], seed=1)
    write_vit_onnx(CONFIGS["vit_b16"], w, "vit_b16.onnx")
"""
import math
import random
import struct
from array import array

# name: image, patch, depth, heads, width, mlp ratio, classes
CONFIGS = {
    "vit_ti16": dict(image=224, patch=16, depth=12, heads=3, width=192, mlp=4, classes=1000),
    "vit_s16": dict(image=224, patch=16, depth=12, heads=6, width=384, mlp=4, classes=1000),
    "vit_b16": dict(image=224, patch=16, depth=12, heads=12, width=768, mlp=4, classes=1000),
    # a small one, for trying the benchmark's machinery (on the emulated driver of the tests)
    "vit_test": dict(image=32, patch=8, depth=2, heads=2, width=64, mlp=4, classes=10),
}


def tokens(cfg):
    return (cfg["image"] // cfg["patch"]) ** 2 + 1


def gflop_per_image(cfg):
    """Multiply-adds x 2 of every matrix product (patch embedding, qkv, attention, projection, MLP, head)."""
    n, c, p, hidden = tokens(cfg), cfg["width"], cfg["patch"], cfg["width"] * cfg["mlp"]
    patch = 2 * (n - 1) * c * 3 * p * p
    block = 2 * n * c * 3 * c + 2 * 2 * n * n * c + 2 * n * c * c + 2 * 2 * n * c * hidden
    return (patch + cfg["depth"] * block + 2 * c * cfg["classes"]) / 1e9


# ------------------------------------------------------------------------------------------------
# weights: seeded, cheap to make at ViT-B size without numpy
# ------------------------------------------------------------------------------------------------
def _values(rng, n, scale, pool):
    """n floats: a seeded pool of normal values, scaled, repeated from a random offset."""
    start = rng.randrange(len(pool))
    out = array("f", pool[start:]) + array("f", pool[:start])
    while len(out) < n:
        out += out
    out = out[:n]
    if scale != 1.0:
        out = array("f", (v * scale for v in out))
    return out


def vit_weights(cfg, seed=1):
    """Ordered dict name -> (dims, array('f')) of a ViT: weights ~ N(0, 1/fan_in), biases and
    LayerNorm parameters small around their identity."""
    rng = random.Random(seed)
    pool = array("f", (rng.gauss(0.0, 1.0) for _ in range(1 << 20)))
    c, p, n, hidden = cfg["width"], cfg["patch"], tokens(cfg), cfg["width"] * cfg["mlp"]
    w = {}

    def add(name, dims, scale, offset=0.0):
        count = 1
        for d in dims:
            count *= d
        v = _values(rng, count, scale, pool)
        if offset:
            v = array("f", (x + offset for x in v))
        w[name] = (list(dims), v)

    add("patch.weight", [c, 3, p, p], 1 / math.sqrt(3 * p * p))
    add("patch.bias", [c], 0.02)
    add("cls_token", [1, 1, c], 0.02)
    add("pos_embed", [1, n, c], 0.02)
    for i in range(cfg["depth"]):
        b = f"blocks.{i}."
        add(b + "norm1.weight", [c], 0.05, 1.0)
        add(b + "norm1.bias", [c], 0.02)
        add(b + "qkv.weight", [c, 3 * c], 1 / math.sqrt(c))  # [in, out]: the MatMul operand
        add(b + "qkv.bias", [3 * c], 0.02)
        add(b + "proj.weight", [c, c], 1 / math.sqrt(c))
        add(b + "proj.bias", [c], 0.02)
        add(b + "norm2.weight", [c], 0.05, 1.0)
        add(b + "norm2.bias", [c], 0.02)
        add(b + "fc1.weight", [c, hidden], 1 / math.sqrt(c))
        add(b + "fc1.bias", [hidden], 0.02)
        add(b + "fc2.weight", [hidden, c], 1 / math.sqrt(hidden))
        add(b + "fc2.bias", [c], 0.02)
    add("norm.weight", [c], 0.05, 1.0)
    add("norm.bias", [c], 0.02)
    add("head.weight", [c, cfg["classes"]], 1 / math.sqrt(c))
    add("head.bias", [cfg["classes"]], 0.02)
    return w


def make_input(cfg, batch, seed):
    rng = random.Random(seed * 1000 + batch)
    pool = array("f", (rng.gauss(0.0, 1.0) for _ in range(1 << 16)))
    return _values(rng, batch * 3 * cfg["image"] * cfg["image"], 1.0, pool)


# ------------------------------------------------------------------------------------------------
# a minimal protobuf writer for ONNX (proto2 wire format)
# ------------------------------------------------------------------------------------------------
def _varint(v):
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field, wire):
    return _varint(field << 3 | wire)


def _int(field, v):
    return _key(field, 0) + _varint(v)


def _bytes(field, b):
    if isinstance(b, str):
        b = b.encode()
    return _key(field, 2) + _varint(len(b)) + b


def _float(field, f):
    return _key(field, 5) + struct.pack("<f", f)


FLOAT, INT64, BOOL = 1, 7, 9


def tensor(name, dims, data_type, raw):
    return b"".join(_int(1, d) for d in dims) + _int(2, data_type) + _bytes(8, name) + _bytes(9, raw)


def attr_int(name, v):
    return _bytes(1, name) + _int(3, v) + _int(20, 2)


def attr_float(name, v):
    return _bytes(1, name) + _float(2, v) + _int(20, 1)


def attr_ints(name, vs):
    return _bytes(1, name) + b"".join(_int(8, v) for v in vs) + _int(20, 7)


def node(op, inputs, outputs, name, attrs=()):
    return (b"".join(_bytes(1, i) for i in inputs) + b"".join(_bytes(2, o) for o in outputs) + _bytes(3, name) +
            _bytes(4, op) + b"".join(_bytes(5, a) for a in attrs))


def value_info(name, elem, dims):
    """dims: ints, or strings for symbolic dimensions."""
    shape = b"".join(_bytes(1, _bytes(2, d) if isinstance(d, str) else _int(1, d)) for d in dims)
    tensor_type = _int(1, elem) + _bytes(2, shape)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor_type))


# ------------------------------------------------------------------------------------------------
# the ViT graph
# ------------------------------------------------------------------------------------------------
def write_vit_onnx(cfg, weights, path):
    c, h, n = cfg["width"], cfg["heads"], tokens(cfg)
    d = c // h
    nodes, inits = [], []
    counter = [0]

    def i64(name, values):
        inits.append(tensor(name, [len(values)], INT64, struct.pack("<%dq" % len(values), *values)))
        return name

    def i64_scalar(name, value):
        inits.append(tensor(name, [], INT64, struct.pack("<q", value)))
        return name

    def f32_scalar(name, value):
        inits.append(tensor(name, [], FLOAT, struct.pack("<f", value)))
        return name

    def op(kind, inputs, attrs=(), outputs=1, name=None):
        counter[0] += 1
        base = name or f"/{kind}_{counter[0]}"
        outs = [f"{base}_output_{k}" for k in range(outputs)]
        nodes.append(node(kind, inputs, outs, base, attrs))
        return outs[0] if outputs == 1 else outs

    for wname, (dims, data) in weights.items():
        inits.append(tensor(wname, dims, FLOAT, data.tobytes()))

    x = op("Conv", ["input", "patch.weight", "patch.bias"],
           [attr_ints("kernel_shape", [cfg["patch"]] * 2), attr_ints("strides", [cfg["patch"]] * 2),
            attr_ints("pads", [0, 0, 0, 0]), attr_ints("dilations", [1, 1]), attr_int("group", 1)],
           name="/patch_embed/proj/Conv")
    x = op("Reshape", [x, i64("patch_shape", [0, c, n - 1])])
    x = op("Transpose", [x], [attr_ints("perm", [0, 2, 1])])
    # the class token, expanded to the batch read from the input's shape
    shape = op("Shape", ["input"])
    batch = op("Gather", [shape, i64_scalar("zero", 0)], [attr_int("axis", 0)])
    batch = op("Unsqueeze", [batch, i64("axis0", [0])])
    cls_shape = op("Concat", [batch, i64("one_c", [1, c])], [attr_int("axis", 0)])
    cls = op("Expand", ["cls_token", cls_shape])
    x = op("Concat", [cls, x], [attr_int("axis", 1)])
    x = op("Add", [x, "pos_embed"])
    qkv_shape = i64("qkv_shape", [0, n, 3, h, d])
    merge_shape = i64("merge_shape", [0, n, c])
    split = i64("split3", [1, 1, 1])
    scale = f32_scalar("attn_scale", d ** -0.5)
    sqrt2 = f32_scalar("sqrt2", math.sqrt(2.0))
    one = f32_scalar("one", 1.0)
    half = f32_scalar("half", 0.5)
    for i in range(cfg["depth"]):
        b = f"blocks.{i}."
        y = op("LayerNormalization", [x, b + "norm1.weight", b + "norm1.bias"],
               [attr_int("axis", -1), attr_float("epsilon", 1e-6)], name=f"/blocks.{i}/norm1")
        y = op("Add", [b + "qkv.bias", op("MatMul", [y, b + "qkv.weight"])])
        y = op("Reshape", [y, qkv_shape])
        y = op("Transpose", [y], [attr_ints("perm", [2, 0, 3, 1, 4])])
        q, k, v = op("Split", [y, split], [attr_int("axis", 0)], outputs=3)
        q, k, v = (op("Squeeze", [t, i64(f"sq{i}_{j}", [0])]) for j, t in enumerate((q, k, v)))
        q = op("Mul", [q, scale])
        s = op("MatMul", [q, op("Transpose", [k], [attr_ints("perm", [0, 1, 3, 2])])])
        s = op("Softmax", [s], [attr_int("axis", -1)])
        y = op("MatMul", [s, v])
        y = op("Transpose", [y], [attr_ints("perm", [0, 2, 1, 3])])
        y = op("Reshape", [y, merge_shape])
        y = op("Add", [b + "proj.bias", op("MatMul", [y, b + "proj.weight"])])
        x = op("Add", [x, y])
        y = op("LayerNormalization", [x, b + "norm2.weight", b + "norm2.bias"],
               [attr_int("axis", -1), attr_float("epsilon", 1e-6)], name=f"/blocks.{i}/norm2")
        y = op("Add", [b + "fc1.bias", op("MatMul", [y, b + "fc1.weight"])])
        g = op("Erf", [op("Div", [y, sqrt2])])
        y = op("Mul", [op("Mul", [y, op("Add", [g, one])]), half])
        y = op("Add", [b + "fc2.bias", op("MatMul", [y, b + "fc2.weight"])])
        x = op("Add", [x, y])
    x = op("LayerNormalization", [x, "norm.weight", "norm.bias"], [attr_int("axis", -1), attr_float("epsilon", 1e-6)],
           name="/norm")
    x = op("Gather", [x, i64_scalar("cls_index", 0)], [attr_int("axis", 1)])
    nodes.append(node("Add", ["head.bias", op("MatMul", [x, "head.weight"])], ["output"], "/head"))

    graph = (b"".join(_bytes(1, nd) for nd in nodes) + _bytes(2, "vit") + b"".join(_bytes(5, t) for t in inits) +
             _bytes(11, value_info("input", FLOAT, ["batch", 3, cfg["image"], cfg["image"]])) +
             _bytes(12, value_info("output", FLOAT, ["batch", cfg["classes"]])))
    model = _int(1, 8) + _bytes(2, "vitc bench/vit_onnx.py") + _bytes(7, graph) + _bytes(8, _bytes(1, "") + _int(2, 17))
    with open(path, "wb") as f:
        f.write(model)
