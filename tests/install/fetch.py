"""A Python training process as a user of the installed files writes it:
the installed tuned_gpu package (which finds the installed libtuned_exec by
itself) fetches the best plan of a graph from the daemon that
$TUNED_SOCKET names, loads it, runs it on its own buffers and checks
y = relu(x w + b).

usage: fetch.py KEY GRAPH.json ROOT  (exit status 0: right; the package
and the library used must lie under ROOT, the staged install)
"""
import array
import os
import sys

import tuned_gpu
from tuned_gpu import _exec

M, K, N = 5, 7, 3


def main():
    key, graph_path, root = sys.argv[1:4]
    library = _exec.library_path()
    for what, path in (("the package", tuned_gpu.__file__), ("the library", library)):
        if not os.path.realpath(path).startswith(os.path.realpath(root) + "/"):
            sys.exit(f"fetch.py: {what} {path} is not the installed one under {root}")
    if "TUNED_EXEC_LIB" in os.environ:
        sys.exit("fetch.py: TUNED_EXEC_LIB is set")
    with tuned_gpu.Client() as client:
        fetched = client.fetch(key=key)
    with open(graph_path) as f:
        graph = f.read()
    x = array.array("f", [float(i % 5) - 2.0 for i in range(M * K)])
    w = array.array("f", [float(i % 3) * 0.5 - 0.25 for i in range(K * N)])
    b = array.array("f", [float(j) - 1.0 for j in range(N)])
    y = array.array("f", [0.0] * (M * N))
    pointers = {name: buf.buffer_info()[0] for name, buf in
                (("x", x), ("w", w), ("b", b), ("y", y))}
    with tuned_gpu.Plan(graph, fetched, "cpu") as plan:
        plan.run(pointers)
    expected = [max(0.0, sum(x[i * K + k] * w[k * N + j] for k in range(K)) + b[j])
                for i in range(M) for j in range(N)]
    if any(abs(got - want) > 1e-4 for got, want in zip(y, expected)):
        sys.exit(f"fetch.py: wrong results {list(y)}, expected {expected}")
    print(f"fetched version {fetched['version']} with {tuned_gpu.__file__} and {library}: "
          "ran, results right")


if __name__ == "__main__":
    main()
