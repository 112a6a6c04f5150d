"""The errors of the tuned_gpu package, one type per cause.

Every error is a TunedError. The daemon's errors (docs/protocol.md,
"Errors") are DaemonError, one subclass per code, carrying the code and
the daemon's message as it sent them; a code this version does not know
is an InternalError, as the protocol says. The client's own failures
(nothing listening, a connection closed, a garbled line) and the plan
executor's have their own types.
"""


class TunedError(Exception):
    """Anything the tuned_gpu package raises; the message says why."""


class DaemonError(TunedError):
    """An error the daemon answered with: `code` is its wire name
    ("not_found"), `message` its message."""

    code = "internal"

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class BadRequestError(DaemonError):
    """A request or a graph the daemon refused (its message names the field)."""
    code = "bad_request"


class UnknownOpError(DaemonError):
    """An op the daemon does not know."""
    code = "unknown_op"


class VersionMismatchError(DaemonError):
    """The daemon speaks another protocol version."""
    code = "version_mismatch"


class NotReadyError(DaemonError):
    """A request before hello."""
    code = "not_ready"


class TooLargeError(DaemonError):
    """A line or a reply over the daemon's frame limit."""
    code = "too_large"


class TooManyError(DaemonError):
    """Over the daemon's limit of connections or of requests in flight."""
    code = "too_many"


class NotFoundError(DaemonError):
    """No such job or key."""
    code = "not_found"


class UnauthorizedError(DaemonError):
    """The daemon does not allow this user the connection or the request."""
    code = "unauthorized"


class BusyError(DaemonError):
    """The daemon cannot take the request now (a full queue, shutting down)."""
    code = "busy"


class CancelledError(DaemonError):
    """The job a fetch or a wait waited on was cancelled."""
    code = "cancelled"


class TimedOutError(DaemonError):
    """A wait ran out: a fetch's timeout_ms, the client's own time limit,
    or the daemon's hello or idle timeout."""
    code = "timeout"


class InternalError(DaemonError):
    """A failure inside the daemon, or a code this client does not know."""
    code = "internal"


_BY_CODE = {cls.code: cls for cls in (
    BadRequestError, UnknownOpError, VersionMismatchError, NotReadyError,
    TooLargeError, TooManyError, NotFoundError, UnauthorizedError, BusyError,
    CancelledError, TimedOutError, InternalError)}


def daemon_error(error):
    """The typed error for the daemon's error object {code, message}."""
    code = error.get("code", "internal")
    return _BY_CODE.get(code, InternalError)(error.get("message", ""), code)


class NoDaemonError(TunedError):
    """Nothing listens at the socket path; the message says how to start
    a daemon there."""


class ProtocolError(TunedError):
    """The connection failed or closed, or the daemon sent what protocol
    1 is not."""


class ExecError(TunedError):
    """A plan that cannot be loaded or run; the message says why."""


class TensorError(ExecError, ValueError):
    """A tensor given to Plan.run that does not match the graph: the
    message names the tensor, what was given and what the graph says."""
