"""vitc: compile Vision Transformers from ONNX ahead of time and run them from Python.

    import numpy as np, vitc
    vitc.compile("vit.onnx", "vit.so", batch=8)            # the vitc CLI, shipped in this package
    with vitc.load("vit.so", threads=2) as m:              # the C runtime, through ctypes
        print(m.inputs, m.outputs, m.max_batch)            # [TensorInfo('input', float32[B,3,224,224])] ...
        logits = m(np.zeros(m.inputs[0].shape_at(4), np.float32))   # one output: one array
        outs = m.run({"input": x})                         # {output name: array}

Arrays go to the runtime as they are (C-contiguous numpy arrays of the
model's dtype, float32 or int64); nothing is converted or copied.  The GIL is
released while a model runs.  Errors of the CLI and of the runtime raise
VitcError with their message.
"""
from ._cli import compile, inspect
from ._errors import BatchOutOfRange, DtypeMismatch, InvalidArgument, ShapeMismatch, VitcError
from ._model import Model, TensorInfo, load
from ._runtime import CLI_PATH, RUNTIME_PATH

from importlib.metadata import PackageNotFoundError as _NotFound, version as _version

try:
    __version__ = _version("vitc")
except _NotFound:  # imported from the source tree, not installed
    __version__ = "unknown"

__all__ = [
    "compile", "inspect", "load", "Model", "TensorInfo", "VitcError", "DtypeMismatch", "ShapeMismatch",
    "BatchOutOfRange", "InvalidArgument", "CLI_PATH", "RUNTIME_PATH", "__version__",
]
