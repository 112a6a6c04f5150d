#!/usr/bin/python3
"""bench/train_torch.py: training on tuned kernels, forward and backward,
against eager PyTorch, on the cpu.

usage: bench/train_torch.py [--models A,B] [--steps N] [--budget S]
                            [--socket PATH] [--build DIR] [--tolerance T]

Two small models written with torch.nn train on synthetic data (a fixed
set of random batches, the same seed): `encoder`, two transformer
encoder layers (attention, softmax, layer norm, GELU MLP) and a token
classifier, and `lstm_lm`, an LSTM language model (its embedding stays
in torch; eight steps of nn.LSTMCell unrolled, then a decoder). Each
starts as two copies of one model: one eager, the other optimized by
tuned_gpu.torch.optimize in training mode, whose partitions the daemon
tunes forward and backward for S seconds each (default 20); once those
jobs have ended and the module runs their best versions, both copies
train for N steps (default 200) with SGD, a step of one and a step of
the other in turn, each timed whole (forward, loss, backward, update).

The daemon is the one at --socket, or a private one of --build on a
temporary cache that this script starts and stops. The table gives per
model the final losses, the largest difference between the two loss
curves relative to eager's loss, the median step times and their ratio,
and a second table splits the medians: forward (with the loss) and
backward of each, and within tuned's a partition's plan runs (median per
call, with their tensors' allocation)
(docs/benchmarks.md); the exit status is 1 when a curve's difference is
over --tolerance (default 1e-3).
"""
import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(SOURCE, "client", "python"))
import torch  # noqa: E402
from torch import nn  # noqa: E402
import tuned_gpu  # noqa: E402
import tuned_gpu.torch  # noqa: E402
from torch_models import commit, device, start_daemon  # noqa: E402

BATCHES = 8          # synthetic batches, cycled
LEARNING_RATE = 0.05


def log(*words):
    print(*words, file=sys.stderr, flush=True)


class EncoderLayer(nn.Module):
    """A post-norm transformer encoder layer (as BERT), without dropout
    and without the key's bias."""

    def __init__(self, hidden, heads, inner):
        super().__init__()
        self.heads, self.head_size = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        # no key bias: softmax over the keys cancels it, so its gradient is 0
        # but rounding, which the verification's relative error refuses
        self.key = nn.Linear(hidden, hidden, bias=False)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, inner)
        self.down = nn.Linear(inner, hidden)
        self.norm2 = nn.LayerNorm(hidden)

    def split_heads(self, x):
        return x.view(x.size(0), x.size(1), self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = (self.split_heads(f(x)) for f in (self.query, self.key, self.value))
        scores = torch.matmul(q, k.transpose(-1, -2)) / self.head_size ** 0.5
        context = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3)
        context = context.reshape(x.size(0), x.size(1), -1)
        x = self.norm1(x + self.out(context))
        return self.norm2(x + self.down(nn.functional.gelu(self.up(x))))


class Encoder(nn.Module):
    """Two encoder layers and a per-token classifier; logits out."""

    def __init__(self, hidden=32, heads=2, inner=64, classes=16):
        super().__init__()
        self.layers = nn.Sequential(EncoderLayer(hidden, heads, inner),
                                    EncoderLayer(hidden, heads, inner))
        self.classify = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.classify(self.layers(x))


class LstmLm(nn.Module):
    """An LSTM language model: embedding, nn.LSTMCell over the sequence,
    a decoder to the vocabulary; logits of the next token out."""

    def __init__(self, vocab=32, hidden=32, steps=8, batch=4):
        super().__init__()
        self.hidden, self.steps, self.batch = hidden, steps, batch
        self.embed = nn.Embedding(vocab, hidden)
        self.cell = nn.LSTMCell(hidden, hidden)
        self.decode = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        h = c = torch.zeros(self.batch, self.hidden)
        outputs = []
        for t in range(self.steps):
            h, c = self.cell(x[:, t], (h, c))
            outputs.append(h.unsqueeze(1))
        return self.decode(torch.cat(outputs, 1))


def encoder_task(generator):
    """The encoder, and batches of (features, per-token class)."""
    model = Encoder()
    batches = [(torch.randn(4, 16, 32, generator=generator),
                torch.randint(0, 16, (4, 16), generator=generator)) for _ in range(BATCHES)]
    return model, batches


def lstm_task(generator):
    """The language model, and batches of (tokens, next tokens)."""
    model = LstmLm()
    batches = []
    for _ in range(BATCHES):
        text = torch.randint(0, 32, (4, 9), generator=generator)
        batches.append((text[:, :8].contiguous(), text[:, 1:].contiguous()))
    return model, batches


TASKS = {"encoder": encoder_task, "lstm_lm": lstm_task}


def tuned_to_the_end(optimized, socket):
    """Waits until the jobs of the partitions' forward and backward graphs
    have ended and the module runs each key's best version."""
    with tuned_gpu.Client(socket) as client:
        jobs = client.call("list")["jobs"]
        for partition in optimized.partitions:
            if partition.trouble or partition.backward_trouble:
                raise RuntimeError("%s is not served: %s" % (
                    partition.name, partition.trouble or partition.backward_trouble))
            for key in (partition.key, partition.grad_key):
                ended = client.wait(max(j["id"] for j in jobs if j["key"] == key))
                if ended["state"] != "done":
                    raise RuntimeError("the job of %s ended %s: %s" % (
                        key, ended["state"], ended.get("error", "")))
            best = (client.fetch(key=partition.key)["version"],
                    client.fetch(key=partition.grad_key)["version"])
            end = time.monotonic() + 60
            while (partition.version, partition.backward_version) < best:
                if time.monotonic() > end:
                    raise RuntimeError("%s does not run versions %d and %d" % (
                        partition.name, *best))
                time.sleep(0.05)


