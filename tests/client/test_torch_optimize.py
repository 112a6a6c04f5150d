"""tuned_gpu.torch.optimize against the real daemon on the cpu: the
optimized models of examples/torch (and one split around a node torch
keeps) give their eager results, running tuned's plans; inputs unlike
the examples are refused, naming the input; a version published while
a loop calls the module is taken between calls, every call right; the
daemon killed (kill -9) mid-loop, or never there, the graph refused, a
plan that does not load: the module carries on (its plan, or torch) and
a TunedWarning says why; the daemon back, the module is served again.

usage: test_torch_optimize.py TUNED LIBTUNED_EXEC  (exit status 0:
passed, 77: skipped, torch missing)
"""
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import unittest
import warnings

import needs_torch  # noqa: F401 (first: the package's path, or exit 77)
import torch  # noqa: E402
import tuned_gpu  # noqa: E402
import tuned_gpu.torch  # noqa: E402
from tuned_gpu.torch import TunedWarning, optimize  # noqa: E402
from torch_examples import load_example  # noqa: E402
from tuned_daemon import start_daemon  # noqa: E402

TUNED, LIBTUNED_EXEC = sys.argv[1:3]
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
# What kernels are verified with: ||out - ref|| / ||ref|| (kernels/verify.c).
TOLERANCE = 1e-4
FIRST_VERSION_S = 120   # the most a first version may take, on a busy machine


def tensors(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


class TestCase(unittest.TestCase):
    def assert_close(self, got, want, what):
        got, want = tensors(got), tensors(want)
        self.assertEqual(len(got), len(want), what)
        for i, (g, w) in enumerate(zip(got, want)):
            self.assertEqual(g.shape, w.shape, "%s, output %d" % (what, i))
            error = ((g - w).norm() / w.norm().clamp(min=1e-30)).item()
            self.assertLessEqual(error, TOLERANCE, "%s, output %d" % (what, i))

    def start_daemon(self, *options):
        work = tempfile.TemporaryDirectory(prefix="tuned-optimize-")
        self.addCleanup(work.cleanup)
        daemon, path = start_daemon(TUNED, work.name, *options)
        self.addCleanup(self.stop, daemon)
        return daemon, path

    @staticmethod
    def stop(daemon):
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)


