#!/usr/bin/env python3
"""bench/run.py: vitc against ONNX Runtime and PyTorch eager, in one run, on the full-size ViTs.

For each model (ViT-Ti/S/B timm-style, torchvision vit_b_16, the insightface face ViT):
  1. export it (tests/models/gen_fixtures.py --full, TorchScript opset 17; cached in --workdir),
  2. compile it with vitc (--batch = the largest batch benchmarked), timing the compile,
  3. time vitc (through the C runtime API, via ctypes), ONNX Runtime (all graph optimisations)
     and PyTorch eager on the same seeded inputs, same thread count, batch 1 and 8: median of
     --repeat runs after --warmup runs, each runtime in its own process so that its peak resident
     memory can be read,
  4. print and write a Markdown table: ms, GFLOP/s, vitc's speed relative to ONNX Runtime and
     PyTorch, the fraction of the machine's peak FLOP/s (measured by bench/peak_fma), peak RSS,
     vitc's error against ONNX Runtime, and the compile seconds.

Needs a Python with torch, torchvision, timm, einops, onnx, onnxruntime and numpy (see
tests/models/requirements.txt), and a built vitc (./setup.sh):

    tests/models/setup-gen-env.sh .venv-gen
    .venv-gen/bin/python bench/run.py                   # all models, 2 threads, batch 1 and 8
    .venv-gen/bin/python bench/run.py --models vit_ti16_timm --batches 1 --repeat 5
"""
import argparse
import ctypes
import datetime
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "models"))

MODELS = ["vit_ti16_timm", "vit_s16_timm", "vit_b16_timm", "vit_b16_torchvision", "face_vit_s"]


# ---------------------------------------------------------------------------------------------
# FLOPs, counted from vitc's own IR dump (every value typed, shapes in terms of the batch B)
# ---------------------------------------------------------------------------------------------
TYPE_RE = re.compile(r"^(?:input  |const  )?(\S+): [a-z0-9]+\[([^\]]*)\]")
NODE_RE = re.compile(r"^(\S+): [a-z0-9]+\[([^\]]*)\] = (\w+)\(([^)]*)\)(.*)$")


def eval_dim(text, batch):
    text = text.strip()
    if text == "B":
        return batch
    m = re.fullmatch(r"(\d+)\*B", text)
    if m:
        return int(m.group(1)) * batch
    return int(text)


def model_gflop(vitc, model, batch):
    """2*M*N*K summed over MatMul, Gemm, Conv and Einsum at this batch (multiply-adds x 2)."""
    text = subprocess.run([vitc, "dump", model], check=True, capture_output=True, text=True).stdout
    shapes, flops = {}, 0
    for line in text.splitlines():
        m = TYPE_RE.match(line)
        if m:
            dims = [eval_dim(d, batch) for d in m.group(2).split(",") if d]
            shapes[m.group(1)] = dims
        m = NODE_RE.match(line)
        if not m:
            continue
        out = [eval_dim(d, batch) for d in m.group(2).split(",") if d]
        op, args = m.group(3), [a.strip() for a in m.group(4).split(",")]
        if op in ("MatMul", "Gemm"):
            a = shapes[args[0]]
            k = a[0] if op == "Gemm" and "transA=1" in m.group(5) else a[-1]
            flops += 2 * int(np.prod(out)) * k
        elif op == "Conv":
            w = shapes[args[1]]
            flops += 2 * int(np.prod(out)) * int(np.prod(w[1:]))
        elif op == "Einsum":
            eq = re.search(r'equation="([^"]*)"', m.group(5)).group(1).replace(" ", "")
            lhs = eq.split("->")[0].split(",")
            sizes = {}
            for term, name in zip(lhs, args):
                for letter, d in zip(term, shapes[name]):
                    sizes[letter] = max(sizes.get(letter, 1), d)
            flops += 2 * int(np.prod(list(sizes.values())))
    return flops / 1e9


# ---------------------------------------------------------------------------------------------
# One runtime in one process: prints a JSON line
# ---------------------------------------------------------------------------------------------
class VitcTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("dims", ctypes.c_int64 * 8), ("data", ctypes.c_void_p)]


def make_tensor(arr):
    t = VitcTensor()
    t.name, t.dtype, t.rank = None, 1, arr.ndim
    for i, d in enumerate(arr.shape):
        t.dims[i] = d
    t.data = arr.ctypes.data_as(ctypes.c_void_p)
    return t


