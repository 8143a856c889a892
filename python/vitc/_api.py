"""vitc.compile and vitc.load: compile (an ONNX file, or a torch.nn.Module exported to
one), cache the .so by what it was made from, and load it.

The cache: a directory (cache_dir=, else $VITC_CACHE_DIR, else
$XDG_CACHE_HOME/vitc, else ~/.cache/vitc) holding one folder per compiled
model, <stem>-<key>/<stem>.so (and <stem>.so.weights with weights="external").
The key is a SHA-256 of the model file's bytes, the compile options as the
CLI gets them (verbose/quiet left out), the vitc version and CLI binary
(its size and mtime: a reinstall starts afresh) and the host CPU (the .so is
built for it unless cpu=/features= say otherwise).  A folder appears only
complete (compiled in a temporary folder beside it, then renamed), so a
folder that is there is a hit, and two processes compiling one model at once
both end with the same .so.  ONNX external-data files beside the model are
not part of the key.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import warnings
from typing import Any, Literal, Optional, Sequence, Tuple, Union, overload

from . import _cli
from ._model import Model

PathLike = Union[str, "os.PathLike[str]"]

_ELF = b"\x7fELF"
_NOT_IN_KEY = ("verbose", "quiet")  # what the CLI prints, not what it writes


def default_cache_dir() -> str:
    """Where vitc.load and vitc.compile keep compiled models when cache_dir is not given."""
    d = os.environ.get("VITC_CACHE_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "vitc")


def _host_cpu() -> str:
    """What the CLI's default target depends on: the machine, its CPU model and features."""
    parts = [platform.machine()]
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key = line.split(":", 1)[0].strip()
                if key in ("model name", "flags", "Features", "CPU part"):
                    parts.append(line.strip())
                elif not line.strip() and len(parts) > 1:
                    break  # the first processor says it for all
    except OSError:
        pass
    return "\n".join(parts)


def _compiler_id() -> str:
    from . import __version__
    try:
        st = os.stat(_cli.CLI_PATH)
        return f"{__version__} {st.st_size} {st.st_mtime_ns}"
    except OSError:
        return __version__


