#!/usr/bin/env python3
"""Benchmark JSON as PNGs. Reads what bench/norm_bench.py,
bench/gemm_bench.py and bench/tuning_bench.py write (--norm takes one file per
run, e.g. the RMSNorm and the LayerNorm run) and writes into --out only the
plots of what it is given: norm-forward.png, norm-backward.png (TB/s per shape:
ktune, each peer the JSON names, the run's device copy as a line),
gemm-bf16.png, gemm-fp8.png (TFLOP/s per shape: cuBLASLt's default, ktune,
torch) and tune-time.png (seconds per tune, per op and shape). Bad input exits
2 with one line naming the file and the field. Re-render the committed PNGs
from the committed JSON:

  d=bench/results/data; python3 bench/plot_results.py --norm $d/2026-11-30-norm-rmsnorm.json \
    $d/2026-11-30-norm-layernorm.json --gemm $d/2026-12-01-gemm-bf16.json \
    --gemm-fp8 $d/2026-12-01-gemm-fp8.json --tuning $d/2026-11-30-tune-time.json --out bench/results/plots
"""
import argparse
import json
import math
import os
import sys

DPI = 110
KTUNE_COLOR = "#c0392b"
# Known series by their JSON names; a peer the bench adds later gets its name
# and a colour from FALLBACK_COLORS.
PEER_STYLE = {
    "eager": ("PyTorch eager", "#b8c4cc"),
    "compile": ("torch.compile", "#6f9fc8"),
    "compile_ma": ("torch.compile max-autotune", "#2c4a6e"),
    "liger": ("Liger", "#8e7cc3"),
}
FALLBACK_COLORS = ["#e1a95f", "#6a9f58", "#a17c6b", "#d37295"]
OP_NAMES = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}
OP_COLORS = ["#c0392b", "#e88b7f", "#2c4a6e", "#8fb1d6", "#6a9f58", "#b7d3a8"]


class BadInput(Exception):
    """One line for stderr: the file and what in it is wrong."""


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise BadInput(f"{path}: cannot read it ({e.strerror})") from None
    except (ValueError, UnicodeDecodeError) as e:  # json.JSONDecodeError is a ValueError
        raise BadInput(f"{path}: not JSON ({e})") from None


def field(obj, key, path, where="", kind=None):
    """obj[key], or BadInput naming `where.key` in `path`; kind: "number", "list" or "text"."""
    name = f"{where}.{key}" if where else key
    if not isinstance(obj, dict) or key not in obj:
        raise BadInput(f"{path}: missing field '{name}'")
    v = obj[key]
    wrong = {"number": isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v),
             "list": not isinstance(v, list), "text": not isinstance(v, str)}.get(kind, False)
    if wrong:
        raise BadInput(f"{path}: field '{name}' is not a {kind}: {json.dumps(v)[:60]}")
    return v


def rows_of(doc, path):
    """The rows of a bench JSON; tuning_bench.py wrote a bare list before it recorded date and commit."""
    rows = doc if isinstance(doc, list) else field(doc, "rows", path, kind="list")
    if not rows:
        raise BadInput(f"{path}: field 'rows' is empty")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise BadInput(f"{path}: field 'rows[{i}]' is not an object")
    return rows


def run_label(docs):
    """'NVIDIA H200, 2026-11-30, 1ca6237' from what the JSON files carry (each value once)."""
    parts = []
    for key in ("gpu", "date", "commit"):
        seen = []
        for d in docs:
            v = d.get(key) if isinstance(d, dict) else None
            if isinstance(v, str) and v and v not in seen:
                seen.append(v)
        if seen:
            parts.append(" / ".join(seen))
    return ", ".join(parts)


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot_results: matplotlib is not installed (Debian: apt-get install python3-matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def grouped_bars(ax, groups, series):
    """One cluster of bars per group; series: [(label, values, colour)], None where a value is missing."""
    width = 0.8 / max(len(series), 1)
    for i, (label, values, color) in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        pairs = [(x, v) for x, v in zip(xs, values) if v is not None]
        ax.bar([x for x, _ in pairs], [v for _, v in pairs], width, label=label, color=color, zorder=2)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.grid(axis="y", color="#dddddd", zorder=0)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)


def finish(fig, ax, title, order=None):
    """The title (two lines) and one legend for the figure above the panels,
    in fixed inches so that short and tall figures lay out alike; `order`
    puts the legend's labels in that order (the rest after)."""
    handles, labels = ax.get_legend_handles_labels()
    if order:
        rank = {label: i for i, label in enumerate(order)}
        pairs = sorted(zip(handles, labels), key=lambda hl: rank.get(hl[1], len(rank)))
        handles, labels = [h for h, _ in pairs], [lb for _, lb in pairs]
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.8 / height))  # before the title: it would make room for it again
    fig.suptitle(title, fontsize=10, y=1 - 0.08 / height, va="top")
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.5 / height))


