"""Model: a compiled model loaded through the C runtime (vitc_model_load) and run
with vitc_run on numpy arrays, without copies.

Arrays are handed to the runtime as they are: what the runtime can check
(count, names, rank, dims, the batch against the compiled limit) it checks,
and its message becomes a VitcError; a dtype other than the model's is
refused here, by dtype name, as a DtypeMismatch; what only Python can see
(not an ndarray, not C-contiguous, misaligned, a non-native byte order, an
output that is read-only) is a TypeError or ValueError raised here.  Nothing
is converted or copied behind the caller's back: convert=True (per run, or
the model's default from vitc.load) asks for it.
"""
from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union, overload

import numpy as np

from . import _runtime
from ._errors import _DTYPE_MISMATCH, _INVALID_ARGUMENT, DtypeMismatch, InvalidArgument, runtime_error

# ONNX TensorProto codes, which vitc_tensor.dtype uses; a dtype the model does
# not take still goes to the runtime, which names both in its message.
_ONNX_CODE = {
    np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3, np.dtype(np.uint16): 4,
    np.dtype(np.int16): 5, np.dtype(np.int32): 6, np.dtype(np.int64): 7, np.dtype(np.bool_): 9,
    np.dtype(np.float16): 10, np.dtype(np.float64): 11, np.dtype(np.uint32): 12, np.dtype(np.uint64): 13,
    np.dtype(np.complex64): 14, np.dtype(np.complex128): 15,
}
_NUMPY_DTYPE = {code: dt for dt, code in _ONNX_CODE.items()}


@dataclass(frozen=True)
class TensorInfo:
    """One input or output of a compiled model.

    name: its ONNX name; dtype: a numpy dtype (float32, or int64 where the
    model says); dims and batch_dims: dimension i is dims[i], times the batch
    where batch_dims[i].  shape shows the batch: ("B", 3, 224, 224), or
    "2*B" for a dimension that is twice the batch, as `vitc inspect` prints
    it; shape_at(batch) is the concrete shape of an array at that batch.
    """
    name: str
    dtype: np.dtype
    dims: Tuple[int, ...]
    batch_dims: Tuple[bool, ...]

    @property
    def shape(self) -> Tuple[Union[int, str], ...]:
        return tuple(("B" if d == 1 else f"{d}*B") if b else d for d, b in zip(self.dims, self.batch_dims))

    @property
    def rank(self) -> int:
        return len(self.dims)

    def shape_at(self, batch: int) -> Tuple[int, ...]:
        """The shape of this tensor when the model runs `batch` images."""
        return tuple(d * batch if b else d for d, b in zip(self.dims, self.batch_dims))

    def __repr__(self):
        shape = ",".join(str(d) for d in self.shape)
        return f"TensorInfo({self.name!r}, {self.dtype}[{shape}])"


def _info(c):
    dtype = _NUMPY_DTYPE.get(c.dtype)
    if dtype is None:
        raise NotImplementedError(f"vitc: a tensor '{_runtime.decode(c.name)}' of ONNX dtype {c.dtype}, "
                                  "which numpy cannot hold")
    return TensorInfo(_runtime.decode(c.name), dtype, tuple(c.dims[:c.rank]),
                      tuple(bool(b) for b in c.is_batch[:c.rank]))


