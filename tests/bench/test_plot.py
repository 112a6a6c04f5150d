"""bench/plot.py draws both charts from committed JSON (curves.json: a
tuning_curve run, two small examples, 12 trials; compare.json: the cpu rows
of a bench/compare run in docs/benchmarks.md), each a valid PNG of a sane
size, and refuses input that is not the benchmark's JSON or that has
nothing to chart, saying why.

usage: test_plot.py PLOT_PY. Exit 77 (meson: skipped) without matplotlib.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path):
    """The (width, height) of the PNG at "path", after checking its
    signature and the CRC of every chunk, which must end with IEND."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == PNG_SIGNATURE, "%s: no PNG signature" % path
    at, kinds, size = 8, [], None
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 4:at + 8 + length]
        crc, = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        assert zlib.crc32(body) & 0xffffffff == crc, "%s: bad CRC in %s" % (path, kind)
        if kind == b"IHDR":
            size = struct.unpack(">II", body[4:12])
        kinds.append(kind)
        at += 12 + length
    assert kinds and kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds, \
        "%s: chunks %s" % (path, kinds)
    return size


def plot(plot_py, kind, source, out):
    return subprocess.run(["/usr/bin/python3", plot_py, kind, source, out],
                          capture_output=True, text=True, timeout=100)


def main():
    plot_py = sys.argv[1]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("skip: /usr/bin/python3 has no matplotlib (Debian: python3-matplotlib, "
              "installed by deploy/setup-deps)")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="tuned-plot-") as work:
        for kind, source in (("curves", "curves.json"), ("compare", "compare.json")):
            out = os.path.join(work, kind + ".png")
            done = plot(plot_py, kind, os.path.join(HERE, source), out)
            assert done.returncode == 0, "%s: %s" % (kind, done.stderr)
            width, height = png_size(out)
            assert 400 <= width <= 4000 and 300 <= height <= 4000, \
                "%s: %d x %d pixels" % (kind, width, height)
            assert os.path.getsize(out) > 10000, "%s: %d bytes, a blank chart?" % (
                kind, os.path.getsize(out))
            print("ok: %s: %d x %d, %d bytes" % (kind, width, height, os.path.getsize(out)))

        # compare's JSON is not tuning_curve's: refused, naming the file.
        out = os.path.join(work, "wrong.png")
        wrong = os.path.join(HERE, "compare.json")
        done = plot(plot_py, "curves", wrong, out)
        assert done.returncode != 0 and "not bench/tuning_curve JSON" in done.stderr \
            and wrong in done.stderr, done.stderr
        assert not os.path.exists(out), "a chart of the wrong JSON"
        print("ok: refused: %s" % done.stderr.strip())

        # compare's rows with no time in any column: refused, saying so.
        with open(os.path.join(HERE, "compare.json")) as f:
            report = json.load(f)
        for row in report["rows"]:
            for key in row:
                if key.endswith("_ms"):
                    row[key] = None
        untimed = os.path.join(work, "untimed.json")
        with open(untimed, "w") as f:
            json.dump(report, f)
        done = plot(plot_py, "compare", untimed, out)
        assert done.returncode != 0 and "compare has no time to chart" in done.stderr \
            and "Traceback" not in done.stderr, done.stderr
        assert not os.path.exists(out), "a chart of no times"
        print("ok: refused: %s" % done.stderr.strip())


if __name__ == "__main__":
    main()
