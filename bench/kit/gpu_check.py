#!/usr/bin/env python3
"""gpu-check: vitc's CUDA backend on this machine's GPU, checked and then timed against PyTorch.

Runs from a kit made by bench/gpu-kit.sh (bin/vitc, lib/libvitc_runtime.so, py/), on a machine with
an NVIDIA GPU, python3 and PyTorch with CUDA; nothing is built or downloaded here.

  1. models: the seed families at fixture size (tests/models/gen_fixtures.py, seeded weights) and,
     at full size, ViT-Ti/S/B/L/16 (timm; ViT-L at batch 1 and 64 only) and torchvision's vit_b_16,
     exported to ONNX with a dynamic batch by this machine's torch;
  2. compile: every model for fp32, tf32, bf16 and fp16 with the kit's vitc (in parallel);
  3. check: every model, precision and batch against PyTorch fp32 (TF32 off) on the same GPU:
     error = max|out - ref| / max|ref| within 1e-4 (fp32), 2e-3 (tf32), 1e-2 (bf16, fp16), the last three
     with cosine >= 0.9999 (the bars of tests/testutil.h), or, at tf32/bf16/fp16, within twice PyTorch's own error at that precision on the
     same input (TF32 matmuls, autocast; the cosine bar still holds): the rounding of the precision
     itself, which the tiny seeded models at batch 64 and 256 push past the fixed bar under PyTorch
     too; the workspace filled with NaN bytes before the first run (VITC_CUDA_POISON);
     the CUDA graph's replay and a plain launch (VITC_CUDA_GRAPH=0) bit for bit equal to the first
     run; host and device entry points (vitc_run, vitc_run_device) equal; the large GEMM tile
     present in the large models.  Every failure is listed before any timing; exit status 1;
  4. time: vitc bf16 against PyTorch eager bf16 (scaled-dot-product attention) and torch.compile,
     inputs already on the GPU, all three timed the same way in one alternation: equal warm-up,
     then rounds of blocks of calls between device-wide synchronisations, the order rotated each
     round, with pauses; and end to end host to host (pinned host buffers, copies included) the
     same way; as ms, images/s and percent of the bf16 matmul peak measured here (torch.matmul
     8192^3).  vitc's own CUDA-event time is reported beside, for reference.

Writes results-gpu.md, results-gpu.json and gpu-check.log (and compile.log) into --out (default
$OUT, else ./gpu-check-out).  Exit status: 0 all checks pass, 1 a check failed, 2 no GPU or a
setup problem (said in one line, without a traceback).

  gpu-check --quick     seed families (TorchScript opset 17) and ViT-B/16 at batch 1 and 64 (~3 min)
  gpu-check             every model at batch 1, 8, 64 and 256
  gpu-check --quick --cpu-dry-run   without a GPU (PYTHON=a python with torch): models, compiles,
                        vitc inspect, the fp32 references and the timing setup on the CPU, then stop
"""
import argparse
import concurrent.futures
import ctypes
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback

PRECISIONS = ["fp32", "tf32", "bf16", "fp16"]
# The project's bars, defined once in tests/testutil.h (TU_BAR_*): the same numbers, kept equal by hand.
BARS = {"fp32": (1e-4, None), "tf32": (2e-3, 0.9999), "bf16": (1e-2, 0.9999), "fp16": (1e-2, 0.9999)}
TINY_FAMILIES = ["torchvision", "timm", "einops", "face_ln", "face_bn"]
FULL_MODELS = ["vit_ti16_timm", "vit_s16_timm", "vit_b16_timm", "vit_b16_torchvision", "vit_l16_timm"]
# checked at these batches only (the largest model's fp32 reference at 256 is slow and large)
FULL_BATCHES = {"vit_l16_timm": [1, 64]}


class SetupError(Exception):
    """A problem with the machine or the kit (exit 2), not with vitc's results."""


class Log:
    def __init__(self, path, append=False):
        self.f = open(path, "a" if append else "w")
        self.t0 = float(os.environ.setdefault("VITC_GPU_CHECK_T0", str(time.time())))  # the parent's, in a child

    def __call__(self, msg):
        line = f"[{time.time() - self.t0:6.1f}s] {msg}"
        print(line, flush=True)
        self.f.write(line + "\n")
        self.f.flush()


# ------------------------------------------------------------------------------------------------
# vitc through its C API (ctypes): standard library only, so that the GPU check comes first
# ------------------------------------------------------------------------------------------------
class VitcTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("dims", ctypes.c_int64 * 8), ("data", ctypes.c_void_p)]


def vt(ptr, dims):
    t = VitcTensor()
    t.name, t.dtype, t.rank, t.data = None, 1, len(dims), ptr
    for i, d in enumerate(dims):
        t.dims[i] = d
    return t


