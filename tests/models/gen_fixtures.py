#!/usr/bin/env python3
"""Generate the ONNX test fixtures of vitc (tests/models/).

The seed ViT family, built the way PyTorch users write it, with seeded random weights, exported the
way users export it:

  torchvision  torchvision.models.vision_transformer.VisionTransformer (class token,
               nn.MultiheadAttention, LayerNorm eps 1e-6)
  timm         timm.models.vision_transformer.VisionTransformer with fused attention disabled
               (fused qkv Linear, reshape(B,N,3,H,D).permute(2,0,3,1,4), q*scale, q@k^T, softmax)
  einops       the einops ViT tutorial: Conv2d + Rearrange patchify, (h d qkv) interleaved qkv split,
               einsum attention, softmax THEN divide by sqrt(emb_size), mean-pool head
  face_ln      insightface arcface_torch ViT (112x112, patch 9, no class token, ReLU6 MLP,
  face_bn      LayerNorm / BatchNorm1d over the patch axis, flatten + Linear/BatchNorm1d feature head)

For each family (tiny config) three exports, each with a dynamic batch axis "batch":
  <family>-ts13.onnx   torch.onnx.export(dynamo=False, opset_version=13)
  <family>-ts17.onnx   torch.onnx.export(dynamo=False, opset_version=17)
  <family>-dynamo.onnx torch.onnx.export(dynamo=True, dynamic_shapes=Dim("batch")), default opset
plus seeded inputs and eager fp32 PyTorch outputs at batch 1 and 3 (<family>.b{1,3}.{input,output}.npy),
the manifest fixtures.tsv and README.md (op_type sets per file).

Every export is checked with onnxruntime (CPU, graph optimizations disabled) against PyTorch:
max|ort - torch| / max|torch| <= 1e-4 at batch 1 and 3, or the script fails.

Usage:
  python tests/models/gen_fixtures.py                  # tiny fixtures into tests/models/
  python tests/models/gen_fixtures.py --out DIR        # ... into DIR
  python tests/models/gen_fixtures.py --full OUTDIR    # full-size benchmark models (not committed)
  python tests/models/gen_fixtures.py --full OUTDIR --only vit_ti16_timm,face_vit_s
"""

import argparse
import math
import os
import sys
import warnings
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import onnx
import onnxruntime as ort

TOL = 1e-4
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# The ops vitc is expected to meet in these exports; anything else is flagged in the report.
EXPECTED_OPS = set("""
Add BatchNormalization Cast Clip Concat Constant ConstantOfShape Conv Div Dropout Einsum Equal Erf
Expand Flatten Gather Gelu Gemm Identity LayerNormalization MatMul Mul Pow Range ReduceMean ReduceSum
Relu Reshape Shape Sigmoid Slice Softmax Split Sqrt Squeeze Sub Tanh Transpose Unsqueeze Where Neg
Reciprocal Exp Log Abs Max Min Less Greater Not And Or ReduceMax CastLike
""".split())


# ----------------------------------------------------------------------------------------------
# Weights: seeded, non-trivial
# ----------------------------------------------------------------------------------------------
NORM_TYPES = (nn.LayerNorm, nn.BatchNorm1d, nn.BatchNorm2d)


@torch.no_grad()
def randomize_(model: nn.Module, seed: int) -> nn.Module:
    """Re-draw every parameter and BatchNorm statistic from one seeded generator.

    Library inits leave biases, class tokens and some heads at zero and LayerNorm at (1, 0), and
    timm's trunc_normal(0.02) makes attention logits so small that the softmax is almost uniform;
    a fixture like that would hide bias, scale and normalization bugs. So:
      LayerNorm/BatchNorm weight   1 + 0.1*randn        bias 0.1*randn
      BatchNorm running_mean       0.1*randn            running_var uniform[0.5, 1.5]
      other weights (Linear, Conv2d, MultiheadAttention in_proj)   randn / sqrt(fan_in)
      other biases                 0.1*randn
      everything else (class token, position embeddings, mask token)  0.1*randn
    """
    g = torch.Generator().manual_seed(seed)

    def randn(t):
        return torch.randn(t.shape, generator=g, dtype=torch.float32)

    owner = {}
    for mname, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owner[f"{mname}.{pname}" if mname else pname] = mod
    for name, p in model.named_parameters():
        mod = owner[name]
        leaf = name.rsplit(".", 1)[-1]
        if isinstance(mod, NORM_TYPES):
            if leaf == "weight":
                p.copy_(1.0 + 0.1 * randn(p))
            else:
                p.copy_(0.1 * randn(p))
        elif leaf.endswith("bias"):
            p.copy_(0.1 * randn(p))
        elif leaf.endswith("weight") and p.dim() >= 2:
            fan_in = int(np.prod(p.shape[1:]))
            p.copy_(randn(p) / math.sqrt(fan_in))
        else:
            p.copy_(0.1 * randn(p))
    for mod in model.modules():
        if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
            mod.running_mean.copy_(0.1 * randn(mod.running_mean))
            mod.running_var.copy_(0.5 + torch.rand(mod.running_var.shape, generator=g))
    return model


