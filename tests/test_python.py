"""test_python.py: the Python package (python/vitc) as `pip install .` installs it.

Run by tests/test_python.sh (ctest test_python) with the venv's pytest, from
outside the source tree, with VITC_SOURCE_DIR set:
  - the installed package runs its own vitc CLI and its own runtime library,
    which the `vitc` command and `python -m vitc` run too;
  - a committed fixture compiled with vitc.compile and run at batch 1 and 3
    matches PyTorch's output (max|out-ref|/max|ref| <= 1e-4);
  - Model.inputs/outputs are what `vitc inspect --json` says;
  - bad inputs raise, with the runtime's message where the runtime checks;
  - broken models fail to compile with VitcError, exit code 2;
  - the GIL is released while a model runs, and two threads run one model;
  - models are freed by close(), a with block, or being collected;
  - vitc.compile without an output and vitc.load of an ONNX file return a
    loaded model, compiled once into a cache keyed by the model's bytes and
    the options (a second load compiles nothing);
  - Model.run(output_names, feed) as onnxruntime.InferenceSession.run has it;
  - a wrong dtype is refused by name ("is float64, the model takes float32"),
    and convert=True converts float64 and non-contiguous inputs;
  - the package is typed (py.typed, annotations);
  - vitc.compile(torch.nn.Module, example_input=...) where torch is installed;
  - a model exported with a dynamic image size compiled for two sizes
    (shapes=): Model.shapes lists both, each runs within 1e-4 of PyTorch, and
    another size is refused naming them.
"""
import gc
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import typing

import numpy as np
import pytest

import vitc