class Split(torch.nn.Module):
    """Two partitions around cumsum, which stays in torch; the first's
    nodes come before and after it, and both give torch a result."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        a = torch.relu(self.fc(x))
        b = torch.cumsum(a, -1)
        return b * 2 + a, a.sum(-1)


class OptimizeTest(TestCase):
    """One daemon; each model tuned with a budget of a few seconds."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.TemporaryDirectory(prefix="tuned-optimize-")
        cls.daemon, cls.path = start_daemon(TUNED, cls.work.name)

    @classmethod
    def tearDownClass(cls):
        cls.stop(cls.daemon)
        cls.work.cleanup()

    def optimized(self, model, inputs, budget=2):
        """The model optimized, once all its partitions run a plan."""
        with warnings.catch_warnings():
            warnings.simplefilter("error", TunedWarning)
            optimized = optimize(model, inputs, budget=budget, socket=self.path)
        self.assertTrue(optimized.wait(FIRST_VERSION_S),
                        [(p.name, p.version, p.trouble) for p in optimized.partitions])
        return optimized

    def test_the_examples_give_their_eager_results(self):
        for name in ("llama_mlp", "lstm_cell", "cnn_block", "bert_layer"):
            with self.subTest(model=name):
                model, inputs = load_example(name)
                optimized = self.optimized(model, inputs)
                self.assertEqual(len(optimized.partitions), 1)
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("error", TunedWarning)
                    self.assert_close(optimized(*inputs), model(*inputs), name)
                    other = [torch.randn_like(x) for x in inputs]
                    self.assert_close(optimized(*other), model(*other), name + ", new inputs")

    def test_a_model_split_around_torch_s_node(self):
        model, x = Split().eval(), torch.randn(4, 8)
        optimized = self.optimized(model, (x,))
        self.assertEqual(len(optimized.partitions), 2)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error", TunedWarning)
            self.assert_close(optimized(x), model(x), "split")

    def test_a_cached_key_runs_its_plan_from_the_first_call(self):
        model, inputs = load_example("llama_mlp")
        first = self.optimized(model, inputs)
        again = optimize(model, inputs, budget=1, socket=self.path)
        self.assertGreaterEqual(again.partitions[0].version, 1)
        self.assertEqual(again.partitions[0].key, first.partitions[0].key)

    def test_parameters_are_read_in_place(self):
        model, inputs = load_example("llama_mlp")
        optimized = self.optimized(model, inputs)
        with torch.no_grad():
            model.down_proj.weight.mul_(-2)
            self.assert_close(optimized(*inputs), model(*inputs), "after an in-place update")

    def test_inputs_unlike_the_examples_are_refused(self):
        model, inputs = load_example("llama_mlp")
        optimized = optimize(model, inputs, socket=self.path, budget=1)
        x = inputs[0]
        cases = [
            (x.double(), "input 'x' (argument 0): dtype float64 given, the module was "
             "optimized for float32"),
            (x[:1], "input 'x' (argument 0): shape [1, 8, 32] given, the module was "
             "optimized for [2, 8, 32]"),
            (torch.empty(x.shape, device="meta"), "input 'x' (argument 0): device meta "
             "given, the module was optimized for cpu"),
        ]
        for value, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(tuned_gpu.TensorError) as caught:
                    optimized(value)
                self.assertTrue(str(caught.exception).startswith(message),
                                str(caught.exception))
        with self.assertRaises(TypeError) as caught:
            optimized(x, x)
        self.assertIn("takes 1 inputs (x): 2 given", str(caught.exception))

    def test_a_new_version_is_taken_between_calls(self):
        """A loop calls the module while its key is tuned: the version it
        runs changes during the loop, and every call is right. Another
        job is submitted when one ends without a second version."""
        model, (x,) = load_example("llama_mlp")
        model = type(model)(hidden=32, intermediate=64).eval()  # a key of its own
        optimized = self.optimized(model, (x,), budget=8)
        partition = optimized.partitions[0]
        versions, end = [], time.monotonic() + 120
        with torch.no_grad(), tuned_gpu.Client(self.path) as client:
            want = model(x)
            while len(set(versions)) < 2 and time.monotonic() < end:
                self.assert_close(optimized(x), want, "call %d" % len(versions))
                versions.append(partition.version)
                if client.status(self.job_of(client, partition.key))["state"] == "done" \
                        and len(set(versions)) < 2:
                    client.submit(partition.graph, budget=8)
                time.sleep(0.02)
        self.assertGreaterEqual(versions[0], 1)
        self.assertGreaterEqual(len(set(versions)), 2, "no second version within 120 s")
        self.assertEqual(versions, sorted(versions))

    def test_gradients_run_in_torch(self):
        model, (x,) = load_example("llama_mlp")
        optimized = self.optimized(model, (x,))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = optimized(x)
        y.sum().backward()
        self.assertIsNotNone(model.down_proj.weight.grad)
        self.assertIn("runs in torch: gradients are asked for, and it was optimized in eval "
                      "mode, without backward plans", str(caught[0].message))

    @staticmethod
    def job_of(client, key):
        """The newest job of `key`."""
        return max(j["id"] for j in client.call("list")["jobs"] if j["key"] == key)


