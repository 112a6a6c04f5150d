"""Runs plans fetched from tuned inside a Python process.

A thin ctypes wrapper of libtuned_exec (client/tuned_exec.h), so that C
and Python training processes run tuned's plans the same way:

    plan = Plan(open("graph.json").read(), fetched, backend="cpu")
    plan.run({"x": x_pointer, "w": w_pointer, "y": y_pointer})
    plan.close()

"fetched" is the reply of a fetch (`tunectl fetch KEY --json`), as a dict
or as JSON text. Pointers are integers: `array.ctypes.data` for numpy,
`tensor.data_ptr()` for torch. Intermediates left out run in the plan's
own scratch buffers.
"""
import ctypes
import json
import os

_HERE = os.path.dirname(os.path.abspath(__file__))

# The installed library, relative to this file when not absolute: set in
# the copy that meson installs (client/python/meson.build); empty here.
_INSTALLED_LIB = ""


def library_path():
    """$TUNED_EXEC_LIB; else the library installed with this file; else
    the build folder of this checkout."""
    if os.environ.get("TUNED_EXEC_LIB"):
        return os.environ["TUNED_EXEC_LIB"]
    if _INSTALLED_LIB:
        return os.path.normpath(os.path.join(_HERE, _INSTALLED_LIB))
    return os.path.join(_HERE, "..", "..", "build", "client", "libtuned_exec.so.0")


def _load_library(path):
    lib = ctypes.CDLL(path)
    lib.tuned_exec_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                    ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                    ctypes.c_size_t]
    lib.tuned_exec_load.restype = ctypes.c_int
    lib.tuned_exec_tensor_count.argtypes = [ctypes.c_void_p]
    lib.tuned_exec_tensor_count.restype = ctypes.c_int
    lib.tuned_exec_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                   ctypes.c_size_t]
    lib.tuned_exec_run.restype = ctypes.c_int
    lib.tuned_exec_free.argtypes = [ctypes.c_void_p]
    lib.tuned_exec_free.restype = None
    return lib


class ExecError(RuntimeError):
    """A plan that cannot be loaded or run; the message says why."""


class Plan:
    """A fetched plan loaded for its graph on a backend ("cpu" or "cuda")."""

    def __init__(self, graph, fetched, backend="cpu", library=None):
        self._lib = _load_library(library or library_path())
        if not isinstance(fetched, str):
            fetched = json.dumps(fetched)
        self.names = list(json.loads(graph)["tensors"])
        self._handle = ctypes.c_void_p()
        why = ctypes.create_string_buffer(512)
        if self._lib.tuned_exec_load(graph.encode(), fetched.encode(), backend.encode(),
                                     ctypes.byref(self._handle), why, len(why)) < 0:
            raise ExecError(why.value.decode())

    def run(self, pointers, stream=None):
        """Runs every kernel on the tensors named in "pointers" (name to
        integer address); a missing intermediate uses scratch."""
        unknown = set(pointers) - set(self.names)
        if unknown:
            raise ExecError("no tensor named %s in the graph" % ", ".join(sorted(unknown)))
        array = (ctypes.c_void_p * len(self.names))(
            *[pointers.get(name) for name in self.names])
        why = ctypes.create_string_buffer(512)
        if self._lib.tuned_exec_run(self._handle, stream, array, why, len(why)) < 0:
            raise ExecError(why.value.decode())

    def close(self):
        if self._handle:
            self._lib.tuned_exec_free(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
