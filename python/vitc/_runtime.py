"""ctypes declarations of the C runtime (include/vitc/runtime.h), and where the
package keeps its binaries.

The library is loaded with ctypes.CDLL, not ctypes.PyDLL: a CDLL function
releases the GIL for the duration of the foreign call, so while vitc_run
computes, other Python threads run (and several threads can run models at
once).  None of the functions below calls back into Python, so they need
the GIL for nothing.
"""
import ctypes
import os
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))
#: the vitc command-line compiler shipped in this package
CLI_PATH = os.path.join(_HERE, "_bin", "vitc")
#: the C runtime shipped in this package (the same libvitc_runtime C programs link)
RUNTIME_PATH = os.path.join(_HERE, "_lib", "libvitc_runtime.so.0")

MAX_RANK = 8  # VITC_MAX_RANK


# how vitc_tensor and vitc_tensor_info both begin
_TENSOR_HEAD: list = [
    ("name", ctypes.c_char_p),
    ("dtype", ctypes.c_int32),
    ("rank", ctypes.c_int32),
    ("dims", ctypes.c_int64 * MAX_RANK),
]


class CTensor(ctypes.Structure):
    """vitc_tensor"""
    _fields_ = _TENSOR_HEAD + [("data", ctypes.c_void_p)]


class CTensorInfo(ctypes.Structure):
    """vitc_tensor_info"""
    _fields_ = _TENSOR_HEAD + [("is_batch", ctypes.c_uint8 * MAX_RANK)]


class CProfilePart(ctypes.Structure):
    """vitc_profile_part"""
    _fields_ = [
        ("kernels", ctypes.c_char_p),
        ("op", ctypes.c_char_p),
        ("source", ctypes.c_char_p),
        ("calls", ctypes.c_int64),
        ("seconds", ctypes.c_double),
    ]


_P = ctypes.c_void_p
_I = ctypes.c_int
_SIGNATURES = {
    "vitc_model_load": (_I, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    "vitc_model_free": (None, [_P]),
    "vitc_model_num_inputs": (_I, [_P]),
    "vitc_model_num_outputs": (_I, [_P]),
    "vitc_model_input": (_I, [_P, _I, ctypes.POINTER(CTensorInfo)]),
    "vitc_model_output": (_I, [_P, _I, ctypes.POINTER(CTensorInfo)]),
    "vitc_model_num_shapes": (_I, [_P]),
    "vitc_model_shape_input": (_I, [_P, _I, _I, ctypes.POINTER(CTensorInfo)]),
    "vitc_model_shape_output": (_I, [_P, _I, _I, ctypes.POINTER(CTensorInfo)]),
    "vitc_model_max_batch": (ctypes.c_int64, [_P]),
    "vitc_model_min_batch": (ctypes.c_int64, [_P]),
    "vitc_model_target": (ctypes.c_char_p, [_P]),
    "vitc_model_compiler_version": (ctypes.c_char_p, [_P]),
    "vitc_model_precision": (ctypes.c_char_p, [_P]),
    "vitc_context_create": (_I, [_P, _I, ctypes.POINTER(_P)]),
    "vitc_context_free": (None, [_P]),
    "vitc_context_num_threads": (_I, [_P]),
    "vitc_run": (_I, [_P, ctypes.POINTER(CTensor), _I, ctypes.POINTER(CTensor), _I]),
    "vitc_context_set_profiling": (_I, [_P, _I]),
    "vitc_context_profile_parts": (_I, [_P]),
    "vitc_context_profile_part": (_I, [_P, _I, ctypes.POINTER(CProfilePart)]),
    "vitc_status_string": (ctypes.c_char_p, [_I]),
    "vitc_last_error": (ctypes.c_char_p, []),
}

_lib = None
_lib_lock = threading.Lock()


def lib():
    """The runtime library, loaded on first use (importing vitc does not need it)."""
    global _lib
    with _lib_lock:
        if _lib is None:
            if not os.path.isfile(RUNTIME_PATH):
                raise ImportError(f"vitc: the runtime library {RUNTIME_PATH} is missing; reinstall the package")
            # CDLL, not PyDLL: the GIL is released during every call (see the module's docstring).
            handle = ctypes.CDLL(RUNTIME_PATH)
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(handle, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _lib = handle
        return _lib


def decode(b):
    """A C string from the runtime as str; bytes that are not UTF-8 survive a round trip."""
    return b.decode("utf-8", "surrogateescape") if b is not None else ""


def encode(s):
    return s.encode("utf-8", "surrogateescape")


def last_error(status):
    """(status name, vitc_last_error()): call on the thread whose call failed (the message is per thread)."""
    rt = lib()
    msg = rt.vitc_last_error()
    return rt.vitc_status_string(status).decode("utf-8", "replace"), msg.decode("utf-8", "replace") if msg else ""
