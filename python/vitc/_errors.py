"""The one exception type of the package, and the runtime statuses it carries."""

# vitc_status (include/vitc/runtime.h): the codes that say an argument was wrong
_INVALID_ARGUMENT = 1
_SHAPE_MISMATCH = 4
_DTYPE_MISMATCH = 5
_BATCH_OUT_OF_RANGE = 6


class VitcError(Exception):
    """An error reported by vitc: the CLI's message or the runtime's.

    Attributes:
        message: the text, as the CLI printed it or vitc_last_error() said it.
        exit_code: the CLI's exit status (2: bad usage or bad input, 3:
            internal error; see `vitc --help`), None for a runtime error.
        status: the runtime's vitc_status code, None for a CLI error.
        status_name: vitc_status_string(status) ("shape mismatch", ...).
        stderr: everything the CLI wrote to stderr (CLI errors).
        command: the CLI's argument list (CLI errors).

    Runtime errors about the arguments are raised as subclasses that are also
    TypeError (a dtype mismatch) or ValueError (a shape mismatch, a batch out
    of range, a wrong count or name), so either family catches them.
    """

    def __init__(self, message, *, exit_code=None, status=None, status_name=None, stderr=None, command=None):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.status = status
        self.status_name = status_name
        self.stderr = stderr
        self.command = command


class DtypeMismatch(VitcError, TypeError):
    """The runtime refused a tensor of another dtype than the model's."""


class ShapeMismatch(VitcError, ValueError):
    """The runtime refused a tensor whose rank or dims are not the model's."""


class BatchOutOfRange(VitcError, ValueError):
    """The batch read from the inputs is below 1 or above the compiled limit."""


class InvalidArgument(VitcError, ValueError):
    """The runtime refused the arguments: a wrong count, an unknown or repeated name."""


_BY_STATUS = {
    _INVALID_ARGUMENT: InvalidArgument,
    _SHAPE_MISMATCH: ShapeMismatch,
    _DTYPE_MISMATCH: DtypeMismatch,
    _BATCH_OUT_OF_RANGE: BatchOutOfRange,
}


def runtime_error(status, status_name, message):
    """The exception for a failed runtime call: its status and vitc_last_error()'s text."""
    cls = _BY_STATUS.get(status, VitcError)
    return cls(message or f"vitc runtime: {status_name}", status=status, status_name=status_name)


for _c in (VitcError, DtypeMismatch, ShapeMismatch, BatchOutOfRange, InvalidArgument):
    _c.__module__ = "vitc"  # tracebacks name vitc.VitcError, not vitc._errors.VitcError
del _c
