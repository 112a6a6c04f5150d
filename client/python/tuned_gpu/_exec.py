"""libtuned_exec (client/tuned_exec.h) through ctypes: where the library
is, and its calls declared.

The copy that meson installs has _INSTALLED_LIB set to the installed
library's path relative to this file's folder (client/python/meson.build),
so that an install, under DESTDIR or moved whole, finds its own library
without any environment variable.
"""
import ctypes
import functools
import os

from .errors import ExecError

_HERE = os.path.dirname(os.path.abspath(__file__))
SONAME = "libtuned_exec.so.0"

# Set in the installed copy; empty here.
_INSTALLED_LIB = ""

MAX_RANK = 8  # TUNED_EXEC_MAX_RANK


def library_path():
    """$TUNED_EXEC_LIB; else the library installed with this package;
    else, run from a checkout, its build folder's; else the soname, which
    the dynamic linker looks for where an installed SDK lies (a package
    installed with pip)."""
    if os.environ.get("TUNED_EXEC_LIB"):
        return os.environ["TUNED_EXEC_LIB"]
    if _INSTALLED_LIB:
        return os.path.normpath(os.path.join(_HERE, _INSTALLED_LIB))
    checkout = os.path.join(_HERE, "..", "..", "..", "build", "client", SONAME)
    return os.path.normpath(checkout) if os.path.exists(checkout) else SONAME


class TensorInfo(ctypes.Structure):
    """struct tuned_exec_tensor."""
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("role", ctypes.c_char_p), ("rank", ctypes.c_int),
                ("shape", ctypes.c_int64 * MAX_RANK)]


def _declare(lib, name, restype, *argtypes):
    function = getattr(lib, name)
    function.restype = restype
    function.argtypes = list(argtypes)


@functools.lru_cache(maxsize=None)
def load(path):
    """The library at "path" with its calls declared (loaded once)."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ExecError("cannot load the plan executor %s (%s): install tuned's C SDK, "
                        "or name the library with TUNED_EXEC_LIB" % (path, e)) from None
    why = (ctypes.c_char_p, ctypes.c_size_t)
    _declare(lib, "tuned_exec_load", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
             ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), *why)
    _declare(lib, "tuned_exec_tensor_count", ctypes.c_int, ctypes.c_void_p)
    _declare(lib, "tuned_exec_tensor_info", ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
             ctypes.POINTER(TensorInfo))
    _declare(lib, "tuned_exec_run", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
             ctypes.POINTER(ctypes.c_void_p), *why)
    _declare(lib, "tuned_exec_free", None, ctypes.c_void_p)
    return lib