class Vitc:
    def __init__(self, kit):
        self.bin = os.path.join(kit, "bin", "vitc")
        self.sync = None  # torch.cuda.synchronize: vitc's stream does not wait for torch's
        lib = os.path.join(kit, "lib", "libvitc_runtime.so")
        if not os.path.exists(self.bin) or not os.path.exists(lib):
            raise SetupError(f"{kit} is not a vitc kit (bin/vitc, lib/libvitc_runtime.so): make one with bench/gpu-kit.sh")
        self.lib = ctypes.CDLL(lib)
        self.lib.vitc_last_error.restype = ctypes.c_char_p
        self.lib.vitc_context_device_ms.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double)]
        for f in ("vitc_run", "vitc_run_device"):
            getattr(self.lib, f).argtypes = [ctypes.c_void_p, ctypes.POINTER(VitcTensor), ctypes.c_int,
                                             ctypes.POINTER(VitcTensor), ctypes.c_int]

    def error(self):
        return self.lib.vitc_last_error().decode(errors="replace")

    def device(self):
        name, arch = ctypes.create_string_buffer(256), ctypes.c_int()
        if self.lib.vitc_cuda_device(name, ctypes.c_size_t(256), ctypes.byref(arch)) != 0:
            return None, 0, self.error()
        return name.value.decode(), arch.value, ""

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: {self.error()}")

    def load(self, so):
        m = ctypes.c_void_p()
        self.check(self.lib.vitc_model_load(so.encode(), ctypes.byref(m)), "vitc_model_load " + so)
        return m

    def context(self, model, graphs=True):
        old = os.environ.get("VITC_CUDA_GRAPH")
        os.environ["VITC_CUDA_GRAPH"] = "1" if graphs else "0"
        c = ctypes.c_void_p()
        try:
            self.check(self.lib.vitc_context_create(model, 0, ctypes.byref(c)), "vitc_context_create")
        finally:
            if old is None:
                del os.environ["VITC_CUDA_GRAPH"]
            else:
                os.environ["VITC_CUDA_GRAPH"] = old
        return c

    def free(self, model, *ctxs):
        for c in ctxs:
            self.lib.vitc_context_free(c)
        self.lib.vitc_model_free(model)

    def run(self, ctx, x, y, device=True):
        """x, y: contiguous float32 torch tensors (on the GPU for device=True, in host memory else)."""
        ti, to = vt(x.data_ptr(), list(x.shape)), vt(y.data_ptr(), list(y.shape))
        f = self.lib.vitc_run_device if device else self.lib.vitc_run
        if device and self.sync:
            self.sync()  # torch's writes to x and y are done before vitc's stream reads or writes them
        self.check(f(ctx, ctypes.byref(ti), 1, ctypes.byref(to), 1), f.__name__)

    def device_ms(self, ctx):
        ms = ctypes.c_double()
        self.check(self.lib.vitc_context_device_ms(ctx, ctypes.byref(ms)), "vitc_context_device_ms")
        return ms.value


# ------------------------------------------------------------------------------------------------
# models
# ------------------------------------------------------------------------------------------------
class Spec:
    def __init__(self, name, family, builder, seed, image, input_seed, exporter, full):
        self.name, self.family, self.builder, self.seed, self.image = name, family, builder, seed, image
        self.input_seed, self.exporter, self.full = input_seed, exporter, full
        self.onnx = self.skip = self.error = None


def model_specs(G, quick):
    specs = []
    for fam in TINY_FAMILIES:
        builder, wseed, image = G.TINY[fam][0], G.TINY[fam][1], G.TINY[fam][2]
        for exp in (["ts17"] if quick else G.EXPORTERS):
            specs.append(Spec(f"{fam}-{exp}", fam, builder, wseed, image, G.TINY_INPUT_SEED[fam], exp, False))
    # the attention kernels' widest head (128: the second 64-column block of attention_wg's V; ViT-B's heads
    # are 64) at a full image's 197 tokens: one timm block of two heads, checked at every batch, not timed
    specs.append(Spec("vit_d128_timm", "vit_d128_timm", lambda: G.build_timm(224, 16, 1, 2, 256, 4.0, 1000), 211, 224,
                      211, "ts17", False))
    for name in (["vit_b16_timm"] if quick else FULL_MODELS):
        builder, wseed, image = G.FULL[name]
        specs.append(Spec(name, name, builder, wseed, image, wseed, "ts17", True))
    return specs


def make_models(G, torch, specs, work, log, named=()):
    """Exports every model to WORK/NAME.onnx (kept from an earlier run).  A model that cannot be made
    is left out (s.onnx None): skipped where a Python package is missing here (s.skip), unless it was
    named (--models), a failure otherwise (s.error)."""
    for s in specs:
        path = os.path.join(work, s.name + ".onnx")
        if os.path.exists(path):
            s.onnx = path
            continue
        t0 = time.time()
        try:
            model = G.make_model(s.builder, s.seed)
            example = torch.from_numpy(G.make_input(s.input_seed + 1000, 2, s.image))
            G.export_one(model, example, path + ".tmp", s.exporter)
        except ImportError as e:
            if s.name in named:
                s.error = f"named with --models, but not made here: {e}"
                log(f"model {s.name}: {s.error}")
            else:
                s.skip = f"not made here: {e}"
                log(f"model {s.name}: SKIPPED ({s.skip})")
            continue
        except Exception as e:  # noqa: BLE001  (the export's own failure is a result: the others go on)
            s.error = f"export failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
            log(f"model {s.name}: {s.error}")
            continue
        os.replace(path + ".tmp", path)
        s.onnx = path
        log(f"model {s.name}: exported ({os.path.getsize(path) / 2**20:.1f} MiB, {time.time() - t0:.1f} s)")


