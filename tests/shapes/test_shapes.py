#!/usr/bin/env python3
"""test_shapes: ViTs exported with a dynamic image size, each compiled once
for several sizes (vitc compile --shapes) into one .so, against PyTorch.

For every export in this folder (gen_shapes.py writes them with PyTorch's
outputs at each size of shapes_common.MODELS):
  - its optimised graph has one Attention per block and no Softmax, Erf,
    MatMul or Resize left (the position table's resampling folded);
  - `vitc compile --shapes` of all its sizes makes one .so; `vitc inspect
    --json` lists every size, and the .so's weights are shared between the
    sizes (less than 1.6 times those of a .so of the first size alone: the
    blocks' weights are stored once, the position tables once per size);
  - `vitc run` at each size is within 1e-4 of PyTorch's output (max |out -
    ref| / max |ref|), NaN or infinite outputs failing;
  - a size not compiled is refused (exit 2), naming the sizes compiled.
On one export, the other commands at a size: compare (--shapes, and --input
files), run of the ONNX file by the interpreter, and dump.  Then the errors: an export with a dynamic size compiled without --shapes,
--shapes for a model of one size, a malformed --shapes, and --target cuda
with several sizes all exit 2 with a message saying what to do.

Run by ctest with VITC_BIN and VITC_SOURCE_DIR set; needs numpy.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError as e:  # the Python references are missing: ctest reports it skipped (77)
    print("skipped: %s: %s (run ./setup.sh, or configure with -DVITC_PYTHON=...)" % (sys.executable, e))
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from shapes_common import BATCH, MODELS, input_array  # noqa: E402

SRC = os.environ.get("VITC_SOURCE_DIR", os.path.join(HERE, "..", ".."))
VITC = os.environ.get("VITC_BIN", "vitc")
BAR = 1e-4


def vitc(*args):
    p = subprocess.run([VITC, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def rel_error(out, ref):
    """max |out - ref| / max |ref|; inf where out holds a NaN or an infinity, or ref is all zeros."""
    if not np.all(np.isfinite(out)) or not np.any(ref):
        return float("inf")
    return float(np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max())


def shape_arg(sizes):
    """The --shapes argument as the issue's users write it: x=Bx3x224x224,Bx3x336x336,..."""
    return "x=" + ",".join("Bx3x%dx%d" % hw for hw in sizes)


def weights_bytes(so):
    rc, text = vitc("inspect", so, "--json")
    assert rc == 0, text
    return json.loads(text)["weights"]["bytes"], json.loads(text)


def check_export(path, tmp, failures):
    name = os.path.basename(path).split("-")[0]
    sizes = MODELS[name]
    so = os.path.join(tmp, os.path.basename(path) + ".so")
    rc, text = vitc("compile", path, "-o", so, "--shapes", shape_arg(sizes), "--batch", str(BATCH), "-q")
    if rc != 0:
        failures.append("%s: compile --shapes %s: exit %d: %s" % (path, shape_arg(sizes), rc, text.strip()[-400:]))
        return
    wb, info = weights_bytes(so)
    listed = [tuple(s["inputs"][0]["shape"][2:]) for s in info["shapes"]]
    if listed != [tuple(hw) for hw in sizes]:
        failures.append("%s: inspect lists the shapes %s, compiled %s" % (path, listed, sizes))
    one = os.path.join(tmp, os.path.basename(path) + ".one.so")
    rc, text = vitc("compile", path, "-o", one, "--shapes", shape_arg(sizes[:1]), "--batch", str(BATCH), "-q")
    wb1 = weights_bytes(one)[0] if rc == 0 else None
    if wb1 is None or not wb < 1.6 * wb1:
        failures.append("%s: %s bytes of weights for %d sizes, %s for one: not shared" % (path, wb, len(sizes), wb1))
    h, w = sizes[1]  # fused as at any size: one Attention per block, no Softmax, Erf or MatMul left
    rc, text = vitc("dump", path, "--stage", "optimized", "--stats", "--shapes", "Bx3x%dx%d" % (h, w))
    stats = dict(l.split() for l in text.splitlines() if len(l.split()) == 2)
    if rc != 0 or stats.get("Attention") != "2" or any(op in stats for op in ("Softmax", "Erf", "MatMul", "Resize")):
        failures.append("%s at %dx%d: not fused: %s" % (path, h, w, text.strip()[-300:]))
    for h, w in sizes:
        x = os.path.join(tmp, "x.npy")
        np.save(x, input_array((BATCH, 3, h, w)))
        outdir = os.path.join(tmp, "out-%dx%d" % (h, w))
        rc, text = vitc("run", so, "--input", x, "--output-dir", outdir)
        if rc != 0:
            failures.append("%s at %dx%d: run: exit %d: %s" % (path, h, w, rc, text.strip()[-300:]))
            continue
        out = np.load(glob.glob(os.path.join(outdir, "*.npy"))[0])
        ref = np.load(os.path.join(HERE, "%s.%dx%d.output.npy" % (name, h, w)))
        e = rel_error(out, ref) if out.shape == ref.shape else float("inf")
        print("%-28s %4dx%-4d  %-14s  max-rel %.2e  %s" % (os.path.basename(path), h, w, "x".join(map(str, out.shape)),
                                                        e, "PASS" if e <= BAR else "FAIL"))
        if not e <= BAR:
            failures.append("%s at %dx%d: error %.3g (bar %g), shape %s (PyTorch's %s)" %
                            (path, h, w, e, BAR, out.shape, ref.shape))
    x = os.path.join(tmp, "x.npy")
    np.save(x, input_array((1, 3, 192, 192)))
    rc, text = vitc("run", so, "--input", x, "--output-dir", os.path.join(tmp, "other"))
    want = "[B,3,%d,%d]" % sizes[0]
    if rc != 2 or "compiled for" not in text or want not in text:
        failures.append("%s: a size not compiled (192x192): exit %d, %r (want exit 2 naming %s)" %
                        (path, rc, text.strip(), want))


