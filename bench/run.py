#!/usr/bin/env python3
"""bench/run.py: vitc against ONNX Runtime and PyTorch eager, in one run, on the full-size ViTs.

For each model (ViT-Ti/S/B timm-style, torchvision vit_b_16, an einops ViT-B, the insightface face
ViT with LayerNorm and with BatchNorm):
  1. export it (tests/models/gen_fixtures.py --full, TorchScript opset 17; cached in --workdir),
  2. compile it with vitc for each --isa (the host's features; "avx2": the AVX2 code path, forced
     with --features=-avx512f on a host with AVX-512, while every runtime's worker of those rows
     sees a CPU without AVX-512 (bench/cpuid_mask.c), so that ONNX Runtime and PyTorch run their
     AVX2 kernels as on an AVX2 machine), timing the compile,
  3. start one worker process per runtime (vitc through the C runtime API via ctypes, ONNX Runtime
     with all graph optimisations, PyTorch eager), each with the same seeded input and thread
     count, warm each up, check each one's output against the reference (ONNX Runtime fp32 run
     apart: fp32 within 1e-4, vitc's bf16 rows within 1e-2 and cosine >= 0.9999; a runtime that
     fails is not timed, is left out of the row, and the run exits 1), then alternate them in short blocks (--block calls of vitc, then of
     ONNX Runtime, then of PyTorch, --blocks times, the leading runtime rotating) with a --pause
     between blocks, so that drift
     on a shared machine hits every runtime alike and a thread pool still spinning after its block
     has parked before the next runtime starts (alternating call by call lets one runtime's idle
     spinning steal a core from the next),
  4. repeat the whole table --rounds times in this one command, and report per row the median of
     the rounds' medians and the spread of the ratios over the rounds,
  5. measure the machine's peaks (bench/peak_fma: fp32 FMA, and the bf16 and int8 dot-product
     units the CPU has) before and after, and write a Markdown table with the date, CPU model, ISA,
     commit and command: ms, images/s, vitc's speed relative to ONNX Runtime and PyTorch, vitc's and
     ONNX Runtime's fraction of peak (each precision's rows against the peak of its own unit: fp32
     rows the FMA peak, vitc's bf16 rows the bf16 peak of the unit its build uses, AMX's TDPBF16PS
     where the compiled model lists amx-bf16, else VDPBF16PS; the table names it), peak RSS of each
     worker, vitc's error against ONNX Runtime, the compile seconds (median of three).

With --precision int8 (or fp32,int8 for both tables), each model also gets ONNX Runtime's
quantize_dynamic and quantize_static QDQ exports (made as tests/data/make_quantized.py makes the
tests', cached in --workdir), and per batch one int8 row of seven workers alternated in the same
blocks: vitc on the dynamic export (vitc-dyn) and on the QDQ export (vitc-qdq), vitc --precision int8
on the fp32 export (vitc-int8), ONNX Runtime on the two exports (ort-dyn, ort-qdq: its int8
kernels), ONNX Runtime fp32 (ort) and vitc fp32 (vitc).  Each is checked against ONNX Runtime fp32
like the others (the int8 ones: cosine >= 0.99, a gate against wrong answers; tests/quantized holds
the accuracy bars), a build that fails to compile is listed under Failures, and the int8 table gives
the ratios vitc-int8/ORT-dyn, vitc-dyn/ORT-dyn, vitc-qdq/ORT-dyn, vitc-qdq/ORT-qdq and vitc-int8/vitc-fp32, each int8
runtime's share of the host's int8 peak measured in the same run (AMX TDPBUSD where peak_fma
measures it, else VPDPBUSD) and the fp32 ones' share of the FMA peak.

Needs a Python with torch, torchvision, timm, einops, onnx, onnxruntime and numpy (see
tests/models/requirements.txt), and a built vitc (./setup.sh):

    tests/models/setup-gen-env.sh .venv-gen
    .venv-gen/bin/python bench/run.py                   # every model, 2 threads, batch 1 and 8
    .venv-gen/bin/python bench/run.py --models vit_ti16_timm --batches 1 --rounds 1
    .venv-gen/bin/python bench/run.py --models vit_ti16_timm --batches 1 --rounds 1 --precision int8
    python3 bench/run.py --self-test                   # the output checks on hand-made outputs (ctest)
    .venv-gen/bin/python bench/run.py --models vit_ti16_timm --batches 1 --rounds 1 --perturb torch   # must exit 1
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
sys.path.insert(0, os.path.join(REPO, "bench"))
import peaks  # noqa: E402  (bench/peaks.py: peak_fma's output read)

MODELS = ["vit_ti16_timm", "vit_s16_timm", "vit_b16_timm", "vit_b16_torchvision", "vit_b16_einops",
          "face_vit_s", "face_vit_s_bn"]
RUNTIMES = ("vitc", "ort", "torch")
# The runtimes of an int8 row (--precision int8), in its order: (label, worker, the export it runs,
# the precision whose bars its output meets).  The exports: the fp32 one, and ONNX Runtime's
# quantize_dynamic and quantize_static (QDQ) of it, made as tests/data/make_quantized.py makes the
# tests' (per-channel int8 weights and uint8 activations calibrated on 8 seeded images for QDQ;
# per-tensor int8 weights, activations quantized at run time, for dynamic).  vitc-int8 is the fp32
# export compiled with --precision int8; ORT runs with all graph optimisations (its int8 kernels).
INT8_SLOTS = [("vitc-dyn", "vitc", "dynamic", "int8"), ("vitc-qdq", "vitc", "qdq", "int8"),
              ("vitc-int8", "vitc", "fp32", "int8"), ("ort-dyn", "ort", "dynamic", "int8"),
              ("ort-qdq", "ort", "qdq", "int8"), ("ort", "ort", "fp32", "fp32"), ("vitc", "vitc", "fp32", "fp32")]
INT8_VITC_ARGS = {"vitc-int8": ["--precision", "int8"]}

# ---------------------------------------------------------------------------------------------
# Every runtime's output is checked against the reference before it is timed: a row that gives a
# wrong answer (or none) is left out of the table, its reason listed, and the run exits 1.
# The reference is ONNX Runtime fp32 (host ISA, basic graph optimisations) run in the driver on the
# row's input.  Bars, error = max|out - ref| / max|ref|: fp32 1e-4; bf16 (vitc's --precision bf16
# rows) 1e-2 with cosine >= 0.9999, as `vitc compare` and the tests use; int8 (the --precision int8
# rows' int8 runtimes: vitc on ONNX Runtime's quantized exports and with --precision int8, ONNX
# Runtime on those exports) cosine >= 0.99 alone, a gate against wrong answers, not the accuracy
# bars of tests/quantized (ONNX Runtime's own static QDQ ViT-S/16 lands at 0.9966 from fp32, its
# tiny timm fixture at 0.989, and max-rel errors of 3e-2 to 2.5e-1 are ordinary for int8).
# ---------------------------------------------------------------------------------------------
BARS = {"fp32": (1e-4, None), "bf16": (1e-2, 0.9999), "int8": (None, 0.99)}


def output_error(y, ref):
    """(error, cosine, None), or (None, None, why) when the output cannot be compared or is not finite."""
    if y is None:
        return None, None, "no output"
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    if y.shape != ref.shape:
        return None, None, f"shape {list(y.shape)}, reference {list(ref.shape)}"
    bad = int(np.count_nonzero(~np.isfinite(y)))
    if bad:
        return None, None, f"{bad} NaN or infinite values of {y.size}"
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    if not np.isfinite(ref).all() or scale == 0.0:
        return None, None, "the reference is all zero or not finite"
    err = float(np.abs(y - ref).max()) / scale
    norms = float(np.linalg.norm(y) * np.linalg.norm(ref))
    cos = float(np.dot(y.ravel(), ref.ravel()) / norms) if norms > 0 else 0.0
    return err, cos, None


def check_output(y, ref, precision):
    """(ok, error, why): y against ref within the bars of precision ('fp32', 'bf16' or 'int8')."""
    tol, ctol = BARS[precision]
    err, cos, why = output_error(y, ref)
    if why:
        return False, err, why
    if tol is not None and not err <= tol:
        return False, err, f"error {err:.2e} > {tol:g} ({precision})"
    if ctol is not None and not cos >= ctol:
        return False, err, f"cosine {cos:.6f} < {ctol} ({precision})"
    return True, err, None


def perturbed(y):
    """What --perturb makes of a runtime's output: 5% of its largest magnitude added to every value,
    beyond the bars of every precision (self_test checks that it is caught)."""
    y = np.asarray(y, np.float32)
    return y + np.float32(0.05) * np.abs(y).max()


def runtime_precision(rt, isa):
    """The precision whose bars runtime rt's output meets in a row of isa."""
    return "bf16" if rt == "vitc" and isa == "bf16" else "fp32"