def compile_all(vitc, specs, max_batch, work, jobs, log, compile_log, emu):
    """Every (model, precision) through `vitc --target cuda`, jobs at a time.  {(name, prec): so or None}."""
    def one(s, p):
        so = os.path.join(work, f"{s.name}.{p}.so")
        cmd = [vitc.bin, s.onnx, "--target", "cuda", "--precision", p, "--batch", str(max_batch), "-o", so]
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode == 0 and emu:
            emu_build(vitc, cmd, so, emu)
        return s, p, so, r, time.time() - t0

    out = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        futs = [ex.submit(one, s, p) for s in specs if s.onnx for p in PRECISIONS]
        for f in concurrent.futures.as_completed(futs):
            s, p, so, r, dt = f.result()
            compile_log.write(f"$ vitc {s.name}.onnx --precision {p}: exit {r.returncode}, {dt:.1f} s\n{r.stdout}{r.stderr}\n")
            ok = r.returncode == 0
            out[(s.name, p)] = so if ok else None
            log(f"compile {s.name} {p}: " + (f"{dt:.1f} s" if ok else f"FAILED (exit {r.returncode}): "
                                              + (r.stderr.strip().splitlines() or ["?"])[-1]))
    compile_log.flush()
    return out


def emu_build(vitc, cmd, so, emu):
    """Testing this script without a GPU (VITC_KIT_EMULATE=TESTS_DIR): the emulation libraries of the
    model's program for tests/fake_libcuda.c (see tests/testutil.c, tu_emu_build_as): the portable one
    and, where a GEMM runs on wgmma, the sm_90a image's."""
    cu = so[:-3] + ".cu"
    subprocess.run(cmd[:-1] + [cu, "--emit", "cuda"], check=True, capture_output=True)
    text = open(cu).read()
    pid = text[text.index('"vitc-program:') + len('"vitc-program:'):][:16]
    sm90a = "vk::gemm_wg<" in text or "vk::gemm_tma<" in text
    for suffix, flags in [("", [])] + ([("-sm90a", ["-DVITC_EMU_SM90A"])] if sm90a else []):
        lib = os.path.join(os.environ["VITC_FAKE_CUDA_EMU_DIR"], f"emu-{pid}{suffix}.so")
        if not os.path.exists(lib):
            subprocess.run([os.environ.get("CXX", "c++"), "-std=c++17", "-O1", "-w", "-shared", "-fPIC", "-DVITC_EMU",
                            *flags, "-I", emu, "-x", "c++", cu, "-o", lib + ".tmp"], check=True)
            os.replace(lib + ".tmp", lib)


# ------------------------------------------------------------------------------------------------
# correctness
# ------------------------------------------------------------------------------------------------
def rel_cos(torch, out, ref):
    o, r = out.double().flatten(), ref.double().flatten()
    den = r.abs().max().item() or 1.0
    err = (o - r).abs().max().item() / den
    cos = (torch.dot(o, r) / (o.norm() * r.norm())).item() if o.norm() > 0 and r.norm() > 0 else 0.0
    return err, cos


def references(G, torch, dev, s, batches):
    """{batch: (input, PyTorch fp32 output, {precision: PyTorch's own output at that precision})} on dev,
    the seeded inputs of gen_fixtures.  PyTorch's reduced precisions: TF32 matmuls (allow_tf32), and
    autocast to bf16 and fp16 on the GPU (bf16 on the CPU, where autocast has no fp16)."""
    ref_model = G.make_model(s.builder, s.seed).to(dev)
    inputs = {}
    with torch.inference_mode():
        for b in batches:
            x = torch.from_numpy(G.make_input(s.input_seed, b, s.image)).to(dev)
            own = {}
            if dev.type == "cuda":
                torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
                try:
                    own["tf32"] = ref_model(x).float()
                finally:
                    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
            for p, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
                if dev.type == "cuda" or p == "bf16":
                    with torch.autocast(device_type=dev.type, dtype=dt):
                        own[p] = ref_model(x).float()
            inputs[b] = (x, ref_model(x).float(), own)
    return inputs


def judge(p, err, cos, pt_err):
    """(ok, how, notes) for vitc's error at precision p, given PyTorch's own error at p (None: not known).
    Within the bar, or, at a reduced precision, within twice PyTorch's own error on the same input and GPU
    (the rounding of the precision itself, which no kernel can beat; FlashAttention's tests use the
    same rule); tf32, bf16 and fp16 need the cosine too."""
    tol, ctol = BARS[p]
    notes = []
    if ctol is not None and cos < ctol:
        notes.append(f"cosine below {ctol}")
    if err <= tol:
        return not notes, "bar", notes
    if p != "fp32" and pt_err is not None and err <= 2 * pt_err:
        return not notes, "2x PyTorch", notes
    notes.append(f"error above {tol:g}" + (f" and above 2x PyTorch's own {pt_err:.2e}" if pt_err is not None else ""))
    return False, "", notes


