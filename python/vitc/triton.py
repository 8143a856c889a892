"""Serving vitc models with Triton Inference Server: a model repository for
the vitc backend (libtriton_vitc.so) from a compiled .so.

    import vitc.triton
    vitc.triton.write_model_repository("vit.so", "models", name="vit")

writes

    models/vit/config.pbtxt        backend "vitc", max_batch_size, inputs and outputs
                                   from the .so's signature, instance group, dynamic batching
    models/vit/1/model.so          the compiled model (and its .weights file, if any)

and `python -m vitc.triton vit.so models --name vit` does the same from a
shell.  The backend checks config.pbtxt against the .so when the server
loads it (and completes a config.pbtxt that says only `backend: "vitc"`);
this writes it out in full so that it can be read and edited.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]

_DTYPES = {"float32": "TYPE_FP32", "int64": "TYPE_INT64"}


def _quote(s: str) -> str:
    """A protobuf text-format string literal."""
    out = []
    for ch in s:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 0x20:
            out.append("\\%03o" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _batch_factor(d: Any) -> Optional[int]:
    """k for a dimension written "B" (1) or "k*B"; None for a number."""
    if isinstance(d, int):
        return None
    s = str(d)
    if s == "B":
        return 1
    if s.endswith("*B"):
        return int(s[:-2])
    raise ValueError(f"unexpected dimension {d!r} in the model's signature")


def _tensors(info: Dict[str, Any], kind: str) -> List[List[Dict[str, Any]]]:
    shapes = info.get("shapes") or [{"inputs": info["inputs"], "outputs": info["outputs"]}]
    return [[s[kind][i] for s in shapes] for i in range(len(info[kind]))]


def _batch_major(info: Dict[str, Any]) -> bool:
    """Every tensor's first dimension is the batch (times 1) and no other depends on it."""
    for kind in ("inputs", "outputs"):
        for variants in _tensors(info, kind):
            for t in variants:
                f = [_batch_factor(d) for d in t["shape"]]
                if not f or f[0] != 1 or any(x is not None for x in f[1:]):
                    return False
    return True


def config_pbtxt(info: Dict[str, Any], name: str, *, instances: int = 1, threads: Optional[int] = None,
                 max_queue_delay_us: Optional[int] = 100, max_batch_size: Optional[int] = None,
                 source: str = "") -> str:
    """The config.pbtxt of a vitc model for Triton, from what `vitc inspect --json` says of it.

    max_batch_size is the .so's largest batch unless given (0: Triton does not batch; the dims
    then include the batch); a model whose export fixed its batch gets 0.  Tensors that take
    several sizes (the batch where Triton does not batch it, an image size of a model compiled
    for several) have -1 there.  CPU models get `instances` KIND_CPU instances, CUDA models
    KIND_GPU ones on GPU 0 (the GPU vitc's runtime uses: VITC_CUDA_DEVICE).  threads sets each
    instance's threads (default: the cores shared among the instances).  With batching, the
    dynamic batcher waits up to max_queue_delay_us for more requests (None: Triton's default).
    """
    min_b, max_b = int(info["min_batch"]), int(info["max_batch"])
    fixed = min_b == max_b and all(
        _batch_factor(d) is None for kind in ("inputs", "outputs") for vs in _tensors(info, kind)
        for t in vs for d in t["shape"])
    batchable = not fixed and _batch_major(info)
    mbs = max_b if batchable else 0
    if max_batch_size is not None:
        if max_batch_size < 0 or max_batch_size > max_b or (max_batch_size > 0 and not batchable):
            raise ValueError(f"max_batch_size {max_batch_size}: the model runs "
                             + (f"batch {min_b} only" if fixed else f"batches {min_b} to {max_b}")
                             + ("" if batchable or max_batch_size == 0 else ", and not with the batch first alone"))
        mbs = max_batch_size

    def dims(variants: List[Dict[str, Any]]) -> List[int]:
        out = []
        for k, d in enumerate(variants[0]["shape"]):
            if mbs > 0 and k == 0:
                continue
            f = _batch_factor(d)
            v = (f * min_b if min_b == max_b else -1) if f is not None else int(d)
            if any(vv["shape"][k] != d for vv in variants[1:]):
                v = -1
            out.append(v)
        return out

    def io_block(kind: str) -> str:
        rows = []
        for variants in _tensors(info, kind):
            t = variants[0]
            if t["dtype"] not in _DTYPES:
                raise ValueError(f"tensor {t['name']!r} is {t['dtype']}, which the vitc backend does not serve")
            d = ", ".join(str(x) for x in dims(variants))
            rows.append(f"  {{ name: {_quote(t['name'])}, data_type: {_DTYPES[t['dtype']]}, dims: [ {d} ] }}")
        return f"{kind[:-1]} [\n" + ",\n".join(rows) + "\n]\n"

    cuda = info.get("target") == "cuda"
    batches = f"batch {min_b} only" if min_b == max_b else f"batches {min_b}-{max_b}"
    lines = [f"# vitc model{' ' + source if source else ''}: vitc {info.get('vitc_version', '?')}, "
             f"{info.get('target', '?')} {info.get('precision', '')}, {batches}\n",
             f"name: {_quote(name)}\n", 'backend: "vitc"\n', f"max_batch_size: {mbs}\n",
             io_block("inputs"), io_block("outputs")]
    if cuda:  # not yet run on a GPU through Triton: see the README's "Serving"
        lines.append(f"instance_group [ {{ kind: KIND_GPU, count: {instances}, gpus: [ 0 ] }} ]\n")
    else:
        lines.append(f"instance_group [ {{ kind: KIND_CPU, count: {instances} }} ]\n")
    if mbs > 0:
        if max_queue_delay_us is None:
            lines.append("dynamic_batching { }\n")
        else:
            lines.append(f"dynamic_batching {{ max_queue_delay_microseconds: {int(max_queue_delay_us)} }}\n")
    if threads is not None:
        lines.append(f'parameters {{ key: "threads" value: {{ string_value: "{int(threads)}" }} }}\n')
    return "".join(lines)


