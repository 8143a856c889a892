#!/usr/bin/env python3
"""bench/gpu_bench.py: vitc's CUDA backend against PyTorch on the same GPU, in one run.

For ViT-Ti/16, ViT-S/16 and ViT-B/16 (timm's architecture, 224x224, seeded weights made by
bench/vit_onnx.py, so nothing is downloaded) at batch 1, 8, 64 and 256:

  vitc            `vitc MODEL.onnx --target cuda --precision fp16 --batch 256`, run through the C
                  runtime API (ctypes): host arrays in and out, so every run includes the copy of the
                  input to the GPU and of the logits back, then the CUDA graph of that batch
  torch eager     the same model and weights as a torch.nn.Module in fp16 on the GPU, attention by
                  F.scaled_dot_product_attention (flash / memory-efficient kernels)
  torch.compile   that module through torch.compile (default mode, one compile per batch size)

PyTorch is timed twice: with the input already on the GPU (what PyTorch benchmarks usually report)
and host to host (input copied in, logits copied out, as vitc is timed).  Times are medians of
--repeat runs after --warmup runs, with the GPU synchronised; images/s = batch / time.  TFLOP/s counts
2 x multiply-adds of every matrix product; "% peak" divides by the tensor-core peak measured here
(a large fp16 torch.matmul through cuBLAS), or, without PyTorch, by the GPU's nominal dense fp16 peak
(marked as such).  Each model's vitc output is checked against vitc's reference interpreter
(`vitc compare`, fp32 with double accumulation, at batch 1) and, with PyTorch, against PyTorch fp32.

Needs only the Python standard library and a vitc built with the CUDA backend (bench/gpu_check.sh
builds one); PyTorch with CUDA, when importable, adds its columns.  Writes bench/results-gpu.md with
the GPU's name and the date.

    python3 bench/gpu_bench.py --build build-gpu
    python3 bench/gpu_bench.py --build build-gpu --models vit_b16 --batches 64 --no-torch-compile
    python3 bench/gpu_bench.py --build build-gpu --models vit_b16 --append   # add to an existing table
"""
import argparse
import ctypes
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from array import array

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import vit_onnx as V  # noqa: E402

# Dense fp16 tensor-core peaks from NVIDIA's data sheets (TFLOP/s, without sparsity): only used when
# PyTorch is not there to measure one.
NOMINAL_FP16_TFLOPS = [("H200", 989.0), ("H100 SXM", 989.0), ("H100 NVL", 835.0), ("H100 PCIe", 756.0),
                       ("H100", 756.0), ("A100", 312.0), ("L40S", 362.0), ("A10", 125.0)]


# ------------------------------------------------------------------------------------------------
# vitc through its C API
# ------------------------------------------------------------------------------------------------
class VitcTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("dims", ctypes.c_int64 * 8), ("data", ctypes.c_void_p)]


def tensor(buf, dims):
    t = VitcTensor()
    t.name, t.dtype, t.rank = None, 1, len(dims)
    for i, d in enumerate(dims):
        t.dims[i] = d
    t.data = buf.buffer_info()[0]
    return t


class Vitc:
    def __init__(self, build):
        path = os.path.join(build, "libvitc_runtime.so")
        if not os.path.exists(path):
            raise SystemExit(f"{path} is missing: build vitc first (bench/gpu_check.sh)")
        self.lib = ctypes.CDLL(path)
        self.lib.vitc_last_error.restype = ctypes.c_char_p
        self.bin = os.path.join(build, "vitc")

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"vitc: {what} failed ({status}): {self.lib.vitc_last_error().decode()}")

    def device(self):
        name, arch = ctypes.create_string_buffer(256), ctypes.c_int()
        if self.lib.vitc_cuda_device(name, ctypes.c_size_t(256), ctypes.byref(arch)) != 0:
            return None, 0, self.lib.vitc_last_error().decode()
        return name.value.decode(), arch.value, ""

    def open(self, so):
        model, ctx = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.lib.vitc_model_load(so.encode(), ctypes.byref(model)), "load " + so)
        self.check(self.lib.vitc_context_create(model, 0, ctypes.byref(ctx)), "context")
        return model, ctx

    def close(self, model, ctx):
        self.lib.vitc_context_free(ctx)
        self.lib.vitc_model_free(model)

    def timed(self, ctx, x, xdims, ydims, warmup, repeat):
        n = 1
        for d in ydims:
            n *= d
        y = array("f", bytes(4 * n))
        tin, tout = tensor(x, xdims), tensor(y, ydims)
        for _ in range(warmup):
            self.check(self.lib.vitc_run(ctx, ctypes.byref(tin), 1, ctypes.byref(tout), 1), "run")
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            self.check(self.lib.vitc_run(ctx, ctypes.byref(tin), 1, ctypes.byref(tout), 1), "run")
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times), y


