"""ktune's exceptions: one small hierarchy for the daemon's gRPC status codes
and the launcher's absl codes, which share their numbers (3 INVALID_ARGUMENT,
5 NOT_FOUND, 9 FAILED_PRECONDITION, 14 UNAVAILABLE, ...).

  Error                     every ktune failure; .code (the canonical number), .message
    InvalidProblem          3  the problem (or a launch argument) is refused; .field names it
    NotFound                5  CACHED_ONLY miss, unknown entry
    FailedPrecondition      9  e.g. a compile-only daemon asked to tune, no driver for the launcher
      NoDriver                 the launcher found no CUDA driver (libcuda.so.1)
    Unavailable             14 (and 4 DEADLINE_EXCEEDED) no daemon answered
    PermissionDenied        7, 16  token missing or wrong
    ResourceExhausted       8  a bound (request size, queue) was hit
    Internal                13 and every other code
    LauncherUnavailable        libktune_launch.so missing or of another ABI
"""
import re

OK, DEADLINE_EXCEEDED, INVALID_ARGUMENT, NOT_FOUND = 0, 4, 3, 5
PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION = 7, 8, 9
INTERNAL, UNAVAILABLE, UNAUTHENTICATED = 13, 14, 16

# "problem.norm.m: must be >= 1" -> "problem.norm.m": the daemon's messages
# lead with the field at fault (tuner/core/*_problem.cc).
_FIELD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):")


class Error(Exception):
    """A ktune failure with its canonical status code."""

    code = INTERNAL

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidProblem(Error, ValueError):
    code = INVALID_ARGUMENT

    @property
    def field(self):
        """The field the daemon named at fault ("problem.pass"), or None."""
        m = _FIELD.match(self.message)
        return m.group(1) if m else None


class NotFound(Error, LookupError):
    code = NOT_FOUND


class FailedPrecondition(Error):
    code = FAILED_PRECONDITION


class NoDriver(FailedPrecondition):
    pass


class Unavailable(Error, ConnectionError):
    code = UNAVAILABLE


class PermissionDenied(Error, PermissionError):
    code = PERMISSION_DENIED


class ResourceExhausted(Error):
    code = RESOURCE_EXHAUSTED


class Internal(Error):
    code = INTERNAL


class LauncherUnavailable(Error, OSError):
    code = FAILED_PRECONDITION


_BY_CODE = {
    INVALID_ARGUMENT: InvalidProblem,
    NOT_FOUND: NotFound,
    FAILED_PRECONDITION: FailedPrecondition,
    UNAVAILABLE: Unavailable,
    DEADLINE_EXCEEDED: Unavailable,
    PERMISSION_DENIED: PermissionDenied,
    UNAUTHENTICATED: PermissionDenied,
    RESOURCE_EXHAUSTED: ResourceExhausted,
}


def from_code(code, message):
    """The exception for a canonical status code (gRPC's or absl's number)."""
    return _BY_CODE.get(code, Internal)(message, code)


def from_rpc_error(error, address=None):
    """A grpc.RpcError as a ktune Error (the one place gRPC codes are mapped)."""
    code = error.code() if hasattr(error, "code") else None
    number = code.value[0] if code is not None else INTERNAL
    details = (error.details() if hasattr(error, "details") else None) or str(error)
    if number == UNAVAILABLE and address:
        details = f"no ktune daemon answered at {address} ({details}); is ktuned running?"
    elif number == DEADLINE_EXCEEDED and address:
        details = f"ktuned at {address} did not answer within the call's deadline ({details})"
    return from_code(number, details)
