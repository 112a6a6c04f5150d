#!/usr/bin/python3
"""bench/plot.py: the benchmarks' charts, drawn with matplotlib.

usage: bench/plot.py curves TUNING_CURVE.json OUT.png
       bench/plot.py compare COMPARE.json OUT.png

curves: bench/tuning_curve's JSON (its --json; tuning_curve --png runs
this). Per example, the best plan so far over the default plan's time,
against trials (left) and against seconds (right), the genetic search
against random search.

compare: bench/compare's JSON (its --json; compare --png calls chart_compare
here). Per example, the times of tuned, PyTorch, OpenBLAS and the roofline
floor in ms (top), and tuned's time over the best PyTorch time (bottom).

An axis of times or ratios goes logarithmic where its values span more than
a decade. Needs matplotlib (Debian: python3-matplotlib, which
deploy/setup-deps installs); bench/compare imports this module only to draw.
"""
import json
import math
import sys

GENETIC, RANDOM = "tab:blue", "tab:orange"
DECADE = 10


def pyplot():
    """matplotlib's pyplot, drawing to files only (no display needed)."""
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot: matplotlib is missing (Debian: apt-get install "
                 "python3-matplotlib, or deploy/setup-deps)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def spans_decades(values):
    """Whether the positive finite "values" span more than a decade."""
    finite = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return bool(finite) and max(finite) > DECADE * min(finite)


def best_steps(points, default_ms, column):
    """The best so far over "default_ms" as (x, y) lists: x is the trial
    (column 0) or the seconds (column 1) of each trial that had a best."""
    xs, ys = [], []
    for point in points:
        best_ms = point[3]
        if best_ms is not None:
            xs.append(point[column])
            ys.append(best_ms / default_ms)
    return xs, ys


def curve_panel(ax, example, column, label):
    """One example's two searches on "ax", x by trials or by seconds."""
    ys = []
    for kind, colour in (("random", RANDOM), ("genetic", GENETIC)):
        x, y = best_steps(example[kind], example["default_ms"], column)
        if x:
            ax.step(x, y, where="post", color=colour, label=kind)
        ys += y
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel(label)
    ax.set_ylabel("best / default plan time")
    if spans_decades(ys + [1.0]):
        ax.set_yscale("log")
    if column == 1 and spans_decades(p[1] for k in ("genetic", "random")
                                     for p in example[k]):
        ax.set_xscale("log")
    ax.grid(True, which="major", alpha=0.3)


def chart_curves(report, path):
    """Writes the tuning curves of "report" (tuning_curve's JSON) to "path"."""
    plt = pyplot()
    examples = [e for e in report["examples"] if e["default_ms"]]
    if not examples:
        sys.exit("plot: no example in the curves has a default plan time")
    fig, axes = plt.subplots(len(examples), 2, squeeze=False,
                             figsize=(10, 3.2 * len(examples)))
    for row, example in zip(axes, examples):
        curve_panel(row[0], example, 0, "trials")
        curve_panel(row[1], example, 1, "seconds since the search started")
        row[0].set_title("%s: default plan %.4g ms" % (example["name"],
                                                       example["default_ms"]))
    axes[0][0].legend(loc="best")
    fig.suptitle("Genetic search against random search: %s backend, %d trials, "
                 "population %d, seed %d" % (report["backend"], report["trials"],
                                             report["population"], report["seed"]))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# compare's timed columns, in the order of its table, with their legends.
COMPARE_TIMES = (("tuned_ms", "tuned"), ("eager_ms", "PyTorch eager"),
                 ("compile_default_ms", "torch.compile"),
                 ("compile_max-autotune_ms", "torch.compile max-autotune"),
                 ("openblas_ms", "OpenBLAS (matmuls only)"),
                 ("floor_ms", "roofline floor"))


def chart_compare(rows, path, device):
    """Writes bench/compare's "rows", measured on "device", to "path"."""
    plt = pyplot()
    if not rows:
        sys.exit("plot: compare has no rows to chart")
    names = [r["example"] for r in rows]
    columns = [(key, label) for key, label in COMPARE_TIMES
               if any(r.get(key) for r in rows)]
    if not columns:
        sys.exit("plot: compare has no time to chart: every row's %s is null"
                 % ", ".join(key for key, _ in COMPARE_TIMES))
    fig, (times, ratios) = plt.subplots(2, 1, figsize=(max(10, 1.2 * len(rows)), 8))
    width = 0.8 / len(columns)
    for i, (key, label) in enumerate(columns):
        x = [j + (i - (len(columns) - 1) / 2) * width for j in range(len(rows))]
        times.bar(x, [r.get(key) or 0 for r in rows], width, label=label)
    times.set_ylabel("time per run (ms)")
    times.set_title("Median time per example (%s)" % device)
    if spans_decades(r.get(key) for r in rows for key, _ in columns):
        times.set_yscale("log")
    times.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))

    # Bars from parity (1) to each ratio: down where tuned is faster.
    values = [r["ratio_to_best_pytorch"] for r in rows]
    ratios.bar(range(len(rows)), [v - 1 for v in values], bottom=1,
               color=["tab:green" if v <= 1 else "tab:red" for v in values])
    for j, v in enumerate(values):
        ratios.annotate("%.3gx" % v, (j, v), ha="center", fontsize="small",
                        va="top" if v <= 1 else "bottom")
    ratios.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ratios.set_ylabel("tuned / best PyTorch time")
    ratios.set_title("Below 1: tuned is faster")
    if spans_decades(values + [1.0]):
        ratios.set_yscale("log")
    for ax in (times, ratios):
        ax.set_xticks(range(len(rows)), names, rotation=30, ha="right")
        ax.set_xlabel("example")
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv):
    if len(argv) != 4 or argv[1] not in ("curves", "compare"):
        sys.exit(__doc__.split("\n\n")[1])
    kind, source, path = argv[1:]
    try:
        with open(source) as f:
            report = json.load(f)
        if kind == "curves":
            chart_curves(report, path)
        else:
            chart_compare(report["rows"], path, report["device"])
    except OSError as e:
        sys.exit("plot: %s" % e)
    except ValueError as e:
        sys.exit("plot: %s: %s" % (source, e))
    except (KeyError, TypeError, IndexError) as e:
        sys.exit("plot: %s is not bench/%s JSON (%s: %s)"
                 % (source, "tuning_curve" if kind == "curves" else "compare",
                    type(e).__name__, e))


if __name__ == "__main__":
    main(sys.argv)