def cache_key(model_path: PathLike, options: dict) -> str:
    """The cache key of compiling model_path with options (hex SHA-256)."""
    h = hashlib.sha256()
    args = _cli.cli_args({k: v for k, v in options.items() if k not in _NOT_IN_KEY})
    head = {"format": 1, "compiler": _compiler_id(), "host": _host_cpu(), "args": args}
    h.update(json.dumps(head, sort_keys=True).encode())
    h.update(b"\0")
    with open(model_path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cached_so(model_path: PathLike, cache_dir: Optional[PathLike] = None, **options: Any) -> Tuple[str, bool]:
    """(the cached .so of model_path compiled with options, whether it was already there);
    compiles it on a miss."""
    if options.get("emit") not in (None, False, "so"):
        raise ValueError(f"emit={options['emit']!r} writes no .so to load; call vitc.compile(model, output, "
                         f"emit={options['emit']!r})")
    model_path = os.fspath(model_path)
    key = cache_key(model_path, options)
    stem = os.path.splitext(os.path.basename(model_path))[0] or "model"
    root = os.path.abspath(os.fspath(cache_dir) if cache_dir is not None else default_cache_dir())
    entry = os.path.join(root, f"{stem}-{key[:24]}")
    so = os.path.join(entry, stem + ".so")
    if os.path.isfile(so):
        return so, True
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{stem}-{key[:24]}.", dir=root)
    try:
        _cli.compile_file(model_path, os.path.join(tmp, stem + ".so"), **options)
        os.chmod(tmp, 0o755)  # mkdtemp's is 0700: the cache is as readable as any folder made here
        try:
            os.rename(tmp, entry)  # the folder appears complete, or not at all
        except OSError:
            if not os.path.isfile(so):  # not another process's compile that got there first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return so, False


def _is_compiled(path: str) -> bool:
    """A .so to load, not an ONNX file to compile: an ELF file, or a name ending in .so."""
    try:
        with open(path, "rb") as f:
            if f.read(4) == _ELF:
                return True
    except OSError:
        pass
    return path.endswith(".so") or not path.endswith(".onnx") and not os.path.exists(path)


def load(path: PathLike, threads: int = 0, *, cache_dir: Optional[PathLike] = None, convert: bool = False,
         **compile_options: Any) -> Model:
    """Loads a model: a .so compiled by vitc, or an ONNX file, compiled on first use.

    A .so (an ELF file, or a name ending in .so) is loaded as it is
    (vitc_model_load).  Anything else is an ONNX model: compiled with
    compile_options (the CLI's options as keywords, as vitc.compile takes them:
    batch=8, opt_level=3, target="cuda", ...) into the cache (cache_dir, else
    $VITC_CACHE_DIR, else ~/.cache/vitc), keyed by a hash of the file's bytes
    and the options, and the cached .so loaded: a second load of the same model
    and options compiles nothing.  model.path is the .so loaded.

    threads: threads per run, the caller's included; 0 (default) is one per
    core, or VITC_NUM_THREADS when set.  convert: the model's default for
    run(..., convert=): convert inputs of another dtype or layout instead of
    refusing them.  A model compiled for CPU features this machine lacks, a
    file that is not a vitc model, or one compiled by an incompatible vitc
    raises VitcError with the runtime's message; a failed compile, VitcError
    with the CLI's.
    """
    p = os.fspath(path)
    if _is_compiled(p):
        if compile_options or cache_dir is not None:
            given = sorted(compile_options) + (["cache_dir"] if cache_dir is not None else [])
            raise TypeError(f"{p} is a compiled model: {', '.join(given)} apply only to an ONNX model, "
                            "compiled on load")
        return Model(p, threads, convert=convert)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"vitc.load: no such model: {p}")
    so, _ = cached_so(p, cache_dir, **compile_options)
    return Model(so, threads, convert=convert)