class WhenTunedFailsTest(TestCase):
    """Each with its own daemon, or none: the module runs whatever befalls
    tuned."""

    def test_killed_mid_loop_the_module_carries_on(self):
        """kill -9 mid-loop: a module running its plan keeps it, one whose
        job waits behind another runs in torch; every call is right and
        each warns why, once."""
        daemon, path = self.start_daemon()
        tuned_model, (x,) = load_example("llama_mlp")
        tuned = optimize(tuned_model, (x,), budget=2, socket=path)
        self.assertTrue(tuned.wait(FIRST_VERSION_S))
        with tuned_gpu.Client(path) as client, open(os.path.join(EXAMPLES,
                                                                 "gpt3_mlp_small.json")) as f:
            client.submit(json.load(f), budget=600)   # the daemon runs one job at a time
        waiting_model, inputs = load_example("lstm_cell")
        waiting = optimize(waiting_model, inputs, budget=2, socket=path)
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i in range(40):
                if i == 10:
                    daemon.send_signal(signal.SIGKILL)
                    daemon.wait(30)
                self.assert_close(tuned(x), tuned_model(x), "call %d" % i)
                self.assert_close(waiting(*inputs), waiting_model(*inputs), "call %d" % i)
                time.sleep(0.05)
        self.assertGreaterEqual(tuned.partitions[0].version, 1)
        self.assertEqual(waiting.partitions[0].version, 0)
        messages = [str(w.message) for w in caught if w.category is TunedWarning]
        self.assertEqual(len(messages), 2, messages)
        unreachable = "the tuned daemon is unreachable (the daemon at %s " % path
        self.assertIn("partition MLP_0 (key %s) runs plan version %d: %s"
                      % (tuned.partitions[0].key, tuned.partitions[0].version, unreachable),
                      messages[0])
        self.assertIn("partition LSTMCell_0 (key %s) runs in torch: %s"
                      % (waiting.partitions[0].key, unreachable), messages[1])

    def test_a_daemon_back_serves_again(self):
        """The daemon killed, then started again on its socket and cache:
        the thread connects again, the trouble is gone, and a new version
        of the key reaches the module; killed again, it warns again."""
        work = tempfile.TemporaryDirectory(prefix="tuned-optimize-")
        self.addCleanup(work.cleanup)
        daemon, path = start_daemon(TUNED, work.name)
        model, (x,) = load_example("llama_mlp")
        optimized = optimize(model, (x,), budget=2, socket=path)
        self.assertTrue(optimized.wait(FIRST_VERSION_S))
        partition = optimized.partitions[0]
        self.kill_and_call(daemon, optimized, x)
        shutil.rmtree(os.path.join(work.name, "run"))
        daemon, path = start_daemon(TUNED, work.name)
        self.addCleanup(self.stop, daemon)
        self.wait_for(lambda: partition.trouble is None, "the daemon found again")
        with tuned_gpu.Client(path) as client:
            before = client.fetch(key=partition.key)["version"]
            for _ in range(5):   # a job publishes when it finds a faster plan
                job = client.submit(partition.graph, budget=4)
                client.wait(job["id"], timeout=FIRST_VERSION_S)
                newest = client.fetch(key=partition.key)["version"]
                if newest > before:
                    break
            self.assertGreater(newest, before, "no new version in 5 jobs")
        self.assertTrue(optimized.wait(30, min_version=newest), partition.trouble)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error", TunedWarning)
            self.assert_close(optimized(x), model(x), "after the daemon came back")
        self.kill_and_call(daemon, optimized, x)  # warns again

    def kill_and_call(self, daemon, optimized, x):
        """Kills the daemon; the next call warns that it is unreachable."""
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(30)
        partition = optimized.partitions[0]
        self.wait_for(lambda: partition.trouble is not None, "the loss seen")
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            optimized(x)
        self.assertEqual(len(caught), 1)
        self.assertIn("runs plan version %d: the tuned daemon is unreachable"
                      % partition.version, str(caught[0].message))

    def wait_for(self, condition, what, timeout=30):
        end = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > end:
                self.fail("%s: not within %d s" % (what, timeout))
            time.sleep(0.05)

    def test_a_refused_graph_runs_in_torch_and_says_why(self):
        daemon, path = self.start_daemon("--max-graph-bytes", "1024")
        model, inputs = load_example("llama_mlp")
        optimized = optimize(model, inputs, socket=path)
        self.assert_one_warning(optimized, model, inputs, [
            "runs in torch: the daemon refused its graph: params.graph: the graph's text "
            "is ", "bytes, over the limit of 1024 (raise it with tuned --max-graph-bytes)"])

    def test_a_plan_that_fails_to_load_runs_in_torch_and_says_why(self):
        daemon, path = self.start_daemon()
        self.addCleanup(os.environ.__setitem__, "TUNED_EXEC_LIB", LIBTUNED_EXEC)
        os.environ["TUNED_EXEC_LIB"] = "/nonexistent/libtuned_exec.so.0"
        model, inputs = load_example("llama_mlp")
        optimized = optimize(model, inputs, budget=2, socket=path)
        partition = optimized.partitions[0]
        self.wait_for(lambda: partition.trouble is not None, "the plan's failure",
                      FIRST_VERSION_S)
        self.assert_one_warning(optimized, model, inputs, [
            "runs in torch: plan version 1 fails to load: cannot load the plan executor "
            "/nonexistent/libtuned_exec.so.0 ("])

    def assert_one_warning(self, optimized, model, inputs, parts):
        """Calls are right, in torch, and the first warns with `parts`."""
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                self.assert_close(optimized(*inputs), model(*inputs), "in torch")
        self.assertEqual(optimized.partitions[0].version, 0)
        self.assertEqual(len(caught), 1, [str(w.message) for w in caught])
        for part in parts:
            self.assertIn(part, str(caught[0].message))

    def test_no_daemon_runs_in_torch_and_says_why(self):
        with tempfile.TemporaryDirectory() as work:
            path = os.path.join(work, "gpu0.sock")
            model, inputs = load_example("llama_mlp")
            optimized = optimize(model, inputs, socket=path)
            with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self.assert_close(optimized(*inputs), model(*inputs), "without a daemon")
                self.assert_close(optimized(*inputs), model(*inputs), "again")
            messages = [str(w.message) for w in caught if w.category is TunedWarning]
            self.assertEqual(messages, [
                "tuned: partition MLP_0 (key not known yet) runs in torch: the tuned daemon "
                "is unreachable (no tuned daemon at %s (no such file or directory): start "
                "one with 'tuned --backend auto --socket %s'); reconnecting every 5 s at most"
                % (path, path)])


if __name__ == "__main__":
    os.environ["TUNED_EXEC_LIB"] = LIBTUNED_EXEC
    unittest.main(argv=sys.argv[:1], verbosity=2)
