"""tuned_gpu.torch.optimize(..., run=ID) against the real daemon on the
cpu: the modules of a training run (one per rank) run the version the
run is pinned to while newer ones land (written into the cache behind
the daemon's back, as another daemon of a shared database would) and
while version events come, a module of another run or of none takes the
newest; advance() in one rank and sync() in the others move every rank
to the latest, and the calls stay right; a module that trains advances
before its keys (its backward graph's last) have a version.

usage: test_torch_runs.py TUNED LIBTUNED_EXEC  (exit status 0: passed,
77: skipped, torch missing)
"""
import os
import signal
import sys
import tempfile
import time
import unittest
import warnings

import needs_torch  # noqa: F401 (first: the package's path, or exit 77)
import torch  # noqa: E402
import tuned_gpu  # noqa: E402
from tuned_gpu.torch import TunedWarning, optimize  # noqa: E402
from torch_examples import load_example  # noqa: E402
from tuned_daemon import land_version, start_daemon  # noqa: E402

TUNED, LIBTUNED_EXEC = sys.argv[1:3]
FIRST_VERSION_S = 120   # the most a first version may take, on a busy machine
TOLERANCE = 1e-4        # ||out - ref|| / ||ref||, as kernels are verified


class Trained(torch.nn.Module):
    """A small layer that trains: its partition has a backward graph."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.up = torch.nn.Linear(8, 12)
        self.down = torch.nn.Linear(12, 8)

    def forward(self, x):
        return self.down(torch.tanh(self.up(x)))


class RunTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.TemporaryDirectory(prefix="tuned-runs-")
        self.addCleanup(self.work.cleanup)
        self.daemon, self.path = start_daemon(TUNED, self.work.name)
        self.addCleanup(self.stop)
        model, (self.x,) = load_example("llama_mlp")
        self.model = type(model)(hidden=32, intermediate=40).eval()  # a key of its own

    def stop(self):
        self.daemon.send_signal(signal.SIGTERM)
        self.daemon.wait(30)

    def optimized(self, run=None):
        """The model optimized (for `run`), once its partition runs a plan."""
        with warnings.catch_warnings():
            warnings.simplefilter("error", TunedWarning)
            optimized = optimize(self.model, (self.x,), budget=2, socket=self.path, run=run)
        self.assertTrue(optimized.wait(FIRST_VERSION_S),
                        [(p.name, p.version, p.trouble) for p in optimized.partitions])
        return optimized

    def announce(self, module, version):
        """A version event of the module's key, as the upgrader gets one."""
        follower, entries = module._follower, module._entries
        with tuned_gpu.Client(self.path) as client:
            follower._on_version(client, entries, {"key": entries[0].key, "version": version})

    def expect_right(self, module):
        with torch.no_grad():
            got, want = module(self.x), self.model(self.x)
        error = ((got - want).norm() / want.norm()).item()
        self.assertLessEqual(error, TOLERANCE)

    def test_ranks_of_a_run_keep_one_version_until_it_advances(self):
        ranks = [self.optimized(run="train-1") for _ in range(2)]
        first = ranks[0].partitions[0]
        pinned, key = first.version, first.key
        self.assertEqual(ranks[1].partitions[0].version, pinned)
        land_version(self.work.name, key)
        self.announce(ranks[0], pinned + 1)
        self.assertEqual(first.version, pinned, "a run's module moved on a version event")
        for rank in ranks:
            rank.sync()
            self.assertEqual(rank.partitions[0].version, pinned)
        late_rank = self.optimized(run="train-1")
        self.assertEqual(late_rank.partitions[0].version, pinned)
        # (the submits of the modules below may queue jobs that publish
        # more versions: the checks are against what the cache holds)
        free = self.optimized()
        self.assertGreater(free.partitions[0].version, pinned)
        other_run = self.optimized(run="train-2")
        self.assertGreater(other_run.partitions[0].version, pinned)

        moved = ranks[0].advance()
        self.assertEqual(len(moved["pins"]), 1, moved)
        latest = moved["pins"][0]["version"]
        self.assertEqual(moved["pins"][0], {"key": key, "version": latest, "previous": pinned})
        self.assertGreater(latest, pinned)
        self.assertEqual(first.version, latest)
        for rank in ranks[1:] + [late_rank]:
            rank.sync()
            self.assertEqual(rank.partitions[0].version, latest)
        for rank in ranks + [late_rank]:
            self.expect_right(rank)

    def test_a_training_run_advances_before_its_keys_have_versions(self):
        model = Trained()
        x = torch.randn(4, 8, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error", TunedWarning)
            optimized = optimize(model, (x,), budget=2, socket=self.path, run="train-3")
        partition, = optimized.partitions
        self.assertIsNotNone(partition.grad_key, "no backward graph was submitted")
        end, early = time.monotonic() + FIRST_VERSION_S, 0
        # the keys without a version yet (the backward's last) are left to
        # the thread, which pins each at its first version
        while not optimized.wait(0) and time.monotonic() < end:
            if partition.backward_version == 0:
                early += 1
            self.assertEqual(optimized.advance()["run"], "train-3")
            optimized.sync()
            time.sleep(0.05)
        self.assertGreater(early, 0, "the backward key had a version at once")
        self.assertTrue(optimized.wait(0), (partition.version, partition.backward_version,
                                            partition.trouble, partition.backward_trouble))
        moved = optimized.advance()
        self.assertEqual(len(moved["pins"]), 2, moved)
        self.assertEqual({p["key"] for p in moved["pins"]},
                         {partition.key, partition.grad_key})
        self.assertGreaterEqual(partition.backward_version, 1)

    def test_a_module_without_a_run_cannot_advance(self):
        free = optimize(self.model, (self.x,), budget=1, socket=self.path)
        with self.assertRaises(ValueError) as caught:
            free.advance()
        self.assertIn("optimized without run=", str(caught.exception))


if __name__ == "__main__":
    os.environ["TUNED_EXEC_LIB"] = LIBTUNED_EXEC
    unittest.main(argv=sys.argv[:1], verbosity=2)