SRC = os.environ.get("VITC_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MODELS = os.path.join(SRC, "tests", "models")
BROKEN = os.path.join(SRC, "tests", "data", "broken")
MAX_REL = 1e-4


def rel_err(out, ref):
    return float(np.max(np.abs(out.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def fixture_io(family, batch):
    return (np.load(os.path.join(MODELS, f"{family}.b{batch}.input.npy")),
            np.load(os.path.join(MODELS, f"{family}.b{batch}.output.npy")))


def mapped(path):
    """Whether this process has the file mapped (dlopen'ed)."""
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        return any(line.split()[-1] == real for line in f if len(line.split()) >= 6)


@pytest.fixture(scope="module")
def timm_so(tmp_path_factory):
    so = str(tmp_path_factory.mktemp("timm") / "timm.so")
    assert vitc.compile(os.path.join(MODELS, "timm-ts17.onnx"), so, batch=8, quiet=True) == so
    return so


@pytest.fixture(scope="module")
def model(timm_so):
    with vitc.load(timm_so, threads=2) as m:
        yield m


@pytest.fixture(scope="module")
def face_so(tmp_path_factory):
    """face_ln (144 tokens) up to batch 128, weights beside the .so: a run long enough to watch."""
    so = str(tmp_path_factory.mktemp("face") / "face.so")
    vitc.compile(os.path.join(MODELS, "face_ln-ts17.onnx"), so, batch=128, target="cpu", opt_level=3,
                 weights="external", quiet=True)
    return so


# ---- the installed package ----

def test_package_runs_its_own_binaries(model):
    pkg = os.path.dirname(os.path.realpath(vitc.__file__))
    assert pkg.startswith(os.path.realpath(sys.prefix)), f"vitc imported from {pkg}, not from this venv"
    assert pkg != os.path.realpath(os.path.join(SRC, "python", "vitc")), "vitc imported from the source tree"
    for path in (vitc.CLI_PATH, vitc.RUNTIME_PATH):
        assert os.path.dirname(os.path.dirname(path)) == pkg and os.path.isfile(path), path
    assert os.access(vitc.CLI_PATH, os.X_OK)
    assert mapped(vitc.RUNTIME_PATH), "the package's libvitc_runtime is not the one loaded"
    out = subprocess.run([vitc.CLI_PATH, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.split()[:2] == ["vitc", vitc.__version__]
    assert model.compiler_version == vitc.__version__


def test_console_command_and_python_m():
    """`vitc` in the venv's bin/ and `python -m vitc` are the package's CLI: its output, its exit codes."""
    script = os.path.join(os.path.dirname(sys.executable), "vitc")
    assert os.access(script, os.X_OK), f"pip installed no {script}"
    want = subprocess.run([vitc.CLI_PATH, "--help"], capture_output=True, text=True, check=True).stdout
    for cmd in ([script], [sys.executable, "-m", "vitc"]):
        p = subprocess.run(cmd + ["--help"], capture_output=True, text=True)
        assert (p.returncode, p.stdout) == (0, want), cmd
        p = subprocess.run(cmd + ["run"], capture_output=True, text=True)
        assert p.returncode == 2 and p.stderr.startswith("vitc: run: no model given"), (cmd, p.stderr)


# ---- results against PyTorch ----

@pytest.mark.parametrize("batch", [1, 3])
def test_matches_pytorch(model, batch, capsys):
    x, ref = fixture_io("timm", batch)
    y = model(x)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    assert y.shape == ref.shape == model.outputs[0].shape_at(batch)
    by_name = model.run({"input": x})
    assert list(by_name) == ["output"]
    np.testing.assert_array_equal(by_name["output"], y)
    np.testing.assert_array_equal(model(input=x), y)
    err = rel_err(y, ref)
    with capsys.disabled():
        print(f"\n    timm-ts17 batch {batch}: max|out-ref|/max|ref| = {err:.3g} against PyTorch")
    assert err <= MAX_REL


def test_out_arrays(model):
    x, ref = fixture_io("timm", 3)
    out = np.empty((3, 10), np.float32)
    res = model.run({"input": x}, out={"output": out})
    assert res["output"] is out and rel_err(out, ref) <= MAX_REL
    with pytest.raises(vitc.ShapeMismatch, match=r"output 'output' has shape \[4,10\]"):
        model.run({"input": x}, out={"output": np.empty((4, 10), np.float32)})
    with pytest.raises(ValueError, match="read-only"):
        ro = np.empty((3, 10), np.float32)
        ro.flags.writeable = False
        model.run({"input": x}, out={"output": ro})


# ---- the signature ----

def test_signature_is_what_inspect_says(model, timm_so):
    p = subprocess.run([vitc.CLI_PATH, "inspect", "--json", timm_so], capture_output=True, text=True, check=True)
    info = json.loads(p.stdout)
    assert vitc.inspect(timm_so) == info
    for ours, theirs in ((model.inputs, info["inputs"]), (model.outputs, info["outputs"])):
        assert [t.name for t in ours] == [t["name"] for t in theirs]
        assert [list(t.shape) for t in ours] == [t["shape"] for t in theirs]
        assert [t.dtype for t in ours] == [np.dtype(t["dtype"]) for t in theirs]
    assert model.max_batch == info["max_batch"] == 8
    assert model.target == info["target"] == "cpu"
    assert model.precision == info["precision"] == "fp32"
    assert model.inputs[0].shape == ("B", 3, 32, 32)
    assert model.inputs[0].shape_at(3) == (3, 3, 32, 32)
    assert model.outputs[0].shape_at(8) == (8, 10)
    assert model.threads == 2
    assert "batch 1..8" in repr(model) and "float32[B,3,32,32]" in repr(model)


# ---- bad inputs: the runtime's message where the runtime checks ----

def test_wrong_dtype(model, timm_so):
    x, _ = fixture_io("timm", 1)
    with pytest.raises(vitc.VitcError) as e:
        model(x.astype(np.float64))
    assert e.value.message == (f"{timm_so}: input 'input' is float64, the model takes float32; "
                               "convert it with .astype(np.float32), or run with convert=True")
    assert isinstance(e.value, vitc.DtypeMismatch) and isinstance(e.value, TypeError)
    assert e.value.status_name == "dtype mismatch"
    assert "(11)" not in str(e.value) and "(1)" not in str(e.value)  # names, not ONNX codes
    with pytest.raises(vitc.DtypeMismatch, match=r"^.*: input 'input' is int64, the model takes float32;"):
        model.run({"input": x.astype(np.int64)})
    with pytest.raises(vitc.DtypeMismatch, match=r": output 'output' is float64, the model gives float32$"):
        model.run({"input": x}, out={"output": np.empty((1, 10), np.float64)})
    with pytest.raises(TypeError, match="byte order"):
        model(x.astype(">f4"))
    with pytest.raises(TypeError, match="expected a numpy.ndarray, got builtins.list"):
        model(x.tolist())


def test_not_contiguous(model):
    x, _ = fixture_io("timm", 3)
    with pytest.raises(ValueError, match="not C-contiguous") as e:
        model(np.asfortranarray(x))
    assert not isinstance(e.value, vitc.VitcError)  # said here: the runtime sees only a pointer
    with pytest.raises(ValueError, match="not C-contiguous"):
        model(np.concatenate([x, x], axis=3)[..., ::2])


def test_wrong_shape(model, timm_so):
    with pytest.raises(vitc.VitcError, match=r"input 'input' has shape \[1,3,32,31\]; the model expects \[B,3,32,32\]") as e:
        model(np.zeros((1, 3, 32, 31), np.float32))
    assert isinstance(e.value, ValueError) and e.value.status_name == "shape mismatch"
    with pytest.raises(vitc.ShapeMismatch, match="has rank 3"):
        model(np.zeros((3, 32, 32), np.float32))


def test_unknown_input_name(model):
    x, _ = fixture_io("timm", 1)
    with pytest.raises(vitc.VitcError, match="the model has no input named 'pixels'") as e:
        model.run({"pixels": x})
    assert isinstance(e.value, ValueError) and e.value.status_name == "invalid argument"
    with pytest.raises(vitc.InvalidArgument, match="the model has 1 inputs; 2 given"):
        model(x, x)
    with pytest.raises(vitc.InvalidArgument, match="the model has 1 inputs; 0 given"):
        model.run({})
    with pytest.raises(TypeError, match="mapping"):
        model.run([x])


def test_batch_over_the_limit(model):
    with pytest.raises(vitc.VitcError, match=r"batch 9; the model runs batches 1 to 8") as e:
        model(np.zeros((9, 3, 32, 32), np.float32))
    assert isinstance(e.value, ValueError) and e.value.status_name == "batch out of range"
    with pytest.raises(vitc.BatchOutOfRange, match="batch 0"):
        model(np.zeros((0, 3, 32, 32), np.float32))


def test_fixed_batch_export(tmp_path, capsys):
    """An export whose input's first dimension is the number 1: compiled with a warning, it runs batch 1 only."""
    so = str(tmp_path / "fixed.so")
    vitc.compile(os.path.join(SRC, "tests", "data", "fixed-batch-1.onnx"), so, batch=8)
    assert "warning: the batch is fixed at 1" in capsys.readouterr().err
    with vitc.load(so, threads=1) as m:
        assert (m.min_batch, m.max_batch) == (1, 1) and "batch 1..1" in repr(m)
        assert m.inputs[0].shape == (1, 4, 6)
        assert m(np.ones((1, 4, 6), np.float32)).shape == (1, 5)
        with pytest.raises(vitc.BatchOutOfRange, match=r"batch 2; the model runs batch 1 only") as e:
            m(np.ones((2, 4, 6), np.float32))
        assert isinstance(e.value, ValueError)
    assert vitc.inspect(so)["min_batch"] == vitc.inspect(so)["max_batch"] == 1


def test_load_errors(tmp_path):
    missing = str(tmp_path / "nothing.so")
    with pytest.raises(vitc.VitcError, match="nothing.so") as e:
        vitc.load(missing)
    assert e.value.status_name == "load failed"
    not_a_model = tmp_path / "text.so"
    not_a_model.write_text("not a shared library\n")
    with pytest.raises(vitc.VitcError) as e:
        vitc.load(not_a_model)
    assert e.value.status_name == "load failed" and str(not_a_model) in e.value.message
    with pytest.raises(FileNotFoundError, match="no such model: .*nothing.onnx"):
        vitc.load(tmp_path / "nothing.onnx", cache_dir=tmp_path / "cache")
    with pytest.raises(TypeError):
        vitc.load(missing, threads="2")


# ---- the compiler ----

def broken_cases():
    with open(os.path.join(BROKEN, "EXPECT.tsv")) as f:
        rows = dict(line.rstrip("\n").split("\t", 1) for line in f.readlines()[1:] if "\t" in line)
    return [(name, rows[name]) for name in ("cycle.onnx", "unsupported-ops.onnx", "matmul-mismatch.onnx",
                                             "random-bytes.onnx")]


@pytest.mark.parametrize("name,fragment", broken_cases(), ids=lambda v: v if v.endswith(".onnx") else "")
def test_compile_broken_model(tmp_path, name, fragment):
    so = tmp_path / "broken.so"
    with pytest.raises(vitc.VitcError) as e:
        vitc.compile(os.path.join(BROKEN, name), so)
    assert e.value.exit_code == 2
    assert fragment in e.value.message and name in e.value.message
    assert e.value.command[0] == vitc.CLI_PATH
    assert not so.exists()


def test_compile_bad_option(tmp_path):
    with pytest.raises(vitc.VitcError, match="did you mean --batch") as e:
        vitc.compile(os.path.join(MODELS, "timm-ts17.onnx"), tmp_path / "m.so", batchh=4)
    assert e.value.exit_code == 2
    with pytest.raises(vitc.VitcError, match=r"-O takes a level from 0 to 3") as e:
        vitc.compile(os.path.join(MODELS, "timm-ts17.onnx"), tmp_path / "m.so", opt_level=7)
    assert e.value.exit_code == 2


def test_compile_options_reach_the_cli(face_so):
    assert os.path.isfile(face_so + ".weights")  # weights="external"
    assert vitc.inspect(face_so)["weights"]["embedded"] is False
    with vitc.load(face_so) as m:
        assert m.max_batch == 128
        for batch in (1, 3):
            x, ref = fixture_io("face_ln", batch)
            assert rel_err(m(x), ref) <= MAX_REL


# ---- threads ----

def test_gil_is_released_while_running(face_so):
    """A thread runs the model (about 0.1 s at batch 128 on one thread) while this one
    keeps time in a Python loop: with the GIL held through the call, none of this
    thread's samples could fall inside the call."""
    with vitc.load(face_so, threads=1) as m:
        x = np.random.default_rng(0).standard_normal(m.inputs[0].shape_at(128), dtype=np.float32)
        m(x)
        best = 0.0
        for _ in range(3):
            window = []

            def worker():
                window.append(time.perf_counter())
                m(x)
                window.append(time.perf_counter())

            th = threading.Thread(target=worker)
            samples = []
            th.start()
            while th.is_alive():
                samples.append(time.perf_counter())
            th.join()
            t0, t1 = window
            inside = [s for s in samples if t0 < s < t1]
            covered = (inside[-1] - inside[0]) / (t1 - t0) if len(inside) > 1 else 0.0
            best = max(best, covered)
            if best >= 0.5:
                break
        assert best >= 0.5, f"this thread ran through {best:.0%} of a {1e3 * (t1 - t0):.0f} ms model call"


def test_two_threads_run_one_model(model):
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((8, 3, 32, 32), dtype=np.float32) for _ in range(2)]
    want = [model(x) for x in xs]
    got, errors = [[], []], []

    def worker(i):
        try:
            for _ in range(20):
                got[i].append(model(xs[i]))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not any(th.is_alive() for th in threads), "a thread did not finish"
    assert not errors, errors
    for i in range(2):
        assert len(got[i]) == 20
        for y in got[i]:
            np.testing.assert_allclose(y, want[i], rtol=1e-6, atol=1e-6)


# ---- lifetime ----

def test_close_and_with_free_the_model(timm_so, tmp_path):
    x, ref = fixture_io("timm", 1)
    so = str(tmp_path / "copy.so")
    shutil.copyfile(timm_so, so)
    with vitc.load(so) as m:
        assert mapped(so)
        assert rel_err(m(x), ref) <= MAX_REL
    assert m.closed and not mapped(so)
    with pytest.raises(ValueError, match="closed"):
        m(x)
    m.close()  # twice is fine

    m = vitc.load(so)
    m(x)
    assert mapped(so)
    del m
    gc.collect()
    assert not mapped(so), "a collected Model left its .so loaded"


def test_profile(model, timm_so):
    """m.profile: every part called once per run, the parts' time within the runs' wall time,
    the same parts (op, kernels, source) as `vitc run --profile --json` lists."""
    x, _ = fixture_io("timm", 3)
    runs = 5
    t0 = time.perf_counter()
    parts = model.profile(x, runs=runs)
    wall = time.perf_counter() - t0
    assert len(parts) > 5
    assert all(p["calls"] == runs for p in parts)
    assert all(parts[i]["seconds"] >= parts[i + 1]["seconds"] for i in range(len(parts) - 1))
    in_parts = sum(p["seconds"] for p in parts)
    assert 0 < in_parts <= wall
    assert {"Linear", "Attention"} <= {p["op"] for p in parts}
    cli = subprocess.run([vitc.CLI_PATH, "run", timm_so, "--input", os.path.join(SRC, "tests", "models",
                          "timm.b3.input.npy"), "--profile", "--json", "--output-dir", os.path.dirname(timm_so)],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    cli_parts = {(p["index"], p["op"], p["kernels"], p["source"]) for p in json.loads(cli.stdout)["profile"]["parts"]}
    assert {(p["index"], p["op"], p["kernels"], p["source"]) for p in parts} == cli_parts
    # each profile starts from zero
    again = model.profile(x, runs=1)
    assert all(p["calls"] == 1 for p in again)
    with pytest.raises(ValueError):
        model.profile(x, runs=0)


# ---- as an ONNX Runtime user expects ----

def test_compile_returns_a_loaded_model(model, timm_so, tmp_path):
    """vitc.compile(onnx) returns a Model (compiled into the cache); with an output path it
    still returns the path (as before), and load=True the Model loaded from that path."""
    x, ref = fixture_io("timm", 3)
    want = model(x)
    m = vitc.compile(os.path.join(MODELS, "timm-ts17.onnx"), batch=8, quiet=True, threads=2,
                     cache_dir=tmp_path / "cache")
    with m:
        assert isinstance(m, vitc.Model) and m.max_batch == 8 and m.threads == 2
        assert os.path.dirname(os.path.dirname(m.path)) == str(tmp_path / "cache")
        np.testing.assert_allclose(m(x), want, rtol=1e-4, atol=1e-4)
        assert rel_err(m(x), ref) <= MAX_REL
    so = str(tmp_path / "out.so")
    assert vitc.compile(os.path.join(MODELS, "timm-ts17.onnx"), so, batch=2, quiet=True) == so
    with vitc.compile(os.path.join(MODELS, "timm-ts17.onnx"), so, batch=2, quiet=True, load=True) as m2:
        assert isinstance(m2, vitc.Model) and m2.path == so and m2.max_batch == 2
        np.testing.assert_allclose(m2(x[:2]), want[:2], rtol=1e-4, atol=1e-4)
    with pytest.raises(TypeError, match="takes the path of an ONNX model or a torch.nn.Module, not builtins.int"):
        vitc.compile(42)


def test_load_onnx_compiles_once(tmp_path, monkeypatch):
    """vitc.load(onnx, cache_dir=): the first load compiles, the second loads the cached .so
    (the same file, not rewritten, the CLI not run); other options, another cache entry;
    the same bytes under another path, the same entry."""
    onnx = os.path.join(MODELS, "timm-ts17.onnx")
    cache = tmp_path / "cache"
    calls = []
    real_run_cli = vitc._cli._run_cli

    def counting(args):
        calls.append(args)
        return real_run_cli(args)

    monkeypatch.setattr(vitc._cli, "_run_cli", counting)
    x, ref = fixture_io("timm", 3)
    with vitc.load(onnx, cache_dir=cache, batch=4, quiet=True) as m:
        first, y = m.path, m(x)
        assert m.max_batch == 4 and first.startswith(str(cache) + os.sep) and first.endswith("timm-ts17.so")
    assert len(calls) == 1 and calls[0][:2] == ["compile", onnx] and "--batch=4" in calls[0]
    assert rel_err(y, ref) <= MAX_REL
    mtime = os.stat(first).st_mtime_ns

    time.sleep(0.01)
    with vitc.load(onnx, cache_dir=cache, batch=4, quiet=True) as m:
        assert m.path == first
        np.testing.assert_array_equal(m(x), y)
    assert len(calls) == 1, "the second load ran the compiler"
    assert os.stat(first).st_mtime_ns == mtime
    assert vitc.load(onnx, cache_dir=cache, batch=4, verbose=False).path == first  # quiet/verbose: not the key

    copy = tmp_path / "elsewhere" / "timm-ts17.onnx"
    copy.parent.mkdir()
    shutil.copyfile(onnx, copy)
    assert vitc.load(copy, cache_dir=cache, batch=4, quiet=True).path == first
    assert len(calls) == 1

    with vitc.load(onnx, cache_dir=cache, batch=2, quiet=True) as m:
        assert m.path != first and m.max_batch == 2
    assert len(calls) == 2
    assert sorted(p for p in os.listdir(cache)) == sorted(
        os.path.basename(os.path.dirname(p)) for p in (first, m.path))  # no temporary folders left

    monkeypatch.setenv("VITC_CACHE_DIR", str(tmp_path / "env-cache"))
    assert vitc.default_cache_dir() == str(tmp_path / "env-cache")
    with vitc.load(onnx, batch=4, quiet=True) as m:
        assert m.path.startswith(str(tmp_path / "env-cache") + os.sep)
    assert len(calls) == 3

    # a .so is loaded as it is; compile options make no sense for it
    with vitc.load(first) as m:
        assert m.path == first
    with pytest.raises(TypeError, match="is a compiled model: batch apply only to an ONNX model"):
        vitc.load(first, batch=2)
    # a failed compile leaves nothing in the cache
    with pytest.raises(vitc.VitcError) as e:
        vitc.load(os.path.join(BROKEN, "cycle.onnx"), cache_dir=tmp_path / "bad")
    assert e.value.exit_code == 2 and os.listdir(tmp_path / "bad") == []


def test_run_as_onnxruntime(model):
    """run(output_names, input_feed) as InferenceSession.run: a list, in the order asked."""
    x, ref = fixture_io("timm", 3)
    want = model(x)
    res = model.run(None, {"input": x})
    assert isinstance(res, list) and len(res) == 1
    np.testing.assert_array_equal(res[0], want)
    assert rel_err(res[0], ref) <= MAX_REL
    [y] = model.run(["output"], {"input": x})
    np.testing.assert_array_equal(y, want)
    a, b = model.run(["output", "output"], {"input": x})
    np.testing.assert_array_equal(a, want)
    np.testing.assert_array_equal(b, want)
    assert model.run(output_names=None, input_feed={"input": x})[0].shape == (3, 10)
    assert [t.name for t in model.get_inputs()] == ["input"] and [t.name for t in model.get_outputs()] == ["output"]
    with pytest.raises(vitc.InvalidArgument) as e:
        model.run(["logits"], {"input": x})
    assert e.value.message == f"{model.path}: the model has no output named 'logits'; its outputs are 'output'"
    assert isinstance(e.value, ValueError)
    with pytest.raises(TypeError, match="output_names must be None or a list of output names"):
        model.run("output", {"input": x})
    with pytest.raises(TypeError, match="takes no run_options"):
        model.run(None, {"input": x}, object())
    with pytest.raises(vitc.InvalidArgument, match="the model has no input named 'pixels'"):
        model.run(None, {"pixels": x})
    # the dict form is unchanged, by position and by keyword
    np.testing.assert_array_equal(model.run({"input": x})["output"], want)
    out = np.empty((3, 10), np.float32)
    assert model.run({"input": x}, {"output": out})["output"] is out
    assert model.run(inputs={"input": x}, out={"output": out})["output"] is out


def test_convert_is_opt_in(model, timm_so):
    """float64, Fortran-ordered, strided or big-endian inputs: refused by default, converted
    with convert=True (per run, or the model's default from vitc.load)."""
    x, ref = fixture_io("timm", 3)
    want = model(x)
    x64 = x.astype(np.float64)  # float32 -> float64 -> float32 is exact
    fortran = np.asfortranarray(x)
    wide = np.zeros(x.shape[:3] + (2 * x.shape[3],), np.float32)
    wide[..., ::2] = x
    strided = wide[..., ::2]  # x's values, every other element of wide
    big = x.astype(">f4")
    for bad, exc in ((x64, vitc.DtypeMismatch), (fortran, ValueError), (strided, ValueError), (big, TypeError)):
        with pytest.raises(exc, match="convert=True"):
            model.run(None, {"input": bad})
    with pytest.raises(ValueError, match="not C-contiguous .*or run with convert=True"):
        model(fortran)
    for arr in (x64, fortran, strided, big, np.asfortranarray(x64)):
        np.testing.assert_array_equal(model.run(None, {"input": arr}, convert=True)[0], want)
        np.testing.assert_array_equal(model.run({"input": arr}, convert=True)["output"], want)
    assert not model.convert
    with vitc.load(timm_so, threads=2, convert=True) as m:
        assert m.convert
        np.testing.assert_array_equal(m(x64), want)
        np.testing.assert_array_equal(m.run(None, {"input": fortran})[0], want)
        assert rel_err(m(x64), ref) <= MAX_REL
        with pytest.raises(vitc.DtypeMismatch):
            m.run(None, {"input": x64}, convert=False)
        with pytest.raises(vitc.DtypeMismatch, match="converts within a kind only .*not complex128 to float32"):
            m(x.astype(np.complex128))


def test_typed():
    pkg = os.path.dirname(vitc.__file__)
    assert os.path.isfile(os.path.join(pkg, "py.typed")), "py.typed is not installed with the package"
    for fn in (vitc.compile, vitc.load, vitc.inspect, vitc.default_cache_dir, vitc.Model.__init__,
               vitc.Model.run, vitc.Model.close, vitc.TensorInfo.shape_at):
        hints = typing.get_type_hints(fn)
        assert "return" in hints, fn
    assert typing.get_type_hints(vitc.load)["return"] is vitc.Model
    assert typing.get_type_hints(vitc.Model.get_inputs)["return"] == typing.List[vitc.TensorInfo]


# test_python's venv holds numpy and pytest only: there vitc.compile(torch.nn.Module) is skipped, and
# tested where torch imports (a venv with torch and this package installed).
NO_TORCH = "torch is not installed in this venv"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason=NO_TORCH)
def test_compile_torch_module(tmp_path):
    """A torch.nn.Module and an example input at batch 2: exported with a dynamic batch,
    compiled, loaded; batch 1 and 3 match PyTorch."""
    import torch
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 32)
            self.norm = torch.nn.LayerNorm(32)
            self.head = torch.nn.Linear(32, 10)

        def forward(self, x):
            return self.head(self.norm(torch.nn.functional.gelu(self.fc(x))).mean(dim=1))

    net = Block().eval()
    m = vitc.compile(net, example_input=torch.randn(2, 7, 16), batch=4, quiet=True, cache_dir=tmp_path)
    with m:
        assert m.inputs[0].shape == ("B", 7, 16) and m.outputs[0].name == "output" and m.max_batch == 4
        for batch in (1, 3):
            x = torch.randn(batch, 7, 16)
            with torch.no_grad():
                ref = net(x).numpy()
            assert rel_err(m(x.numpy()), ref) <= MAX_REL
    so = str(tmp_path / "block.so")
    assert vitc.compile(net, so, example_input=torch.randn(2, 7, 16), batch=4, quiet=True) == so
    with pytest.raises(TypeError, match="needs example_input"):
        vitc.compile(net, cache_dir=tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_compile_torch_module_without_torch():
    with pytest.raises(TypeError, match=r"not builtins.object \(torch is not installed, so no torch.nn.Module"):
        vitc.compile(object())


def test_several_image_sizes(tmp_path):
    sys.path.insert(0, os.path.join(SRC, "tests", "shapes"))
    try:
        from shapes_common import BATCH, input_array
    finally:
        sys.path.pop(0)
    onnx = os.path.join(SRC, "tests", "shapes", "hf_vit_dyn-ts17.onnx")
    m = vitc.compile(onnx, shapes=[(3, 224, 224), (3, 160, 160)], batch=BATCH, cache_dir=tmp_path)
    assert [[t.shape for t in ins] for ins in m.shapes] == [[("B", 3, 224, 224)], [("B", 3, 160, 160)]]
    assert m.inputs[0].shape == ("B", 3, 224, 224)
    for h in (224, 160):
        ref = np.load(os.path.join(SRC, "tests", "shapes", f"hf_vit_dyn.{h}x{h}.output.npy"))
        out = m(input_array((BATCH, 3, h, h)))
        assert out.shape == ref.shape and rel_err(out, ref) <= MAX_REL
        one = m(input_array((1, 3, h, h)))  # another batch of the same size
        assert one.shape == (1,) + ref.shape[1:]
    with pytest.raises(vitc.ShapeMismatch, match=r"compiled for \[B,3,224,224\], \[B,3,160,160\]"):
        m(input_array((1, 3, 192, 192)))
