#!/usr/bin/python3
"""bench/torch_models.py: the models of examples/torch through
tuned_gpu.torch.optimize, against eager PyTorch and torch.compile.

usage: bench/torch_models.py [--models A,B,...] [--budget S] [--socket PATH]
                             [--build DIR] [--seconds S]

Each model is optimized with a tuning budget of S seconds (default 30)
by the daemon at --socket, or by a private one on a temporary cache
that this script starts and stops. Once its job has ended and the
module runs the job's last version, these are timed in this one
process, under torch.no_grad(), each for --seconds (default 2) after
three calls to warm up: the optimized module, the model eager, and
torch.compile's (default mode) where this torch has it. A time is the
median of the calls. The table gives each per forward, tuned over
eager, and the largest difference between tuned's outputs and
eager's (docs/benchmarks.md).
"""
import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(SOURCE, "client", "python"))
import torch  # noqa: E402
import tuned_gpu  # noqa: E402
import tuned_gpu.torch  # noqa: E402

MODELS = ["bert_layer", "llama_mlp", "lstm_cell", "cnn_block"]
WARM_UP_CALLS = 3


def log(*words):
    print(*words, file=sys.stderr, flush=True)


def example(name):
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(SOURCE, "examples", "torch", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.example()


def start_daemon(build, work):
    """A private daemon on the cpu, on a temporary cache; its process and
    socket once it answers."""
    path = os.path.join(work, "tuned.sock")
    daemon = subprocess.Popen(
        [os.path.join(build, "daemon", "tuned"), "--backend", "cpu", "--socket", path,
         "--cache", os.path.join(work, "cache.db"), "--log", os.path.join(work, "tuned.log")],
        env=dict(os.environ, TUNED_WORKER=os.path.join(build, "daemon", "tuned-worker")))
    for _ in range(300):
        try:
            tuned_gpu.Client(path).close()
            return daemon, path
        except tuned_gpu.NoDaemonError:
            if daemon.poll() is not None:
                sys.exit("torch_models: the daemon exited with %d" % daemon.returncode)
            time.sleep(0.1)
    sys.exit("torch_models: the daemon did not open %s" % path)


def ms_per_call(function, inputs, seconds):
    """The median time of a call of `function` on `inputs`, in ms."""
    for _ in range(WARM_UP_CALLS):
        function(*inputs)
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        start = time.perf_counter()
        function(*inputs)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def tensors(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def max_difference(got, want):
    return max((g - w).abs().max().item() for g, w in zip(tensors(got), tensors(want)))


def tuned_to_the_end(optimized, socket):
    """Waits until the jobs of the module's partitions have ended and it
    runs each key's best version."""
    with tuned_gpu.Client(socket) as client:
        for partition in optimized.partitions:
            jobs = [j for j in client.call("list")["jobs"] if j["key"] == partition.key]
            ended = client.wait(max(j["id"] for j in jobs))
            if ended["state"] != "done":
                raise RuntimeError("the job of %s ended %s: %s" % (
                    partition.name, ended["state"], ended.get("error", "")))
            best = client.fetch(key=partition.key)["version"]
            if not optimized.wait(60, min_version=best):
                raise RuntimeError("%s does not run version %d: %s" % (
                    partition.name, best, partition.trouble))


def measure(name, budget, socket, seconds):
    model, inputs = example(name)
    log("%s: optimizing, budget %g s" % (name, budget))
    with warnings.catch_warnings():
        warnings.simplefilter("error", tuned_gpu.torch.TunedWarning)
        optimized = tuned_gpu.torch.optimize(model, inputs, budget=budget, socket=socket)
    tuned_to_the_end(optimized, socket)
    row = {"model": name, "partitions": len(optimized.partitions),
           "versions": "/".join(str(p.version) for p in optimized.partitions)}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", tuned_gpu.torch.TunedWarning)
        row["diff"] = max_difference(optimized(*inputs), model(*inputs))
        row["tuned"] = ms_per_call(optimized, inputs, seconds)
        row["eager"] = ms_per_call(model, inputs, seconds)
        row["compile"] = None
        if hasattr(torch, "compile"):
            row["compile"] = ms_per_call(torch.compile(model), inputs, seconds)
    return row


def device():
    with open("/proc/cpuinfo") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return "cpu: %s, %d cores" % (names[0] if names else "unknown", len(names))


def commit():
    out = subprocess.run(["git", "-C", SOURCE, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def print_table(rows):
    print("| model | partitions | version | tuned ms | eager ms | torch.compile ms "
          "| tuned / eager | max diff |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        compiled = "%.4f" % r["compile"] if r["compile"] is not None else "-"
        print("| %s | %d | %s | %.4f | %.4f | %s | %.2fx | %.1e |"
              % (r["model"], r["partitions"], r["versions"], r["tuned"], r["eager"],
                 compiled, r["tuned"] / r["eager"], r["diff"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--budget", type=float, default=30)
    parser.add_argument("--socket")
    parser.add_argument("--build", default=os.path.join(SOURCE, "build"))
    parser.add_argument("--seconds", type=float, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tuned-torch-bench-") as work:
        daemon, socket = (None, args.socket) if args.socket else start_daemon(args.build, work)
        try:
            rows = [measure(name, args.budget, socket, args.seconds)
                    for name in args.models.split(",")]
        finally:
            if daemon is not None:
                daemon.terminate()
                daemon.wait(30)
    print("device: %s; torch %s%s; commit %s; budget %g s per model"
          % (device(), torch.__version__,
             "" if hasattr(torch, "compile") else " (no torch.compile)", commit(),
             args.budget))
    print_table(rows)


if __name__ == "__main__":
    main()