def runner_vitc(args, x):
    lib = ctypes.CDLL(args.runtime_lib)
    lib.vitc_last_error.restype = ctypes.c_char_p
    model, ctx = ctypes.c_void_p(), ctypes.c_void_p()

    def check(status, what):
        if status != 0:
            raise SystemExit(f"vitc: {what} failed ({status}): {lib.vitc_last_error().decode()}")

    check(lib.vitc_model_load(args.so.encode(), ctypes.byref(model)), "load")
    check(lib.vitc_context_create(model, args.threads, ctypes.byref(ctx)), "context")
    info_out = np.empty(tuple(args.out_shape), np.float32)
    tin, tout = make_tensor(x), make_tensor(info_out)

    def run():
        check(lib.vitc_run(ctx, ctypes.byref(tin), 1, ctypes.byref(tout), 1), "run")
        return info_out

    return run


def runner_ort(args, x):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(args.onnx, opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return lambda: sess.run(None, {name: x})[0]


def runner_torch(args, x):
    import torch
    import gen_fixtures as gf
    torch.set_num_threads(args.threads)
    builder, seed, _ = gf.FULL[args.name]
    model = gf.make_model(builder, seed)
    xt = torch.from_numpy(x)

    def run():
        with torch.inference_mode():
            return model(xt).numpy()

    return run


def peak_rss_mb():
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited across exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one(args):
    x = np.load(args.input)
    run = {"vitc": runner_vitc, "ort": runner_ort, "torch": runner_torch}[args.one](args, x)
    for _ in range(args.warmup):
        y = run()
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        y = run()
        times.append((time.perf_counter() - t0) * 1e3)
    np.save(args.save, np.asarray(y, np.float32))
    rss = peak_rss_mb()
    print(json.dumps({"median_ms": statistics.median(times), "min_ms": min(times), "rss_mb": rss}))


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------
def peak_gflops(repo_build, threads):
    """The machine's fp32 peak with this many threads, as bench/peak_fma measures it."""
    exe = os.path.join(repo_build, "bench", "peak_fma")
    if not os.path.exists(exe):
        return None, "bench/peak_fma not built"
    out = subprocess.run([exe], capture_output=True, text=True).stdout
    m = re.search(r"peak fp32, %d threads?:\s+([\d.]+) GFLOP/s" % threads, out)
    if not m:
        return None, f"peak_fma printed no figure for {threads} threads"
    return float(m.group(1)), ""


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def child(args, runtime, name, onnx_path, so, inp, batch, out_shape, save):
    cmd = [sys.executable, os.path.abspath(__file__), "--one", runtime, "--name", name, "--onnx", onnx_path,
           "--so", so, "--input", inp, "--threads", str(args.threads), "--repeat", str(args.repeat),
           "--warmup", str(args.warmup), "--save", save, "--runtime-lib", args.runtime_lib,
           "--out-shape", *[str(d) for d in out_shape]]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description="vitc vs ONNX Runtime vs PyTorch on full-size ViTs")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/vitc-bench")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results.md"))
    # child-process mode
    ap.add_argument("--one", choices=["vitc", "ort", "torch"])
    ap.add_argument("--name"), ap.add_argument("--onnx"), ap.add_argument("--so"), ap.add_argument("--input")
    ap.add_argument("--save"), ap.add_argument("--runtime-lib"), ap.add_argument("--out-shape", nargs="*", type=int)
    args = ap.parse_args()
    if args.one:
        return one(args)

    vitc = os.path.join(args.build, "vitc")
    args.runtime_lib = os.path.join(args.build, "libvitc_runtime.so")
    for p in (vitc, args.runtime_lib):
        if not os.path.exists(p):
            raise SystemExit(f"{p} is missing: build vitc first (./setup.sh)")
    os.makedirs(args.workdir, exist_ok=True)
    names = args.models.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    import gen_fixtures as gf
    peak, note = peak_gflops(args.build, args.threads)

    rows = []
    for name in names:
        onnx_path = os.path.join(args.workdir, f"{name}.onnx")
        if not os.path.exists(onnx_path):
            print(f"== exporting {name}", flush=True)
            subprocess.run([sys.executable, os.path.join(REPO, "tests", "models", "gen_fixtures.py"),
                            "--full", args.workdir, "--only", name], check=True)
        so = os.path.join(args.workdir, f"{name}.so")
        print(f"== compiling {name}", flush=True)
        t0 = time.perf_counter()
        subprocess.run([vitc, onnx_path, "-o", so, "--batch", str(max(batches))], check=True)
        compile_s = time.perf_counter() - t0
        _, seed, image = gf.FULL[name]
        for b in batches:
            inp = os.path.join(args.workdir, f"{name}.bench.b{b}.input.npy")
            np.save(inp, gf.make_input(seed + 7, b, image))
            gflop = model_gflop(vitc, onnx_path, b)
            res, outs = {}, {}
            out_shape = None
            for rt in ("ort", "vitc", "torch"):
                save = os.path.join(args.workdir, f"{name}.b{b}.{rt}.npy")
                if rt == "vitc":
                    out_shape = list(np.load(outs["ort"]).shape) if "ort" in outs else [b, 1000]
                print(f"   {name} batch {b}: {rt}", flush=True)
                res[rt] = child(args, rt, name, onnx_path, so, inp, b, out_shape or [b], save)
                if "error" not in res[rt]:
                    outs[rt] = save
            err = None
            if "vitc" in outs and "ort" in outs:
                y, r = np.load(outs["vitc"]), np.load(outs["ort"])
                err = float(np.max(np.abs(y - r)) / np.max(np.abs(r)))
            rows.append(dict(name=name, batch=b, gflop=gflop, res=res, err=err, compile_s=compile_s))
            print(format_row(rows[-1], peak), flush=True)
    write_table(args, rows, peak, note)