# ----------------------------------------------------------------------------------------------
# torchvision
# ----------------------------------------------------------------------------------------------
def build_torchvision(image=32, patch=8, depth=2, heads=4, width=64, mlp=128, classes=10):
    from torchvision.models.vision_transformer import VisionTransformer
    # norm_layer defaults to partial(nn.LayerNorm, eps=1e-6)
    return VisionTransformer(image_size=image, patch_size=patch, num_layers=depth, num_heads=heads,
                             hidden_dim=width, mlp_dim=mlp, num_classes=classes)


def build_torchvision_vit_b_16():
    from torchvision.models import vit_b_16
    return vit_b_16(weights=None)  # 224, patch 16, 12 layers, 768, 12 heads, mlp 3072


# ----------------------------------------------------------------------------------------------
# timm
# ----------------------------------------------------------------------------------------------
def build_timm(image=32, patch=8, depth=2, heads=4, width=64, mlp_ratio=2.0, classes=10):
    from timm.layers import set_fused_attn
    from timm.models.vision_transformer import VisionTransformer
    # Attention modules read use_fused_attn() in __init__: turn F.scaled_dot_product_attention off
    # before constructing, so forward() takes the explicit q*scale @ k^T -> softmax -> @ v path.
    set_fused_attn(False)
    m = VisionTransformer(img_size=image, patch_size=patch, embed_dim=width, depth=depth,
                          num_heads=heads, mlp_ratio=mlp_ratio, num_classes=classes)
    n_attn = 0
    for mod in m.modules():
        if hasattr(mod, "fused_attn"):
            mod.fused_attn = False  # belt and braces
            n_attn += 1
    assert n_attn == depth, f"timm: expected {depth} Attention modules, found {n_attn}"
    return m


