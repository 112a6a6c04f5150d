"""Imported first by the tests of tuned_gpu.torch: puts the source tree's
package (client/python) first on the path, and exits 77 (meson's skip)
saying why when this python has no torch."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "client", "python"))
try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: torch is not installed for %s" % sys.executable)
    sys.exit(77)