def save(plt, fig, out, name, written):
    path = os.path.join(out, name)
    # No software version in the file: the committed PNGs change only when the figures do.
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    written.append(path)


def norm_plots(plt, paths, out, written):
    runs = []  # (path, doc, rows, peers)
    for path in paths:
        doc = load(path)
        rows = rows_of(doc, path)
        field(doc, "copy_tbs", path, kind="number")
        peers = field(doc, "peers", path, kind="list")
        for i, r in enumerate(rows):
            where = f"rows[{i}]"
            for key in ("op", "pass"):
                field(r, key, path, where, "text")
            for key in ["M", "N", "ktune_tbs"] + [f"{p}_tbs" for p in peers]:
                field(r, key, path, where, "number")
        runs.append((path, doc, rows, peers))
    for pas, title, moved in (("fwd", "forward", "reads x, w (and b), writes y"),
                              ("bwd", "backward", "reads x, dy, w, writes dx, dw (and db)")):
        ops = []  # (op, [(row, doc, peers)])
        for path, doc, rows, peers in runs:
            for r in rows:
                if r["pass"] != pas:
                    continue
                if r["op"] not in [o for o, _ in ops]:
                    ops.append((r["op"], []))
                next(v for o, v in ops if o == r["op"]).append((r, doc, peers))
        if not ops:
            continue
        fig, axes = plt.subplots(len(ops), 1, figsize=(11, 1.2 + 3.2 * len(ops)), squeeze=False)
        for ax, (op, entries) in zip(axes[:, 0], ops):
            peers = []
            for _, _, ps in entries:
                peers += [p for p in ps if p not in peers]
            series = [("ktune", [r["ktune_tbs"] for r, _, _ in entries], KTUNE_COLOR)]
            for j, p in enumerate(peers):
                label, color = PEER_STYLE.get(p, (p, FALLBACK_COLORS[j % len(FALLBACK_COLORS)]))
                series.append((label, [r.get(f"{p}_tbs") for r, _, _ in entries], color))
            grouped_bars(ax, [f"{r['M']} x {r['N']}" for r, _, _ in entries], series)
            ceilings = sorted({d["copy_tbs"] for _, d, _ in entries})
            for c in ceilings:
                ax.axhline(c, color="black", linestyle="--", linewidth=1, zorder=3,
                           label="device copy in the run" if c == ceilings[0] else None)
                ax.annotate(f"copy {c:.2f} TB/s", (1, c), xycoords=("axes fraction", "data"), xytext=(-4, 3),
                            textcoords="offset points", ha="right", fontsize=8)
            top = max([c for c in ceilings] + [v for _, vs, _ in series for v in vs if v is not None])
            ax.set_ylim(0, top * 1.1)
            ax.set_ylabel("TB/s")
            ax.set_title(OP_NAMES.get(op, op), loc="left", fontsize=10, fontweight="bold")
        finish(fig, axes[0, 0], f"bf16 norm {title}, TB/s by fewest bytes ({moved}); CUDA-graph replay, "
                                f"median per call\n{run_label([d for _, d, _, _ in runs])}",
               order=["ktune"] + [PEER_STYLE.get(p, (p,))[0] for p in PEER_STYLE])
        save(plt, fig, out, f"norm-{title}.png", written)


