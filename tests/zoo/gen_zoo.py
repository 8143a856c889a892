#!/usr/bin/env python3
"""Writes tests/zoo/: ViTs as the libraries build them, exported as users
export them, with PyTorch's outputs.  tests/zoo/test_zoo.py checks vitc on
every export listed in zoo.tsv.

Models (tiny configs, weights random and seeded, eval mode): HF transformers
ViTForImageClassification, CLIPVisionModel (QuickGELU) and Dinov2Model (layer
scale), each with attn_implementation "eager" and "sdpa"; timm's DeiT with its
distillation token, a CLIP-style ViT (QuickGELU, pre-norm), a DINOv2-style ViT
(layer scale) and one with an average-pool head, no class token and no qkv
bias; torchvision's VisionTransformer; the rotary families: timm's EVA02 and
RoPE-Mixed ViT and HF DINOv3 (rope_models); HF SigLIP (pooled), HF BEiT and timm's Swin
(more_models).  Exporters: the
TorchScript exporter at opset 14 and 17 (dynamo=False) and the dynamo exporter at
its default opset, all with a dynamic batch axis; an export the exporter refuses
(HF BEiT through dynamo) is said and left out of zoo.tsv.

    .venv-gen/bin/python tests/zoo/gen_zoo.py     # needs requirements.txt here
    .venv-gen/bin/python tests/zoo/gen_zoo.py --only timm_attnpool   # one model (seeds as in a full run)
    .venv-gen/bin/python tests/zoo/gen_zoo.py --full /tmp/zoo-full [--only ...]  # library sizes, not committed
    VITC_ZOO=/tmp/zoo-full tests/zoo/test_zoo.py                               # and check them
    .venv-gen/bin/python tests/zoo/gen_zoo.py --big /tmp/zoo-big --only timm_vit_l16   # ViT-L/H/g, so400m

With an older torch (Debian 12's python3-torch 1.13, whose TorchScript exporter
a Debian user has), the same timm and torchvision models are written as
MODEL_torch1 at opset 13 and 17 (transformers and the dynamo exporter need
torch 2); zoo.tsv keeps the rows of the other run:

    python3 -m venv --system-site-packages .venv-deb   # after apt-get install python3-torch python3-torchvision
    .venv-deb/bin/pip install --no-deps timm==0.9.16 && .venv-deb/bin/pip install pyyaml huggingface_hub safetensors
    .venv-deb/bin/python tests/zoo/gen_zoo.py
"""
import copy
import os
import sys
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# --full DIR: the same models at the libraries' full sizes (ViT-B/16, 224x224), written to DIR (not committed)
FULL = sys.argv[sys.argv.index("--full") + 1] if "--full" in sys.argv else None
# --big DIR: the sizes people deploy (big_models), TorchScript opset 17 only, not committed
BIG = sys.argv[sys.argv.index("--big") + 1] if "--big" in sys.argv else None
IMG = 224 if FULL else 32
OUT = FULL or BIG or HERE
# models whose output PyTorch also computes in bf16 (MODEL.b{1,3}.bf16-output.npy: weights and input in
# bf16): their bf16 error, a product of two projections (gated MLPs) and rotated Q and K among the
# roundings, is the yardstick for vitc's bf16 on them (test_cuda_emu)
BF16_REFERENCE = ("timm_eva02", "timm_rope_mixed", "hf_dinov3_eager", "hf_dinov3_sdpa", "timm_swin", "hf_siglip")
OLD_TORCH = int(torch.__version__.split(".")[0]) < 2
warnings.filterwarnings("ignore")


