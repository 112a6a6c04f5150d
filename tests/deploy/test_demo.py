#!/usr/bin/env python3
"""deploy/demo, as the README's first command runs it, on a small example
with a short budget: it ends with the table (first and best version, a
speedup that is their ratio, kernels, the cache), the cache outlives it,
the daemon's log stays out of the way; and when tuning fails it says so
with the end of the log.

    test_demo.py SOURCE_ROOT BUILD_DIR
"""
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile

root, build = sys.argv[1], sys.argv[2]
failures = []


def expect(ok, what, output):
    if not ok:
        failures.append("%s\n--- output:\n%s" % (what, output))


def demo(home, *args):
    env = dict(os.environ, TUNED_BUILD=build, XDG_CACHE_HOME=home)
    return subprocess.run([os.path.join(root, "deploy", "demo"), *args], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=110)


def ms(out, row):
    m = re.search(r"^  %s +([0-9.]+) ms" % row, out, re.M)
    return float(m.group(1)) if m else None


def check_success(home):
    out = demo(home, os.path.join(root, "examples", "softmax_scores_small.json"), "3")
    text = out.stdout
    cache = os.path.join(home, "tuned-demo", "cache.db")
    expect(out.returncode == 0, "exit %d, not 0" % out.returncode, text)
    expect("== what 3 s of tuning bought" in text, "no table", text)
    for row in ("first version", "best version", "speedup", "kernels", "device"):
        expect(re.search(r"^  %s " % row, text, re.M), "no row '%s'" % row, text)
    expect("  cached in      %s\n" % cache in text, "no cache path", text)
    expect("rm -r %s removes it" % os.path.join(home, "tuned-demo") in text,
           "no word on removing the cache", text)
    expect(not re.search(r"tuned\[\d+\] (info|warning|error)", text),
           "the daemon's log is in the output", text)
    first, best = ms(text, "first version"), ms(text, "best version")
    speedup = re.search(r"^  speedup +([0-9.]+)x", text, re.M)
    if first and best and speedup:
        ratio = first / best
        expect(abs(float(speedup.group(1)) - ratio) <= 0.02 * ratio,
               "speedup %s is not first / best = %.3f" % (speedup.group(1), ratio), text)
    expect(os.path.exists(cache), "the cache did not outlive the demo", text)
    if os.path.exists(cache):
        db = sqlite3.connect(cache)
        versions = db.execute("SELECT count(*) FROM plans").fetchone()[0]
        db.close()
        expect(versions >= 1, "no version in the cache left", text)


def check_failure(home):
    out = demo(home, os.path.join(root, "tests", "client", "cycle.json"), "3")
    text = out.stdout
    log = re.search(r"the daemon's log is (\S+), ending:", text)
    expect(out.returncode != 0, "a graph with a cycle did not fail the demo", text)
    expect("cycle" in text, "the demo does not say what failed", text)
    expect(log and os.path.exists(log.group(1)), "no log path on failure", text)
    if log and os.path.exists(log.group(1)):
        with open(log.group(1)) as f:
            lines = f.read().splitlines()
        expect(any("listening on" in line for line in lines),
               "the daemon's log has no 'listening on'", text)
        expect(lines and lines[-1] in text, "no tail of the log on failure", text)
    if log:
        shutil.rmtree(os.path.dirname(log.group(1)), ignore_errors=True)


with tempfile.TemporaryDirectory() as home:
    check_success(home)
    check_failure(home)
for f in failures:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if failures else 0)
