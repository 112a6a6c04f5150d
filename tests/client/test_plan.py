"""tuned_gpu.Plan (client/python/tuned_gpu/plan.py) on numpy arrays or on torch
tensors: the plans tunectl runs, loaded through libtuned_exec and run on
the caller's tensors, against numpy's reference; every tensor that does
not fit the graph refused before anything runs, with a message naming it.

usage: test_plan.py TUNECTL numpy|torch  (exit status 0: passed; 77: this
Python has no numpy, or no torch)
"""
import functools
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
import tuned_gpu  # noqa: E402
from tuned_gpu.plan import Tensor, check_tensors  # noqa: E402

TUNECTL, MODE = sys.argv[1:3]
try:
    import numpy as np
    if MODE == "torch":
        import torch
except ImportError as e:
    print("SKIP: %s has no %s" % (sys.executable, e.name))
    sys.exit(77)

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def mlp(dtype):
    """h = x w, y = relu(h + b), in "dtype"."""
    return {"version": 1, "name": "mlp", "tensors": {
        "x": {"shape": [5, 7], "dtype": dtype, "role": "input"},
        "w": {"shape": [7, 3], "dtype": dtype, "role": "input"},
        "b": {"shape": [3], "dtype": dtype, "role": "input"},
        "h": {"shape": [5, 3], "dtype": dtype},
        "y": {"shape": [5, 3], "dtype": dtype, "role": "output"}},
        "ops": ["h[i, j] = sum(k) x[i, k] * w[k, j]", "y[i, j] = relu(h[i, j] + b[j])"]}


COUNTS = {"version": 1, "name": "counts", "tensors": {
    "n": {"shape": [4, 6], "dtype": "i32", "role": "input"},
    "m": {"shape": [4, 6], "dtype": "i32", "role": "output"}},
    "ops": ["m[i, j] = 3 * n[i, j] + j"]}


