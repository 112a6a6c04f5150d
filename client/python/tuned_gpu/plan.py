"""Plans fetched from tuned, run inside a Python process on its tensors.

    with Plan(graph, client.fetch(key=key), backend="cpu") as plan:
        plan.run({"x": x, "w": w, "y": y})

The plan runs through libtuned_exec (the C executor, client/tuned_exec.h),
so C and Python processes run the kernels tuned verified the same way.
Tensors are given by name: torch tensors, numpy arrays, or pointers
(integers). Before anything runs, each tensor is checked against the
graph the plan was loaded for (dtype, shape, C-contiguity, device), and
every input and output must be given; intermediates left out live in the
plan's own scratch buffers. Neither torch nor numpy is imported here: a
tensor is recognized by what it offers.
"""
import collections
import ctypes
import json
import sys

from . import _exec
from .errors import ExecError, TensorError

# The graph's dtypes (docs/graph-format.md) as torch and numpy name them.
DTYPE_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i32": "int32"}

Tensor = collections.namedtuple("Tensor", "name dtype role shape")
Tensor.__doc__ = """A tensor of the plan's graph: its name, dtype ("f32",
"f16", "bf16", "i32"), role ("input", "output", "intermediate") and shape
(a tuple)."""

# What Plan.run needs of a given tensor; "device" is "cpu" or "cuda:N".
_Given = collections.namedtuple("_Given", "kind pointer dtype shape contiguous device "
                                          "writable")


def _as_text(document):
    return document if isinstance(document, str) else json.dumps(document)


def _torch_given(t):
    return _Given("torch tensor", t.data_ptr(), str(t.dtype).replace("torch.", ""),
                  tuple(t.shape), t.is_contiguous(), str(t.device), True)


def _numpy_given(a):
    dtype = a.dtype.name if a.dtype.isnative else a.dtype.str
    return _Given("numpy array", a.__array_interface__["data"][0], dtype, tuple(a.shape),
                  a.flags.c_contiguous, "cpu", a.flags.writeable)


def _given(name, value):
    """What "value" is, a torch tensor or a numpy array (None for a
    pointer)."""
    if isinstance(value, int):
        return None
    if hasattr(value, "data_ptr") and hasattr(value, "is_contiguous"):
        return _torch_given(value)
    if hasattr(value, "__array_interface__") and hasattr(value, "flags"):
        return _numpy_given(value)
    raise TensorError("tensor '%s': a %s given; pass a torch tensor, a numpy array or a "
                      "pointer (an int)" % (name, type(value).__name__))


def _shape_text(shape):
    return "[%s]" % ", ".join(str(d) for d in shape)


def check_tensors(graph_tensors, backend, tensors):
    """The pointers of "tensors" (name to torch tensor, numpy array or
    pointer) in the order of "graph_tensors" (the plan's Tensor list), and
    the device of the tensors given (None when all are pointers); a
    TensorError for the first that does not fit a plan on "backend"."""
    names = {t.name for t in graph_tensors}
    unknown = sorted(set(tensors) - names)
    if unknown:
        raise TensorError("no tensor named %s in the graph (its tensors: %s)"
                          % (", ".join("'%s'" % n for n in unknown),
                             ", ".join(t.name for t in graph_tensors)))
    missing = ["'%s' (an %s)" % (t.name, t.role) for t in graph_tensors
               if t.role != "intermediate" and tensors.get(t.name) is None]
    if missing:
        raise TensorError("tensor%s %s not given: a plan needs every input and output"
                          % ("s" if len(missing) > 1 else "", ", ".join(missing)))
    pointers, device = [], None
    for t in graph_tensors:
        value = tensors.get(t.name)
        given = None if value is None else _given(t.name, value)
        if given is not None:
            device = _check_device(t, given, backend, device)
            _check_layout(t, given)
        pointers.append(given.pointer if given is not None else value)
    return pointers, device