def randomize_(model, seed):
    """Seeded weights that exercise every term: matrices randn/sqrt(fan_in),
    biases, tokens and tables 0.1*randn, norm weights and layer scales 1+0.1*randn."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if p.dim() >= 2 and "embeddings" not in name and "token" not in name:
                p.copy_(r / np.sqrt(p[0].numel()))
            elif "norm" in name and name.endswith("weight") or "lambda" in name:
                p.copy_(1 + 0.1 * r)
            else:
                p.copy_(0.1 * r)
    return model.eval()


def models():
    import timm.models.deit
    import timm.models.vision_transformer as tv
    import torchvision.models.vision_transformer as tvv

    small = dict(img_size=IMG, patch_size=8, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2, num_classes=10)
    if FULL:  # ViT-B/16 as the libraries default to it
        small = dict(img_size=IMG, patch_size=16, embed_dim=768, depth=12, num_heads=12, mlp_ratio=4,
                     num_classes=1000)
    d = small["depth"]
    yield "timm_deit_distilled", timm.models.deit.VisionTransformerDistilled(**small), d
    yield "timm_clip", tv.VisionTransformer(act_layer="quick_gelu", pre_norm=True, **small), d
    yield "timm_dinov2", tv.VisionTransformer(init_values=0.5, **small), d
    yield "timm_avgpool", tv.VisionTransformer(class_token=False, global_pool="avg", qkv_bias=False, fc_norm=True,
                                               **small), d
    yield "torchvision_vit", (tvv.vit_b_16() if FULL else
                              tvv.VisionTransformer(image_size=IMG, patch_size=8, num_layers=2, num_heads=4,
                                                    hidden_dim=64, mlp_dim=128, num_classes=10)), d
    if not OLD_TORCH:
        yield from hf_models()
        # attention pooling (timm's AttentionPoolLatent: a learned query attends to the tokens, K and V from one
        # packed projection): cross-attention.  Last, so that the seeds of the models above stay as they were.
        yield "timm_attnpool", tv.VisionTransformer(class_token=False, global_pool="map", **small), d + 1
        yield from hf_deit()
        yield from rope_models(small)
        yield from more_models(small)


def big_models():
    """The sizes people deploy, with the head sizes that are not a power of two: ViT-L/16, ViT-H/14
    (heads of 80), ViT-g/14 (88) and SigLIP so400m/14 at 384x384 (72; MLP 4304), as
    (name, model, blocks, image size)."""
    import timm
    from transformers import SiglipVisionConfig, SiglipVisionModel
    for name, timm_name, depth in (("timm_vit_l16", "vit_large_patch16_224", 24), ("timm_vit_h14", "vit_huge_patch14_224", 32),
                                   ("timm_vit_g14", "vit_giant_patch14_224", 40)):
        yield name, timm.create_model(timm_name, pretrained=False), depth, 224
    cfg = SiglipVisionConfig(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                             image_size=384, patch_size=14)
    yield "hf_siglip_so400m", Logits(SiglipVisionModel(cfg), "pooler_output"), 28, 384


def rope_models(small):
    """The families with rotary position embeddings (2026): timm's EVA02 (interleaved
    rotation, separate q/k/v projections, SwiGLU MLP with a LayerNorm inside), timm's
    RoPE-Mixed ViT (per-head frequencies, a register token) and HF DINOv3 (rotate-half,
    register tokens, layer scale; plain and gated MLP)."""
    from timm.models.eva import Eva
    from transformers import DINOv3ViTConfig, DINOv3ViTModel
    d = small["depth"]
    grid = small["img_size"] // small["patch_size"]
    eva = {k: v for k, v in small.items() if k != "mlp_ratio"}
    yield "timm_eva02", Eva(qkv_fused=False, mlp_ratio=4 * 2 / 3, swiglu_mlp=True, scale_mlp=True, use_rot_pos_emb=True,
                            ref_feat_shape=(grid, grid), **eva), d
    yield "timm_rope_mixed", Eva(mlp_ratio=small["mlp_ratio"], qkv_bias=True, init_values=1e-5, use_abs_pos_emb=False,
                                 use_rot_pos_emb=True, rope_grid_indexing="xy", rope_temperature=10.0,
                                 rope_type="mixed", num_reg_tokens=1, **eva), d
    tiny, hd = hf_tiny()
    for attn, gated in (("eager", False), ("sdpa", True)):
        cfg = DINOv3ViTConfig(num_register_tokens=2, layerscale_value=0.5, use_gated_mlp=gated, **tiny)
        cfg._attn_implementation = attn
        yield "hf_dinov3_%s" % attn, Logits(DINOv3ViTModel(cfg)), hd


def more_models(small):
    """HF SigLIP (attention-pool head with a tiled probe), HF BEiT (relative position bias, layer
    scale, mean-pool head) and timm's Swin (windowed attention, shifted windows, patch merging)."""
    from timm.models.swin_transformer import SwinTransformer
    from transformers import BeitConfig, BeitModel, SiglipVisionConfig, SiglipVisionModel
    tiny, d = hf_tiny()
    yield "hf_siglip", Logits(SiglipVisionModel(SiglipVisionConfig(**tiny)), "pooler_output"), d + 1
    yield "hf_beit", Logits(BeitModel(BeitConfig(use_relative_position_bias=True, use_mean_pooling=True,
                                                 layer_scale_init_value=0.5, **tiny))), d
    swin = dict(img_size=small["img_size"], patch_size=4, window_size=4, embed_dim=32, depths=(2, 2),
                num_heads=(2, 4), mlp_ratio=2, num_classes=small["num_classes"])
    if FULL:
        swin = dict(img_size=IMG)  # Swin-T
    yield "timm_swin", SwinTransformer(**swin), sum(swin.get("depths", (2, 2, 6, 2)))


def hf_tiny():
    """The HF configs' sizes: tiny, or with --full their defaults (ViT-B/16)."""
    if FULL:
        return dict(image_size=IMG, patch_size=16), 12
    return dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=IMG,
                patch_size=8), 2