# ----------------------------------------------------------------------------------------------
# einops (the einops ViT tutorial code, as users copy it)
# ----------------------------------------------------------------------------------------------
def build_einops(image=32, patch=8, depth=2, heads=4, width=64, expansion=2, classes=10):
    from einops import rearrange, repeat
    from einops.layers.torch import Rearrange, Reduce
    Tensor = torch.Tensor

    class PatchEmbedding(nn.Module):
        def __init__(self, in_channels: int = 3, patch_size: int = 16, emb_size: int = 768,
                     img_size: int = 224):
            self.patch_size = patch_size
            super().__init__()
            self.projection = nn.Sequential(
                # using a conv layer instead of a linear one -> performance gains
                nn.Conv2d(in_channels, emb_size, kernel_size=patch_size, stride=patch_size),
                Rearrange('b e h w -> b (h w) e'),
            )
            self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
            self.positions = nn.Parameter(torch.randn((img_size // patch_size) ** 2 + 1, emb_size))

        def forward(self, x: Tensor) -> Tensor:
            b, _, _, _ = x.shape
            x = self.projection(x)
            cls_tokens = repeat(self.cls_token, '() n e -> b n e', b=b)
            # prepend the cls token to the input
            x = torch.cat([cls_tokens, x], dim=1)
            # add position embedding
            x += self.positions
            return x

    class MultiHeadAttention(nn.Module):
        def __init__(self, emb_size: int = 768, num_heads: int = 8, dropout: float = 0):
            super().__init__()
            self.emb_size = emb_size
            self.num_heads = num_heads
            # fuse the queries, keys and values in one matrix
            self.qkv = nn.Linear(emb_size, emb_size * 3)
            self.att_drop = nn.Dropout(dropout)
            self.projection = nn.Linear(emb_size, emb_size)

        def forward(self, x: Tensor, mask: Tensor = None) -> Tensor:
            # split keys, queries and values in num_heads
            qkv = rearrange(self.qkv(x), "b n (h d qkv) -> (qkv) b h n d", h=self.num_heads, qkv=3)
            queries, keys, values = qkv[0], qkv[1], qkv[2]
            # sum up over the last axis
            energy = torch.einsum('bhqd, bhkd -> bhqk', queries, keys)  # batch, num_heads, query_len, key_len
            if mask is not None:
                fill_value = torch.finfo(torch.float32).min
                energy.mask_fill(~mask, fill_value)
            scaling = self.emb_size ** (1 / 2)
            att = F.softmax(energy, dim=-1) / scaling
            att = self.att_drop(att)
            # sum up over the third axis
            out = torch.einsum('bhal, bhlv -> bhav ', att, values)
            out = rearrange(out, "b h n d -> b n (h d)")
            out = self.projection(out)
            return out

    class ResidualAdd(nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x, **kwargs):
            res = x
            x = self.fn(x, **kwargs)
            x += res
            return x

    class FeedForwardBlock(nn.Sequential):
        def __init__(self, emb_size: int, expansion: int = 4, drop_p: float = 0.):
            super().__init__(
                nn.Linear(emb_size, expansion * emb_size),
                nn.GELU(),
                nn.Dropout(drop_p),
                nn.Linear(expansion * emb_size, emb_size),
            )

    class TransformerEncoderBlock(nn.Sequential):
        def __init__(self, emb_size: int = 768, drop_p: float = 0., forward_expansion: int = 4,
                     forward_drop_p: float = 0., **kwargs):
            super().__init__(
                ResidualAdd(nn.Sequential(
                    nn.LayerNorm(emb_size),
                    MultiHeadAttention(emb_size, **kwargs),
                    nn.Dropout(drop_p)
                )),
                ResidualAdd(nn.Sequential(
                    nn.LayerNorm(emb_size),
                    FeedForwardBlock(emb_size, expansion=forward_expansion, drop_p=forward_drop_p),
                    nn.Dropout(drop_p)
                ))
            )

    class TransformerEncoder(nn.Sequential):
        def __init__(self, depth: int = 12, **kwargs):
            super().__init__(*[TransformerEncoderBlock(**kwargs) for _ in range(depth)])

    class ClassificationHead(nn.Sequential):
        def __init__(self, emb_size: int = 768, n_classes: int = 1000):
            super().__init__(
                Reduce('b n e -> b e', reduction='mean'),
                nn.LayerNorm(emb_size),
                nn.Linear(emb_size, n_classes))

    class ViT(nn.Sequential):
        def __init__(self, in_channels: int = 3, patch_size: int = 16, emb_size: int = 768,
                     img_size: int = 224, depth: int = 12, n_classes: int = 1000, **kwargs):
            super().__init__(
                PatchEmbedding(in_channels, patch_size, emb_size, img_size),
                TransformerEncoder(depth, emb_size=emb_size, **kwargs),
                ClassificationHead(emb_size, n_classes)
            )

    return ViT(in_channels=3, patch_size=patch, emb_size=width, img_size=image, depth=depth,
               n_classes=classes, num_heads=heads, forward_expansion=expansion)


# ----------------------------------------------------------------------------------------------
# insightface face ViT (recognition/arcface_torch/backbones/vit.py), inference path.
# Differences from the original file, none of which changes the eval-mode graph on CPU:
#   - the torch.cuda.amp.autocast(True/False) context managers are left out (no-ops for fp32 CPU
#     export, and they only emit deprecation warnings);
#   - DropPath comes from the original only for drop_path_rate > 0 (0 here) -> nn.Identity;
#   - the training-only random masking path is kept behind `self.training` as in the original.
# ----------------------------------------------------------------------------------------------
class FaceMlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.ReLU6,
                 drop=0.):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop(x)
        x = self.fc2(x)
        x = self.drop(x)
        return x


class VITBatchNorm(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.num_features = num_features
        self.bn = nn.BatchNorm1d(num_features=num_features)

    def forward(self, x):
        return self.bn(x)


class FaceAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = False,
                 qk_scale: Optional[None] = None, attn_drop: float = 0., proj_drop: float = 0.):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = qk_scale or head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        batch_size, num_token, embed_dim = x.shape
        # qkv is [3,batch_size,num_heads,num_token, embed_dim//num_heads]
        qkv = self.qkv(x).reshape(
            batch_size, num_token, 3, self.num_heads, embed_dim // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0].float(), qkv[1].float(), qkv[2].float()
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)
        x = (attn @ v).transpose(1, 2).reshape(batch_size, num_token, embed_dim)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class FaceBlock(nn.Module):
    def __init__(self, dim: int, num_heads: int, num_patches: int, mlp_ratio: float = 4.,
                 qkv_bias: bool = False, qk_scale: Optional[None] = None, drop: float = 0.,
                 attn_drop: float = 0., drop_path: float = 0., act_layer: Callable = nn.ReLU6,
                 norm_layer: str = "ln", patch_n: int = 144):
        super().__init__()
        if norm_layer == "bn":
            self.norm1 = VITBatchNorm(num_features=num_patches)
            self.norm2 = VITBatchNorm(num_features=num_patches)
        elif norm_layer == "ln":
            self.norm1 = nn.LayerNorm(dim)
            self.norm2 = nn.LayerNorm(dim)
        self.attn = FaceAttention(dim, num_heads=num_heads, qkv_bias=qkv_bias, qk_scale=qk_scale,
                                  attn_drop=attn_drop, proj_drop=drop)
        assert drop_path == 0.0
        self.drop_path = nn.Identity()
        mlp_hidden_dim = int(dim * mlp_ratio)
        self.mlp = FaceMlp(in_features=dim, hidden_features=mlp_hidden_dim, act_layer=act_layer,
                           drop=drop)

    def forward(self, x):
        x = x + self.drop_path(self.attn(self.norm1(x)))
        x = x + self.drop_path(self.mlp(self.norm2(x)))
        return x


class FacePatchEmbed(nn.Module):
    def __init__(self, img_size=108, patch_size=9, in_channels=3, embed_dim=768):
        super().__init__()
        img_size = (img_size, img_size)
        patch_size = (patch_size, patch_size)
        num_patches = (img_size[1] // patch_size[1]) * (img_size[0] // patch_size[0])
        self.img_size = img_size
        self.patch_size = patch_size
        self.num_patches = num_patches
        self.proj = nn.Conv2d(in_channels, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        batch_size, channels, height, width = x.shape
        assert height == self.img_size[0] and width == self.img_size[1], \
            f"Input image size ({height}*{width}) doesn't match model ({self.img_size[0]}*{self.img_size[1]})."
        x = self.proj(x).flatten(2).transpose(1, 2)
        return x


class FaceVisionTransformer(nn.Module):
    def __init__(self, img_size: int = 112, patch_size: int = 16, in_channels: int = 3,
                 num_classes: int = 1000, embed_dim: int = 768, depth: int = 12,
                 num_heads: int = 12, mlp_ratio: float = 4., qkv_bias: bool = False,
                 qk_scale: Optional[None] = None, drop_rate: float = 0., attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0., norm_layer: str = "ln", mask_ratio=0.1):
        super().__init__()
        self.num_classes = num_classes
        self.num_features = self.embed_dim = embed_dim
        self.patch_embed = FacePatchEmbed(img_size=img_size, patch_size=patch_size,
                                          in_channels=in_channels, embed_dim=embed_dim)
        self.mask_ratio = mask_ratio
        num_patches = self.patch_embed.num_patches
        self.num_patches = num_patches
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches, embed_dim))
        self.pos_drop = nn.Dropout(p=drop_rate)
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]
        patch_n = (img_size // patch_size) ** 2
        self.blocks = nn.ModuleList([
            FaceBlock(dim=embed_dim, num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
                      qk_scale=qk_scale, drop=drop_rate, attn_drop=attn_drop_rate, drop_path=dpr[i],
                      norm_layer=norm_layer, num_patches=num_patches, patch_n=patch_n)
            for i in range(depth)])
        if norm_layer == "ln":
            self.norm = nn.LayerNorm(embed_dim)
        elif norm_layer == "bn":
            self.norm = VITBatchNorm(self.num_patches)
        # features head
        self.feature = nn.Sequential(
            nn.Linear(in_features=embed_dim * num_patches, out_features=embed_dim, bias=False),
            nn.BatchNorm1d(num_features=embed_dim, eps=2e-5),
            nn.Linear(in_features=embed_dim, out_features=num_classes, bias=False),
            nn.BatchNorm1d(num_features=num_classes, eps=2e-5)
        )
        self.mask_token = nn.Parameter(torch.zeros(1, 1, embed_dim))

    def forward_features(self, x):
        B = x.shape[0]
        x = self.patch_embed(x)
        x = x + self.pos_embed
        x = self.pos_drop(x)
        if self.training and self.mask_ratio > 0:
            raise NotImplementedError("training-time random masking is not part of the fixture")
        for func in self.blocks:
            x = func(x)
        x = self.norm(x.float())
        return torch.reshape(x, (B, self.num_patches * self.embed_dim))

    def forward(self, x):
        x = self.forward_features(x)
        x = self.feature(x)
        return x


def build_face(norm_layer, embed=64, depth=2, heads=4, mlp_ratio=2.0, num_features=32):
    return FaceVisionTransformer(img_size=112, patch_size=9, num_classes=num_features,
                                 embed_dim=embed, depth=depth, num_heads=heads, mlp_ratio=mlp_ratio,
                                 norm_layer=norm_layer, mask_ratio=0.1)


# ----------------------------------------------------------------------------------------------
# Families
# ----------------------------------------------------------------------------------------------
# name: (builder, weight seed, image, depth, heads, width, tokens, norm layers are BatchNorm)
# (fixtures.tsv's has_batchnorm is per file: whether a BatchNormalization node is in it; the face
# models' feature head has BatchNorm1d, which the dynamo exporter's optimizer folds into Gemm.)
TINY = {
    "torchvision": (build_torchvision, 101, 32, 2, 4, 64, 17, False),
    "timm": (build_timm, 102, 32, 2, 4, 64, 17, False),
    "einops": (build_einops, 103, 32, 2, 4, 64, 17, False),
    "face_ln": (lambda: build_face("ln"), 104, 112, 2, 4, 64, 144, False),
    "face_bn": (lambda: build_face("bn"), 105, 112, 2, 4, 64, 144, True),
}
TINY_INPUT_SEED = {"torchvision": 11, "timm": 12, "einops": 13, "face_ln": 14, "face_bn": 15}

# Full-size benchmark models (ts17 only, --full OUTDIR). The face ViT is insightface's "vit_s"
# (get_model("vit_s"): img 112, patch 9, embed_dim 512, depth 12, num_heads 8, mlp_ratio 4 (the
# default), norm_layer "ln", num_features 512); "vit_t" is the same with embed_dim 256.
def calibrated_bn(builder, image):
    """A builder whose model's BatchNorm statistics are measured after randomize_ (as training
    would leave them), instead of drawn: twelve blocks of BatchNorm over random statistics leave
    activations no trained model has, where float rounding alone moves the output."""
    def build():
        m = builder()
        m.calibrate_bn = image
        return m
    return build


FULL = {
    "vit_ti16_timm": (lambda: build_timm(224, 16, 12, 3, 192, 4.0, 1000), 201, 224),
    "vit_s16_timm": (lambda: build_timm(224, 16, 12, 6, 384, 4.0, 1000), 202, 224),
    "vit_b16_timm": (lambda: build_timm(224, 16, 12, 12, 768, 4.0, 1000), 203, 224),
    "vit_b16_torchvision": (build_torchvision_vit_b_16, 204, 224),
    "face_vit_s": (lambda: build_face("ln", 512, 12, 8, 4.0, 512), 205, 112),
    "vit_b16_einops": (lambda: build_einops(224, 16, 12, 12, 768, 4, 1000), 206, 224),
    "face_vit_s_bn": (calibrated_bn(lambda: build_face("bn", 512, 12, 8, 4.0, 512), 112), 207, 112),
    "vit_l16_timm": (lambda: build_timm(224, 16, 24, 16, 1024, 4.0, 1000), 208, 224),
}


@torch.no_grad()
def calibrate_bn_(m, seed, image):
    m.eval()
    for mod in m.modules():
        if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
            mod.reset_running_stats()
            mod.momentum = None  # a cumulative average over the calibration batches
            mod.train()          # only the BatchNorms: the rest stays in inference mode
    for k in range(4):
        m(torch.from_numpy(make_input(seed + 500 + k, 16, image)))


def make_model(builder, seed):
    torch.manual_seed(seed)
    m = builder()
    randomize_(m, seed)
    if getattr(m, "calibrate_bn", False):
        calibrate_bn_(m, seed, m.calibrate_bn)
    m.eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def make_input(seed, batch, image):
    rng = np.random.default_rng([seed, batch])
    return np.ascontiguousarray(rng.standard_normal((batch, 3, image, image), dtype=np.float32))


def save_npy(path, arr):
    arr = np.ascontiguousarray(np.asarray(arr, dtype="<f4"))
    np.save(path, arr, allow_pickle=False)


@torch.no_grad()
def run_torch(model, x):
    y = model(torch.from_numpy(x))
    assert isinstance(y, torch.Tensor), type(y)
    return y.detach().numpy().astype(np.float32)


# ----------------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------------
def export_ts(model, example, path, opset):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example,), path, dynamo=False, opset_version=opset,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                          do_constant_folding=True)


