#!/usr/bin/env python3
"""bench/fleet's smoke test: runs it with the arguments given (a short
budget, small keys) and checks what it printed and wrote: one row per
phase and fleet size, each with its jobs, the daemons that claimed them
and its trials, a speedup only where the run reached quality, and every
row's version verified (an ok trial of its plan in the database); the
fetch latency of both caches. Exit 77 (skip) where bench/fleet found no
PostgreSQL to run.

usage: test_fleet.py FLEET-BINARY JSON-PATH ARGS...
"""
import json
import math
import subprocess
import sys


def fail(why, out=""):
    print(out)
    print("test_fleet: " + why, file=sys.stderr)
    sys.exit(1)


def check_rows(out, runs):
    """The time-to-quality table: a row per run, as in the JSON."""
    lines = out.splitlines()
    header = next((i for i, l in enumerate(lines) if l.startswith("phase ")), None)
    if header is None:
        fail("no table header", out)
    rows = [l.split() for l in lines[header + 1:header + 1 + len(runs)]]
    for row, run in zip(rows, runs):
        if len(row) != 10:
            fail("a row of 10 columns expected: %r" % row, out)
        phase, daemons, jobs, claimed, trials = row[:5]
        if (phase, int(daemons)) != (run["phase"], run["daemons"]):
            fail("row %r is not run %s N=%d" % (row, run["phase"], run["daemons"]), out)
        if not 1 <= int(claimed) <= run["daemons"] or int(jobs) < 1 or int(trials) < 1:
            fail("row %r: no work done, or claimed by more daemons than ran" % row, out)
        if row[9] != "yes":
            fail("row %r: a version reached was not verified" % row, out)
        if row[5] != "%d/%d" % (run["reached"], len(run["keys"])):
            fail("row %r: keys at quality disagree with the JSON" % row, out)
        if (row[6] == "-") != (run["quality_s"] is None) or \
           (run["quality_s"] is None) != (run["reached"] < len(run["keys"])):
            fail("row %r disagrees with the JSON on quality" % row, out)
        if run["daemons"] == 1 and run["quality_s"] is not None and row[7] != "1.00x":
            fail("row %r: N=1 is its own peer, 1.00x expected" % row, out)


def check_json(data):
    runs = data["runs"]
    sizes = sorted({r["daemons"] for r in runs})
    if {r["phase"] for r in runs} != {"batch", "single"} or sizes[0] != 1:
        fail("both phases and N=1 expected: %r" % [(r["phase"], r["daemons"]) for r in runs])
    for r in runs:
        for k in r["keys"]:
            if not k["versions"] or not k["verified"] or len(k["key"]) != 64:
                fail("%s N=%d %s: no verified version" % (r["phase"], r["daemons"], k["name"]))
            times = [t for t, _, _ in k["versions"]]
            if times != sorted(times):
                fail("%s: versions out of order" % k["name"])
    if not any(r["reached"] > 0 for r in runs):
        fail("no run reached the fastest version, which one of them measured")
    caches = [l["cache"] for l in data["fetch_latency"]]
    if caches != ["sqlite", "postgresql"]:
        fail("fetch latency of sqlite and postgresql expected: %r" % caches)
    for l in data["fetch_latency"]:
        for f in ("idle_p50_ms", "idle_p99_ms", "busy_p50_ms", "busy_p99_ms"):
            if not (l[f] > 0 and math.isfinite(l[f])):
                fail("%s %s: %r" % (l["cache"], f, l[f]))
        if l["idle_p99_ms"] < l["idle_p50_ms"]:
            fail("%s: p99 below p50" % l["cache"])
    return runs


def main():
    fleet, path, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    proc = subprocess.run([fleet, "--json", path] + args, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=900)
    if proc.returncode == 77:
        print(proc.stderr.strip())
        sys.exit(77)
    if proc.returncode != 0:
        fail("bench/fleet exited %d:\n%s" % (proc.returncode, proc.stderr[-4000:]),
             proc.stdout)
    with open(path) as f:
        runs = check_json(json.load(f))
    check_rows(proc.stdout, runs)
    if "sqlite" not in proc.stdout or "postgresql" not in proc.stdout:
        fail("no fetch latency table", proc.stdout)
    print(proc.stdout)


if __name__ == "__main__":
    main()