def hf_deit():
    """HF DeiT with its distillation token (the "with teacher" head averages the class and distillation heads)."""
    from transformers import DeiTConfig, DeiTForImageClassificationWithTeacher
    tiny, d = hf_tiny()
    for attn in ("eager", "sdpa"):
        cfg = DeiTConfig(num_labels=10, **tiny)
        cfg._attn_implementation = attn
        yield "hf_deit_%s" % attn, Logits(DeiTForImageClassificationWithTeacher(cfg)), d


def hf_models():
    from transformers import (CLIPVisionConfig, CLIPVisionModel, Dinov2Config, Dinov2Model, ViTConfig,
                              ViTForImageClassification)
    tiny, d = hf_tiny()
    for attn in ("eager", "sdpa"):
        for name, cls, cfg in (("hf_vit", ViTForImageClassification, ViTConfig(num_labels=10, **tiny)),
                               ("hf_clip", CLIPVisionModel, CLIPVisionConfig(hidden_act="quick_gelu", **tiny)),
                               ("hf_dinov2", Dinov2Model, Dinov2Config(layerscale_value=0.5, **tiny))):
            cfg._attn_implementation = attn
            yield "%s_%s" % (name, attn), Logits(cls(cfg)), d


class Logits(torch.nn.Module):
    """pixel_values -> the model's logits, else its last hidden state, or the output named."""

    def __init__(self, m, output=None):
        super().__init__()
        self.m = m
        self.output = output

    def forward(self, x):
        r = self.m(pixel_values=x)
        if self.output:
            return getattr(r, self.output)
        return r.logits if hasattr(r, "logits") else r.last_hidden_state


def export(w, x, path, exporter):
    if exporter.startswith("ts"):
        kw = {} if OLD_TORCH else {"dynamo": False}  # 1.13 has only the TorchScript exporter
        args = dict(opset_version=int(exporter[2:]), input_names=["x"], output_names=["y"],
                    dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, **kw)
        try:
            torch.onnx.export(w, (x,), path, **args)
        except TypeError as e:  # timm's Eva calls sdpa in a way the TorchScript exporter cannot trace
            if "is_causal" not in str(e):
                raise
            for m in w.modules():  # timm's documented way out: attention without sdpa
                if hasattr(m, "fused_attn"):
                    m.fused_attn = False
            torch.onnx.export(w, (x,), path, **args)
    else:
        torch.onnx.export(w, (x,), path, dynamo=True, dynamic_shapes=({0: torch.export.Dim("batch")},),
                          external_data=False)


def main():
    os.makedirs(OUT, exist_ok=True)
    manifest = os.path.join(OUT, "zoo.tsv")
    rows = {}  # file -> row, in the manifest's order: this run's rows replace their files' old ones
    if os.path.exists(manifest):
        with open(manifest) as t:
            rows = {r[0]: r for r in (l.rstrip("\n").split("\t") for l in t if l.strip() and not l.startswith("#"))}
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
    for i, (name, m, depth, *size) in enumerate(big_models() if BIG else models()):
        if only and name not in only:
            continue
        img = size[0] if size else IMG
        name += "_torch1" if OLD_TORCH else ""
        w = randomize_(m, 1000 + i)
        rng = np.random.default_rng(2000 + i)
        for b in (1, 3):
            x = rng.standard_normal((b, 3, img, img)).astype(np.float32)
            with torch.no_grad():
                y = w(torch.from_numpy(x)).numpy()
            np.save(os.path.join(OUT, "%s.b%d.input.npy" % (name, b)), x)
            np.save(os.path.join(OUT, "%s.b%d.output.npy" % (name, b)), y)
            if name in BF16_REFERENCE:  # PyTorch's own bf16 error, the scale for bf16 checks of these models
                with torch.no_grad():
                    yb = copy.deepcopy(w).to(torch.bfloat16)(torch.from_numpy(x).bfloat16()).float().numpy()
                np.save(os.path.join(OUT, "%s.b%d.bf16-output.npy" % (name, b)), yb)
        for exporter in ("ts13", "ts17") if OLD_TORCH else ("ts17",) if BIG else ("ts14", "ts17", "dynamo"):
            f = "%s-%s.onnx" % (name, exporter)
            try:
                export(w, torch.zeros(2, 3, img, img), os.path.join(OUT, f), exporter)  # 2: torch.export fixes a batch of 1
            except Exception as e:  # the exporter does not take this model: no row (said here)
                print("exporter %s refused %s: %s: %s" % (exporter, name, type(e).__name__, (str(e).strip() or "?").splitlines()[0][:200]))
                rows.pop(f, None)
                if os.path.exists(os.path.join(OUT, f)):
                    os.remove(os.path.join(OUT, f))
                continue
            rows[f] = (f, name, exporter, str(depth))
            print("wrote", f)
    with open(manifest, "w") as t:
        t.write("# file\tmodel (inputs/outputs: MODEL.b{1,3}.{input,output}.npy)\texporter\tblocks\n")
        for r in rows.values():
            t.write("\t".join(r) + "\n")


if __name__ == "__main__":
    main()