@functools.lru_cache(maxsize=None)
def fetched(text):
    """The plan and sources `tunectl run --json` runs for the graph "text",
    as a fetch holds them."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        f.write(text)
        f.flush()
        out = subprocess.run([TUNECTL, "run", f.name, "--backend", "cpu", "--json"],
                             capture_output=True, text=True, check=True)
    return out.stdout


def load(graph):
    """A Plan of "graph" on the cpu."""
    text = json.dumps(graph)
    return tuned_gpu.Plan(text, fetched(text), "cpu")


def reference_mlp(x, w, b):
    """y of mlp in float32, h rounded to the dtype of x as the plan stores it."""
    h = (x.astype(np.float32) @ w.astype(np.float32)).astype(x.dtype).astype(np.float32)
    return np.maximum(h + b.astype(np.float32), 0)


def reference_gpt3(x, w1, w2):
    """gpt3_mlp_small in float32, each intermediate rounded to f16."""
    h1 = (x.astype(np.float32) @ w1.astype(np.float32)).astype(np.float16).astype(np.float32)
    g = 0.5 * h1 * (1 + np.tanh(np.sqrt(2 / np.pi) * (h1 + 0.044715 * h1 ** 3)))
    g = g.astype(np.float16).astype(np.float32)
    return g @ w2.astype(np.float32)


class FakeCudaTensor:
    """What Plan.run reads of a torch tensor, on a GPU this machine need
    not have: the cuda checks run without one."""

    def __init__(self, shape, device, dtype="torch.float32"):
        self.shape, self.device, self.dtype = shape, device, dtype

    def data_ptr(self):
        return 4096

    def is_contiguous(self):
        return True


class Common:
    """Tests of both modes; "array(values, dtype)" makes their tensors."""

    rng = np.random.default_rng(7)

    def random(self, shape, dtype):
        return self.array(self.rng.uniform(-1, 1, shape), dtype)

    def mlp_tensors(self, dtype):
        return {"x": self.random((5, 7), dtype), "w": self.random((7, 3), dtype),
                "b": self.random((3,), dtype), "y": self.array(np.zeros((5, 3)), dtype)}

    def setUp(self):
        self.plan = load(mlp("f32"))
        self.addCleanup(self.plan.close)

    def test_the_plan_describes_its_graph(self):
        self.assertEqual(self.plan.tensors, [
            Tensor("x", "f32", "input", (5, 7)), Tensor("w", "f32", "input", (7, 3)),
            Tensor("b", "f32", "input", (3,)), Tensor("h", "f32", "intermediate", (5, 3)),
            Tensor("y", "f32", "output", (5, 3))])

    def test_runs_on_the_caller_s_tensors(self):
        for _ in range(2):
            t = self.mlp_tensors("float32")
            self.plan.run(t)
            want = reference_mlp(*(self.numpy(t[n]) for n in "xwb"))
            np.testing.assert_allclose(self.numpy(t["y"]), want, rtol=1e-5, atol=1e-6)

    def test_an_intermediate_given_is_written(self):
        t = self.mlp_tensors("float32")
        t["h"] = self.array(np.zeros((5, 3)), "float32")
        self.plan.run(t)
        np.testing.assert_allclose(self.numpy(t["h"]),
                                   self.numpy(t["x"]) @ self.numpy(t["w"]), rtol=1e-5,
                                   atol=1e-6)

    def test_f16(self):
        with open(os.path.join(SOURCE, "examples", "gpt3_mlp_small.json")) as f:
            graph = json.load(f)
        with load(graph) as plan:
            t = {"X": self.random((8, 32), "float16"), "W1": self.random((32, 16), "float16"),
                 "W2": self.random((16, 32), "float16"),
                 "Y": self.array(np.zeros((8, 32)), "float16")}
            plan.run(t)
            want = reference_gpt3(*(self.numpy(t[n]) for n in ("X", "W1", "W2")))
            np.testing.assert_allclose(self.numpy(t["Y"]).astype(np.float32), want,
                                       rtol=1e-2, atol=1e-2)

    def test_i32(self):
        with load(COUNTS) as plan:
            n = self.array(self.rng.integers(-1000, 1000, (4, 6)), "int32")
            m = self.array(np.zeros((4, 6)), "int32")
            plan.run({"n": n, "m": m})
            np.testing.assert_array_equal(self.numpy(m), 3 * self.numpy(n) + np.arange(6))

    def refused(self, changes, message):
        t = self.mlp_tensors("float32")
        t.update(changes)
        before = self.numpy(t["y"]).copy() if t.get("y") is not None else None
        with self.assertRaises(tuned_gpu.TensorError) as caught:
            self.plan.run(t)
        self.assertEqual(str(caught.exception), message)
        if before is not None:  # refused before anything ran
            np.testing.assert_array_equal(self.numpy(t["y"]), before)

    def test_a_wrong_dtype_is_refused(self):
        self.refused({"w": self.random((7, 3), "float64")},
                     "tensor 'w': dtype float64 given, the graph says f32")
        self.refused({"x": self.random((5, 7), "float16")},
                     "tensor 'x': dtype float16 given, the graph says f32")

    def test_a_wrong_shape_is_refused(self):
        self.refused({"x": self.random((7, 5), "float32")},
                     "tensor 'x': shape [7, 5] given, the graph says [5, 7]")
        self.refused({"b": self.random((1, 3), "float32")},
                     "tensor 'b': shape [1, 3] given, the graph says [3]")

    def test_a_tensor_not_contiguous_is_refused(self):
        self.refused({"x": self.transposed(self.random((7, 5), "float32"))},
                     "tensor 'x': a %s that is not C-contiguous given, the plan reads and "
                     "writes it row-major: pass a contiguous copy" % self.kind)

    def test_a_missing_tensor_is_refused(self):
        self.refused({"b": None}, "tensor 'b' (an input) not given: a plan needs every "
                     "input and output")
        self.refused({"x": None, "y": None}, "tensors 'x' (an input), 'y' (an output) not "
                     "given: a plan needs every input and output")

    def test_an_unknown_name_is_refused(self):
        self.refused({"z": self.random((5, 7), "float32")},
                     "no tensor named 'z' in the graph (its tensors: x, w, b, h, y)")

    def test_something_else_is_refused(self):
        self.refused({"x": [[0.0] * 7] * 5}, "tensor 'x': a list given; pass a torch "
                     "tensor, a numpy array or a pointer (an int)")

    def test_cuda_plans_take_cuda_tensors_of_one_device(self):
        """The checks of a cuda plan, without a GPU (a cuda plan cannot be
        loaded here): a cpu tensor, and tensors on two devices."""
        t = self.mlp_tensors("float32")
        with self.assertRaises(tuned_gpu.TensorError) as caught:
            check_tensors(self.plan.tensors, "cuda", t)
        self.assertEqual(str(caught.exception), "tensor 'x': device cpu given (a %s), the "
                         "plan runs on cuda" % self.kind)
        t = {n: FakeCudaTensor(s.shape, "cuda:0") for n, s in
             zip("xwbhy", self.plan.tensors)}
        pointers, device = check_tensors(self.plan.tensors, "cuda", t)
        self.assertEqual((pointers, device), ([4096] * 5, "cuda:0"))
        t["b"] = FakeCudaTensor((3,), "cuda:1")
        with self.assertRaises(tuned_gpu.TensorError) as caught:
            check_tensors(self.plan.tensors, "cuda", t)
        self.assertEqual(str(caught.exception), "tensor 'b': device cuda:1 given, but the "
                         "tensors before it are on cuda:0: a plan runs on one device")
        with self.assertRaises(tuned_gpu.TensorError) as caught:
            check_tensors(self.plan.tensors, "cpu", t)
        self.assertEqual(str(caught.exception), "tensor 'x': device cuda:0 given (a torch "
                         "tensor), the plan runs on cpu")


class NumpyTest(Common, unittest.TestCase):
    kind = "numpy array"

    @staticmethod
    def array(values, dtype):
        return np.asarray(values, dtype=dtype)

    @staticmethod
    def numpy(a):
        return a

    @staticmethod
    def transposed(a):
        return a.T

    def test_pointers_run_unchecked(self):
        t = self.mlp_tensors("float32")
        self.plan.run({n: a.ctypes.data for n, a in t.items()})
        np.testing.assert_allclose(t["y"], reference_mlp(t["x"], t["w"], t["b"]),
                                   rtol=1e-5, atol=1e-6)

    def test_a_read_only_output_is_refused(self):
        y = np.zeros((5, 3), np.float32)
        y.flags.writeable = False
        self.refused({"y": y}, "tensor 'y': a read-only numpy array given, the plan "
                     "writes it (an output)")

    def test_a_plan_that_does_not_fit_is_not_loaded(self):
        with self.assertRaises(tuned_gpu.ExecError) as caught:
            tuned_gpu.Plan(json.dumps(mlp("f32")), {"plan": {"kernels": []}}, "cpu")
        self.assertIn("does not fit the graph", str(caught.exception))


class TorchTest(Common, unittest.TestCase):
    kind = "torch tensor"

    @staticmethod
    def array(values, dtype):
        return torch.from_numpy(np.asarray(values, dtype=dtype)).clone()

    @staticmethod
    def numpy(t):
        return t.numpy()

    @staticmethod
    def transposed(t):
        return t.t()

    def test_bf16(self):
        with load(mlp("bf16")) as plan:
            t = {n: torch.empty(s.shape).uniform_(-1, 1).to(torch.bfloat16)
                 for n, s in zip("xwby", plan.tensors[:3] + plan.tensors[4:])}
            plan.run(t)
            x, w, b = (t[n].float() for n in "xwb")
            want = torch.relu((x @ w).to(torch.bfloat16).float() + b)
            torch.testing.assert_close(t["y"].float(), want, rtol=2e-2, atol=2e-2)

    def test_a_tensor_on_another_device_is_refused(self):
        self.refused({"w": torch.empty((7, 3), device="meta")},
                     "tensor 'w': device meta given (a torch tensor), the plan runs on cpu")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], defaultTest="NumpyTest" if MODE == "numpy" else
                  "TorchTest", verbosity=2)