def export_dynamo(model, example, path):
    batch = torch.export.Dim("batch", min=1, max=4096)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(model, (example,), dynamo=True, dynamic_shapes=({0: batch},),
                                 input_names=["input"], output_names=["output"],
                                 external_data=False, report=False, verify=False, verbose=False)
    proto = prog.model_proto
    graph = proto.graph
    assert len(graph.input) == 1 and len(graph.output) == 1, "dynamo export: expected 1 in / 1 out"
    rename = {graph.input[0].name: "input", graph.output[0].name: "output"}
    for old, new in rename.items():
        if old == new:
            continue
        for vi in list(graph.input) + list(graph.output):
            if vi.name == old:
                vi.name = new
        for node in graph.node:
            for i, n in enumerate(node.input):
                if n == old:
                    node.input[i] = new
            for i, n in enumerate(node.output):
                if n == old:
                    node.output[i] = new
    # Make the batch dim of input and output the symbol "batch".
    for vi in (graph.input[0], graph.output[0]):
        d = vi.type.tensor_type.shape.dim[0]
        assert not d.HasField("dim_value"), f"dynamo export: batch dim of {vi.name} is static"
        d.dim_param = "batch"
    # Node metadata keeps the exporter's provenance (namespace, class hierarchy, fx node), but the
    # Python stack traces hold absolute paths of this machine: drop them so the file depends only
    # on the package versions, not on where the venv or the checkout live.
    for node in graph.node:
        keep = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    onnx.save(proto, path, save_as_external_data=False)