def _torch_module(model: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def _export_torch(module: Any, example_input: Any, path: str, input_names: Optional[Sequence[str]],
                  output_names: Optional[Sequence[str]], opset: int) -> None:
    """torch.onnx.export (TorchScript exporter, dynamo=False) with the first dimension of
    every input and output the dynamic batch "B"."""
    import torch  # type: ignore[import-not-found,unused-ignore]
    if example_input is None:
        raise TypeError("vitc.compile(torch.nn.Module) needs example_input= (a tensor, or a tuple of them)")
    args = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    if input_names is None:
        input_names = ["input"] if len(args) == 1 else [f"input{i}" for i in range(len(args))]
    if output_names is None:
        was_training = module.training
        module.eval()
        with torch.no_grad():
            y = module(*args)
        module.train(was_training)
        n = len(y) if isinstance(y, (tuple, list)) else 1
        output_names = ["output"] if n == 1 else [f"output{i}" for i in range(n)]
    dynamic_axes = {name: {0: "B"} for name in list(input_names) + list(output_names)}
    with warnings.catch_warnings():  # the TorchScript exporter is chosen here, not by the caller
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(module, args, path, input_names=list(input_names), output_names=list(output_names),
                          dynamic_axes=dynamic_axes, opset_version=opset, dynamo=False)


@overload
def compile(model: Any, output: None = None, *, batch: Optional[int] = None, target: Optional[str] = None,
            load: Literal[True, None] = None, threads: int = 0, cache_dir: Optional[PathLike] = None,
            convert: bool = False, example_input: Any = None, input_names: Optional[Sequence[str]] = None,
            output_names: Optional[Sequence[str]] = None, opset: int = 17, **options: Any) -> Model: ...


@overload
def compile(model: Any, output: PathLike, *, batch: Optional[int] = None, target: Optional[str] = None,
            load: Literal[False, None] = None, threads: int = 0, cache_dir: None = None,
            convert: bool = False, example_input: Any = None, input_names: Optional[Sequence[str]] = None,
            output_names: Optional[Sequence[str]] = None, opset: int = 17, **options: Any) -> str: ...


@overload
def compile(model: Any, output: PathLike, *, batch: Optional[int] = None, target: Optional[str] = None,
            load: Literal[True], threads: int = 0, cache_dir: None = None,
            convert: bool = False, example_input: Any = None, input_names: Optional[Sequence[str]] = None,
            output_names: Optional[Sequence[str]] = None, opset: int = 17, **options: Any) -> Model: ...


def compile(model: Any, output: Optional[PathLike] = None, *, batch: Optional[int] = None,
            target: Optional[str] = None, load: Optional[bool] = None, threads: int = 0,
            cache_dir: Optional[PathLike] = None, convert: bool = False, example_input: Any = None,
            input_names: Optional[Sequence[str]] = None, output_names: Optional[Sequence[str]] = None,
            opset: int = 17, **options: Any) -> Union[Model, str]:
    """Compiles a model with the vitc CLI; returns the loaded Model, or the .so's path.

    model: an ONNX file, or (where torch is installed) a torch.nn.Module with
    example_input= (a tensor, or a tuple of them), exported by torch.onnx.export
    (dynamo=False, opset 17) with the first dimension of every input and output
    the batch; input_names/output_names name them (default "input", "output").

    vitc.compile(model, **options) compiles into the cache (as vitc.load does:
    cache_dir, keyed by the model's bytes and the options) and returns the
    loaded Model (with threads= and convert= as vitc.load takes them).
    vitc.compile(model, output, **options) writes output and returns its path,
    as it always has; load=True returns the Model loaded from output instead.

    Keywords are the CLI's options (`vitc help compile`), '_' for '-':
    batch=8 (largest batch; default 16), target="cpu"|"cuda", opt_level=0..3,
    cpu="znver3", features="+a,-b" (or a list), weights="embedded"|"external",
    precision="bf16"|"fp16"|"tf32"|"fp32"|"int8", calibrate="DIR", emit="so"|"cuda", verbose=True,
    quiet=True, shapes=[(3, 224, 224), (3, 336, 336)] (a model exported with a
    dynamic image size: the sizes to compile for, the dimensions after the
    batch; Model.shapes lists them and run takes any of them).  None or False leaves an option out.  The CLI's messages on
    stderr are passed on to sys.stderr; on failure VitcError carries them
    (message) and its exit code (exit_code: 2 bad usage or bad input, 3
    internal error), and no file is written.
    """
    options = {"batch": batch, "target": target, **options}
    if load is None:
        load = output is None
    if isinstance(model, (str, bytes, os.PathLike)):
        if example_input is not None:
            raise TypeError("example_input= is for a torch.nn.Module; the model is a file")
        return _compile_onnx(os.fsdecode(model), output, load, threads, cache_dir, convert, options)
    if _torch_module(model):
        with tempfile.TemporaryDirectory(prefix="vitc-export-") as tmp:
            onnx_path = os.path.join(tmp, type(model).__name__ + ".onnx")
            _export_torch(model, example_input, onnx_path, input_names, output_names, opset)
            return _compile_onnx(onnx_path, output, load, threads, cache_dir, convert, options)
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]  # noqa: F401  (for the message only)
        have_torch = True
    except ImportError:
        have_torch = False
    raise TypeError(f"vitc.compile takes the path of an ONNX model or a torch.nn.Module, not "
                    f"{type(model).__module__}.{type(model).__qualname__}"
                    + ("" if have_torch else " (torch is not installed, so no torch.nn.Module either)"))


def _compile_onnx(path, output, load, threads, cache_dir, convert, options):
    if output is None:
        so, _ = cached_so(path, cache_dir, **options)
    else:
        if cache_dir is not None:
            raise TypeError("cache_dir= is for a compile without output; this one writes " + os.fspath(output))
        so = _cli.compile_file(path, output, **options)
    return Model(so, threads, convert=convert) if load else so