def check_model(G, torch, dev, vitc, s, sos, batches, log):
    """Rows of (model, precision, batch, err, cos, equal, ok, note) for one model."""
    rows = []
    inputs = references(G, torch, dev, s, batches)
    for p in PRECISIONS:
        so = sos.get((s.name, p))
        if not so:
            rows.append(dict(model=s.name, precision=p, batch=0, ok=False, note="compile failed (compile.log)"))
            continue
        m = ctx = ctx_plain = None
        try:
            m = vitc.load(so)
            os.environ["VITC_CUDA_POISON"] = "1"
            ctx, ctx_plain = vitc.context(m, graphs=True), vitc.context(m, graphs=False)
            for b in batches:
                x, ref, own = inputs[b]
                y1, y2, y3 = (torch.empty(ref.shape, dtype=torch.float32, device=dev) for _ in range(3))
                y1.fill_(float("nan")), y2.fill_(float("nan")), y3.fill_(float("nan"))
                vitc.run(ctx, x, y1)      # captures the graph of this batch, then launches it
                vitc.run(ctx, x, y2)      # replays it
                vitc.run(ctx_plain, x, y3)  # kernel by kernel
                notes = []
                equal = torch.equal(y1, y2) and torch.equal(y1, y3)
                if not equal:
                    notes.append("graph replay / plain launch differ")
                if b == batches[0]:       # the host entry point, from pinned and from pageable memory
                    xh, yh = x.cpu(), torch.empty(ref.shape, dtype=torch.float32)
                    vitc.run(ctx, xh.contiguous(), yh, device=False)
                    if not torch.equal(yh.to(dev), y1):
                        equal = False
                        notes.append("vitc_run and vitc_run_device differ")
                finite = bool(torch.isfinite(y1).all())
                if not finite:
                    notes.append("NaN/Inf in the output (an unwritten or overflowing value)")
                err, cos = rel_cos(torch, y1, ref)
                pt_err = rel_cos(torch, own[p], ref)[0] if p in own else None
                good, how, why = judge(p, err, cos, pt_err)
                if finite:
                    notes += why
                ok = finite and equal and good
                rows.append(dict(model=s.name, precision=p, batch=b, err=err, cos=cos, pt_err=pt_err, equal=equal,
                                 ok=ok, how=how if ok else "", note="; ".join(notes)))
                log(f"check {s.name} {p} batch {b}: err {err:.2e} cos {cos:.6f} (PyTorch {fmt(pt_err, '.2e')}) "
                    f"{'ok (' + how + ')' if ok else 'FAIL: ' + '; '.join(notes)}")
        except Exception as e:  # a failing run is a result, the others go on
            rows.append(dict(model=s.name, precision=p, batch=0, ok=False, note=str(e).splitlines()[0][:300]))
            log(f"check {s.name} {p}: FAIL: {e}")
        finally:
            os.environ.pop("VITC_CUDA_POISON", None)
            if m:
                vitc.free(m, *[c for c in (ctx, ctx_plain) if c])
    return rows


def dry_check_model(G, torch, dev, vitc, s, sos, batches, log):
    """--cpu-dry-run: what check_model does before the GPU: the references, and every precision's .so
    inspected, loaded through ctypes and its context refused for want of a device."""
    rows = []
    inputs = references(G, torch, dev, s, batches)
    shapes = " ".join(f"b{b}:{tuple(r.shape)}" for b, (_, r, _) in inputs.items())
    for p in PRECISIONS:
        so = sos.get((s.name, p))
        if not so:
            rows.append(dict(model=s.name, precision=p, batch=0, ok=False, note="compile failed (compile.log)"))
            continue
        notes = []
        r = subprocess.run([vitc.bin, "inspect", so], capture_output=True, text=True)
        if r.returncode != 0 or "cuda" not in r.stdout:
            notes.append(f"vitc inspect: exit {r.returncode} {r.stderr.strip()[:200]}")
        m = vitc.load(so)
        try:
            vitc.context(m)
            notes.append("a context without a GPU")
        except RuntimeError as e:
            if "vitc_context_create" not in str(e):
                notes.append(str(e))
        finally:
            vitc.free(m)
        rows.append(dict(model=s.name, precision=p, batch=0, ok=not notes,
                         note="; ".join(notes) or "compiled, inspected, loaded; not run (no GPU)"))
        log(f"dry {s.name} {p}: {rows[-1]['note']} (references {shapes})")
    return rows


_plans = {}


def launch_plan(vitc, so):
    """The launches of a compiled CUDA model (vitc inspect --json: cuda.plan), read once per file."""
    if so not in _plans:
        r = subprocess.run([vitc.bin, "inspect", so, "--json"], capture_output=True, text=True)
        _plans[so] = json.loads(r.stdout).get("cuda", {}).get("plan", []) if r.returncode == 0 else []
    return _plans[so]


def kernel_variants(vitc, so, batches):
    """Which kernel runs each GEMM and attention layer at each batch (the plan, from vitc inspect
    --json): {batch: ["K=768 N=2304: wgmma+tma 128x128 x12", ...]}, identical layers counted."""
    import re
    out = {}
    for b in batches:
        rows = {}
        for launch in launch_plan(vitc, so):
            k = launch.get("kernel") or ""
            if not launch["min_batch"] <= b <= launch["max_batch"]:
                continue
            label = re.sub(r" \[sm_.*", "", k.split(" ", 1)[1] if " " in k else k)
            m = re.match(r"gemm (?:bf16|f16|tf32|fp32) (.*?) ?(K=\d+ N=\d+)(.*)", label)
            if m:
                key = f"{m.group(2)}: {m.group(1)}" + "".join(
                    f" {w}" for w in ("split-k", "+layernorm", "+rmsnorm") if w in m.group(3))
            elif label.startswith("attention"):
                key = label
            else:
                continue
            rows[key] = rows.get(key, 0) + 1
        out[b] = [f"{k} x{n}" if n > 1 else k for k, n in rows.items()]
    return out


def has_large_tile(vitc, so):
    """Whether the model's GEMMs include a tile larger than 64x64 (the kernels' labels in its plan)."""
    import re
    return any(int(a) * int(b) > 64 * 64 for launch in launch_plan(vitc, so)
               for a, b in re.findall(r"mma(?:\+tma)?(?: pingpong)? (\d+)x(\d+) ", launch.get("kernel") or ""))


