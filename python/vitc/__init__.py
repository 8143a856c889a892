"""vitc: compile Vision Transformers from ONNX ahead of time and run them from Python.

    import numpy as np, vitc
    m = vitc.load("vit.onnx", batch=8)                     # compiled on first use, cached by hash and options
    print(m.inputs, m.outputs, m.max_batch)                # [TensorInfo('input', float32[B,3,224,224])] ...
    logits = m(np.zeros(m.inputs[0].shape_at(4), np.float32))   # one output: one array
    [logits] = m.run(None, {"input": x})                   # as onnxruntime.InferenceSession.run
    outs = m.run({"input": x})                             # {output name: array}
    m = vitc.compile("vit.onnx", batch=8)                  # the same: a loaded model
    vitc.compile("vit.onnx", "vit.so", batch=8)            # writes vit.so, returns its path
    with vitc.load("vit.so", threads=2) as m: ...          # a .so, loaded as it is

Arrays go to the runtime as they are (C-contiguous numpy arrays of the
model's dtype, float32 or int64); nothing is converted or copied unless
convert=True asks for it (per run, or vitc.load(..., convert=True)).  The GIL
is released while a model runs.  Errors of the CLI and of the runtime raise
VitcError with their message.
"""
from ._api import compile, default_cache_dir, load
from ._cli import inspect
from ._errors import BatchOutOfRange, DtypeMismatch, InvalidArgument, ShapeMismatch, VitcError
from ._model import Model, TensorInfo
from ._runtime import CLI_PATH, RUNTIME_PATH

from importlib.metadata import PackageNotFoundError as _NotFound, version as _version

try:
    __version__ = _version("vitc")
except _NotFound:  # imported from the source tree, not installed
    __version__ = "unknown"

__all__ = [
    "compile", "inspect", "load", "default_cache_dir", "Model", "TensorInfo", "VitcError", "DtypeMismatch", "ShapeMismatch",
    "BatchOutOfRange", "InvalidArgument", "CLI_PATH", "RUNTIME_PATH", "__version__",
]