def default_opset(m):
    for imp in m.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    raise RuntimeError("no default-domain opset_import")


def inspect_onnx(path):
    m = onnx.load(path, load_external_data=False)
    onnx.checker.check_model(m, full_check=False)
    g = m.graph
    # self-contained
    for init in g.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            raise RuntimeError(f"{path}: initializer {init.name} uses external data")
    # names and symbolic batch
    assert [i.name for i in g.input if i.name not in {x.name for x in g.initializer}] == ["input"], \
        f"{path}: graph inputs {[i.name for i in g.input]}"
    assert [o.name for o in g.output] == ["output"], f"{path}: graph outputs {[o.name for o in g.output]}"
    for vi in (g.input[0], g.output[0]):
        d = vi.type.tensor_type.shape.dim[0]
        if d.HasField("dim_value") or not d.dim_param:
            raise RuntimeError(f"{path}: batch dim of {vi.name} is not symbolic")
    ops = set()
    domains = set()

    def walk(graph):
        for n in graph.node:
            ops.add(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}")
            if n.domain not in ("", "ai.onnx"):
                domains.add(n.domain)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)
    walk(g)
    for f in m.functions:
        domains.add(f"function:{f.domain}::{f.name}")
    opsets = {imp.domain or "ai.onnx": imp.version for imp in m.opset_import}
    return {"opset": default_opset(m), "ops": sorted(ops), "domains": sorted(domains),
            "opsets": opsets, "nodes": len(g.node), "batch_symbol": g.input[0].type.tensor_type.shape.dim[0].dim_param}