def gemm_plot(plt, path, dtype, out, written):
    doc = load(path)
    rows = rows_of(doc, path)
    for i, r in enumerate(rows):
        for key in ("m", "n", "k", "ktune_tflops", "cublaslt_default_tflops", "torch_tflops"):
            field(r, key, path, f"rows[{i}]", "number")
    blocks = all("ktune_block_tflops" in r for r in rows)
    for i, r in enumerate(rows):
        if blocks:
            field(r, "ktune_block_tflops", path, f"rows[{i}]", "number")
    torch_name = "torch._scaled_mm" if dtype == "fp8" else "torch.matmul"
    panels = []  # (m, rows): one panel per M, each with its own scale (1 to 1400 TFLOP/s overall)
    for r in rows:
        if r["m"] not in [m for m, _ in panels]:
            panels.append((r["m"], []))
        next(v for m, v in panels if m == r["m"]).append(r)
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(12, 1.3 + 3.1 * nrows), squeeze=False)
    for ax, (m, prs) in zip(axes.flat, panels):
        # Two ktune figures where the bench has both: the tune's own, taken
        # as cuBLASLt's is, and the one timed in blocks as torch is
        # (gemm_bench.py's header says why they differ).
        series = [("cuBLASLt default (in the tune)", [r["cublaslt_default_tflops"] for r in prs], "#8fb1d6"),
                  ("ktune (in the tune)", [r["ktune_tflops"] for r in prs], KTUNE_COLOR)]
        if blocks:
            series.append(("ktune (in blocks, as torch)", [r["ktune_block_tflops"] for r in prs], "#e88b7f"))
        series.append((f"{torch_name} (in blocks)" if blocks else torch_name,
                       [r["torch_tflops"] for r in prs], "#2c4a6e"))
        grouped_bars(ax, [f"N {r['n']}\nK {r['k']}" for r in prs], series)
        ax.set_title(f"M = {m}", loc="left", fontsize=10, fontweight="bold")
        ax.set_ylabel("TFLOP/s")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    finish(fig, axes[0, 0], f"{dtype} GEMM D = A x B^T, TFLOP/s = 2MNK / time\n{run_label([doc])}")
    save(plt, fig, out, f"gemm-{dtype}.png", written)


def tuning_plot(plt, path, out, written):
    doc = load(path)
    rows = rows_of(doc, path)
    for i, r in enumerate(rows):
        field(r, "op", path, f"rows[{i}]", "text")
        field(r, "cold_s", path, f"rows[{i}]", "number")
    # Per shape where every row names one (tuning_bench.py's rows do), else per op alone.
    by_shape = all("M" in r and "N" in r for r in rows)
    if by_shape:
        for i, r in enumerate(rows):
            field(r, "M", path, f"rows[{i}]", "number")
            field(r, "N", path, f"rows[{i}]", "number")
    # One panel per kind of tune every row has: tuning_bench.py also times a
    # warm re-tune and coordinate descent.
    kinds = [("cold_s", "cold tune (fresh database and kernel cache)")]
    kinds += [(k, t) for k, t in (("warm_s", "warm re-tune (every cubin from the kernel cache)"),
                                  ("descent_s", "coordinate descent (fresh database and kernel cache)"))
              if all(k in r for r in rows)]
    for i, r in enumerate(rows):
        for k, _ in kinds:
            field(r, k, path, f"rows[{i}]", "number")
    ops, groups = [], []
    for r in rows:
        if r["op"] not in ops:
            ops.append(r["op"])
        g = f"{r['M']} x {r['N']}" if by_shape else ""
        if g not in groups:
            groups.append(g)
    at = {(r["op"], f"{r['M']} x {r['N']}" if by_shape else ""): r for r in rows}
    fig, axes = plt.subplots(len(kinds), 1, figsize=(11, 1.2 + 3.2 * len(kinds)), squeeze=False)
    for ax, (key, title) in zip(axes[:, 0], kinds):
        series = [(op, [at[(op, g)][key] if (op, g) in at else None for g in groups], OP_COLORS[j % len(OP_COLORS)])
                  for j, op in enumerate(ops)]
        grouped_bars(ax, groups, series)
        ax.set_ylabel("seconds")
        ax.set_title(title, loc="left", fontsize=10, fontweight="bold")
    finish(fig, axes[0, 0], f"Tune time: wall time of `ktune tune` per problem\n{run_label([doc])}")
    save(plt, fig, out, "tune-time.png", written)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--norm", nargs="+", metavar="NORM.json", help="bench/norm_bench.py's JSON, one or more runs")
    ap.add_argument("--gemm", metavar="GEMM.json", help="bench/gemm_bench.py's JSON, bf16")
    ap.add_argument("--gemm-fp8", metavar="FP8.json", help="bench/gemm_bench.py's JSON, fp8")
    ap.add_argument("--tuning", metavar="TUNING.json", help="bench/tuning_bench.py's JSON")
    ap.add_argument("--out", required=True, help="the folder the PNGs go to (made if missing)")
    args = ap.parse_args()
    if not (args.norm or args.gemm or args.gemm_fp8 or args.tuning):
        ap.error("nothing to plot: give --norm, --gemm, --gemm-fp8 or --tuning")
    plt = import_pyplot()
    written = []
    try:
        os.makedirs(args.out, exist_ok=True)
        if args.norm:
            norm_plots(plt, args.norm, args.out, written)
        for path, dtype in ((args.gemm, "bf16"), (args.gemm_fp8, "fp8")):
            if path:
                gemm_plot(plt, path, dtype, args.out, written)
        if args.tuning:
            tuning_plot(plt, args.tuning, args.out, written)
    except BadInput as e:
        print(f"plot_results: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the output folder
        print(f"plot_results: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