def _check_device(t, given, backend, device):
    """"given" is where a plan on "backend" runs, and on the device of the
    tensors before it ("device"); returns the device of the tensors so
    far."""
    if given.device.split(":")[0] != backend:
        raise TensorError("tensor '%s': device %s given (a %s), the plan runs on %s"
                          % (t.name, given.device, given.kind, backend))
    if device is not None and given.device != device:
        raise TensorError("tensor '%s': device %s given, but the tensors before it are on "
                          "%s: a plan runs on one device" % (t.name, given.device, device))
    return given.device


def _check_layout(t, given):
    """"given" has the graph's dtype and shape, row-major, and is writable
    when the plan writes it."""
    if given.dtype != DTYPE_NAMES[t.dtype]:
        raise TensorError("tensor '%s': dtype %s given, the graph says %s"
                          % (t.name, given.dtype, t.dtype))
    if given.shape != t.shape:
        raise TensorError("tensor '%s': shape %s given, the graph says %s"
                          % (t.name, _shape_text(given.shape), _shape_text(t.shape)))
    if not given.contiguous:
        raise TensorError("tensor '%s': a %s that is not C-contiguous given, the plan "
                          "reads and writes it row-major: pass a contiguous copy"
                          % (t.name, given.kind))
    if t.role != "input" and not given.writable:
        raise TensorError("tensor '%s': a read-only %s given, the plan writes it (an %s)"
                          % (t.name, given.kind, t.role))


class Plan:
    """A fetched plan loaded for its graph on a backend, "cpu" or "cuda".

    graph: the graph.json the plan was fetched for (text or dict); any
    listing of the same graph works. fetched: the fetch's result (a dict,
    or JSON text), or a plan alone, whose kernels are then generated
    again. library: the path of libtuned_exec (None: found as
    _exec.library_path says). Raises ExecError with the executor's reason.
    """

    def __init__(self, graph, fetched, backend="cpu", library=None):
        self._lib = _exec.load(library or _exec.library_path())
        self.backend = backend
        self._handle = ctypes.c_void_p()
        self._why = ctypes.create_string_buffer(512)  # a run's error, if any
        why = self._why
        if self._lib.tuned_exec_load(_as_text(graph).encode(), _as_text(fetched).encode(),
                                     backend.encode(), ctypes.byref(self._handle), why,
                                     len(why)) < 0:
            raise ExecError(why.value.decode())
        self.tensors = [self._tensor(i) for i in
                        range(self._lib.tuned_exec_tensor_count(self._handle))]

    def _tensor(self, index):
        info = _exec.TensorInfo()
        self._lib.tuned_exec_tensor_info(self._handle, index, ctypes.byref(info))
        return Tensor(info.name.decode(), info.dtype.decode(), info.role.decode(),
                      tuple(info.shape[:info.rank]))

    def run(self, tensors, stream=None):
        """Runs every kernel of the plan on "tensors", a dict of name to
        torch tensor, numpy array or pointer, after checking them all
        (TensorError names the tensor). On cuda the kernels are enqueued
        on "stream" (a CUstream handle as an int), by default torch's
        current stream of the tensors' device, and run returns without
        waiting; on the cpu they have run when it returns."""
        if not self._handle:
            raise ExecError("the plan is closed")
        pointers, device = check_tensors(self.tensors, self.backend, tensors)
        if stream is None and device is not None and self.backend == "cuda":
            torch = sys.modules["torch"]
            stream = torch.cuda.current_stream(torch.device(device)).cuda_stream
        self.run_checked(pointers, stream)

    def run_checked(self, pointers, stream=None):
        """Runs the plan on "pointers", in the order of self.tensors (None
        for an intermediate left to the plan), unchecked: for a caller
        that checked the same tensors with run() before (tuned_gpu.torch
        does, and then checks only that a call's inputs are those it
        was optimized for), so that a call costs no more than it must."""
        array = (ctypes.c_void_p * len(pointers))(*pointers)
        if self._lib.tuned_exec_run(self._handle, stream, array, self._why,
                                    len(self._why)) < 0:
            raise ExecError(self._why.value.decode())

    def close(self):
        """Frees the loaded plan; the Plan cannot run after."""
        if self._handle:
            self._lib.tuned_exec_free(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None):
            self.close()
