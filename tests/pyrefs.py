"""pyrefs.py: what the Python tests share: their references (numpy, ONNX,
ONNX Runtime) imported, or the test reported skipped to ctest (exit 77) with
the reason when this Python lacks them."""
import importlib
import sys


def require(*modules):
    """The modules named, imported; exits 77 saying which is missing."""
    try:
        return [importlib.import_module(m) for m in modules]
    except ImportError as e:
        print("skipped: %s: %s (run ./setup.sh, or configure with -DVITC_PYTHON=...)" % (sys.executable, e))
        sys.exit(77)