def ort_run(path, x):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return sess.run(["output"], {"input": x})[0]


def rel_err(out, ref):
    assert out.shape == ref.shape, f"shape {out.shape} != {ref.shape}"
    return float(np.max(np.abs(out.astype(np.float64) - ref)) / np.max(np.abs(ref)))


# ----------------------------------------------------------------------------------------------
# Drivers
# ----------------------------------------------------------------------------------------------
EXPORTERS = ["ts13", "ts17", "dynamo"]


def export_one(model, example, path, exporter):
    if exporter == "ts13":
        export_ts(model, example, path, 13)
    elif exporter == "ts17":
        export_ts(model, example, path, 17)
    else:
        export_dynamo(model, example, path)


def gen_tiny(outdir, families):
    os.makedirs(outdir, exist_ok=True)
    rows, report, failures = [], [], []
    for fam in families:
        builder, wseed, image, depth, heads, width, tokens, _ = TINY[fam]
        model = make_model(builder, wseed)
        refs = {}
        for b in (1, 3):
            x = make_input(TINY_INPUT_SEED[fam], b, image)
            y = run_torch(model, x)
            save_npy(os.path.join(outdir, f"{fam}.b{b}.input.npy"), x)
            save_npy(os.path.join(outdir, f"{fam}.b{b}.output.npy"), y)
            refs[b] = (x, y)
        example = torch.from_numpy(make_input(TINY_INPUT_SEED[fam] + 1000, 2, image))
        for exp in EXPORTERS:
            name = f"{fam}-{exp}.onnx"
            path = os.path.join(outdir, name)
            export_one(model, example, path, exp)
            info = inspect_onnx(path)
            errs = {b: rel_err(ort_run(path, x), y) for b, (x, y) in refs.items()}
            ok = all(e <= TOL for e in errs.values())
            unexpected = [o for o in info["ops"] if o not in EXPECTED_OPS]
            print(f"{name:26s} opset {info['opset']:2d} nodes {info['nodes']:4d} "
                  f"err b1 {errs[1]:.2e} b3 {errs[3]:.2e} {'ok' if ok else 'FAIL'} "
                  f"size {os.path.getsize(path)}")
            print(f"    opsets {info['opsets']}")
            print(f"    ops    {' '.join(info['ops'])}")
            if unexpected or info["domains"]:
                print(f"    NOTE   unexpected ops {unexpected} domains {info['domains']}")
            if not ok:
                failures.append(f"{name}: err b1 {errs[1]:.3e} b3 {errs[3]:.3e} > {TOL}")
            rows.append([name, fam, exp, str(info["opset"]), str(depth), str(heads), str(width),
                         str(tokens), str(image), "1" if "BatchNormalization" in info["ops"] else "0"])
            report.append((name, info, errs, unexpected))
    if failures:
        raise SystemExit("FIXTURE SELF-CHECK FAILED:\n  " + "\n  ".join(failures))
    return rows, report


def write_manifest(outdir, rows):
    header = ["model", "family", "exporter", "opset", "depth", "heads", "width", "tokens", "image",
              "has_batchnorm"]
    with open(os.path.join(outdir, "fixtures.tsv"), "w", newline="\n") as f:
        f.write("\t".join(header) + "\n")
        for r in rows:
            f.write("\t".join(r) + "\n")


