"""Draw Chrome-trace files written with CS336_TRACE=DIR (or pytest --comm-trace DIR) as one PNG timeline.

    CS336_TRACE=/tmp/tr .venv/bin/python -m pytest tests/test_ddp.py -k bucket --world-sizes 2 -x
    python scripts/show_trace.py /tmp/tr/*.json --out /tmp/tr.png

One row per (file, rank); each communication call is a bar from when it returned to when its handle
was waited on (async calls), orange when it was made inside backward, blue otherwise; the grey bar
behind is the recorded phase. The same files open in
https://ui.perfetto.dev or chrome://tracing. (pytest's own --trace is its debugger, hence --comm-trace.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="PNG path (default: the first file with .png)")
    args = parser.parse_args()
    rows = []
    for f in sorted(args.files):
        trace = json.loads(f.read_text())
        rows.append((f"{f.stem}", trace["traceEvents"]))
    fig, ax = plt.subplots(figsize=(11, 0.6 * len(rows) + 1.2))
    for y, (name, events) in enumerate(rows):
        for e in events:
            ms, dur = e["ts"] / 1e3, e["dur"] / 1e3
            if e["cat"] == "phase":
                ax.barh(y, dur, left=ms, height=0.8, color="lightgrey")
            else:
                ax.barh(y, dur, left=ms, height=0.5, color="tab:orange" if e["cat"] == "backward" else "tab:blue",
                        edgecolor="black", lw=0.4)  # fmt: skip
        counts = sum(e["cat"] != "phase" for e in events), sum(e["cat"] == "backward" for e in events)
        print(f"{name}: {counts[0]} calls, {counts[1]} in backward")
    ax.set_yticks(range(len(rows)), [n for n, _ in rows], fontsize=7)
    ax.set_xlabel("ms since the recorder opened (orange: made inside backward)")
    fig.tight_layout()
    out = args.out or args.files[0].with_suffix(".png")
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
