#!/usr/bin/env python3
"""Writes tests/shapes/: ViTs exported with a dynamic image size (height and
width symbolic, beside the batch), with PyTorch's outputs at several sizes.
tests/shapes/test_shapes.py compiles each for all of those sizes into one .so
(vitc compile --shapes) and checks every size against these outputs.

Models (tiny widths, the libraries' own patch sizes and position tables at
224x224, weights random and seeded, eval mode): HF transformers' Dinov2Model,
which interpolates its position table bicubically to the grid of the image it
is given, HF ViTForImageClassification run with interpolate_pos_encoding=True
(the same), and timm's VisionTransformer with dynamic_img_size=True (the same
by timm's resample_abs_pos_embed, antialiased).  Exporters: TorchScript at
opset 17 with dynamic_axes on the batch, the height and the width, and the
dynamo exporter with the same three dimensions dynamic; an export the
exporter refuses is said and left out (timm's through TorchScript: its
antialiased bicubic resampling has no ONNX form there).

The inputs are not stored: input(shape) below makes them, the same in the
test, without a random generator whose stream could change between numpy
releases.

    .venv-gen/bin/python tests/shapes/gen_shapes.py
"""
import os
import sys
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from shapes_common import BATCH, MODELS, input_array  # noqa: E402

warnings.filterwarnings("ignore")


def randomize_(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


class Out(torch.nn.Module):
    """pixel_values -> the logits, else the last hidden state (HF), or the output (timm)."""

    def __init__(self, m, **kw):
        super().__init__()
        self.m = m
        self.kw = kw

    def forward(self, x):
        if hasattr(self.m, "forward_features"):
            return self.m(x)
        r = self.m(pixel_values=x, **self.kw)
        return r.logits if hasattr(r, "logits") else r.last_hidden_state


def build(name):
    if name == "hf_dinov2_dyn":
        from transformers import Dinov2Config, Dinov2Model
        cfg = Dinov2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                           image_size=224, patch_size=16, layerscale_value=0.5)
        cfg._attn_implementation = "eager"
        return Out(Dinov2Model(cfg))
    if name == "hf_vit_dyn":
        from transformers import ViTConfig, ViTForImageClassification
        cfg = ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                        image_size=224, patch_size=16, num_labels=10)
        cfg._attn_implementation = "sdpa"
        return Out(ViTForImageClassification(cfg), interpolate_pos_encoding=True)
    if name == "timm_vit_dyn":
        from timm.models.vision_transformer import VisionTransformer
        return Out(VisionTransformer(img_size=224, patch_size=16, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2,
                                     num_classes=10, dynamic_img_size=True))
    raise SystemExit("unknown model %s" % name)


def main():
    for i, (name, sizes) in enumerate(MODELS.items()):
        w = randomize_(build(name), 3000 + i)
        for h, wd in sizes:
            x = input_array((BATCH, 3, h, wd))
            with torch.no_grad():
                y = w(torch.from_numpy(x)).numpy()
            np.save(os.path.join(HERE, "%s.%dx%d.output.npy" % (name, h, wd)), y)
        for exporter in ("ts17", "dynamo"):
            path = os.path.join(HERE, "%s-%s.onnx" % (name, exporter))
            try:
                export(w, path, exporter)
            except Exception as e:  # said, and no file: test_shapes.py checks the files there are
                print("exporter %s refused %s: %s: %s" % (exporter, name, type(e).__name__,
                                                          (str(e).strip() or "?").splitlines()[0][:160]))
                if os.path.exists(path):
                    os.remove(path)
                continue
            print("wrote", path)


def export(w, path, exporter):
    # traced at a size other than the position table's, so that the resampling is in the graph
    # (timm leaves it out where the size is the table's own: a trace there fixes the size)
    x = torch.zeros(2, 3, 256, 192)
    if exporter == "ts17":
        torch.onnx.export(w, (x,), path, dynamo=False, opset_version=17, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}, "y": {0: "batch"}})
    else:
        dims = {0: torch.export.Dim("batch"), 2: torch.export.Dim("height", min=32, max=1024),
                3: torch.export.Dim("width", min=32, max=1024)}
        torch.onnx.export(w, (x,), path, dynamo=True, external_data=False, input_names=["x"], output_names=["y"],
                          dynamic_shapes=(dims,))

if __name__ == "__main__":
    main()