class Trainer:
    """One copy of the model, its forward (eager, or the optimized
    module), its optimizer, and per step its loss and times: the whole
    step, and of it the forward (with the loss) and the backward."""

    def __init__(self, model, forward):
        self.model, self.forward = model, forward
        self.optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=0.9)
        self.losses, self.times = [], {"step": [], "forward": [], "backward": []}

    def step(self, inputs, target):
        start = time.perf_counter()
        self.optimizer.zero_grad()
        logits = self.forward(inputs)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                           target.reshape(-1))
        forward = time.perf_counter()
        loss.backward()
        backward = time.perf_counter()
        self.optimizer.step()
        end = time.perf_counter()
        for name, seconds in (("step", end - start), ("forward", forward - start),
                              ("backward", backward - forward)):
            self.times[name].append(seconds)
        self.losses.append(loss.item())

    def ms(self, name):
        return statistics.median(self.times[name]) * 1e3


def time_plans(optimized):
    """Per call, the seconds each partition's forward and backward plan
    runs take (with their tensors' allocation): the partitions' methods
    that run them, timed. Returns the lists that fill."""
    times = {"forward": [], "backward": []}
    for partition in optimized.partitions:
        for direction, method in (("forward", "run_forward"), ("backward", "run_backward")):
            def timed(*args, run=getattr(partition, method), spent=times[direction]):
                start = time.perf_counter()
                result = run(*args)
                spent.append(time.perf_counter() - start)
                return result
            setattr(partition, method, timed)
    return times


def measure(name, steps, budget, socket):
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model, batches = TASKS[name](generator)
    eager = Trainer(model, model)
    copied = copy.deepcopy(model)
    log("%s: optimizing, budget %g s forward and backward" % (name, budget))
    with warnings.catch_warnings():
        warnings.simplefilter("error", tuned_gpu.torch.TunedWarning)
        optimized = tuned_gpu.torch.optimize(copied, batches[0][:1], budget=budget,
                                             socket=socket)
        tuned_to_the_end(optimized, socket)
        tuned = Trainer(copied, optimized)
        plans = time_plans(optimized)
        log("%s: training %d steps" % (name, steps))
        for i in range(steps):
            inputs, target = batches[i % len(batches)]
            eager.step(inputs, target)
            tuned.step(inputs, target)
    difference = max(abs(t - e) / abs(e) for t, e in zip(tuned.losses, eager.losses))
    return {"model": name, "partitions": len(optimized.partitions),
            "versions": "/".join("%d+%d" % (p.version, p.backward_version)
                                 for p in optimized.partitions),
            "eager_loss": (eager.losses[0], eager.losses[-1]),
            "tuned_loss": (tuned.losses[0], tuned.losses[-1]), "difference": difference,
            "eager": eager, "tuned": tuned,
            "plans": ["%.2f" % (statistics.median(plans[d]) * 1e3)
                      for d in ("forward", "backward")]}


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def print_table(rows):
    print("| model | partitions | versions (fwd+bwd) | eager loss first -> last "
          "| tuned loss first -> last | max curve diff | eager ms/step | tuned ms/step "
          "| tuned / eager |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        eager, tuned = r["eager"].ms("step"), r["tuned"].ms("step")
        print("| %s | %d | %s | %.4f -> %.4f | %.4f -> %.4f | %.1e | %.2f | %.2f | %.2fx |"
              % (r["model"], r["partitions"], r["versions"], *r["eager_loss"],
                 *r["tuned_loss"], r["difference"], eager, tuned, tuned / eager))
    print()
    print("| model | eager forward / backward ms | tuned forward / backward ms "
          "| a partition's plans, per call: forward / backward ms |")
    print("|---|---|---|---|")
    for r in rows:
        print("| %s | %.2f / %.2f | %.2f / %.2f | %s / %s |"
              % (r["model"], r["eager"].ms("forward"), r["eager"].ms("backward"),
                 r["tuned"].ms("forward"), r["tuned"].ms("backward"), *r["plans"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(TASKS))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--budget", type=float, default=20)
    parser.add_argument("--socket")
    parser.add_argument("--build", default=os.path.join(SOURCE, "build"))
    parser.add_argument("--tolerance", type=float, default=1e-3)
    args = parser.parse_args()
    os.environ.setdefault("TUNED_EXEC_LIB",
                          os.path.join(args.build, "client", "libtuned_exec.so"))
    with tempfile.TemporaryDirectory(prefix="tuned-train-bench-") as work:
        daemon, socket = (None, args.socket) if args.socket else start_daemon(args.build, work)
        try:
            rows = [measure(name, args.steps, args.budget, socket)
                    for name in args.models.split(",")]
        finally:
            if daemon is not None:
                daemon.terminate()
                daemon.wait(30)
    print("device: %s; load %s; torch %s; commit %s; budget %g s per graph; %d steps"
          % (device(), load(), torch.__version__, commit(), args.budget, args.steps))
    print_table(rows)
    over = [r["model"] for r in rows if r["difference"] > args.tolerance]
    if over:
        sys.exit("train_torch: the loss curves of %s differ from eager's by more than %g"
                 % (", ".join(over), args.tolerance))


if __name__ == "__main__":
    main()