def self_test():
    """check_output and the gate of bench_one (checked_runtimes) on hand-made outputs: a wrong,
    NaN, mis-shaped or missing output is left out with its reason; right ones pass.  Exit status."""
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((2, 1000)).astype(np.float32)
    near_bf16 = ref + 3e-3 * np.abs(ref).max() * rng.uniform(-1, 1, ref.shape).astype(np.float32)
    near_int8 = ref + 0.077 * rng.standard_normal(ref.shape).astype(np.float32)  # cosine about 0.997
    far_int8 = ref + 0.2 * rng.standard_normal(ref.shape).astype(np.float32)  # cosine about 0.98
    cases = [  # (what, output, precision, passes)
        ("fp32 equal", ref.copy(), "fp32", True),
        ("fp32 off by 5e-5", ref + np.float32(5e-5 * np.abs(ref).max()), "fp32", True),
        ("fp32 off by 2e-4", ref + np.float32(2e-4 * np.abs(ref).max()), "fp32", False),
        ("bf16 off by 3e-3", near_bf16, "bf16", True),
        ("bf16 off by 3e-3 judged as fp32", near_bf16, "fp32", False),
        ("bf16 off by 2e-2", ref + np.float32(2e-2 * np.abs(ref).max()), "bf16", False),
        ("bf16 sign-flipped half", np.where(np.arange(ref.size).reshape(ref.shape) % 2, -ref, ref), "bf16", False),
        ("one NaN", np.where(np.arange(ref.size).reshape(ref.shape) == 7, np.nan, ref), "fp32", False),
        ("infinite", np.full_like(ref, np.inf), "fp32", False),
        ("wrong shape", ref[:1], "fp32", False),
        ("no output", None, "fp32", False),
        ("--perturb's output", perturbed(ref), "fp32", False),
        ("--perturb's output judged as bf16", perturbed(ref), "bf16", False),
        ("int8 at cosine 0.997", near_int8, "int8", True),
        ("int8 at cosine 0.997 judged as bf16", near_int8, "bf16", False),
        ("int8 at cosine 0.98", far_int8, "int8", False),
        ("int8 sign-flipped half", np.where(np.arange(ref.size).reshape(ref.shape) % 2, -ref, ref), "int8", False),
        ("int8 one NaN", np.where(np.arange(ref.size).reshape(ref.shape) == 7, np.nan, ref), "int8", False),
        ("int8 all zero", np.zeros_like(ref), "int8", False),
        ("--perturb's output judged as int8", perturbed(ref), "int8", False),
    ]
    bad = 0
    for what, y, precision, passes in cases:
        ok, err, why = check_output(y, ref, precision)
        right = ok == passes
        bad += not right
        print(f"{what:36} {'pass' if ok else 'fail':4} {why or '':42} {'ok' if right else 'WRONG'}")
    # the gate: a worker with a wrong output is not timed and is named with its reason
    fp32_row = {rt: runtime_precision(rt, "host") for rt in RUNTIMES}
    outs = {"vitc": ref + np.float32(1e-2), "ort": ref.copy(), "torch": ref.copy()}
    timed, failures = checked_runtimes(outs, {}, ref, fp32_row, "row")
    right = timed == ["ort", "torch"] and len(failures) == 1 and failures[0].startswith("- row vitc: ")
    bad += not right
    print(f"{'gate: vitc wrong, others right':36} timed {','.join(timed):10} {failures} {'ok' if right else 'WRONG'}")
    timed, failures = checked_runtimes({"ort": ref.copy()}, {"vitc": "crashed", "torch": None}, ref, fp32_row, "row")
    right = timed == ["ort"] and len(failures) == 2
    bad += not right
    print(f"{'gate: vitc crashed, torch silent':36} timed {','.join(timed):10} {failures} {'ok' if right else 'WRONG'}")
    # an int8 row: its int8 runtimes against the int8 bar, the fp32 ones against fp32's, in INT8_SLOTS' order
    int8_row = {label: precision for label, _, _, precision in INT8_SLOTS}
    outs = {label: near_int8 for label in int8_row if int8_row[label] == "int8"}
    outs.update({"ort": ref.copy(), "vitc": near_int8, "vitc-qdq": far_int8})
    timed, failures = checked_runtimes(outs, {"vitc-int8": "`vitc compile --precision int8` exit 2"}, ref, int8_row,
                                       "row")
    right = (timed == ["vitc-dyn", "ort-dyn", "ort-qdq", "ort"] and len(failures) == 3 and
             any("vitc-int8: `vitc compile" in f for f in failures) and any("- row vitc: " in f for f in failures) and
             any("vitc-qdq: wrong output" in f for f in failures))
    bad += not right
    print(f"{'gate: int8 row':36} timed {','.join(timed):30} {failures} {'ok' if right else 'WRONG'}")
    # the int8 table on hand-made times (two rounds): ratios as speed ratios, shares of the int8 and fp32 peaks
    ms = {"vitc-dyn": 20.0, "vitc-qdq": 25.0, "vitc-int8": 10.0, "ort-dyn": 20.0, "ort-qdq": 30.0, "ort": 40.0,
          "vitc": 30.0}
    res = {label: {"ms": [v] * 3, "rss_mb": 100.0, "error": None} for label, v in ms.items()}
    after = {label: (0.03, 0.999) for label in ms}
    builds = {"m": {"slots": {}, "errors": {}, "compile_s": {"vitc-dyn": 1.0, "vitc-qdq": 1.5, "vitc-int8": 2.0},
                    "unit": "int8 VPDPBUSD"}}
    peak = {"host": {"fp32": 100.0, "int8 VPDPBUSD": 1000.0}}
    for left_out, want in ((set(), "| m | 1 | 2.0 | 20.0 | 25.0 | 10.0 | 20.0 | 30.0 | 40.0 | 30.0 | "
                            "2.00x [2.00-2.00] | 1.00x [1.00-1.00] | 0.80x [0.80-0.80] | 1.20x [1.20-1.20] | 3.00x [3.00-3.00] | "
                            "10% / 8% / 20% / 10% / 7% | 67% / 50% | 0.9990 / 0.9990 / 0.9990 / 0.9990 / 0.9990 | "
                            "100 / 100 | 1.0 / 1.5 / 2.0 |"),
                           ({("m", "int8", 1, "vitc-int8")}, "| m | 1 | 2.0 | 20.0 | 25.0 | n/a | 20.0 | 30.0 | 40.0 | "
                            "30.0 | n/a | 1.00x [1.00-1.00] | 0.80x [0.80-0.80] | 1.20x [1.20-1.20] | n/a | 10% / 8% / n/a / 10% / 7% |")):
        lines, fails = int8_table(argparse.Namespace(left_out=left_out), peak, ["m"], [1], {("m", 1): 2.0}, builds,
                                  {("m", 1): [(res, after), (res, after)]})
        right = lines[-1].startswith(want) and not fails
        bad += not right
        print(f"{'int8 table' + (', vitc-int8 left out' if left_out else ''):36} {lines[-1][:90]}... "
              f"{'ok' if right else 'WRONG: want ' + want}")
    print(f"{bad} self-test check(s) wrong")
    return 1 if bad else 0