def ms(res, rt):
    r = res.get(rt, {})
    return r.get("median_ms") if "error" not in r else None


def format_row(row, peak):
    res, g = row["res"], row["gflop"]
    v, o, t = ms(res, "vitc"), ms(res, "ort"), ms(res, "torch")
    f = lambda x: f"{x:.1f}" if x is not None else "n/a"
    ratio = lambda a, b: f"{b / a:.2f}x" if a and b else "n/a"
    gfs = lambda x: f"{g / (x / 1e3):.0f}" if x else "n/a"
    frac = f"{(g / (v / 1e3)) / peak:.0%}" if v and peak else "n/a"
    rss = lambda rt: f"{res[rt]['rss_mb']:.0f}" if "rss_mb" in res.get(rt, {}) else "n/a"
    err = f"{row['err']:.1e}" if row["err"] is not None else "n/a"
    return (f"| {row['name']} | {row['batch']} | {g:.1f} | {f(v)} | {f(o)} | {f(t)} | {gfs(v)} | {gfs(o)} | "
            f"{ratio(v, o)} | {ratio(v, t)} | {frac} | {rss('vitc')} / {rss('ort')} / {rss('torch')} | {err} | "
            f"{row['compile_s']:.1f} |")


def write_table(args, rows, peak, note):
    import onnxruntime
    try:
        import torch
        tv = torch.__version__
    except ImportError:
        tv = "n/a"
    head = [
        f"# vitc benchmark: {datetime.date.today().isoformat()}",
        "",
        f"Machine: {cpu_name()}, {os.cpu_count()} cores visible; {args.threads} threads for every runtime. "
        f"Measured peak fp32: {peak:.0f} GFLOP/s with {args.threads} threads (bench/peak_fma)"
        if peak else f"Machine: {cpu_name()}; peak not measured ({note})",
        f"ONNX Runtime {onnxruntime.__version__} (all graph optimisations), PyTorch {tv} eager; "
        f"median of {args.repeat} runs after {args.warmup} warm-up runs; same seeded input for all.",
        "Command: `.venv-gen/bin/python bench/run.py " + " ".join(sys.argv[1:]) + "`",
        "",
        "vitc/ORT and vitc/torch are speed ratios (above 1: vitc is faster). RSS is each runtime's peak resident "
        "memory in its own process (includes the Python interpreter, ~30 MB, and for torch its libraries). "
        "err: max|vitc - ORT| / max|ORT|. compile: seconds for `vitc MODEL.onnx -o MODEL.so`.",
        "",
        "| model | batch | GFLOP | vitc ms | ORT ms | torch ms | vitc GFLOP/s | ORT GFLOP/s | vitc/ORT | vitc/torch | "
        "vitc % peak | RSS MB vitc / ORT / torch | err | compile s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines = head + [format_row(r, peak) for r in rows]
    errors = [f"- {r['name']} b{r['batch']} {rt}: {v['error']}" for r in rows for rt, v in r["res"].items()
              if "error" in v]
    if errors:
        lines += ["", "Failures:", *errors]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
