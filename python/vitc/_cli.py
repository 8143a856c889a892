"""The vitc CLI shipped in this package, run as a subprocess: compile_file() (the
compile behind vitc.compile and vitc.load) and inspect()."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, Union

from ._errors import VitcError
from ._runtime import CLI_PATH


def _run_cli(args):
    cmd = [CLI_PATH] + args
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout = p.stdout.decode("utf-8", "replace")
    stderr = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        msg = stderr.strip()
        if p.returncode < 0:
            msg = (msg + "\n" if msg else "") + f"vitc was killed by signal {-p.returncode}"
        raise VitcError(msg or f"vitc exited with status {p.returncode}", exit_code=p.returncode,
                        stderr=stderr, command=cmd)
    return stdout, stderr


def _option(key, value):
    """One keyword argument as the CLI's option: opt_level=3 -> -O3, cpu="znver3" ->
    --cpu=znver3, features=["+avx2", "-avx512f"] -> --features=+avx2,-avx512f, quiet=True -> --quiet,
    shapes=[(3, 224, 224), (3, 336, 336)] -> --shapes=3x224x224,3x336x336."""
    if key == "opt_level":
        return [f"-O{value}"]
    if key == "shapes" and isinstance(value, (list, tuple)):  # [(3, 224, 224), "3x336x336", ...]
        value = [v if isinstance(v, str) else "x".join(str(int(d)) for d in v) for v in value]
    flag = "--" + key.replace("_", "-")
    if value is True:
        return [flag]
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    return [f"{flag}={os.fspath(value) if isinstance(value, os.PathLike) else value}"]


def cli_args(options):
    """The CLI's options for keyword options (None or False left out), in the order given."""
    args = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        args += _option(key, value)
    return args


def compile_file(model, output, **options) -> str:
    """Compiles an ONNX model into a shared library with the vitc CLI; returns `output`.

    The options, the messages and the errors are vitc.compile's (its docstring).
    """
    args = ["compile", os.fspath(model), "-o", os.fspath(output)] + cli_args(options)
    stdout, stderr = _run_cli(args)
    if stdout:
        sys.stdout.write(stdout)
    if stderr:
        sys.stderr.write(stderr)
    return os.fspath(output)


def inspect(path: Union[str, os.PathLike]) -> Dict[str, Any]:
    """What a compiled model holds, as `vitc inspect --json` prints it (a dict)."""
    stdout, _ = _run_cli(["inspect", os.fspath(path), "--json"])
    return json.loads(stdout)
