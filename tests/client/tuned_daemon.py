"""A daemon of this build for the Python tests: tuned on the cpu, on a
socket and cache of its own in a work folder."""
import os
import socket
import sqlite3
import subprocess
import time


def start_daemon(tuned, work, *options):
    """tuned (the program at `tuned`) on the cpu, on a socket and cache in
    `work`, with more `options`; its process and socket path once it
    accepts connections."""
    os.mkdir(os.path.join(work, "run"), 0o700)
    path = os.path.join(work, "run", "gpu0.sock")
    daemon = subprocess.Popen([tuned, "--backend", "cpu", "--socket", path,
                               "--cache", os.path.join(work, "cache.db"),
                               "--log", os.path.join(work, "tuned.log"),
                               "--jobs", "1", "--compile-workers", "1", *options])
    start = time.monotonic()
    while True:
        try:
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(path)
            return daemon, path
        except OSError:
            if daemon.poll() is not None or time.monotonic() - start > 30:
                raise RuntimeError("tuned did not listen within 30 s (see %s/tuned.log)"
                                   % work)
            time.sleep(0.05)


def land_version(work, key):
    """A newer version of `key` lands in the cache of the daemon in `work`:
    its latest copied as the next (half its time), written behind the
    daemon's back, as another daemon of a shared database would."""
    db = sqlite3.connect(os.path.join(work, "cache.db"), timeout=10)
    with db:
        db.execute("INSERT INTO plans (graph, device, codegen, version, plan, sources, "
                   "binaries, launch, median_ms, spread_ms, found_by, created_at, "
                   "checksum) SELECT graph, device, codegen, version + 1, plan, sources, "
                   "binaries, launch, median_ms / 2, spread_ms, 'landed', created_at, "
                   "checksum FROM plans WHERE graph = ? ORDER BY version DESC LIMIT 1",
                   (key,))
    db.close()