def _copy_atomic(src: str, dst: str) -> None:
    """dst becomes a copy of src in one step (a new file, never src's bytes written over a loaded one)."""
    d = os.path.dirname(dst)
    fd, tmp = tempfile.mkstemp(prefix=".vitc-", dir=d)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dst)
    except BaseException:
        os.unlink(tmp)
        raise


def _inspect(model: str, vitc_cli: Optional[str]) -> Dict[str, Any]:
    if vitc_cli is None:
        from ._cli import inspect
        return inspect(model)
    p = subprocess.run([vitc_cli, "inspect", model, "--json"], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True)
    if p.returncode != 0:
        from ._errors import VitcError
        raise VitcError(p.stderr.strip() or f"vitc inspect exited with status {p.returncode}",
                        exit_code=p.returncode, stderr=p.stderr, command=[vitc_cli, "inspect", model, "--json"])
    return json.loads(p.stdout)


def write_model_repository(model: PathLike, repository: PathLike, name: Optional[str] = None, *, version: int = 1,
                           instances: int = 1, threads: Optional[int] = None,
                           max_queue_delay_us: Optional[int] = 100, max_batch_size: Optional[int] = None,
                           vitc_cli: Optional[PathLike] = None) -> str:
    """Puts a compiled model into a Triton model repository for the vitc backend; returns the model's directory.

    REPOSITORY/NAME/config.pbtxt (config_pbtxt()) and REPOSITORY/NAME/VERSION/model.so, with the
    .so's external weights file beside it under the name the .so looks for.  NAME defaults to the
    file's stem.  Files are replaced whole (written beside, then renamed), so a server that has
    the model loaded can reload it.  The signature is read with `vitc inspect --json` (the
    package's vitc, or vitc_cli).
    """
    model = os.fspath(model)
    repository = os.fspath(repository)
    if name is None:
        name = os.path.basename(model).split(".")[0]
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"model name {name!r}: a directory name is needed")
    if int(version) < 1:
        raise ValueError(f"version {version}: Triton's versions are 1, 2, ...")
    info = _inspect(model, os.fspath(vitc_cli) if vitc_cli is not None else None)
    text = config_pbtxt(info, name, instances=instances, threads=threads, max_queue_delay_us=max_queue_delay_us,
                        max_batch_size=max_batch_size, source=os.path.basename(model))
    mdir = os.path.join(repository, name)
    vdir = os.path.join(mdir, str(int(version)))
    os.makedirs(vdir, exist_ok=True)
    weights = (info.get("weights") or {}).get("file")
    if weights:
        _copy_atomic(os.path.join(os.path.dirname(os.path.abspath(model)), weights), os.path.join(vdir, weights))
    _copy_atomic(model, os.path.join(vdir, "model.so"))
    fd, tmp = tempfile.mkstemp(prefix=".vitc-", dir=mdir)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join(mdir, "config.pbtxt"))
    return mdir


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m vitc.triton",
        description="Put a model compiled by vitc into a Triton Inference Server model repository "
                    "(REPOSITORY/NAME/config.pbtxt and REPOSITORY/NAME/VERSION/model.so) for the vitc backend.")
    p.add_argument("model", help="the compiled model (.so)")
    p.add_argument("repository", help="the model repository (made if missing)")
    p.add_argument("--name", help="the model's name in Triton (default: the file's stem)")
    p.add_argument("--version", type=int, default=1, help="its version directory (default 1)")
    p.add_argument("--instances", type=int, default=1, help="instances (each with its own context; default 1)")
    p.add_argument("--threads", type=int, help="threads per instance (default: the cores shared among them)")
    p.add_argument("--max-batch-size", type=int, help="max_batch_size (default: the .so's largest batch)")
    p.add_argument("--max-queue-delay-us", type=int, default=100,
                   help="how long the dynamic batcher waits for more requests (default 100)")
    p.add_argument("--vitc", dest="vitc_cli", help="the vitc command to read the signature with")
    a = p.parse_args(argv)
    try:
        d = write_model_repository(a.model, a.repository, a.name, version=a.version, instances=a.instances,
                                   threads=a.threads, max_queue_delay_us=a.max_queue_delay_us,
                                   max_batch_size=a.max_batch_size, vitc_cli=a.vitc_cli)
    except (OSError, ValueError) as e:
        print(f"vitc.triton: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # VitcError: vitc inspect's own message
        print(f"vitc.triton: {e}", file=sys.stderr)
        return 2
    print(f"wrote {os.path.join(d, 'config.pbtxt')} and {os.path.join(d, str(a.version), 'model.so')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