def checked_runtimes(outputs, errors, ref, precisions, row, found=None):
    """The runtimes whose output (outputs: runtime -> array) meets the bars of its precision
    (precisions: runtime -> 'fp32', 'bf16' or 'int8', in the row's order) against ref, in that order,
    and a failure line for each one that does not or that failed (errors: runtime -> why); the error of
    each output compared goes into found (runtime -> error), when given."""
    timed, failures = [], []
    for rt, precision in precisions.items():
        if rt in errors:
            failures.append(f"- {row} {rt}: {errors[rt] or 'no output'}")
            continue
        if rt not in outputs:
            continue
        ok, err, why = check_output(outputs[rt], ref, precision)
        if found is not None and err is not None:
            found[rt] = err
        if ok:
            timed.append(rt)
        else:
            failures.append(f"- {row} {rt}: wrong output before timing, left out: {why}")
    return timed, failures


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
# A worker: one runtime in its own process, driven over stdin/stdout, one JSON line per reply
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
    out = np.empty(tuple(args.out_shape), np.float32)
    tin, tout = make_tensor(x), make_tensor(out)

    def run():
        check(lib.vitc_run(ctx, ctypes.byref(tin), 1, ctypes.byref(tout), 1), "run")
        return out

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


def worker(args):
    """Loads one runtime, warms it up, then answers: 'run N' (times of N calls), 'save PATH'
    (the last output), 'quit' (peak RSS)."""
    x = np.load(args.input)
    t0 = time.perf_counter()
    hidden = None  # --hide-avx512: None when it worked, else why not
    if args.hide_avx512:
        err = ctypes.create_string_buffer(256)
        if ctypes.CDLL(args.hide_avx512).vitc_bench_hide_avx512(err, len(err)):
            hidden = err.value.decode() or "failed"
    run = {"vitc": runner_vitc, "ort": runner_ort, "torch": runner_torch}[args.worker](args, x)
    if args.perturb == args.worker:  # --perturb: a wrong answer on purpose, which the checks must catch
        exact = run
        run = lambda: perturbed(exact())
    # whether this runtime runs its AVX2 kernels: all do with CPUID masked; without it, PyTorch still
    # does by its own switches (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS, set by
    # the driver; ATen's answer stands for them) and ONNX Runtime, which has none, runs the host's
    avx2 = bool(args.hide_avx512) and hidden is None
    if args.hide_avx512 and args.worker == "torch":
        import torch
        avx2 = torch.backends.cpu.get_cpu_capability() == "AVX2"
    elif args.hide_avx512 and args.worker == "vitc":
        avx2 = True  # its code path is chosen when it compiles (--features=-avx512f)
    y = None
    for _ in range(args.warmup):
        y = run()
    reply = lambda obj: print(json.dumps(obj), flush=True)
    reply({"ready": True, "load_s": time.perf_counter() - t0,
           "avx512_hidden": bool(args.hide_avx512) and hidden is None, "hide_error": hidden, "avx2": avx2})
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "run":
            times = []
            for _ in range(int(arg)):
                t = time.perf_counter()
                y = run()
                times.append((time.perf_counter() - t) * 1e3)
            reply({"ms": times})
        elif cmd == "save":
            np.save(arg, np.asarray(y, np.float32))
            reply({"saved": arg})
        elif cmd == "quit":
            reply({"rss_mb": peak_rss_mb()})
            return


class Worker:
    def __init__(self, args, runtime, name, onnx_path, so, inp, out_shape, hide_avx512=False):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", runtime, "--name", name, "--onnx", onnx_path,
               "--so", so, "--input", inp, "--threads", str(args.threads), "--warmup", str(args.warmup),
               "--runtime-lib", args.runtime_lib, "--out-shape", *[str(d) for d in out_shape]]
        if hide_avx512:
            cmd += ["--hide-avx512", args.cpuid_mask_lib]
        if args.perturb:
            cmd += ["--perturb", args.perturb]
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        if hide_avx512:  # PyTorch's own switches to its AVX2 kernels, for where CPUID cannot be masked
            env.update(ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2", MKL_ENABLE_INSTRUCTIONS="AVX2")
        self.runtime = runtime
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env)
        self.error = None
        self.ready = self._reply()

    def _reply(self):
        line = self.p.stdout.readline()
        if not line:
            self.error = (self.p.stderr.read().strip().splitlines() or ["exited"])[-1]
            return None
        return json.loads(line)

    def ask(self, cmd):
        if self.error:
            return None
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self._reply()

    def close(self):
        r = self.ask("quit")
        self.p.wait()
        return r


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------
def measure_peaks(build, threads, isa="host"):
    """The machine's peaks with this many threads, as bench/peak_fma measures them: {unit: GFLOP/s (int8:
    GOP/s) or None} for "fp32" and, on the host's code path, each dot-product unit ("bf16 TDPBF16PS", ...;
    peaks.UNITS), and {unit: why not available}.  isa avx2: fp32 alone, with the vectors of vitc's AVX2 path."""
    exe = os.path.join(build, "bench", "peak_fma")
    units = ["fp32"] if isa == "avx2" else peaks.UNITS
    if not os.path.exists(exe):
        return {u: None for u in units}, {u: f"{exe} is missing" for u in units}
    out = subprocess.run([exe] + (["--avx2"] if isa == "avx2" else []), capture_output=True, text=True).stdout
    values, why, _, _ = peaks.parse(out)
    return {u: values.get(u, {}).get(threads) for u in units}, why


def bf16_unit(vitc, so):
    """The dot-product unit of a --precision bf16 build, from the CPU features it was compiled for:
    AMX's TDPBF16PS where they list amx-bf16 (with amx-tile), else AVX512-BF16's VDPBF16PS."""
    r = subprocess.run([vitc, "inspect", so, "--json"], capture_output=True, text=True)
    features = set(json.loads(r.stdout).get("features", [])) if r.returncode == 0 else set()
    if {"amx-tile", "amx-bf16"} <= features:
        return "bf16 TDPBF16PS"
    return "bf16 VDPBF16PS" if "avx512bf16" in features else None