# ------------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------------
class Timer:
    """Device time of fn() on the current torch stream (CUDA events), or host time on the CPU."""

    def __init__(self, torch, dev):
        self.torch, self.cuda = torch, dev.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def _events_ms(self, fn):
        """One call of fn between two CUDA events on the stream, in ms."""
        a, b = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b)

    def _wall_ms(self, fn):
        """One call of fn until the device is done with it, in ms of host time."""
        t0 = time.perf_counter()
        fn()
        self.sync()
        return (time.perf_counter() - t0) * 1e3

    def _median(self, one_ms, fn, warmup, repeat):
        for _ in range(warmup):
            fn()
        self.sync()
        return statistics.median([one_ms(fn) for _ in range(repeat)])

    def device(self, fn, warmup, repeat):
        return self._median(self._events_ms if self.cuda else self._wall_ms, fn, warmup, repeat)

    def host(self, fn, warmup, repeat):
        return self._median(self._wall_ms, fn, warmup, repeat)

    def alternated(self, fns, warmup, rounds, block, pause):
        """Per-call ms of each of fns (name -> fn), all timed alike: the same warm-up calls, then
        `rounds` rounds in which each fn runs `block` calls back to back between two device-wide
        synchronisations (host time; one stream or several, every runtime's work is inside), the
        order rotated each round and `pause` seconds between blocks, so that no runtime always
        follows the same one or inherits another's clocks or caches.  The median over rounds."""
        names = list(fns)
        for k in names:
            for _ in range(warmup):
                fns[k]()
        self.sync()
        per = {k: [] for k in names}
        for r in range(rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:
                self.sync()
                t0 = time.perf_counter()
                for _ in range(block):
                    fns[k]()
                self.sync()
                per[k].append((time.perf_counter() - t0) * 1e3 / block)
                time.sleep(pause)
        return {k: statistics.median(v) for k, v in per.items()}


def measured_peak(torch, dev, timer):
    n = 8192 if dev.type == "cuda" else 512
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    ms = timer.device(lambda: a @ b, 3, 10)
    return 2 * n ** 3 / (ms / 1e3) / 1e12


def flop_per_image(torch, model, image, dev):
    from torch.utils.flop_counter import FlopCounterMode
    x = torch.zeros(1, 3, image, image, device=dev)
    with torch.inference_mode(), FlopCounterMode(display=False) as fc:
        model(x)
    return fc.get_total_flops()


def eager_bf16(G, torch, s, dev):
    """The same model and weights in bf16, as PyTorch users run it: fused attention on."""
    m = G.make_model(s.builder, s.seed)
    for mod in m.modules():
        if hasattr(mod, "fused_attn"):
            mod.fused_attn = True  # timm: F.scaled_dot_product_attention
    return m.to(dev).to(torch.bfloat16)


def time_setup(G, torch, dev, s, log):
    """GFLOP per image (fp32 model, FlopCounterMode), the bf16 eager model and its output width."""
    fp32 = G.make_model(s.builder, s.seed).to(dev)
    gflop = flop_per_image(torch, fp32, s.image, dev) / 1e9
    del fp32
    eager = eager_bf16(G, torch, s, dev)
    with torch.inference_mode():
        classes = eager(torch.zeros(1, 3, s.image, s.image, device=dev, dtype=torch.bfloat16)).shape[-1]
    log(f"time {s.name}: {gflop:.2f} GFLOP per image, {classes} outputs")
    return gflop, eager, classes


def time_model(G, torch, dev, vitc, s, so, batches, args, rows, log, failed=False, progress=None):
    """Appends one row per batch to rows (those done stay there when a later batch raises), calling
    progress() after each."""
    timer = Timer(torch, dev)
    gflop, eager, classes = time_setup(G, torch, dev, s, log)
    compiled = None
    if not args.no_compile:
        compiled = torch.compile(eager, mode=args.compile_mode, dynamic=False)
    m = vitc.load(so)
    ctx = vitc.context(m)
    try:
        for b in batches:
            x = torch.from_numpy(G.make_input(s.input_seed, b, s.image)).to(dev)
            y = torch.empty(b, classes, dtype=torch.float32, device=dev)
            pin = dev.type == "cuda"
            xh = x.cpu().pin_memory() if pin else x.cpu()
            yh = torch.empty(y.shape, dtype=torch.float32).pin_memory() if pin else torch.empty(y.shape)
            row = dict(model=s.name + (" (bf16 check FAILED)" if failed else ""), batch=b, gflop=gflop * b)

            xb = x.bfloat16()
            with torch.inference_mode():
                dev_fns = {"vitc": lambda: vitc.run(ctx, x, y), "eager": lambda: eager(xb)}
                if compiled is not None:
                    try:  # compiled here, outside the timing
                        t0 = time.time()
                        compiled(xb)
                        row["compile_s"] = time.time() - t0
                        dev_fns["compiled"] = lambda: compiled(xb)
                    except Exception as e:
                        row["compiled_error"] = str(e).splitlines()[0][:200]
                        compiled = None
                row.update(timer.alternated(dev_fns, args.warmup, args.repeat, args.block, args.pause))
                h2h = timer.alternated(
                    {"vitc_h2h": lambda: vitc.run(ctx, xh, yh, device=False),
                     "eager_h2h": lambda: yh.copy_(eager(xh.to(dev, non_blocking=True).bfloat16()).float(),
                                                   non_blocking=True)},
                    args.warmup, args.repeat, args.block, args.pause)
                row.update(h2h)
            if dev.type == "cuda":  # vitc's own CUDA events around its kernels, for reference
                dts = []
                for _ in range(args.repeat):
                    vitc.run(ctx, x, y)
                    dts.append(vitc.device_ms(ctx))
                row["vitc_events"] = statistics.median(dts)
            rows.append(row)
            log("time " + " ".join(f"{k}={fmt(v)}" for k, v in row.items()))
            if progress:
                progress()
    finally:
        vitc.free(m, ctx)


# ------------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------------
def fmt(v, spec=".3f"):
    if v is None:
        return "n/a"
    return format(v, spec) if isinstance(v, float) else str(v)


def report(args, info, checks, large_tile, skipped, timings, peak, out):
    fails = [r for r in checks if not r["ok"]]
    L = [f"# vitc on the GPU: {info['date']}", "",
         f"Device: **{info['device']}** (sm_{info['arch']}), driver {info['driver']}.  Commit {info['commit']}.  "
         f"PyTorch {info['torch']}, Python {info['python']}, host {info['host']}.",
         f"Command: `gpu-check {' '.join(sys.argv[1:])}` ({'quick' if args.quick else 'full'}"
         f"{'; CPU dry run: nothing ran on a GPU' if args.cpu_dry_run else ''}).", ""]
    if skipped:
        L += ["Left out: " + "; ".join(skipped) + ".", ""]
    L += [
         "## Correctness", "",
         f"{len(checks) - len(fails)} of {len(checks)} model/precision/batch checks pass "
         "(against PyTorch fp32 on this GPU, TF32 off; error = max|out-ref|/max|ref|; bars (tests/testutil.h): fp32 1e-4, tf32 2e-3, "
         "bf16/fp16 1e-2 and cosine >= 0.9999, or, for tf32/bf16/fp16, at most twice PyTorch's own error at that "
         "precision on the same input (TF32 matmuls; autocast), with the cosine bar still; \"PyTorch\" is that "
         "error, \"by\" which rule passed; workspace poisoned with NaN bytes; graph replay and plain launch "
         "bit-identical to the first run).  Large GEMM tile in: " + (", ".join(large_tile) or "NONE") + ".", ""]
    if fails:
        L += ["**FAILURES**", ""] + [f"- {r['model']} {r['precision']} batch {r['batch']}: {r['note']}" for r in fails] + [""]
    if info.get("kernels"):
        L += ["Kernels of the bf16 plans, per layer and batch (GEMMs by K and N; an sm_90 GPU runs the wgmma "
              "ones, others their mma.sync form):", ""]
        for name, per_batch in info["kernels"].items():
            for b, rows in per_batch.items():
                L.append(f"- {name} batch {b}: " + "; ".join(rows))
        L.append("")
    L += ["| model | precision | batch | error | PyTorch | cosine | replay = plain | result | by |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in checks:
        L.append(f"| {r['model']} | {r['precision']} | {r['batch']} | {fmt(r.get('err'), '.2e')} | "
                 f"{fmt(r.get('pt_err'), '.2e')} | {fmt(r.get('cos'), '.6f')} | {fmt(r.get('equal'))} | "
                 f"{'PASS' if r['ok'] else 'FAIL ' + r['note']} | {r.get('how', '')} |")
    if timings:
        pk = lambda r, k: r["gflop"] / r[k] / peak * 100 if r.get(k) and peak else None  # GFLOP/ms = TFLOP/s
        ips = lambda r, k: r["batch"] / (r[k] / 1e3) if r.get(k) else None
        L += ["", "## Speed (bf16 both sides)", "",
              f"bf16 matmul peak measured here (torch.matmul 8192^3, random data): {peak:.0f} TFLOP/s.  "
              f"Time per call, input on the GPU: vitc (vitc_run_device), eager and torch.compile timed alike, "
              f"{args.warmup} warm-up calls each, then {args.repeat} rounds in which each runs {args.block} calls "
              f"between two device-wide synchronisations (host clock), the order rotated each round, "
              f"{args.pause:g} s apart; medians over rounds.  h2h: host to host the same way, pinned "
              "buffers, copies and synchronisation included.  vitc events: vitc's own CUDA events around its "
              "kernels (vitc_context_device_ms), for reference.  torch.compile mode: "
              f"{'off' if args.no_compile else args.compile_mode}.", "",
              "| model | batch | vitc ms | vitc img/s | vitc % peak | vitc events ms | vitc h2h ms | eager ms | eager img/s "
              "| eager % peak | eager h2h ms | compile ms | compile img/s | compile % peak | vitc / eager | vitc / compile |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in timings:
            sp = lambda k: f"{r[k] / r['vitc']:.2f}x" if r.get(k) else "n/a"
            L.append(f"| {r['model']} | {r['batch']} | {fmt(r['vitc'])} | {fmt(ips(r, 'vitc'), '.0f')} | "
                     f"{fmt(pk(r, 'vitc'), '.1f')} | {fmt(r.get('vitc_events'))} | {fmt(r['vitc_h2h'])} | {fmt(r['eager'])} | "
                     f"{fmt(ips(r, 'eager'), '.0f')} | {fmt(pk(r, 'eager'), '.1f')} | {fmt(r['eager_h2h'])} | "
                     f"{fmt(r.get('compiled'))} | {fmt(ips(r, 'compiled'), '.0f')} | {fmt(pk(r, 'compiled'), '.1f')} | "
                     f"{sp('eager')} | {sp('compiled')} |")
    text = "\n".join(L) + "\n"
    with open(os.path.join(out, "results-gpu.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "results-gpu.json"), "w") as f:
        json.dump(dict(info=info, peak_tflops=peak, large_tile=large_tile, skipped=skipped, checks=checks,
                       timings=timings), f, indent=1)
    return text, fails


# ------------------------------------------------------------------------------------------------
def parse_args():
    ap = argparse.ArgumentParser(description="vitc on this machine's GPU: correctness, then speed against PyTorch")
    ap.add_argument("--kit", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--quick", action="store_true", help="seed families (opset 17) and ViT-B/16 at batch 1 and 64")
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu-check-out")
    ap.add_argument("--work", default=os.environ.get("TMPDIR", "/tmp") + "/vitc-gpu-check", help="models, .so files")
    ap.add_argument("--batches", help="comma-separated (default 1,8,64,256; quick: 1,64)")
    ap.add_argument("--models", help="comma-separated names to keep (e.g. timm-ts17,vit_b16_timm; default all)")
    ap.add_argument("--no-time", action="store_true", help="correctness only")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out of the timing")
    ap.add_argument("--time-models", help="comma-separated full-size models to time (default: every one checked)")
    ap.add_argument("--time-failing", action="store_true",
                    help="time a model whose bf16 check failed too (its rows say so); by default it is left out")
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode (e.g. max-autotune)")
    ap.add_argument("--repeat", type=int, default=20, help="timing rounds (each runtime one block per round)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up calls, the same for every runtime")
    ap.add_argument("--block", type=int, default=5, help="calls per timed block")
    ap.add_argument("--pause", type=float, default=0.05, help="seconds between blocks")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1), help="parallel vitc compiles")
    ap.add_argument("--check-timeout", type=int, default=300,
                    help="seconds for one model's checks (each model is checked in a process of its own)")
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="without a GPU, everything before it: models, compiles, vitc inspect, PyTorch fp32 "
                         "references and the timing setup on the CPU; then stop (exit 0 when all of that works)")
    ap.add_argument("--check-one", help=argparse.SUPPRESS)  # internal: NAME, checked in this child process
    return ap.parse_args()


def setup(args, log):
    """vitc, torch, the device and gen_fixtures, as both the parent and a --check-one child need them."""
    vitc = Vitc(args.kit)
    gpu, arch, why = vitc.device()
    if args.cpu_dry_run:
        gpu, arch = f"none (--cpu-dry-run; vitc's device: {gpu or why})", 0
    elif not gpu:
        raise SetupError(f"no GPU: {why}")
    try:
        import numpy  # noqa: F401
        import torch
    except ImportError as e:
        raise SetupError(f"PyTorch and numpy are needed here: {e}")
    if os.environ.get("VITC_KIT_EMULATE") or args.cpu_dry_run:  # tests only: the CPU emulation of the driver
        dev = torch.device("cpu")
    elif not torch.cuda.is_available():
        raise SetupError(f"no GPU: vitc sees {gpu}, but PyTorch {torch.__version__} sees no CUDA device")
    else:
        dev = torch.device("cuda")
        vitc.sync = torch.cuda.synchronize
        torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference is fp32
        torch.backends.cudnn.allow_tf32 = False
    sys.path.insert(0, os.path.join(args.kit, "py"))
    import gen_fixtures as G  # noqa: E402  (tests/models/gen_fixtures.py: the model builders)
    torch.backends.mha.set_fastpath_enabled(False)  # exportable nn.MultiheadAttention
    from torch.onnx._internal.torchscript_exporter import symbolic_opset14
    torch.onnx.register_custom_op_symbolic("aten::scaled_dot_product_attention",
                                           symbolic_opset14.scaled_dot_product_attention, 13)
    return vitc, torch, dev, G, gpu, arch


def model_batches(args, s, batches):
    emu = os.environ.get("VITC_KIT_EMULATE")
    if s.name in FULL_BATCHES:
        return [b for b in batches if b in FULL_BATCHES[s.name]] or FULL_BATCHES[s.name][:1]
    return batches if s.full or emu else sorted(set(batches) | {1, 8, 64, 256})  # tiny: every batch


def check_child(args, batches):
    """--check-one NAME: one model's checks in this process (a sticky CUDA error or a hang stays here);
    the rows go to WORK/NAME.rows.json."""
    log = Log(os.path.join(args.out, "gpu-check.log"), append=True)
    vitc, torch, dev, G, _, _ = setup(args, log)
    s = next(s for s in model_specs(G, args.quick) if s.name == args.check_one)
    sos = {(s.name, p): so for p, so in json.load(open(os.path.join(args.work, s.name + ".sos.json"))).items()}
    b = model_batches(args, s, batches)
    check = dry_check_model if args.cpu_dry_run else check_model
    rows = check(G, torch, dev, vitc, s, sos, b, log)
    with open(os.path.join(args.work, s.name + ".rows.json.tmp"), "w") as f:
        json.dump(rows, f)
    os.replace(os.path.join(args.work, s.name + ".rows.json.tmp"), os.path.join(args.work, s.name + ".rows.json"))
    return 0


def check_in_child(args, s, sos, log):
    """Runs --check-one for s in a process of its own, args.check_timeout seconds at most; its rows, or
    one failing row saying how the process ended."""
    rows_path = os.path.join(args.work, s.name + ".rows.json")
    if os.path.exists(rows_path):
        os.remove(rows_path)
    with open(os.path.join(args.work, s.name + ".sos.json"), "w") as f:
        json.dump({p: sos.get((s.name, p)) for p in PRECISIONS}, f)
    cmd = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + ["--kit", args.kit, "--out", args.out,
                                                                          "--work", args.work, "--check-one", s.name]
    try:
        r = subprocess.run(cmd, timeout=args.check_timeout)
        how = f"exit {r.returncode}" + (f" (signal {-r.returncode})" if r.returncode < 0 else "")
    except subprocess.TimeoutExpired:
        how = f"still running after {args.check_timeout} s (a hang?), killed"
    if os.path.exists(rows_path):
        return json.load(open(rows_path))
    log(f"check {s.name}: the check process ended without results: {how}")
    return [dict(model=s.name, precision="-", batch=0, ok=False,
                 note=f"the check process ended without results: {how} (gpu-check.log)")]


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    quick_batches = [1, 64] if args.quick else [1, 8, 64, 256]
    batches = [int(b) for b in args.batches.split(",")] if args.batches else quick_batches
    if args.check_one:
        return check_child(args, batches)
    log = Log(os.path.join(args.out, "gpu-check.log"))
    emu = os.environ.get("VITC_KIT_EMULATE")  # tests only: the CPU emulation of the driver
    dry = args.cpu_dry_run
    vitc, torch, dev, G, gpu, arch = setup(args, log)

    driver = "n/a"
    if shutil.which("nvidia-smi"):
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True)
        driver = r.stdout.strip() or driver
    commit = "unknown"
    if os.path.exists(os.path.join(args.kit, "VERSION")):
        commit = open(os.path.join(args.kit, "VERSION")).read().strip()
    info = dict(date=datetime.datetime.now().isoformat(timespec="minutes"), device=gpu, arch=arch, driver=driver,
                commit=commit, torch=torch.__version__ + f" (CUDA {torch.version.cuda})", python=platform.python_version(),
                host=platform.node(), quick=args.quick)
    log(f"device {gpu} (sm_{arch}), driver {driver}, kit {commit}, PyTorch {info['torch']}")

    specs = model_specs(G, args.quick)
    if args.models:
        keep = set(args.models.split(","))
        unknown = keep - {s.name for s in specs}
        if unknown:
            raise SetupError(f"--models: no model {', '.join(sorted(unknown))} here "
                             f"(there are: {', '.join(s.name for s in specs)})")
        specs = [s for s in specs if s.name in keep]
    make_models(G, torch, specs, args.work, log, set(args.models.split(",")) if args.models else ())
    with open(os.path.join(args.out, "compile.log"), "w") as clog:
        sos = compile_all(vitc, specs, max(batches + [256]), args.work, args.jobs, log, clog, emu)
    info["kernels"] = {s.name: kernel_variants(vitc, sos[(s.name, "bf16")], model_batches(args, s, batches))
                       for s in specs if s.full and sos.get((s.name, "bf16"))}

    checks, large_tile = [], []
    for s in specs:
        if not s.onnx:
            if s.error:
                checks.append(dict(model=s.name, precision="-", batch=0, ok=False, note=s.error))
            continue
        checks += check_in_child(args, s, sos, log)
        so = sos.get((s.name, "bf16"))
        if so and has_large_tile(vitc, so):
            large_tile.append(s.name)
    if not large_tile and any(s.full for s in specs):
        checks.append(dict(model="(all)", precision="-", batch=0, ok=False,
                           note="no model has a GEMM tile larger than 64x64: it was not exercised"))
    fails = [r for r in checks if not r["ok"]]
    log(f"correctness: {len(checks) - len(fails)} of {len(checks)} checks pass")
    for r in fails:
        log(f"FAIL {r['model']} {r['precision']} batch {r['batch']}: {r['note']}")

    skipped = [f"{s.name}: {s.skip}" for s in specs if s.skip]
    timings, peak = [], None
    if dry:
        for s in specs:
            if s.full and s.onnx:
                time_setup(G, torch, dev, s, log)
        log("cpu-dry-run: stopping here; the rest needs the GPU (vitc_run_device, graph replay, "
            "the comparison with the references, timings)")
    elif not args.no_time:
        # the correctness report is written before the timings, so that it survives a timing that
        # fails or runs past the command's time limit
        report(args, info, checks, large_tile, skipped + ["timings: not (yet) run"], timings, peak, args.out)
        peak = measured_peak(torch, dev, Timer(torch, dev))
        log(f"bf16 matmul peak: {peak:.0f} TFLOP/s")
        for s in specs:
            bad = any(not r["ok"] for r in checks if r["model"] == s.name and r["precision"] == "bf16")
            if (s.full or emu) and (not args.time_models or s.name in args.time_models.split(",")):
                if not sos.get((s.name, "bf16")) or (bad and not args.time_failing):
                    log(f"time {s.name}: skipped (bf16 failed its check)")
                    continue
                try:
                    # the report so far after every batch: it survives a command's time limit
                    time_model(G, torch, dev, vitc, s, sos[(s.name, "bf16")], batches, args, timings, log, bad,
                               lambda: report(args, info, checks, large_tile, skipped + ["timings: in progress"],
                                              timings, peak, args.out))
                except Exception as e:  # noqa: BLE001  (the correctness results are kept and reported)
                    why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
                    skipped.append(f"timing of {s.name} failed after {len([r for r in timings if r['model'].split(' ')[0] == s.name])} "
                                   f"batches: {why}")
                    log(f"time {s.name}: FAILED: {why}")
                    traceback.print_exc()
                    if dev.type == "cuda":
                        torch.cuda.empty_cache()
    text, fails = report(args, info, checks, large_tile, skipped, timings, peak, args.out)
    print(text)
    log(f"wrote {args.out}/results-gpu.md, results-gpu.json; " + (f"{len(fails)} FAILURES" if fails else "all checks pass"))
    return 1 if fails else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SetupError as e:
        print(f"gpu-check: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:  # a bug here, not a result: the traceback goes to the log too
        traceback.print_exc()
        sys.exit(3)