def write_readme(outdir, report):
    import einops
    import timm
    import torchvision
    lines = []
    w = lines.append
    w("# Test fixtures: the seed ViT family as ONNX")
    w("")
    w("Generated by `gen_fixtures.py`; do not edit by hand (this README is generated too).")
    w("")
    w("Regenerate (from the repository root):")
    w("")
    w("```")
    w("tests/models/setup-gen-env.sh .venv-gen        # once: venv with requirements.txt")
    w(".venv-gen/bin/python tests/models/gen_fixtures.py")
    w("```")
    w("")
    w("Full-size benchmark models (never committed; ts17 only; `<name>.onnx`, `<name>.b1.input.npy`,")
    w("`<name>.b1.output.npy`):")
    w("")
    w("```")
    w(".venv-gen/bin/python tests/models/gen_fixtures.py --full OUTDIR [--only " + ",".join(FULL) + "]")
    w("```")
    w("")
    w("## What is here")
    w("")
    w("Five tiny ViTs (depth 2, width 64, 4 heads, MLP 128), built the way PyTorch users write them:")
    w("")
    w("| family | source | image / patch | tokens | notes |")
    w("|---|---|---|---|---|")
    w("| torchvision | `torchvision.models.vision_transformer.VisionTransformer` | 32 / 8 | 17 | class token, "
      "`nn.MultiheadAttention` (fast path off, so it goes through `scaled_dot_product_attention`), LayerNorm eps 1e-6, 10 classes |")
    w("| timm | `timm.models.vision_transformer.VisionTransformer` | 32 / 8 | 17 | fused attention off "
      "(`timm.layers.set_fused_attn(False)`): qkv Linear, reshape(B,N,3,H,D).permute(2,0,3,1,4), q*scale, q@k^T, softmax; 10 classes |")
    w("| einops | einops ViT tutorial code (in `gen_fixtures.py`) | 32 / 8 | 17 | Conv2d + `Rearrange`, "
      "qkv split `(h d qkv)` interleaved, `einsum`, softmax then `/ sqrt(emb_size)`, mean-pool `Reduce` + LayerNorm + Linear head; 10 classes |")
    w("| face_ln | insightface `arcface_torch/backbones/vit.py` (in `gen_fixtures.py`) | 112 / 9 | 144 | no class token, "
      "ReLU6 MLP, LayerNorm, flatten + Linear/BatchNorm1d/Linear/BatchNorm1d (eps 2e-5) head, 32 features |")
    w("| face_bn | same, `norm_layer=\"bn\"` | 112 / 9 | 144 | BatchNorm1d(144) over the patch axis of (B, 144, 64) instead of LayerNorm |")
    w("")
    w("Weights are seeded random draws (see `randomize_`): Linear/Conv weights randn/sqrt(fan_in), biases,")
    w("class tokens and position embeddings 0.1*randn, LayerNorm/BatchNorm weight 1+0.1*randn, bias 0.1*randn,")
    w("BatchNorm running_mean 0.1*randn, running_var uniform [0.5, 1.5]. Models are in eval() mode.")
    w("")
    w("Per family:")
    w("")
    w("- `<family>-ts13.onnx`: `torch.onnx.export(dynamo=False, opset_version=13)` (LayerNorm decomposed)")
    w("- `<family>-ts17.onnx`: `torch.onnx.export(dynamo=False, opset_version=17)` (LayerNormalization)")
    w("- `<family>-dynamo.onnx`: `torch.onnx.export(dynamo=True, dynamic_shapes=Dim(\"batch\"))`, default opset, one self-contained file")
    w("- `<family>.b{1,3}.input.npy`: seeded standard-normal float32 input, (B, 3, H, W)")
    w("- `<family>.b{1,3}.output.npy`: eager PyTorch fp32 output for that input")
    w("")
    w("Every .onnx has one input `input` and one output `output`, both with symbolic batch dim `batch`.")
    w("`fixtures.tsv` lists them (model, family, exporter, opset actually in the file, depth, heads, width,")
    w("tokens = encoder sequence length, image = H = W, has_batchnorm = 1 when the file has a BatchNormalization")
    w("node: face_bn always; face_ln in its ts13/ts17 files only, for the dynamo exporter's optimizer folds the")
    w("feature head's BatchNorm1d into the Gemm before it).")
    w("")
    w(f"Generated with torch {torch.__version__}, torchvision {torchvision.__version__}, timm {timm.__version__}, "
      f"einops {einops.__version__}, onnx {onnx.__version__}, onnxruntime {ort.__version__}.")
    w("")
    w("## What the exporters emit (observed with the versions above)")
    w("")
    w("- torchvision: with the fast path off, `nn.MultiheadAttention(need_weights=False)` calls")
    w("  `F.scaled_dot_product_attention`. The TorchScript exporter only has a symbolic for it from opset 14;")
    w("  for `torchvision-ts13.onnx` the generator registers that same symbolic (it only uses opset-13 ops) for")
    w("  opset 13, which is what a user hitting the 'not supported' error would do. Its decomposition computes")
    w("  the scale at run time (Shape -> Slice -> Cast -> Sqrt -> Div(1, .) -> Cast) and multiplies BOTH q and")
    w("  k^T by Sqrt(scale) before the MatMul; the dynamo export does the same with a constant. The MHA input")
    w("  projection is one (3E, E) MatMul + Add on the (L, B, E) transposed tensor, split into q, k, v by")
    w("  Reshape/Unsqueeze/Transpose/Squeeze/Gather; each head is then Reshape + Transpose to (B*H, L, D).")
    w("  `Mod` appears in the TorchScript files, on Constant inputs only (shape arithmetic of the unflatten):")
    w("  constant folding removes it.")
    w("- einops: `Einsum` equations keep the user's spaces: `bhqd, bhkd -> bhqk` and `bhal, bhlv -> bhav ` (trailing")
    w("  space); the 1/sqrt(64) is a `Div` after the `Softmax`.")
    w("- face: ReLU6 is `Clip(x, 0, 6)` with min/max as inputs. The feature head is a `Reshape` to (B, 144*64) then")
    w("  MatMul (TorchScript, Linear without bias) or Gemm. The dynamo exporter's optimizer folds the head's two")
    w("  BatchNorm1d into the Gemms before them (rule FuseBatchNormIntoGemm), so `face_ln-dynamo.onnx` has no")
    w("  BatchNormalization; `face_bn` keeps BatchNormalization over the patch axis of (B, 144, 64) (C = 144).")
    w("  The `.float()` calls of the original become `Cast(to=FLOAT)` on float tensors in the TorchScript files.")
    w("- dynamo files (opset 20): `Gelu` (approximate none) and `LayerNormalization`; `Shape` with start/end")
    w("  attributes, `Reshape` with allowzero=1; rank-2 Linear becomes `Gemm`, rank-3 Linear `MatMul` + `Add`")
    w("  with a pre-transposed weight initializer. Node metadata_props (namespace, class hierarchy, fx node) are")
    w("  kept; the Python stack traces are dropped so the files do not depend on local paths.")
    w("- TorchScript files: GELU is the erf form (Div, Erf, Add, Mul, Mul); at opset 13 LayerNorm is")
    w("  ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add; the batch dimension flows through")
    w("  Shape/Gather/Unsqueeze/Concat into Reshape and Expand targets.")
    w("")
    w("## Self-check: onnxruntime (CPU, graph optimizations off) vs PyTorch")
    w("")
    w("error = max|ort - torch| / max|torch|; the generator fails above 1e-4.")
    w("")
    w("| model | opset | nodes | err b1 | err b3 |")
    w("|---|---|---|---|---|")
    for name, info, errs, _ in report:
        w(f"| {name} | {info['opset']} | {info['nodes']} | {errs[1]:.1e} | {errs[3]:.1e} |")
    w("")
    w("## op_types per file")
    w("")
    for name, info, errs, unexpected in report:
        other = {k: v for k, v in info["opsets"].items() if k != "ai.onnx"}
        extra = f" (other opset imports: {other})" if other else ""
        w(f"- `{name}` (opset {info['opset']}{extra}): {' '.join(info['ops'])}")
        if unexpected or info["domains"]:
            w(f"  - outside the expected set: {' '.join(unexpected) or '-'}; domains/functions: {' '.join(info['domains']) or '-'}")
    w("")
    with open(os.path.join(outdir, "README.md"), "w", newline="\n") as f:
        f.write("\n".join(lines))


