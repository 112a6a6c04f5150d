"""The Python plan executor (client/python/tuned_exec.py) end to end: the
plan tunectl runs, loaded through ctypes and run on Python's own buffers,
against the definition; and its refusals.

usage: test_exec.py TUNECTL LIBTUNED_EXEC  (exit status 0: passed)
"""
import array
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
import tuned_exec  # noqa: E402

GRAPH = {"version": 1, "name": "mlp", "tensors": {
    "x": {"shape": [5, 7], "dtype": "f32", "role": "input"},
    "w": {"shape": [7, 3], "dtype": "f32", "role": "input"},
    "b": {"shape": [3], "dtype": "f32", "role": "input"},
    "h": {"shape": [5, 3], "dtype": "f32"},
    "y": {"shape": [5, 3], "dtype": "f32", "role": "output"}},
    "ops": ["h[i, j] = sum(k) x[i, k] * w[k, j]", "y[i, j] = relu(h[i, j] + b[j])"]}


def fetched_by_tunectl(tunectl, graph_path):
    """The plan and sources `tunectl run --json` ran: what a fetch holds."""
    out = subprocess.run([tunectl, "run", graph_path, "--backend", "cpu", "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def expected(x, w, b):
    return [max(0.0, sum(x[i * 7 + k] * w[k * 3 + j] for k in range(7)) + b[j])
            for i in range(5) for j in range(3)]


def main():
    tunectl, library = sys.argv[1], sys.argv[2]
    failures = []
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "mlp.json")
        with open(path, "w") as f:
            json.dump(GRAPH, f)
        fetched = fetched_by_tunectl(tunectl, path)
        text = json.dumps(GRAPH)
        with tuned_exec.Plan(text, fetched, "cpu", library=library) as plan:
            rng = random.Random(3)
            for _ in range(2):
                x, w, b = (array.array("f", [rng.uniform(-1, 1) for _ in range(n)])
                           for n in (35, 21, 3))
                y = array.array("f", [0.0] * 15)
                plan.run({n: a.buffer_info()[0] for n, a in
                          (("x", x), ("w", w), ("b", b), ("y", y))})
                worst = max(abs(g - e) for g, e in zip(y, expected(x, w, b)))
                if worst > 1e-5:
                    failures.append("y differs from the definition by %g" % worst)
            try:
                plan.run({"x": x.buffer_info()[0], "y": y.buffer_info()[0]})
                failures.append("a missing input was not refused")
            except tuned_exec.ExecError as e:
                if "has no pointer" not in str(e):
                    failures.append("missing input: %s" % e)
        try:
            tuned_exec.Plan(text, {"plan": {"kernels": []}}, "cpu", library=library)
            failures.append("a plan without kernels was loaded")
        except tuned_exec.ExecError as e:
            if "does not fit the graph" not in str(e):
                failures.append("empty plan: %s" % e)
    for f in failures:
        print("FAIL:", f)
    print("python executor: %d failure(s)" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
