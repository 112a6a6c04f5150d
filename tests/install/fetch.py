"""A Python training process as a user of the installed files writes it:
fetches the best plan of a graph from the daemon over its socket (the
protocol of docs/protocol.md: hello, then fetch), loads it with the
installed tuned_exec (which finds the installed libtuned_exec by itself),
runs it on its own buffers and checks y = relu(x w + b).

usage: fetch.py SOCKET KEY GRAPH.json PREFIX  (exit status 0: right; the
library used must lie under PREFIX)
"""
import array
import json
import os
import socket
import sys

import tuned_exec

M, K, N = 5, 7, 3


def call(conn, reader, request_id, op, params):
    conn.sendall((json.dumps({"id": request_id, "op": op, "params": params}) + "\n").encode())
    for line in reader:
        reply = json.loads(line)
        if reply.get("id") == request_id:
            if "error" in reply:
                sys.exit(f"fetch.py: {op}: {reply['error']}")
            return reply["result"]
    sys.exit(f"fetch.py: the daemon closed the connection during {op}")


def fetch(path, key):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        reader = conn.makefile("r")
        call(conn, reader, 1, "hello", {"version": 1})
        return call(conn, reader, 2, "fetch", {"key": key})


def main():
    path, key, graph_path, prefix = sys.argv[1:5]
    library = tuned_exec.library_path()
    if "TUNED_EXEC_LIB" in os.environ or not library.startswith(prefix):
        sys.exit(f"fetch.py: the library {library} is not the installed one under {prefix}")
    fetched = fetch(path, key)
    graph = open(graph_path).read()
    x = array.array("f", [float(i % 5) - 2.0 for i in range(M * K)])
    w = array.array("f", [float(i % 3) * 0.5 - 0.25 for i in range(K * N)])
    b = array.array("f", [float(j) - 1.0 for j in range(N)])
    y = array.array("f", [0.0] * (M * N))
    pointers = {name: buf.buffer_info()[0] for name, buf in
                (("x", x), ("w", w), ("b", b), ("y", y))}
    with tuned_exec.Plan(graph, fetched, "cpu") as plan:
        plan.run(pointers)
    expected = [max(0.0, sum(x[i * K + k] * w[k * N + j] for k in range(K)) + b[j])
                for i in range(M) for j in range(N)]
    if any(abs(got - want) > 1e-4 for got, want in zip(y, expected)):
        sys.exit(f"fetch.py: wrong results {list(y)}, expected {expected}")
    print(f"fetched version {fetched['version']} with {library}: ran, results right")


if __name__ == "__main__":
    main()