def gen_full(outdir, names):
    os.makedirs(outdir, exist_ok=True)
    failures = []
    for name in names:
        builder, wseed, image = FULL[name]
        model = make_model(builder, wseed)
        x = make_input(wseed, 1, image)
        y = run_torch(model, x)
        save_npy(os.path.join(outdir, f"{name}.b1.input.npy"), x)
        save_npy(os.path.join(outdir, f"{name}.b1.output.npy"), y)
        path = os.path.join(outdir, f"{name}.onnx")
        example = torch.from_numpy(make_input(wseed + 1000, 2, image))
        export_ts(model, example, path, 17)
        info = inspect_onnx(path)
        err = rel_err(ort_run(path, x), y)
        print(f"{name:22s} opset {info['opset']} nodes {info['nodes']} err b1 {err:.2e} "
              f"size {os.path.getsize(path) / 2**20:.1f} MiB")
        print(f"    ops {' '.join(info['ops'])}")
        if err > TOL:
            failures.append(f"{name}: err {err:.3e}")
        del model
    if failures:
        raise SystemExit("FULL-SIZE SELF-CHECK FAILED:\n  " + "\n  ".join(failures))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=HERE, help="output folder for the tiny fixtures (default: %(default)s)")
    ap.add_argument("--full", metavar="OUTDIR", help="generate the full-size benchmark models into OUTDIR instead")
    ap.add_argument("--only", help="comma-separated subset of families (tiny) or model names (--full)")
    args = ap.parse_args()

    torch.set_num_threads(1)  # reproducible eager reference outputs
    # torchvision's nn.MultiheadAttention would otherwise take the native fast path in eval/no-grad
    # (aten::_native_multi_head_attention), which no ONNX exporter understands.
    torch.backends.mha.set_fastpath_enabled(False)
    # torch.onnx has no opset-13 symbolic for aten::scaled_dot_product_attention (what
    # nn.MultiheadAttention(need_weights=False) calls); the opset-14 one only uses opset-13 ops,
    # so register it for 13 as a user hitting that error would.
    from torch.onnx._internal.torchscript_exporter import symbolic_opset14
    torch.onnx.register_custom_op_symbolic("aten::scaled_dot_product_attention",
                                           symbolic_opset14.scaled_dot_product_attention, 13)

    if args.full:
        names = args.only.split(",") if args.only else list(FULL)
        for n in names:
            if n not in FULL:
                ap.error(f"unknown full-size model {n!r}; known: {', '.join(FULL)}")
        gen_full(args.full, names)
        return
    fams = args.only.split(",") if args.only else list(TINY)
    for f in fams:
        if f not in TINY:
            ap.error(f"unknown family {f!r}; known: {', '.join(TINY)}")
    rows, report = gen_tiny(args.out, fams)
    if not args.only:
        write_manifest(args.out, rows)
        write_readme(args.out, report)
    print("all fixtures pass (err <= %g)" % TOL)


if __name__ == "__main__":
    main()