def check_tools(path, tmp, failures):
    """compare (random inputs at a --shapes size, and --input files), run of the ONNX file by the
    interpreter at a size given by its input file, and dump at a size."""
    name = os.path.basename(path).split("-")[0]
    h, w = MODELS[name][1]
    rc, text = vitc("compare", path, "--shapes", "3x%dx%d" % (h, w))  # the short form: no name, no B
    if rc != 0 or "PASS" not in text or "%d," % BATCH not in text:
        failures.append("%s: compare --shapes 3x%dx%d: exit %d: %s" % (path, h, w, rc, text.strip()[-300:]))
    x = os.path.join(tmp, "x.npy")
    np.save(x, input_array((BATCH, 3, h, w)))
    rc, text = vitc("compare", path, "--input", x)
    if rc != 0 or "PASS" not in text:
        failures.append("%s: compare --input (%dx%d): exit %d: %s" % (path, h, w, rc, text.strip()[-300:]))
    outdir = os.path.join(tmp, "interp")
    rc, text = vitc("run", path, "--input", x, "--output-dir", outdir)
    if rc != 0:
        failures.append("%s: run by the interpreter at %dx%d: exit %d: %s" % (path, h, w, rc, text.strip()[-300:]))
    else:
        out = np.load(glob.glob(os.path.join(outdir, "*.npy"))[0])
        e = rel_error(out, np.load(os.path.join(HERE, "%s.%dx%d.output.npy" % (name, h, w))))
        print("%-28s %4dx%-4d  interpreter     max-rel %.2e" % (os.path.basename(path), h, w, e))
        if not e <= BAR:
            failures.append("%s: the interpreter at %dx%d: error %.3g" % (path, h, w, e))
    rc, text = vitc("dump", path, "--stage", "optimized", "--stats", "--shapes", "3x%dx%d" % (h, w))
    if rc != 0 or "Attention 2" not in text:
        failures.append("%s: dump --shapes: exit %d: %s" % (path, rc, text.strip()[-300:]))


def expect_error(failures, what, args, words):
    rc, text = vitc(*args)
    if rc != 2 or not all(w in text for w in words):
        failures.append("%s: exit %d, %r (want exit 2 and %s)" % (what, rc, text.strip()[-300:], words))
    else:
        print("refused as it should: %s: %s" % (what, text.strip().splitlines()[0][:160]))


def main():
    failures = []
    exports = sorted(glob.glob(os.path.join(HERE, "*.onnx")))
    if len(exports) < 5:
        failures.append("%d exports in %s (gen_shapes.py writes 5)" % (len(exports), HERE))
    with tempfile.TemporaryDirectory() as tmp:
        for path in exports:
            check_export(path, tmp, failures)
        dyn = os.path.join(HERE, "hf_dinov2_dyn-ts17.onnx")
        check_tools(dyn, tmp, failures)
        so = os.path.join(tmp, "e.so")
        expect_error(failures, "a dynamic image size without --shapes", ("compile", dyn, "-o", so),
                     ["'height'", "--shapes x=Bx3x224x224"])
        fixed = os.path.join(SRC, "tests", "models", "einops-ts17.onnx")
        expect_error(failures, "--shapes for a model of one size",
                     ("compile", fixed, "-o", so, "--shapes", "3x32x32"), ["no graph input has a symbolic"])
        expect_error(failures, "--shapes with a named input the model lacks",
                     ("compile", dyn, "-o", so, "--shapes", "pixels=Bx3x224x224"), ["'pixels'"])
        expect_error(failures, "a malformed --shapes", ("compile", dyn, "-o", so, "--shapes", "3x224xx"),
                     ["is not a shape"])
        expect_error(failures, "a fixed dimension given otherwise",
                     ("compile", dyn, "-o", so, "--shapes", "4x224x224"), ["dimension 1 is 3"])
        expect_error(failures, "two --shapes, one without a name",
                     ("compile", dyn, "-o", so, "--shapes", "x=3x224x224", "--shapes", "3x224x224"),
                     ["each names its input"])
        expect_error(failures, "two --shapes with different counts",
                     ("compile", dyn, "-o", so, "--shapes", "x=3x224x224,3x336x336", "--shapes", "y=3x4"),
                     ["give each input as many"])
        expect_error(failures, "--target cuda with several sizes",
                     ("compile", dyn, "-o", so, "--target", "cuda", "--shapes", "3x224x224,3x336x336"),
                     ["--target cuda" if "without the CUDA backend" in vitc("--version")[1] else "one shape per .so"])
        if os.path.exists(so):
            failures.append("a refused compile left %s" % so)
    for f in failures:
        print("FAIL:", f)
    print("test_shapes: %d exports, %d failures" % (len(exports), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
