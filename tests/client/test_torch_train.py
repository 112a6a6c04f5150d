"""Training on tuned's plans, against the real daemon on the cpu: a module
optimized in training mode runs each partition's forward plan as one
autograd op whose backward runs the backward plan (docs/client.md,
"Training on tuned kernels"); its gradients, parameters' and inputs',
are eager's, the backward plan reading the results the forward plan saves
for it, and a few SGD steps follow eager's losses. An input asking
for a gradient the backward graph does not give, and a backward plan
that fails, leave the gradients to torch, right, with a TunedWarning
saying why.

usage: test_torch_train.py TUNED LIBTUNED_EXEC  (exit status 0: passed,
77: skipped, torch missing)
"""
import copy
import os
import signal
import sys
import tempfile
import unittest
import warnings

import needs_torch  # noqa: F401 (first: the package's path, or exit 77)
import torch  # noqa: E402
from tuned_gpu.torch import TunedWarning, optimize  # noqa: E402
from tuned_daemon import start_daemon  # noqa: E402

TUNED, LIBTUNED_EXEC = sys.argv[1:3]
# f32 kernels against torch's f32, relative to the gradient's norm
TOLERANCE = 1e-4
FIRST_VERSION_S = 180   # the most the first forward and backward versions may take
WEIGHTS = torch.linspace(-1, 1, 32).reshape(4, 8)  # of the outputs, in the loss


class Block(torch.nn.Module):
    """A residual MLP block with a layer norm, the ops a transformer
    layer trains: linear, GELU, tanh, layer norm, a residual add."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.up(x))
        return self.norm(x + torch.tanh(self.down(h)))


def relative_error(got, want):
    return ((got - want).norm() / want.norm().clamp(min=1e-30)).item()


class TrainTest(unittest.TestCase):
    """One daemon; each model tuned with a budget of a few seconds."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.TemporaryDirectory(prefix="tuned-train-")
        cls.daemon, cls.path = start_daemon(TUNED, cls.work.name)

    @classmethod
    def tearDownClass(cls):
        if cls.daemon.poll() is None:
            cls.daemon.send_signal(signal.SIGTERM)
            cls.daemon.wait(30)
        cls.work.cleanup()

    def optimized(self, model, inputs):
        """The model optimized, once each partition runs a forward and a
        backward plan."""
        with warnings.catch_warnings():
            warnings.simplefilter("error", TunedWarning)
            optimized = optimize(model, inputs, budget=2, socket=self.path)
        self.assertTrue(optimized.wait(FIRST_VERSION_S),
                        [(p.name, p.version, p.backward_version, p.trouble,
                          p.backward_trouble) for p in optimized.partitions])
        return optimized

    def gradients(self, model, forward, x):
        """The loss, and the gradients of the model's parameters and of x.
        The loss weighs each output (a layer norm's mean square is 1
        whatever its input: its gradient would be 0 but rounding)."""
        model.zero_grad()
        x = x.detach().requires_grad_(True)
        loss = (forward(x) * WEIGHTS).sum()
        loss.backward()
        return loss.item(), [p.grad.clone() for p in model.parameters()] + [x.grad]

    def assert_eager_gradients(self, model, optimized, x):
        """The optimized module gives eager's loss and gradients on x;
        returns the TunedWarnings of its call."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loss, got = self.gradients(model, optimized, x)
        want_loss, want = self.gradients(model, model, x)
        self.assertLessEqual(abs(loss - want_loss), TOLERANCE * abs(want_loss))
        names = [n for n, _ in model.named_parameters()] + ["x"]
        for name, g, w in zip(names, got, want):
            self.assertLessEqual(relative_error(g, w), TOLERANCE, name)
        return [str(w.message) for w in caught if w.category is TunedWarning]

    def test_gradients_are_eager_s(self):
        model = Block()
        x = torch.randn(4, 8, requires_grad=True)
        optimized = self.optimized(model, (x,))
        partition, = optimized.partitions
        self.assertEqual(sorted(partition.wrt),
                         ["down_bias", "down_weight", "norm_bias", "norm_weight", "up_bias",
                          "up_weight", "x"])
        self.assertGreaterEqual(partition.backward_version, 1)
        self.assertEqual(self.assert_eager_gradients(model, optimized, torch.randn(4, 8)), [])
        # the forward plan also outputs the contractions (and other costly
        # results) the backward plan reads saved instead of recomputing
        forward, backward = partition.current[0], partition.backward[0]
        outputs = {t.name for t in forward.tensors if t.role == "output"}
        saved = outputs - set(partition._outputs)
        self.assertTrue(saved, outputs)
        self.assertLessEqual(saved, {t.name for t in backward.tensors if t.role == "input"})

    def test_sgd_steps_follow_eager_s_losses(self):
        model = Block()
        eager = copy.deepcopy(model)
        x, target = torch.randn(4, 8), torch.randn(4, 8)
        optimized = self.optimized(model, (x,))
        losses = {}
        with warnings.catch_warnings():
            warnings.simplefilter("error", TunedWarning)
            for name, module, forward in (("tuned", model, optimized),
                                          ("eager", eager, eager)):
                step = torch.optim.SGD(module.parameters(), lr=0.1)
                losses[name] = []
                for _ in range(10):
                    step.zero_grad()
                    loss = ((forward(x) - target) ** 2).mean()
                    loss.backward()
                    step.step()
                    losses[name].append(loss.item())
        self.assertLess(losses["eager"][-1], losses["eager"][0])
        for i, (got, want) in enumerate(zip(losses["tuned"], losses["eager"])):
            self.assertLessEqual(abs(got - want), 1e-4 * abs(want), "step %d" % i)

    def test_an_input_without_a_backward_gradient_runs_in_torch(self):
        """Optimized for an input that needs no gradient, a call whose
        input asks for one differentiates in torch, and says why."""
        model = Block()
        optimized = self.optimized(model, (torch.randn(4, 8),))
        messages = self.assert_eager_gradients(model, optimized, torch.randn(4, 8))
        self.assertEqual(len(messages), 1, messages)
        self.assertIn("runs in torch: gradients are asked for x, and its backward plans give "
                      "those of ", messages[0])

    def test_a_failing_backward_plan_leaves_gradients_to_torch(self):
        model = Block()
        x = torch.randn(4, 8, requires_grad=True)
        optimized = self.optimized(model, (x,))
        partition, = optimized.partitions
        plan, version = partition.backward
        plan.close()  # it fails to run from now on
        self.assertEqual(self.assert_eager_gradients(model, optimized, x), [
            "tuned: partition %s (key %s) runs in torch: backward plan version %d failed to "
            "run: the plan is closed" % (partition.name, partition.key, version)])
        self.assertEqual(partition.backward_version, 0)


if __name__ == "__main__":
    os.environ["TUNED_EXEC_LIB"] = LIBTUNED_EXEC
    unittest.main(argv=sys.argv[:1], verbosity=2)
