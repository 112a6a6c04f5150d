"""tuned_gpu: tuned from Python, a client of the daemon (protocol version 1
over its Unix socket) and the plan executor, in the standard library alone.

    import tuned_gpu

    with tuned_gpu.Client() as client:      # $TUNED_SOCKET, or the default
        job = client.submit(graph_text, budget=60)
        client.wait(job["id"])
        kernel = client.fetch(job=job["id"])
    with tuned_gpu.Plan(graph_text, kernel, "cpu") as plan:
        plan.run({"x": x, "w": w, "y": y})  # torch, numpy or pointers

Named tuned_gpu, as the service is (tuned-gpu@N): Debian's power daemon
tuned owns the Python package "tuned". docs/client.md, "The Python
package", says more.
"""
from .client import Client, Event, Watch, default_socket
from .errors import (BadRequestError, BusyError, CancelledError, DaemonError, ExecError,
                     InternalError, NoDaemonError, NotFoundError, NotReadyError,
                     ProtocolError, TensorError, TimedOutError, TooLargeError,
                     TooManyError, TunedError, UnauthorizedError, UnknownOpError,
                     VersionMismatchError)
from .plan import Plan, Tensor

__all__ = ["Client", "Event", "Watch", "default_socket", "Plan", "Tensor", "TunedError",
           "DaemonError", "BadRequestError", "UnknownOpError", "VersionMismatchError",
           "NotReadyError", "TooLargeError", "TooManyError", "NotFoundError",
           "UnauthorizedError", "BusyError", "CancelledError", "TimedOutError",
           "InternalError", "NoDaemonError", "ProtocolError", "ExecError", "TensorError"]