# ------------------------------------------------------------------------------------------------
# PyTorch, when it is there
# ------------------------------------------------------------------------------------------------
def import_torch():
    try:
        import torch
    except ImportError as e:
        return None, f"PyTorch is not installed ({e})"
    if not torch.cuda.is_available():
        return None, f"PyTorch {torch.__version__} sees no CUDA device"
    return torch, ""


def torch_vit(torch, cfg, weights):
    """The ViT of bench/vit_onnx.py as a torch module with the same weights (fp32, on the GPU)."""
    nn, F = torch.nn, torch.nn.functional
    c, h = cfg["width"], cfg["heads"]

    def param(name):
        dims, data = weights[name]
        return torch.frombuffer(bytearray(data.tobytes()), dtype=torch.float32).reshape(dims).clone()

    class Block(nn.Module):
        def __init__(self, i):
            super().__init__()
            b = f"blocks.{i}."
            self.n1 = nn.LayerNorm(c, eps=1e-6)
            self.n2 = nn.LayerNorm(c, eps=1e-6)
            self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.fc1, self.fc2 = nn.Linear(c, c * cfg["mlp"]), nn.Linear(c * cfg["mlp"], c)
            with torch.no_grad():
                for ln, key in ((self.n1, "norm1"), (self.n2, "norm2")):
                    ln.weight.copy_(param(b + key + ".weight"))
                    ln.bias.copy_(param(b + key + ".bias"))
                for lin, key in ((self.qkv, "qkv"), (self.proj, "proj"), (self.fc1, "fc1"), (self.fc2, "fc2")):
                    lin.weight.copy_(param(b + key + ".weight").t())  # stored [in, out] for MatMul
                    lin.bias.copy_(param(b + key + ".bias"))

        def forward(self, x):
            bsz, n, _ = x.shape
            q, k, v = self.qkv(self.n1(x)).reshape(bsz, n, 3, h, c // h).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v)
            x = x + self.proj(a.transpose(1, 2).reshape(bsz, n, c))
            return x + self.fc2(F.gelu(self.fc1(self.n2(x))))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(3, c, cfg["patch"], cfg["patch"])
            self.cls = nn.Parameter(param("cls_token"))
            self.pos = nn.Parameter(param("pos_embed"))
            self.blocks = nn.ModuleList(Block(i) for i in range(cfg["depth"]))
            self.norm = nn.LayerNorm(c, eps=1e-6)
            self.head = nn.Linear(c, cfg["classes"])
            with torch.no_grad():
                self.patch.weight.copy_(param("patch.weight"))
                self.patch.bias.copy_(param("patch.bias"))
                self.norm.weight.copy_(param("norm.weight"))
                self.norm.bias.copy_(param("norm.bias"))
                self.head.weight.copy_(param("head.weight").t())
                self.head.bias.copy_(param("head.bias"))

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            for b in self.blocks:
                x = b(x)
            return self.head(self.norm(x)[:, 0])

    return ViT().eval().cuda()


def torch_timed(torch, fn, x_host, warmup, repeat, host_to_host):
    """Median ms of fn; the input on the GPU already, or copied in and out each run."""
    x_dev = x_host.cuda().half()
    with torch.inference_mode():
        for _ in range(warmup):
            fn(x_dev)
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            if host_to_host:
                fn(x_host.cuda(non_blocking=False).half()).float().cpu()
            else:
                fn(x_dev)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def measured_peak(torch):
    """fp16 dense tensor-core TFLOP/s of cuBLAS on an 8192^3 product."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    reps, best = 20, None
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / reps
        best = dt if best is None else min(best, dt)
    return 2 * n ** 3 / best / 1e12


# ------------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------------
def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def rel_error(a, b):
    den = max(abs(v) for v in b) or 1.0
    return max(abs(x - y) for x, y in zip(a, b)) / den


def main():
    ap = argparse.ArgumentParser(description="vitc (CUDA) vs PyTorch eager and torch.compile on one GPU")
    ap.add_argument("--build", default=os.path.join(REPO, "build-gpu"))
    ap.add_argument("--models", default="vit_ti16,vit_s16,vit_b16")
    ap.add_argument("--batches", default="1,8,64,256")
    ap.add_argument("--precision", default="fp16", choices=["fp16", "bf16", "tf32", "fp32"])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--workdir", default="/tmp/vitc-gpu-bench")
    ap.add_argument("--out", default=os.path.join(HERE, "results-gpu.md"))
    ap.add_argument("--no-torch", action="store_true", help="vitc only")
    ap.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile (slow to compile)")
    ap.add_argument("--append", action="store_true",
                    help="add the rows to an existing --out (a run split in parts, e.g. one model per command)")
    args = ap.parse_args()

    vitc = Vitc(args.build)
    gpu, arch, why = vitc.device()
    if not gpu:
        raise SystemExit(f"gpu_bench: no CUDA device: {why}")
    torch, torch_why = (None, "--no-torch") if args.no_torch else import_torch()
    os.makedirs(args.workdir, exist_ok=True)
    batches = [int(b) for b in args.batches.split(",")]
    print(f"GPU: {gpu} (sm_{arch}); PyTorch: {torch.__version__ if torch else torch_why}", flush=True)

    peak, peak_note = None, ""
    if torch:
        peak = measured_peak(torch)
        peak_note = f"measured: fp16 torch.matmul 8192^3 (cuBLAS), {peak:.0f} TFLOP/s"
    else:
        for key, tf in NOMINAL_FP16_TFLOPS:
            if key.split()[0] in gpu and all(w in gpu for w in key.split()[1:]):
                peak, peak_note = tf, f"nominal (data sheet, dense fp16): {tf:.0f} TFLOP/s; not measured: {torch_why}"
                break
        if peak is None:
            peak_note = f"unknown: {torch_why}, and {gpu} is not in the data-sheet table"
    print("peak:", peak_note, flush=True)

    rows, checks = [], []
    for name in args.models.split(","):
        cfg = V.CONFIGS[name]
        onnx = os.path.join(args.workdir, f"{name}.onnx")
        print(f"== {name}: weights and ONNX", flush=True)
        weights = V.vit_weights(cfg, seed=1)
        if not os.path.exists(onnx):
            V.write_vit_onnx(cfg, weights, onnx)
        so = os.path.join(args.workdir, f"{name}.{args.precision}.so")
        t0 = time.perf_counter()
        r = run([vitc.bin, onnx, "--target", "cuda", "--precision", args.precision, "--batch", str(max(batches)),
                 "-o", so])
        compile_s = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"compiling {name} failed:\n{r.stderr}")
        print(f"   compiled in {compile_s:.1f} s", flush=True)
        r = run([vitc.bin, "compare", onnx, so, "--batch", "1"])
        m = re.search(r"^\S+\s+f32\[[^\]]*\]\s+(\S+)\s+(\S+)\s+(\S+)", r.stdout, re.M)
        checks.append(f"- {name}: `vitc compare` (reference interpreter, batch 1): "
                      + (f"max_rel {m.group(2)}, cosine {m.group(3)}, " if m else "")
                      + ("PASS" if r.returncode == 0 else f"FAIL (exit {r.returncode})"))
        print("  ", checks[-1], flush=True)
        tmodel = None
        if torch:
            tmodel = torch_vit(torch, cfg, weights)
            half = torch_vit(torch, cfg, weights).half()
            compiled = None if args.no_torch_compile else torch.compile(half)
        model, ctx = vitc.open(so)
        try:
            for b in batches:
                x = V.make_input(cfg, b, seed=7)
                xd, yd = [b, 3, cfg["image"], cfg["image"]], [b, cfg["classes"]]
                ms, y = vitc.timed(ctx, x, xd, yd, args.warmup, args.repeat)
                row = dict(model=name, batch=b, gflop=V.gflop_per_image(cfg) * b, vitc=ms, compile_s=compile_s)
                if torch:
                    xt = torch.frombuffer(bytearray(x.tobytes()), dtype=torch.float32).reshape(xd)
                    row["eager"] = torch_timed(torch, half, xt, args.warmup, args.repeat, False)
                    row["eager_h2h"] = torch_timed(torch, half, xt, args.warmup, args.repeat, True)
                    if compiled is not None:
                        row["compiled"] = torch_timed(torch, compiled, xt, args.warmup, args.repeat, False)
                    if b == min(batches):
                        with torch.inference_mode():
                            ref = tmodel(xt.cuda()).cpu().flatten().tolist()
                        checks.append(f"- {name}: vitc {args.precision} vs PyTorch fp32 at batch {b}: "
                                      f"max_rel {rel_error(list(y), ref):.2e}")
                        print("  ", checks[-1], flush=True)
                rows.append(row)
                print("  ", format_row(row, peak), flush=True)
        finally:
            vitc.close(model, ctx)
        if torch:
            del tmodel, half, compiled
            torch.cuda.empty_cache()
    write_table(args, gpu, arch, torch, torch_why, peak_note, peak, rows, checks)


def fmt(x, spec=".2f"):
    return format(x, spec) if x is not None else "n/a"


def format_row(r, peak):
    ips = lambda ms: r["batch"] / (ms / 1e3) if ms else None
    tflops = r["gflop"] / r["vitc"]  # GFLOP / ms = TFLOP/s
    cells = [r["model"], str(r["batch"]), fmt(r["vitc"]), fmt(ips(r["vitc"]), ".0f"), fmt(tflops, ".1f"),
             fmt(tflops / peak * 100 if peak else None, ".1f"),
             fmt(r.get("eager")), fmt(ips(r.get("eager")), ".0f"), fmt(r.get("eager_h2h")),
             fmt(r.get("compiled")), fmt(ips(r.get("compiled")), ".0f"),
             fmt(r["eager_h2h"] / r["vitc"] if r.get("eager_h2h") else None) + "x" if r.get("eager_h2h") else "n/a"]
    return "| " + " | ".join(cells) + " |"


def write_table(args, gpu, arch, torch, torch_why, peak_note, peak, rows, checks):
    head = [
        f"# vitc on the GPU: {datetime.date.today().isoformat()}",
        "",
        f"GPU: **{gpu}** (sm_{arch}).  Host: {platform.node()}, Python {platform.python_version()}.  "
        f"PyTorch: {torch.__version__ + ' (CUDA ' + str(torch.version.cuda) + ')' if torch else torch_why}.",
        f"Tensor-core peak: {peak_note}.",
        f"vitc: `--target cuda --precision {args.precision} --batch {max(int(b) for b in args.batches.split(','))}`, "
        "run through the C API with host arrays (every run copies the input in and the logits out).  "
        "PyTorch: fp16 eager with F.scaled_dot_product_attention, and torch.compile, input already on the GPU; "
        "'eager h2h' adds the same host copies as vitc's.  Medians of "
        f"{args.repeat} runs after {args.warmup} warm-up runs.",
        f"Command: `python3 bench/gpu_bench.py {' '.join(sys.argv[1:])}` (or bench/gpu_check.sh)",
        "",
        "| model | batch | vitc ms | vitc img/s | vitc TFLOP/s | vitc % peak | eager ms | eager img/s | eager h2h ms "
        "| compile ms | compile img/s | vitc speed-up vs eager h2h |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    table = [format_row(r, peak) for r in rows]
    if args.append and os.path.exists(args.out):
        with open(args.out) as f:
            old = f.read().split("\nCorrectness:\n")
        old_checks = old[1].strip().splitlines() if len(old) > 1 else []
        text = old[0].rstrip("\n") + "\n" + "\n".join(table) + "\n\nCorrectness:\n" + "\n".join(old_checks + checks) + "\n"
    else:
        text = "\n".join(head + table + ["", "Correctness:", *checks]) + "\n"
    print(text)
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