# How the table names each unit's peak
UNIT_NAMES = {"fp32": "fp32 FMA", "bf16 TDPBF16PS": "bf16 AMX (TDPBF16PS)", "bf16 VDPBF16PS": "bf16 VDPBF16PS",
              "int8 TDPBUSD": "int8 AMX (TDPBUSD)", "int8 VPDPBUSD": "int8 VPDPBUSD"}


def cpu_info():
    name, flags = platform.processor(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE"
    extra = [f for f in ("avx512_bf16", "amx_tile", "avx512_vnni") if f in flags]
    return name, isa + (" (" + ", ".join(extra) + ")" if extra else ""), flags


def git_commit():
    r = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (r.stdout.strip() or "unknown") + (" (with uncommitted changes)" if dirty else "")


def compile_model(vitc, onnx_path, so, batch, isa_args):
    # the previous models' hundreds of MB still being written back would slow this one's writes
    os.sync()
    t0 = time.perf_counter()
    subprocess.run([vitc, onnx_path, "-o", so, "--batch", str(batch), "--quiet", *isa_args], check=True)
    return time.perf_counter() - t0


def try_compile(vitc, onnx_path, so, batch, extra):
    """(seconds, None) for one `vitc MODEL.onnx -o SO --batch N --quiet EXTRA...`, or (None, why)."""
    os.sync()
    t0 = time.perf_counter()
    r = subprocess.run([vitc, onnx_path, "-o", so, "--batch", str(batch), "--quiet", *extra], capture_output=True,
                       text=True)
    if r.returncode != 0:
        msg = (r.stderr.strip() or r.stdout.strip() or "no message").splitlines()[0]
        return None, (f"`vitc {os.path.basename(onnx_path)} {' '.join(extra)}` exit {r.returncode}: "
                      f"{msg.replace(onnx_path, os.path.basename(onnx_path))}")
    return time.perf_counter() - t0, None


def int8_unit(vitc, so):
    """The int8 dot-product unit a build's CPU features allow: AMX's TDPBUSD where they list amx-int8
    (with amx-tile), else AVX512-VNNI's VPDPBUSD, else None (AVX-VNNI alone: peak_fma does not measure it)."""
    r = subprocess.run([vitc, "inspect", so, "--json"], capture_output=True, text=True)
    features = set(json.loads(r.stdout).get("features", [])) if r.returncode == 0 else set()
    if {"amx-tile", "amx-int8"} <= features:
        return "int8 TDPBUSD"
    return "int8 VPDPBUSD" if "avx512vnni" in features else None


def prepare_int8(args, vitc, name, onnx_path, batch, host_build):
    """The int8 row of a model: ONNX Runtime's dynamic and static QDQ exports of it (made once, kept in
    --workdir) and vitc's builds (compiled once each; the fp32 one is the host row's where there is one).
    Returns {"slots": label -> (worker, ONNX file, .so, precision) in INT8_SLOTS' order, "errors": label ->
    why it cannot run (a quantization or a compile that failed), "compile_s": label -> seconds, "unit":
    the int8 unit vitc-int8's build allows}."""
    sys.path.insert(0, os.path.join(REPO, "tests", "data"))
    import make_quantized as mq
    exports, bad = {"fp32": onnx_path}, {}
    for kind in ("dynamic", "qdq"):
        path = os.path.join(args.workdir, f"{name}-{kind}.onnx")
        if not os.path.exists(path):
            print(f"== quantizing {name} ({'quantize_dynamic' if kind == 'dynamic' else 'quantize_static, QDQ'})",
                  flush=True)
            try:
                mq.quantize(kind, onnx_path, path + ".part.onnx")
                os.replace(path + ".part.onnx", path)
            except Exception as e:  # noqa: BLE001 (ONNX Runtime's quantizers raise many kinds)
                bad[kind] = f"ONNX Runtime's quantize_{'dynamic' if kind == 'dynamic' else 'static'} failed: {e}"
        exports[kind] = path
    out = {"slots": {}, "errors": {}, "compile_s": {}, "unit": None}
    for label, rt, export, precision in INT8_SLOTS:
        if label in args.skip:
            continue
        so = ""
        if export in bad:
            out["errors"][label] = bad[export]
        elif rt == "vitc" and label == "vitc" and host_build:
            so = host_build[1]
            out["compile_s"][label] = host_build[2][len(host_build[2]) // 2]
        elif rt == "vitc":
            so = os.path.join(args.workdir, f"{name}.{label}.so")
            t, why = try_compile(vitc, exports[export], so, batch, INT8_VITC_ARGS.get(label, []))
            if why:
                out["errors"][label] = why
            else:
                out["compile_s"][label] = t
            print(f"== compiled {name} ({label}): " + (f"{t:.2f} s" if t is not None else why), flush=True)
        out["slots"][label] = (rt, exports[export], so, precision)
    if "vitc-int8" in out["compile_s"]:
        out["unit"] = int8_unit(vitc, out["slots"]["vitc-int8"][2])
    return out


def bench_one(args, name, isa, onnx_path, so, batch, image, seed):
    """One row of one round of vitc, ONNX Runtime and PyTorch on the fp32 export (vitc's .so compiled
    for isa).  Returns per runtime the call times, the peak RSS and the error, and vitc's error against
    ONNX Runtime."""
    slots = {rt: (rt, onnx_path, so, runtime_precision(rt, isa)) for rt in RUNTIMES if rt not in args.skip}
    res, found = bench_row(args, name, isa, slots, {}, batch, image, seed, onnx_path)
    return res, found.get("vitc", (None, None))[0]


def bench_row(args, name, isa, slots, errors, batch, image, seed, ref_onnx):
    """One row of one round: its runtimes (slots: label -> (worker: vitc, ort or torch, the ONNX file,
    vitc's .so, the precision whose bars it meets), in the row's order) alternated in blocks, each
    checked against ONNX Runtime fp32 on ref_onnx before and after it is timed; errors: label -> why
    for those that could not even start (a compile refused).  Returns per label the call times, the
    peak RSS and the error, and per label the (error, cosine) of its last output against the
    reference."""
    import gen_fixtures as gf
    inp = os.path.join(args.workdir, f"{name}.bench.b{batch}.input.npy")
    np.save(inp, gf.make_input(seed + 7, batch, image))
    out_shape = [batch, 512 if name.startswith("face") else 1000]
    workers = {}
    for label, (rt, onnx_path, so, _) in slots.items():
        if label in errors:
            continue
        workers[label] = Worker(args, rt, name, onnx_path, so, inp, out_shape, hide_avx512=isa == "avx2")
        ready = workers[label].ready or {}
        if ready.get("hide_error"):
            args.hide_errors.add(ready["hide_error"])
        if isa == "avx2":
            args.avx2_kernels.setdefault(rt, set()).add(bool(ready.get("avx2")))
        time.sleep(args.pause)
    # every runtime's output against the reference before it is timed: a wrong one is not timed
    row = f"{name} ({isa}) b{batch}"
    ref = reference_output(ref_onnx, inp)
    outputs, errors = {}, dict(errors)
    for label, w in workers.items():
        path = os.path.join(args.workdir, f"{name}.{isa}.b{batch}.{label}.check.npy")
        if w.ask(f"save {path}"):
            outputs[label] = np.load(path)
        else:
            errors[label] = w.error
    found = {}
    precisions = {label: slot[3] for label, slot in slots.items()}
    timed, failed = checked_runtimes(outputs, errors, ref, precisions, row, found)
    print(f"   {row}: checked against ONNX Runtime fp32 before timing: " +
          ", ".join(f"{rt} {'pass' if rt in timed else 'FAIL'} ({found[rt]:.1e})" if rt in found else
                    f"{rt} FAIL" for rt in slots), flush=True)
    args.check_failures += failed
    args.left_out.update((name, isa, batch, rt) for rt in slots if rt not in timed)
    for rt in [rt for rt in workers if rt not in timed]:
        workers.pop(rt).close()
    times = {rt: [] for rt in workers}
    order = list(workers)
    for k in range(args.blocks):
        for rt in order[k % len(order):] + order[:k % len(order)]:  # each runtime leads some blocks
            w = workers[rt]
            r = w.ask(f"run {args.block}")
            if r:
                times[rt] += r["ms"]
            time.sleep(args.pause)
    # and after: the last timed call's output meets the same bars
    after = {}
    for rt in list(workers):
        path = os.path.join(args.workdir, f"{name}.{isa}.b{batch}.{rt}.npy")
        y = np.load(path) if workers[rt].ask(f"save {path}") else None
        ok, e, why = check_output(y, ref, precisions[rt])
        after[rt] = output_error(y, ref)[:2]
        if not ok:
            args.check_failures.append(f"- {row} {rt}: wrong output after timing, left out: "
                                       f"{why if y is not None else workers[rt].error}")
            args.left_out.add((name, isa, batch, rt))
            times[rt] = []
    res = {}
    for rt, w in workers.items():
        done = w.close()
        res[rt] = {"ms": times[rt], "rss_mb": done["rss_mb"] if done else None, "error": w.error}
    return res, after


def reference_output(onnx_path, inp):
    """ONNX Runtime's fp32 output of the model on the .npy input: the reference every runtime meets."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: np.load(inp)})[0]


def main():
    ap = argparse.ArgumentParser(description="vitc vs ONNX Runtime vs PyTorch on full-size ViTs, alternated in blocks")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--isa", default="host,avx2",
                    help="code paths to compile vitc for: host (the host's features), avx2 "
                         "(--features=-avx512f, and ORT and PyTorch with AVX-512 hidden from CPUID; the same as host on a host without AVX-512) and/or bf16 "
                         "(--precision bf16: Linear layers in bf16 on AMX tiles, else with AVX512-BF16; left out without either)")
    ap.add_argument("--precision", default="fp32",
                    help="fp32: the --isa rows (vitc, ONNX Runtime and PyTorch on the fp32 export); int8: per model "
                         "and batch one row of vitc on ONNX Runtime's dynamic and static QDQ exports (vitc-dyn, "
                         "vitc-qdq), vitc --precision int8 on the fp32 export (vitc-int8), ONNX Runtime on those "
                         "exports (ort-dyn, ort-qdq), ONNX Runtime fp32 (ort) and vitc fp32 (vitc), against the "
                         "int8 peak of the host (AMX TDPBUSD, else VPDPBUSD) measured in the run; fp32,int8: both")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--block", type=int, default=3, help="calls of one runtime in a row")
    ap.add_argument("--blocks", type=int, default=4, help="blocks per runtime and row in each round")
    ap.add_argument("--pause", type=float, default=0.3, help="seconds between blocks")
    ap.add_argument("--rounds", type=int, default=3, help="times the whole table is measured")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--skip", default="", help="runtimes to leave out, e.g. torch, or runtimes of the int8 rows "
                                                "(vitc-dyn, vitc-qdq, vitc-int8, ort-dyn, ort-qdq, ort, vitc)")
    ap.add_argument("--target", type=float, default=1.15,
                    help="vitc/ORT ratio below which a row is listed after the table with its gap and where "
                         "vitc's time goes")
    ap.add_argument("--workdir", default="/tmp/vitc-bench")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results.md"))
    # worker mode
    ap.add_argument("--worker", choices=RUNTIMES)
    ap.add_argument("--name"), ap.add_argument("--onnx"), ap.add_argument("--so"), ap.add_argument("--input")
    ap.add_argument("--runtime-lib"), ap.add_argument("--out-shape", nargs="*", type=int)
    ap.add_argument("--hide-avx512", help="(worker) the library that hides AVX-512 and AMX from CPUID")
    ap.add_argument("--perturb", choices=RUNTIMES,
                    help="a check of the checks: this runtime's worker adds 5%% of its output's largest magnitude to "
                         "every output (perturbed), so that the run must leave it out of every row and exit 1")
    ap.add_argument("--self-test", action="store_true",
                    help="check the output checks on hand-made outputs (needs only numpy), then exit")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if args.worker:
        return worker(args)
    args.check_failures = []  # a runtime's output missing or beyond its bars: why, one line each
    args.left_out = set()  # (model, isa, batch, runtime) whose output failed a check in some round
    args.skip = set(filter(None, args.skip.split(",")))

    vitc = os.path.join(args.build, "vitc")
    args.runtime_lib = os.path.join(args.build, "libvitc_runtime.so")
    args.cpuid_mask_lib = os.path.join(args.build, "bench", "libvitc_cpuid_mask.so")
    args.hide_errors = set()  # why AVX-512 could not be hidden from the avx2 rows' workers, if it could not
    args.avx2_kernels = {}  # runtime -> {whether it ran its AVX2 kernels in an avx2 row}
    args.peak_unit = {}  # (model, isa) -> the peaks.UNITS entry vitc's rows are against
    for p in (vitc, args.runtime_lib, args.cpuid_mask_lib):
        if not os.path.exists(p):
            raise SystemExit(f"{p} is missing: build vitc first (./setup.sh)")
    os.makedirs(args.workdir, exist_ok=True)
    args.commit = git_commit()  # the code measured: a commit made while the run goes on is not it
    names = args.models.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    cpu, isa_desc, flags = cpu_info()
    precisions = set(filter(None, args.precision.split(",")))
    if not precisions or precisions - {"fp32", "int8"}:
        raise SystemExit(f"--precision {args.precision}: fp32, int8 or fp32,int8")
    isas = []
    for isa in (args.isa.split(",") if "fp32" in precisions else []):
        if isa == "host":
            isas.append(("host", []))
        elif isa == "avx2" and "avx512f" in flags:
            isas.append(("avx2", ["--features=-avx512f"]))
        elif isa == "avx2":
            print("== avx2: the host has no AVX-512, so its own code path is the AVX2 one", flush=True)
        elif isa == "bf16" and ("amx_bf16" in flags or "avx512_bf16" in flags):
            isas.append(("bf16", ["--precision", "bf16"]))
        elif isa == "bf16":
            print("== bf16: the host has neither AMX-BF16 nor AVX512-BF16, so --precision bf16 is left out", flush=True)
        else:
            raise SystemExit(f"unknown --isa {isa}")
    import gen_fixtures as gf
    peak_isas = ["host"] + [isa for isa, _ in isas if isa not in ("host", "bf16")]  # bf16: a unit of the host's
    peak_before = {isa: measure_peaks(args.build, args.threads, isa) for isa in peak_isas}
    print(f"== {cpu}, {isa_desc}; peaks with {args.threads} threads: " +
          ", ".join(f"{isa} {u} {v}" for isa, (vals, _) in peak_before.items() for u, v in vals.items()), flush=True)

    compiled, gflops = {}, {}
    int8_builds = {}  # name -> prepare_int8's slots and errors
    for name in names:
        onnx_path = os.path.join(args.workdir, f"{name}.onnx")
        if not os.path.exists(onnx_path):
            print(f"== exporting {name}", flush=True)
            subprocess.run([sys.executable, os.path.join(REPO, "tests", "models", "gen_fixtures.py"),
                            "--full", args.workdir, "--only", name], check=True)
        for isa, isa_args in isas:
            so = os.path.join(args.workdir, f"{name}.{isa}.so")
            # three compiles: one alone swings by a second here with the page cache's writeback
            times = sorted(compile_model(vitc, onnx_path, so, max(batches), isa_args) for _ in range(3))
            compiled[name, isa] = (onnx_path, so, times)
            # the peak vitc's rows of this build are measured against
            args.peak_unit[name, isa] = bf16_unit(vitc, so) if isa == "bf16" else "fp32"
            print(f"== compiled {name} ({isa}) in " + ", ".join(f"{t:.2f}" for t in times) + " s", flush=True)
        if "int8" in precisions:
            int8_builds[name] = prepare_int8(args, vitc, name, onnx_path, max(batches), compiled.get((name, "host")))
        for b in batches:
            gflops[name, b] = model_gflop(vitc, onnx_path, b)

    results = {}  # (name, isa, batch) -> list over rounds of (res, err)
    int8_results = {}  # (name, batch) -> list over rounds of (res, {runtime: (error, cosine)})
    for rnd in range(args.rounds):
        for name in names:
            _, seed, image = gf.FULL[name]
            for isa, _ in isas:
                onnx_path, so, _ = compiled[name, isa]
                for b in batches:
                    res, err = bench_one(args, name, isa, onnx_path, so, b, image, seed)
                    results.setdefault((name, isa, b), []).append((res, err))
                    med = {rt: statistics.median(r["ms"]) for rt, r in res.items() if r["ms"]}
                    print(f"   round {rnd + 1} {name} ({isa}) b{b}: " +
                          ", ".join(f"{rt} {v:.2f} ms" for rt, v in med.items()) +
                          (f", vitc/ORT {med['ort'] / med['vitc']:.2f}x" if "vitc" in med and "ort" in med else ""),
                          flush=True)
            if name in int8_builds:
                slots, errors = int8_builds[name]["slots"], int8_builds[name]["errors"]
                for b in batches:
                    res, after = bench_row(args, name, "int8", slots, errors, b, image, seed,
                                           os.path.join(args.workdir, f"{name}.onnx"))
                    int8_results.setdefault((name, b), []).append((res, after))
                    med = {rt: statistics.median(r["ms"]) for rt, r in res.items() if r["ms"]}
                    print(f"   round {rnd + 1} {name} (int8) b{b}: " + ", ".join(f"{rt} {v:.2f} ms" for rt, v in
                                                                              med.items()), flush=True)
    peak_after = {isa: measure_peaks(args.build, args.threads, isa) for isa in peak_isas}
    # where vitc's time goes: its own profile (vitc run --profile), after the timed rounds
    profiles = {}
    for name in names:
        for isa, _ in isas:
            for b in batches:
                inp = os.path.join(args.workdir, f"{name}.bench.b{b}.input.npy")
                r = subprocess.run([vitc, "run", compiled[name, isa][1], "--input", inp, "--repeat", "5",
                                    "--threads", str(args.threads), "--profile", "--json", "--output-dir",
                                    os.path.join(args.workdir, "profile-out")], capture_output=True, text=True)
                if r.returncode == 0:
                    profiles[name, isa, b] = json.loads(r.stdout)["profile"]["ops"]
    failures = write_table(args, cpu, isa_desc, peak_before, peak_after, names, isas, batches, compiled, gflops,
                           results, profiles, int8_builds, int8_results)
    if failures:
        print(f"{len(failures)} failure(s): a worker that failed, or an output beyond its bars (those runtimes "
              "are left out of their rows, and a row whose vitc failed is left out); listed under Failures",
              file=sys.stderr)
        return 1
    return 0


def by_op(ops):
    if not ops:
        return "n/a"
    top = sorted(ops, key=lambda o: -o["share"])[:3]
    return ", ".join(f"{o['op']} {o['share']:.0%}" for o in top)


def gap_line(args, name, isa, b, med, ratio, share, ops, ort_wider):
    """One row under --target: its gap, the share of the peak the target takes (bf16 rows: of vitc's bf16
    unit's peak), and where vitc's time goes."""
    vitc_ms, ort_ms = med["vitc"][0], med["ort"][0]
    need_ms = ort_ms / args.target
    pct = lambda v: f"{v:.0%}" if v is not None else "n/a"
    vp, op = pct(share("vitc")), pct(share("ort"))
    need = pct(share("vitc") * vitc_ms / need_ms if share("vitc") is not None else None)
    unit = args.peak_unit.get((name, isa), "fp32")
    of_v = "of the AVX2 peak" if isa == "avx2" else f"of the {UNIT_NAMES.get(unit, unit)} peak" if unit != "fp32" \
        else "of peak"
    of_o = "of the host's peak, on its AVX-512 kernels" if ort_wider else of_v if unit == "fp32" else \
        "of the fp32 FMA peak"
    where = ", ".join(f"{o['op']} {o['share'] * vitc_ms:.1f}" for o in sorted(ops or [], key=lambda o: -o["share"])[:4])
    return (f"- {name} ({isa}) batch {b}: vitc/ORT {ratio}. vitc {vitc_ms:.1f} ms, ORT {ort_ms:.1f}; "
            f"{args.target:.2f}x takes {need_ms:.1f} ms ({1 - need_ms / vitc_ms:.0%} less time), vitc at {need} "
            f"{of_v} where it ran at {vp} (ORT at {op} {of_o})" + (f"; vitc's time in ms: {where}" if where else "") +
            ".")


def compile_s(times):
    """The median of the compile times and their range."""
    return f"{times[len(times) // 2]:.1f} [{times[0]:.1f}-{times[-1]:.1f}]"


def int8_table(args, peak, names, batches, gflops, int8_builds, int8_results):
    """The int8 rows' table, with the text that says what it holds."""
    host = peak.get("host", {})
    unit = "int8 TDPBUSD" if host.get("int8 TDPBUSD") else "int8 VPDPBUSD"
    int8_peak = host.get(unit)
    units = {b["unit"] for b in int8_builds.values() if b.get("unit")}
    text = [
        "",
        "## int8",
        "",
        "Per model and batch one row of seven runtimes, alternated in blocks as above: vitc on ONNX Runtime's "
        "quantize_dynamic export (vitc-dyn) and on its quantize_static QDQ export (vitc-qdq; per-channel int8 weights, "
        "uint8 activations calibrated on 8 seeded images), vitc `--precision int8` on the fp32 export (vitc-int8), "
        "ONNX Runtime with all graph optimisations on those exports (ORT-dyn, ORT-qdq: its int8 kernels), ONNX "
        "Runtime fp32 and vitc fp32. Ratios are speed ratios (above 1: the first is faster): vitc-int8/ORT-dyn is "
        "vitc's own int8 against ONNX Runtime's dynamic int8, vitc-qdq/ORT-dyn vitc on the static export against ONNX "
        "Runtime's faster dynamic int8, vitc-int8/vitc-fp32 what int8 gains vitc. % int8 "
        f"peak: GOP/s (the model's matrix products, as GFLOP above) against the host's int8 peak measured in this "
        f"run, {UNIT_NAMES.get(unit, unit)} ({f'{int8_peak:.0f} GOP/s' if int8_peak else 'not measured'}); vitc's "
        "--precision int8 builds allow " + (", ".join(UNIT_NAMES.get(u, u) for u in sorted(units)) if units else
                                             "no unit peak_fma measures (or none compiled)") +
        "; the fp32 runtimes' % against the fp32 FMA peak. cosine: of each int8 runtime's output with ONNX Runtime "
        "fp32's run apart on the same input (the lowest over the rounds); an int8 output below cosine 0.99, or an fp32 "
        "one beyond 1e-4, is not timed and is listed under Failures. compile s: one compile each.",
        "",
        "| model | batch | GOP | vitc-dyn ms | vitc-qdq ms | vitc-int8 ms | ORT-dyn ms | ORT-qdq ms | ORT fp32 ms | "
        "vitc fp32 ms | vitc-int8/ORT-dyn | vitc-dyn/ORT-dyn | vitc-qdq/ORT-dyn | vitc-qdq/ORT-qdq | vitc-int8/vitc-fp32 | "
        "% int8 peak vitc-dyn / vitc-qdq / vitc-int8 / ORT-dyn / ORT-qdq | % fp32 peak vitc / ORT | "
        "cosine vitc-dyn / vitc-qdq / vitc-int8 / ORT-dyn / ORT-qdq | RSS MB vitc-int8 / ORT-dyn | "
        "compile s vitc-dyn / vitc-qdq / vitc-int8 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines, failures = [], []
    int8_labels = ["vitc-dyn", "vitc-qdq", "vitc-int8", "ort-dyn", "ort-qdq"]
    for name in names:
        build = int8_builds.get(name)
        for b in batches:
            rounds = int8_results.get((name, b))
            if not build or not rounds:
                continue
            g = gflops[name, b]
            med = {}
            for label, *_ in INT8_SLOTS:
                per = [statistics.median(r[label]["ms"]) for r, _ in rounds if label in r and r[label]["ms"]]
                med[label] = (statistics.median(per), per) if per and (name, "int8", b, label) not in args.left_out \
                    else None
                for r, _ in rounds:
                    if label in r and r[label]["error"]:
                        failures.append(f"- {name} (int8) b{b} {label}: {r[label]['error']}")
            f = lambda label: f"{med[label][0]:.1f}" if med.get(label) else "n/a"

            def ratio(a, o):  # a/o as a speed ratio in each round: o's ms / a's ms
                if not med.get(a) or not med.get(o):
                    return "n/a"
                rs = [y / x for x, y in zip(med[a][1], med[o][1])]
                return f"{statistics.median(rs):.2f}x [{min(rs):.2f}-{max(rs):.2f}]"

            def share(label, p):
                return f"{g / (med[label][0] / 1e3) / p:.0%}" if med.get(label) and p else "n/a"

            def cosine(label):
                cs = [after[label][1] for _, after in rounds if label in after and after[label][1] is not None]
                return f"{min(cs):.4f}" if cs else "n/a"

            def rss(label):
                v = [r[label]["rss_mb"] for r, _ in rounds if label in r and r[label]["rss_mb"]]
                return f"{max(v):.0f}" if v else "n/a"
            cs = lambda label: f"{build['compile_s'][label]:.1f}" if label in build["compile_s"] else "n/a"
            fp32_peak = host.get("fp32")
            lines.append(
                f"| {name} | {b} | {g:.1f} | {f('vitc-dyn')} | {f('vitc-qdq')} | {f('vitc-int8')} | {f('ort-dyn')} | "
                f"{f('ort-qdq')} | {f('ort')} | {f('vitc')} | {ratio('vitc-int8', 'ort-dyn')} | "
                f"{ratio('vitc-dyn', 'ort-dyn')} | {ratio('vitc-qdq', 'ort-dyn')} | {ratio('vitc-qdq', 'ort-qdq')} | "
                f"{ratio('vitc-int8', 'vitc')} | "
                + " / ".join(share(label, int8_peak) for label in int8_labels) + " | "
                f"{share('vitc', fp32_peak)} / {share('ort', fp32_peak)} | "
                + " / ".join(cosine(label) for label in int8_labels) + " | "
                f"{rss('vitc-int8')} / {rss('ort-dyn')} | {cs('vitc-dyn')} / {cs('vitc-qdq')} / {cs('vitc-int8')} |")
    return (text + lines if lines else text + ["", "(no int8 row was measured)"]), failures


def write_table(args, cpu, isa_desc, peak_before, peak_after, names, isas, batches, compiled, gflops, results,
                profiles, int8_builds=None, int8_results=None):
    import onnxruntime
    try:
        import torch
        tv = torch.__version__
    except ImportError:
        tv = "n/a"
    peak = {}  # isa -> unit -> the larger of before and after
    for isa, (before, _) in peak_before.items():
        after = peak_after.get(isa, ({}, {}))[0]
        peak[isa] = {}
        for u in before:
            pair = [v for v in (before[u], after.get(u)) if v]
            peak[isa][u] = max(pair) if pair else None

    def peak_line(isa, u):
        b, a = peak_before[isa][0].get(u), peak_after.get(isa, ({}, {}))[0].get(u)
        why = peak_before[isa][1].get(u)
        what = f"{isa} {UNIT_NAMES.get(u, u)}" if isa != "host" else UNIT_NAMES.get(u, u)
        unit = "GOP/s" if u.startswith("int8") else "GFLOP/s"
        return (f"{what}: {b:.0f} {unit} before, {a:.0f} after" if b and a else
                f"{what}: not available ({why})" if why else f"{what}: not measured")
    peak_lines = [peak_line(isa, u) for isa in peak_before for u in peak_before[isa][0]]
    n_calls = args.block * args.blocks
    ran_avx2 = {rt for rt, seen in args.avx2_kernels.items() if seen == {True}}
    if not args.hide_errors:
        avx2_line = (" In the avx2 rows every worker ran with AVX-512 and AMX hidden from CPUID (bench/cpuid_mask.c, "
                     "CPUID faulting), so ONNX Runtime and PyTorch ran their AVX2 kernels, as on an AVX2 machine; "
                     "% peak there is of the AVX2 peak (8-float vectors) for every runtime.")
    else:
        others = [("ONNX Runtime", "ort"), ("PyTorch", "torch")]
        on = [n for n, rt in others if rt in ran_avx2]
        off = [n for n, rt in others if rt not in ran_avx2]
        avx2_line = (" AVX-512 could not be hidden from CPUID here (" + "; ".join(sorted(args.hide_errors)) + ")" +
                     ("; PyTorch ran its AVX2 kernels all the same, by its own switches (ATEN_CPU_CAPABILITY=avx2, "
                      "ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2)" if "PyTorch" in on else "") +
                     (", and " + " and ".join(off) + " ran the host's AVX-512 kernels against vitc's AVX2 code (" +
                      ("it has" if len(off) == 1 else "they have") + " no such switch)" if off else "") +
                     ". % peak in the avx2 rows is of the AVX2 peak for a runtime on its AVX2 kernels, else of the "
                     "host's peak.")
    head = [
        f"# vitc benchmark: {datetime.date.today().isoformat()}",
        "",
        f"- Machine: {cpu}, {os.cpu_count()} cores visible, {isa_desc}; {args.threads} threads for every runtime.",
        f"- Peaks measured in this run (bench/peak_fma, {args.threads} threads; % of peak uses the larger of before "
        "and after): " + "; ".join(peak_lines) + "." +
        (avx2_line if "avx2" in peak_before and "host" in peak_before else ""),
        f"- vitc at commit {args.commit}; ONNX Runtime {onnxruntime.__version__} (all graph optimisations); "
        f"PyTorch {tv} eager.",
        f"- Method: per row, one worker process per runtime, alternated in blocks of {args.block} calls "
        f"({args.blocks} blocks each, {args.pause:.1f} s pause between blocks, {args.warmup} warm-up calls); "
        f"the whole table measured {args.rounds} times in this one command. ms: median over the rounds of each "
        f"round's median of {n_calls} calls; ratios: median over the rounds [lowest-highest].",
        "- Command: `.venv-gen/bin/python bench/run.py " + " ".join(sys.argv[1:]) + "`",
    ]
    table_head = [
        "",
        "vitc/ORT and vitc/torch are speed ratios (above 1: vitc is faster). isa: vitc's code path (host: the "
        "host's features; avx2: compiled with --features=-avx512f, the other runtimes as the header says; bf16: "
        "--precision bf16, the Linear layers in bf16 (" + ("on AMX tiles" if "amx_tile" in isa_desc else
                                                         "with AVX512-BF16's VDPBF16PS") + "; attention and the rest "
        "in fp32), whose err is bf16's, ORT and PyTorch staying fp32). % peak: each runtime's GFLOP/s (the model's "
        "matrix products) against the peak of the unit it ran, measured in this run: vitc's against the column "
        "'vitc's peak' (its bf16 rows against the bf16 peak of the unit its build uses: AMX's TDPBF16PS where the "
        "compiled model lists amx-bf16, else VDPBF16PS), ORT's against the fp32 FMA peak (AVX2's in the avx2 rows, "
        "as the header says). Runs before this column (up to 2026-11-27) gave the bf16 rows' % peak against the "
        "fp32 FMA peak. RSS: each worker's peak resident memory "
        "(includes the Python interpreter, ~30 MB, and for torch its libraries). err: max|vitc - ref| / max|ref|, ref "
        "ONNX Runtime fp32 run apart on the same input; every runtime's output meets it before and after it is timed "
        "(fp32 1e-4; bf16 1e-2 and cosine >= 0.9999), else it is left out of the row and listed under Failures. "
        "compile: seconds for `vitc MODEL.onnx -o MODEL.so`, the median of three [fastest-slowest]. "
        "vitc's time by op: `vitc run --profile` (the three largest shares).",
        "",
        "| model | isa | batch | GFLOP | vitc ms | ORT ms | torch ms | vitc img/s | vitc/ORT | vitc/torch | "
        "vitc % peak | vitc's peak | ORT % peak | RSS MB vitc / ORT / torch | err | compile s | vitc's time by op |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ] if isas else []
    lines = []
    failures = list(args.check_failures)
    below = []  # the rows under --target, explained after the table
    for name in names:
        for isa, _ in isas:
            for b in batches:
                rounds = results[name, isa, b]
                g = gflops[name, b]
                med = {}
                for rt in RUNTIMES:
                    per = [statistics.median(r[rt]["ms"]) for r, _ in rounds if rt in r and r[rt]["ms"]]
                    # a runtime with a wrong output in any round is left out of the row
                    med[rt] = (statistics.median(per), per) if per and (name, isa, b, rt) not in args.left_out \
                        else None
                    for r, _ in rounds:
                        if rt in r and r[rt]["error"]:
                            failures.append(f"- {name} ({isa}) b{b} {rt}: {r[rt]['error']}")
                if not med["vitc"]:  # no vitc time that checked out: no row (the reason is under Failures)
                    continue

                def ratios(other):  # vitc/other in each round
                    if not med["vitc"] or not med.get(other):
                        return None
                    return [o / v for v, o in zip(med["vitc"][1], med[other][1])]

                def ratio(other, digits=2):
                    rs = ratios(other)
                    return f"{statistics.median(rs):.{digits}f}x [{min(rs):.2f}-{max(rs):.2f}]" if rs else "n/a"

                f = lambda rt: f"{med[rt][0]:.1f}" if med.get(rt) else "n/a"
                unit = args.peak_unit.get((name, isa), "fp32")

                def share(rt):  # of the peak of the unit each ran (vitc's bf16 rows: its bf16 unit's), or None
                    if rt == "vitc" and unit != "fp32":
                        p = peak["host"].get(unit)
                    else:
                        p = peak.get(isa if isa == "avx2" and (rt == "vitc" or rt in ran_avx2) else "host", {}).get("fp32")
                    return g / (med[rt][0] / 1e3) / p if med.get(rt) and p else None
                vitc_peak = ("bf16, its unit not known" if unit is None else UNIT_NAMES.get(unit, unit) +
                             (", AVX2" if isa == "avx2" else "") + ("" if share("vitc") else " (not measured)"))
                pk = lambda rt: f"{share(rt):.0%}" if share(rt) is not None else "n/a"
                ips = f"{b / (med['vitc'][0] / 1e3):.1f}" if med.get("vitc") else "n/a"
                def rss(rt):  # the largest peak over the rounds
                    v = [r[rt]["rss_mb"] for r, _ in rounds if rt in r and r[rt]["rss_mb"]]
                    return f"{max(v):.0f}" if v else "n/a"
                errs = [e for _, e in rounds if e is not None]
                err = f"{max(errs):.1e}" if errs else "n/a"
                if ratios("ort") and statistics.median(ratios("ort")) < args.target:  # the table's ratio
                    below.append(gap_line(args, name, isa, b, med, ratio("ort", 3), share, profiles.get((name, isa, b)),
                                          isa == "avx2" and "ort" not in ran_avx2))
                lines.append(f"| {name} | {isa} | {b} | {g:.1f} | {f('vitc')} | {f('ort')} | {f('torch')} | {ips} | "
                             f"{ratio('ort')} | {ratio('torch')} | {pk('vitc')} | {vitc_peak} | {pk('ort')} | "
                             f"{rss('vitc')} / {rss('ort')} / {rss('torch')} | {err} | "
                             f"{compile_s(compiled[name, isa][2])} | "
                             f"{by_op(profiles.get((name, isa, b)))} |")
    gaps = ["", f"Rows whose median vitc/ORT is below {args.target:.2f}x ({len(below)} of {len(lines)}), with what "
            f"{args.target:.2f}x takes: vitc's time at that ratio to ORT's median, and the share of the peak vitc "
            "would then run at; where vitc's time goes, by op (its profile's shares of its median).", "",
            *below] if below else []
    int8_part = []
    if int8_builds:
        int8_part, int8_failures = int8_table(args, peak, names, batches, gflops, int8_builds, int8_results or {})
        failures += int8_failures
    failures = list(dict.fromkeys(failures))  # a failure seen in every round is listed once
    text = "\n".join(head + table_head + lines + gaps + int8_part +
                     (["", "Failures:", *failures] if failures else [])) + "\n"
    print(text)
    with open(args.out, "w") as fh:
        fh.write(text)
    print(f"wrote {args.out}")
    return failures


if __name__ == "__main__":
    sys.exit(main())
