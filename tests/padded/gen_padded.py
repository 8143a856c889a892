#!/usr/bin/env python3
"""Writes tests/padded/: models exported at an image size that makes them pad
computed activations, with PyTorch's outputs; a model zoo of their own
(zoo.tsv), checked by tests/zoo/test_zoo.py with VITC_ZOO pointing here
(ctest: test_padded), so tests/zoo/ stays as it is.

timm's Swin as tests/zoo's (patch 4, window 4, two stages of two blocks) at
36x36: 9x9 tokens, which every block pads (a Pad of its activations, constant
0) to 12x12 before the window partition, and the patch merging pads to
10x10; the second stage's 5x5 tokens pad to 8x8.  Exported by the
TorchScript exporter at opset 17 with a dynamic batch axis (the dynamo
exporter's graph optimises to the same ops); weights and inputs seeded as
gen_zoo.py seeds them, PyTorch's outputs in fp32 and in bf16 (the yardstick
of test_cuda_emu's bf16 bar).

    .venv-gen/bin/python tests/padded/gen_padded.py
"""
import copy
import os
import sys
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "zoo"))
from gen_zoo import export, randomize_  # noqa: E402

warnings.filterwarnings("ignore")
IMG = 36


def models():
    from timm.models.swin_transformer import SwinTransformer
    swin = dict(img_size=IMG, patch_size=4, window_size=4, embed_dim=32, depths=(2, 2), num_heads=(2, 4),
                mlp_ratio=2, num_classes=10, strict_img_size=False)
    yield "timm_swin_pad36", SwinTransformer(**swin), 4


def main():
    rows = []
    for i, (name, m, depth) in enumerate(models()):
        w = randomize_(m, 3000 + i)
        rng = np.random.default_rng(4000 + i)
        for b in (1, 3):
            x = rng.standard_normal((b, 3, IMG, IMG)).astype(np.float32)
            with torch.no_grad():
                y = w(torch.from_numpy(x)).numpy()
                yb = copy.deepcopy(w).to(torch.bfloat16)(torch.from_numpy(x).bfloat16()).float().numpy()
            np.save(os.path.join(HERE, "%s.b%d.input.npy" % (name, b)), x)
            np.save(os.path.join(HERE, "%s.b%d.output.npy" % (name, b)), y)
            np.save(os.path.join(HERE, "%s.b%d.bf16-output.npy" % (name, b)), yb)
        for exporter in ("ts17",):
            f = "%s-%s.onnx" % (name, exporter)
            export(w, torch.zeros(2, 3, IMG, IMG), os.path.join(HERE, f), exporter)
            rows.append((f, name, exporter, str(depth)))
            print("wrote", f)
    with open(os.path.join(HERE, "zoo.tsv"), "w") as t:
        t.write("# file\tmodel (inputs/outputs: MODEL.b{1,3}.{input,output}.npy)\texporter\tblocks\n")
        for r in rows:
            t.write("\t".join(r) + "\n")


if __name__ == "__main__":
    main()