def _check_array(what, a, writeable=False):
    """The checks the runtime cannot make: it sees a pointer, a dtype code and dims."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what}: expected a numpy.ndarray, got {type(a).__module__}.{type(a).__qualname__}")
    if not a.dtype.isnative:
        raise TypeError(f"{what}: dtype {a.dtype.str} is not in this machine's byte order; "
                        f"convert it with .astype({a.dtype.newbyteorder('=').name!r})"
                        + ("" if writeable else ", or run with convert=True"))
    if a.dtype not in _ONNX_CODE:
        raise TypeError(f"{what}: dtype {a.dtype} is not a tensor dtype a compiled model can take")
    if not a.flags.c_contiguous:
        raise ValueError(f"{what}: the array is not C-contiguous (shape {a.shape}, strides {a.strides}); the "
                         "runtime reads one dense row-major block; pass np.ascontiguousarray(...) (a copy)"
                         + ("" if writeable else ", or run with convert=True"))
    if not a.flags.aligned:
        raise ValueError(f"{what}: the array's data is not aligned to its {a.dtype.itemsize}-byte elements")
    if writeable and not a.flags.writeable:
        raise ValueError(f"{what}: the array is read-only")


def _converted(a, dtype):
    """convert=True: an ndarray of `dtype` (when numpy casts a's dtype to it within its kind, as
    float64 to float32 or int32 to int64), C-contiguous, aligned and in native byte order; a
    itself when it is all that already, else a copy.  Anything else is left for the checks to refuse."""
    if not isinstance(a, np.ndarray):
        try:
            a = np.asarray(a)
        except Exception:  # not array-like: the check names its type
            return a
    if dtype is not None and a.dtype != dtype:
        if a.dtype.kind in "OSUVMm" or not np.can_cast(a.dtype, dtype, "same_kind"):
            return a  # refused by the dtype check, which says so
        a = a.astype(dtype)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if not (a.flags.c_contiguous and a.flags.aligned):
        a = np.ascontiguousarray(a)
        if not a.flags.aligned:
            a = a.copy()
    return a


def _fill(t, name, a):
    t.name = _runtime.encode(name) if name is not None else None
    t.dtype = _ONNX_CODE[a.dtype]
    t.rank = a.ndim  # above MAX_RANK the runtime refuses it by its rank
    for k, d in enumerate(a.shape[:_runtime.MAX_RANK]):
        t.dims[k] = d
    t.data = a.ctypes.data


class Model:
    """A model compiled by vitc (a .so), loaded with vitc.load(path, threads).

    m(x) runs it on the arrays given in input order (or by name, m(input=x))
    and returns the output array, or a tuple of them in output order when the
    model has several.  m.run({"input": x}) returns {name: array}; as ONNX
    Runtime's InferenceSession.run, m.run(None, {"input": x}) returns the list
    of all outputs, m.run(["logits"], feed) those named, in that order.  The
    batch is read from the inputs; outputs are new arrays unless run(..., out=)
    gives them.

    Inputs must have the model's dtype, be C-contiguous and in native byte
    order; convert=True (per run, or for every run: vitc.load(..., convert=True))
    converts those that are not (float64 to float32, int32 to int64, a strided
    or Fortran-ordered array to a C-contiguous copy) instead of refusing them.

    Every run takes a context (the runtime's workspace and thread pool, with
    `threads` threads) from the model's pool, creating one when all are busy,
    so several Python threads may run one Model at once; the GIL is released
    while a model runs.  close() (or leaving a `with` block, or the object
    being collected) frees the contexts and the model, after any runs in
    flight; a closed model raises ValueError.
    """

    def __init__(self, path: Union[str, os.PathLike], threads: int = 0, *, convert: bool = False) -> None:
        self._handle = None
        self._cond = threading.Condition()
        self._idle, self._busy, self._closed = [], 0, False
        if not isinstance(threads, int) or isinstance(threads, bool):
            raise TypeError(f"threads must be an int (0: one per core), not {type(threads).__name__}")
        self._rt = _runtime.lib()
        self._path = os.fspath(path)
        self._threads_asked = threads
        self._convert = bool(convert)
        handle = ctypes.c_void_p()
        st = self._rt.vitc_model_load(os.fsencode(self._path), ctypes.byref(handle))
        if st != 0:
            raise runtime_error(st, *_runtime.last_error(st))
        self._handle = handle.value
        try:
            self._inputs = self._signature(self._rt.vitc_model_num_inputs, self._rt.vitc_model_input)
            self._outputs = self._signature(self._rt.vitc_model_num_outputs, self._rt.vitc_model_output)
            # per input shape compiled (vitc compile --shapes): its (inputs, outputs); the first is the above
            self._variants = tuple(
                (self._signature(self._rt.vitc_model_num_inputs,
                                 lambda h, i, c, s=s: self._rt.vitc_model_shape_input(h, s, i, c)),
                 self._signature(self._rt.vitc_model_num_outputs,
                                 lambda h, i, c, s=s: self._rt.vitc_model_shape_output(h, s, i, c)))
                for s in range(int(self._rt.vitc_model_num_shapes(self._handle))))
            self._max_batch = int(self._rt.vitc_model_max_batch(self._handle))
            self._min_batch = int(self._rt.vitc_model_min_batch(self._handle))
            self._target = _runtime.decode(self._rt.vitc_model_target(self._handle))
            self._version = _runtime.decode(self._rt.vitc_model_compiler_version(self._handle))
            self._precision = _runtime.decode(self._rt.vitc_model_precision(self._handle))
            ctx = self._new_context()  # the first context now: its errors (no GPU, memory) belong to load()
            self._nthreads = int(self._rt.vitc_context_num_threads(ctx))
            self._idle.append(ctx)
        except BaseException:
            self.close()
            raise

    def _signature(self, count, get):
        infos = []
        for i in range(count(self._handle)):
            c = _runtime.CTensorInfo()
            st = get(self._handle, i, ctypes.byref(c))
            if st != 0:
                raise runtime_error(st, *_runtime.last_error(st))
            infos.append(_info(c))
        return tuple(infos)

    def _new_context(self):
        ctx = ctypes.c_void_p()
        st = self._rt.vitc_context_create(self._handle, self._threads_asked, ctypes.byref(ctx))
        if st != 0:
            raise runtime_error(st, *_runtime.last_error(st))
        return ctx.value

    # -- what the model is --
    path = property(lambda self: self._path, doc="The .so this model was loaded from.")
    inputs = property(lambda self: list(self._inputs), doc="The inputs, as TensorInfo, in the model's order.")
    outputs = property(lambda self: list(self._outputs), doc="The outputs, as TensorInfo, in the model's order.")
    shapes = property(lambda self: [list(ins) for ins, _ in self._variants],
                      doc="The input shapes it was compiled for, as lists of TensorInfo (one list per shape, the "
                          "inputs in the model's order): one for a model of one size; several for a model compiled "
                          "with vitc compile --shapes, which runs each and takes the one whose inputs fit a run's. "
                          "inputs and outputs describe the first.")
    max_batch = property(lambda self: self._max_batch,
                         doc="The largest batch it runs (vitc --batch, or the batch its ONNX export fixed).")
    min_batch = property(lambda self: self._min_batch,
                         doc="The smallest batch it runs: 1, or the batch its ONNX export fixed (the first "
                             "dimension of its inputs a number, not symbolic), which is then the only one.")
    target = property(lambda self: self._target, doc='"cpu" or "cuda".')
    compiler_version = property(lambda self: self._version, doc="The vitc version that compiled it.")
    precision = property(lambda self: self._precision,
                         doc='The arithmetic it was compiled for: "fp32", "bf16" (--precision bf16: on the CPU, '
                             'the Linear layers on AMX tiles) or "int8" (--precision int8: every Linear on int8 '
                             'kernels); a CUDA model\'s --precision.')
    threads = property(lambda self: self._nthreads, doc="Threads each run uses, the caller's included.")
    convert = property(lambda self: self._convert,
                       doc="Whether runs convert inputs of another dtype or layout by default (vitc.load(..., convert=)).")
    closed = property(lambda self: self._handle is None)

    def get_inputs(self) -> List[TensorInfo]:
        """The inputs (as InferenceSession.get_inputs names it); the same as m.inputs."""
        return list(self._inputs)

    def get_outputs(self) -> List[TensorInfo]:
        """The outputs (as InferenceSession.get_outputs names it); the same as m.outputs."""
        return list(self._outputs)

    def __repr__(self):
        sig = lambda ts: ", ".join(f"{t.name}: {t.dtype}[{','.join(map(str, t.shape))}]" for t in ts)
        state = "closed" if self.closed else \
            f"{self._target}, batch {self._min_batch}..{self._max_batch}, {self._nthreads} threads"
        return f"<vitc.Model {self._path!r} {state}; inputs ({sig(self._inputs)}) -> ({sig(self._outputs)})>"

    # -- running --
    def __call__(self, *args: Any, **kwargs: Any) -> Union[np.ndarray, Tuple[np.ndarray, ...]]:
        """Runs the model on inputs given by position (model order) and/or by name;
        returns the one output array, or a tuple of them in the model's output order.
        Inputs are converted when the model was loaded with convert=True."""
        feed = [(None, a) for a in args] + list(kwargs.items())
        res = self._run(feed, None, convert=self._convert)
        return res[0] if len(res) == 1 else tuple(res)

    @overload
    def run(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any],
            run_options: None = None, *, convert: Optional[bool] = None) -> List[np.ndarray]: ...

    @overload
    def run(self, inputs: Mapping[str, Any], out: Optional[Mapping[str, np.ndarray]] = None, /, *,
            convert: Optional[bool] = None) -> Dict[str, np.ndarray]: ...

    @overload
    def run(self, *, inputs: Mapping[str, Any], out: Optional[Mapping[str, np.ndarray]] = None,
            convert: Optional[bool] = None) -> Dict[str, np.ndarray]: ...

    def run(self, output_names: Any = None, input_feed: Optional[Mapping[str, Any]] = None, run_options: None = None,
            *, inputs: Optional[Mapping[str, Any]] = None, out: Optional[Mapping[str, np.ndarray]] = None,
            convert: Optional[bool] = None) -> Union[List[np.ndarray], Dict[str, np.ndarray]]:
        """Runs the model, in either of two forms.

        m.run(output_names, input_feed), as onnxruntime.InferenceSession.run: input_feed
        is {input name: array}; returns a list of arrays, the outputs named in
        output_names in that order, or all of them in the model's order where it is
        None.  An output name the model lacks raises InvalidArgument (a ValueError).
        run_options is accepted for ONNX Runtime's signature and must be None.

        m.run(inputs, out=None): inputs is {input name: array}; returns {output name:
        array}.  out: optional {output name: array} to write into (C-contiguous,
        writeable, the output's dtype and shape at the batch), returned in the result.

        convert: True converts inputs of another dtype (within its kind: float64 to
        float32, int32 to int64) or layout (not C-contiguous, another byte order) into
        new arrays; False refuses them (DtypeMismatch, a TypeError, names both dtypes;
        ValueError for the layout); None (default) takes the model's (vitc.load's convert).
        """
        conv = self._convert if convert is None else bool(convert)
        if inputs is not None or isinstance(output_names, Mapping):  # the dict form
            if inputs is None:
                inputs, output_names = output_names, None
                if input_feed is not None:  # run(inputs, out) by position
                    if out is not None:
                        raise TypeError("run() got out twice, by position and by keyword")
                    out, input_feed = input_feed, None
            if output_names is not None or input_feed is not None or run_options is not None:
                raise TypeError("run(inputs=..., out=...) takes no output_names, input_feed or run_options")
            if not isinstance(inputs, Mapping):
                raise TypeError(f"run() takes a mapping of input name to array, not {type(inputs).__name__}; "
                                "call the model (m(x)) to pass arrays by position")
            if out is not None and not isinstance(out, Mapping):
                raise TypeError(f"out must be a mapping of output name to array, not {type(out).__name__}")
            res = self._run(list(inputs.items()), out, convert=conv)
            return {t.name: a for t, a in zip(self._outputs, res)}

        # onnxruntime's form: run(output_names, input_feed, run_options=None)
        if not isinstance(input_feed, Mapping):
            raise TypeError("run() takes (output_names, input_feed) as onnxruntime.InferenceSession.run does, "
                            "input_feed a mapping of input name to array, or a mapping of input name to array "
                            f"alone; got {type(output_names).__name__}" +
                            (f" and {type(input_feed).__name__}" if input_feed is not None else ""))
        if run_options is not None:
            raise TypeError("vitc takes no run_options (pass None)")
        if out is not None:
            raise TypeError("out= belongs to run(inputs, out=...), the form that returns a dict")
        names = [t.name for t in self._outputs]
        if output_names is None:
            wanted = names
        else:
            if isinstance(output_names, (str, bytes)) or not isinstance(output_names, Sequence) or \
                    not all(isinstance(n, str) for n in output_names):
                raise TypeError("output_names must be None or a list of output names (str), not "
                                f"{output_names!r}")
            wanted = list(output_names)
            for n in wanted:
                if n not in names:
                    raise InvalidArgument(f"{self._path}: the model has no output named '{n}'; its outputs are "
                                          + ", ".join(f"'{m}'" for m in names),
                                          status=_INVALID_ARGUMENT, status_name="invalid argument")
        res = dict(zip(names, self._run(list(input_feed.items()), None, convert=conv)))
        return [res[n] for n in wanted]

    def _by_slot(self, feed):
        """{input index in the model's order: array} of a feed."""
        by_slot = {}
        for i, (name, a) in enumerate(feed):
            j = i if name is None else next((k for k, t in enumerate(self._inputs) if t.name == name), None)
            if j is not None and j < len(self._inputs):
                by_slot.setdefault(j, a)
        return by_slot

    def _variant_of(self, feed):
        """The (inputs, outputs) of the compiled shape the runtime will run for this feed: the
        first whose inputs have its arrays' dimensions but for the batch (the first shape where
        none has: the runtime then refuses the inputs)."""
        by_slot = self._by_slot(feed)
        for ins, outs in self._variants[1:]:
            if all(j in by_slot and by_slot[j].ndim == t.rank and
                   all(b or d == n for d, b, n in zip(t.dims, t.batch_dims, by_slot[j].shape))
                   for j, t in enumerate(ins)):
                return ins, outs
        return self._variants[0]

    def _batch_of(self, feed, inputs=None):
        """The batch the runtime will read (the first batch dimension of the first input
        in the model's order), or 1 where it will refuse the inputs anyway."""
        by_slot = self._by_slot(feed)
        for j, t in enumerate(inputs or self._inputs):
            for k, (d, b) in enumerate(zip(t.dims, t.batch_dims)):
                if not b or d == 0:
                    continue
                a = by_slot.get(j)
                if a is None or a.ndim != t.rank or a.shape[k] % d:
                    return 1
                batch = a.shape[k] // d
                return batch if 1 <= batch <= self._max_batch else 1
        return 1

    def profile(self, inputs: Union[np.ndarray, Mapping[str, np.ndarray]], runs: int = 10) -> List[Dict[str, Any]]:
        """Runs the model `runs` times on inputs (an array, or {input name: array}) with the
        runtime's profile on, and returns its parts longest first: one dict per part of a run
        (the code of one node of the compiled graph) with "index" (its place in the run), "op",
        "kernels", "source" (the ONNX nodes it came from), "calls" and "seconds" (summed over
        the runs); for a CUDA model, one per kernel launch of its plan, timed by CUDA events.
        VitcError where the model has no profile (a CPU model compiled before vitc made
        profile marks)."""
        feed = list(inputs.items()) if isinstance(inputs, Mapping) else [(None, inputs)]
        if not isinstance(runs, int) or runs < 1:
            raise ValueError(f"runs must be a positive int, not {runs!r}")
        rt = self._rt
        ctx = self._acquire()
        try:
            st = rt.vitc_context_set_profiling(ctx, 1)
            if st != 0:
                raise runtime_error(st, *_runtime.last_error(st))
            try:
                for _ in range(runs):
                    self._run(feed, None, ctx, convert=self._convert)
                parts = []
                for i in range(rt.vitc_context_profile_parts(ctx)):
                    p = _runtime.CProfilePart()
                    st = rt.vitc_context_profile_part(ctx, i, ctypes.byref(p))
                    if st != 0:
                        raise runtime_error(st, *_runtime.last_error(st))
                    parts.append({"index": i, "op": _runtime.decode(p.op), "kernels": _runtime.decode(p.kernels),
                                  "source": _runtime.decode(p.source), "calls": p.calls, "seconds": p.seconds})
            finally:
                rt.vitc_context_set_profiling(ctx, 0)
        finally:
            self._release(ctx)
        return sorted(parts, key=lambda p: (-p["seconds"], p["index"]))

    def _slot(self, i, name):
        """The model's input that feed item i (by position, or named `name`) is, or None."""
        if name is None:
            return self._inputs[i] if i < len(self._inputs) else None
        return next((t for t in self._inputs if t.name == name), None)

    def _run(self, feed, out, ctx=None, convert=False):
        checked = []
        for i, (name, a) in enumerate(feed):
            t = self._slot(i, name)
            if convert:
                a = _converted(a, t.dtype if t is not None else None)
            what = f"input '{name}'" if name is not None else \
                (f"input {i} ('{t.name}')" if t is not None else f"input {i}")
            _check_array(what, a)
            if t is not None and a.dtype != t.dtype:
                if convert:
                    hint = f"; convert=True converts within a kind only (as float64 to float32), not {a.dtype} " \
                           f"to {t.dtype}"
                else:
                    hint = f"; convert it with .astype(np.{t.dtype.name}), or run with convert=True"
                raise DtypeMismatch(f"{self._path}: input '{t.name}' is {a.dtype}, the model takes {t.dtype}{hint}",
                                    status=_DTYPE_MISMATCH, status_name="dtype mismatch")
            checked.append((name, a))
        feed = checked
        out = dict(out or {})
        for name, a in out.items():
            _check_array(f"output '{name}'", a, writeable=True)
            t = next((t for t in self._outputs if t.name == name), None)
            if t is not None and a.dtype != t.dtype:
                raise DtypeMismatch(f"{self._path}: output '{name}' is {a.dtype}, the model gives {t.dtype}",
                                    status=_DTYPE_MISMATCH, status_name="dtype mismatch")
        ins, outputs = self._variant_of(feed) if len(self._variants) > 1 else (self._inputs, self._outputs)
        batch = self._batch_of(feed, ins)
        results = [out.pop(t.name) if t.name in out else np.empty(t.shape_at(batch), t.dtype)
                   for t in outputs]
        extra = list(out.items())  # names the model lacks: the runtime says so
        cin = (_runtime.CTensor * max(len(feed), 1))()
        for t, (name, a) in zip(cin, feed):
            _fill(t, name, a)
        outs = [(t.name, a) for t, a in zip(outputs, results)] + extra
        cout = (_runtime.CTensor * max(len(outs), 1))()
        for t, (name, a) in zip(cout, outs):
            _fill(t, name, a)
        own = ctx is None  # profile() passes the context it profiles
        if own:
            ctx = self._acquire()
        try:
            # CDLL: the GIL is released until vitc_run returns.
            st = self._rt.vitc_run(ctx, cin, len(feed), cout, len(outs))
            if st != 0:
                raise runtime_error(st, *_runtime.last_error(st))  # same thread: its vitc_last_error
        finally:
            if own:
                self._release(ctx)
        return results

    # -- contexts and lifetime --
    def _acquire(self):
        with self._cond:
            if self._handle is None or self._closed:
                raise ValueError(f"{self._path}: the model is closed")
            ctx = self._idle.pop() if self._idle else None
            self._busy += 1
        if ctx is None:
            try:
                ctx = self._new_context()
            except BaseException:
                self._release(None)
                raise
        return ctx

    def _release(self, ctx):
        with self._cond:
            if ctx is not None:
                self._idle.append(ctx)
            self._busy -= 1
            self._cond.notify_all()

    def close(self) -> None:
        """Frees the model's contexts and the model, once runs in flight have returned."""
        with self._cond:
            self._closed = True
            while self._busy:
                self._cond.wait()
            handle, self._handle = self._handle, None
            contexts, self._idle = self._idle, []
        for ctx in contexts:
            self._rt.vitc_context_free(ctx)
        if handle is not None:
            self._rt.vitc_model_free(handle)

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # no run can be in flight: a run holds a reference to the model
        if getattr(self, "_cond", None) is None or getattr(self, "_rt", None) is None:
            return
        try:
            self.close()
        except Exception:
            pass


def load(path: Union[str, os.PathLike], threads: int = 0, *, convert: bool = False) -> Model:
    """Loads a model compiled by vitc (vitc_model_load): a Model (vitc.load also compiles ONNX).

    threads: threads per run, the caller's included; 0 (default) is one per
    core, or VITC_NUM_THREADS when set.  A model compiled for CPU features
    this machine lacks, a file that is not a vitc model, or one compiled by an
    incompatible vitc raises VitcError with the runtime's message.
    """
    return Model(path, threads, convert=convert)


for _c in (TensorInfo, Model):
    _c.__module__ = "vitc"  # its public name: vitc.Model in reprs and tracebacks
del _c
