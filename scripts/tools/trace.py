"""Draw a test's communication trace (written with pytest --comm-trace DIR, or CS336_TRACE=DIR) as a PNG.

    .venv/bin/python -m pytest tests/test_ddp.py -k overlap --world-sizes 2 -x --comm-trace /tmp/tr
    python -m scripts.tools.trace /tmp/tr/test_ddp.py__test_each_bucket*w2-deep-bucketed*.json
    pytest tests/test_parallelize.py --world-sizes 8 -k composed --comm-trace out/trace
    python -m scripts.tools.trace out/trace/test_parallelize.py__test_composed*.json --summary "dp=2,pp=1,cp=2,tp=2"

One row per process of each file: the judging pytest process (its setup, call and teardown) and each
rank. On a rank's row the grey bar is a recorded region (named after the rank function) and each
communication call is a bar from when it returned to when its handle was waited on (async calls):
orange when it was made inside backward, blue otherwise. Overlapping async calls are drawn in
thinner sub-rows. The same files open in https://ui.perfetto.dev or chrome://tracing, with every
call's group, peer, bytes and shapes. Raw per-recording files (``DIR/.ranks/*.json``, left by code
that records outside pytest) are drawn too, one row each. (pytest's own --trace is its debugger,
hence --comm-trace.)

``--summary TEXT`` also prints, for every recorded region whose label contains TEXT, each rank's calls
per axis: how many of each op and their bytes (the tensors handed to the call: a send's message, an
all-gather's or reduce-scatter's input on this rank). Part 11's training ranks record each step as a
region labelled "mesh dp=2,pp=1,cp=2,tp=2 ddp step 0"; from those sizes (row-major, last axis fastest)
a group's axis is the one along which its ranks' coordinates differ, and a send's the one along which
the peer's do. Other labels name no axes: their groups are listed by ranks.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402


def rows_of(path: Path) -> list[tuple[str, list[dict]]]:
    """(row label, its slices) for every process in one trace file."""
    trace = json.loads(path.read_text())
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("ph") == "M"}
    by_pid: dict[int, list[dict]] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            by_pid.setdefault(e["pid"], []).append(e)
    if len(by_pid) == 1:  # a raw per-recording file: one rank
        return [(path.stem[:60], next(iter(by_pid.values())))]
    return [(str(names.get(pid, pid)), events) for pid, events in sorted(by_pid.items())]


def call_colour(event: dict) -> str:
    """A communication call's colour: orange when made inside backward, blue otherwise."""
    return "tab:orange" if event["cat"] == "backward" else "tab:blue"


def draw_rows(ax, rows: list[tuple[str, list[dict]]], colour=call_colour, phase_colour=lambda e: "lightgrey",
              min_ms: float = 0.0) -> None:  # fmt: skip
    """Draw ``rows`` (from ``rows_of``) on ``ax``, one row per process, top to bottom: each phase or recorded
    region a full-height bar (``phase_colour(event)``), each call a bar in its sub-row (``colour(event)``), at
    least ``min_ms`` wide (a synchronous call lasts a microsecond in the trace)."""
    for y, (_, events) in enumerate(rows):
        lanes = max([e["tid"] for e in events if e["cat"] != "phase"] + [1])
        for e in events:
            ms, dur = e["ts"] / 1e3, e["dur"] / 1e3
            if e["cat"] == "phase":
                ax.barh(y, dur, left=ms, height=0.8, color=phase_colour(e), edgecolor="grey", lw=0.3)
                ax.text(ms, y - 0.42, e["name"], fontsize=6, va="bottom", color="dimgrey")
                continue
            lane = max(e["tid"], 1) - 1  # sub-row for overlapping async calls
            height = 0.6 / lanes
            ax.barh(y - 0.3 + height * (lane + 0.5), max(dur, min_ms), left=ms, height=height * 0.9,
                    color=colour(e), edgecolor="black", lw=0.3)  # fmt: skip
    ax.set_yticks(range(len(rows)), [n for n, _ in rows], fontsize=7)
    ax.invert_yaxis()


def draw(rows: list[tuple[str, list[dict]]], out: Path, title: str = "") -> None:
    fig, ax = plt.subplots(figsize=(11, 0.7 * len(rows) + 1.4))
    ax.set_title(title, fontsize=8)
    draw_rows(ax, rows)
    for name, events in rows:
        calls = [e for e in events if e["cat"] != "phase"]
        print(f"{name}: {len(calls)} calls, {sum(e['cat'] == 'backward' for e in calls)} in backward")
    ax.set_xlabel("ms since the test started (orange: made inside backward; grey: recorded regions and phases)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def mesh_coords(label: str) -> tuple[list[str], list[tuple[int, ...]]] | None:
    """The axes and every rank's coordinates of a region labelled "mesh dp=2,pp=1,cp=2,tp=2 ..." (row-major)."""
    found = re.search(r"mesh ((?:\w+=\d+,?)+)", label)
    if not found:
        return None
    sizes = [(a, int(n)) for a, n in (item.split("=") for item in found.group(1).strip(",").split(","))]
    return [a for a, _ in sizes], list(itertools.product(*(range(n) for _, n in sizes)))


def axis_of(call: dict, rank: int, mesh) -> str:
    """The mesh axis a call travels along: the one where its group's (or a p2p peer's) coordinates differ."""
    args = call["args"]
    if mesh is None:
        return f"peer {args['peer']}" if args["peer"] is not None else f"group {args['group']}"
    axes, coords = mesh
    members = [rank, args["peer"]] if args["peer"] is not None else args["group"]
    varying = [a for i, a in enumerate(axes) if len({coords[r][i] for r in members}) > 1]
    return "·".join(varying) or "self"


def summary(rows: list[tuple[str, list[dict]]], text: str) -> list[str]:
    """One line per (region, rank, axis, op): how many calls and their bytes, for regions labelled with ``text``."""
    lines = []
    for name, events in rows:
        if not name.startswith("rank "):
            continue
        rank = int(name.split()[1])
        for region in [e for e in events if e["cat"] == "phase" and text in e["name"]]:
            end = region["ts"] + region["dur"]
            mesh = mesh_coords(region["name"])
            counts, sizes = Counter(), Counter()
            for call in events:
                if call["cat"] != "phase" and region["ts"] <= call["ts"] <= end:
                    key = (axis_of(call, rank, mesh), call["name"])
                    counts[key] += 1
                    sizes[key] += call["args"]["bytes"]
            for (axis, op), n in sorted(counts.items()):
                lines.append(f"{region['name']} | {name} | {axis} | {op} | {n} calls | {sizes[(axis, op)]} bytes")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path, help="trace files (one per test, or raw rank files)")
    parser.add_argument("--out", type=Path, default=None, help="PNG path (default: the first file with .png)")
    parser.add_argument("--summary", metavar="TEXT", help="print each rank's calls per axis in the regions "
                        "whose label contains TEXT (e.g. 'dp=2,pp=1,cp=2,tp=2 ddp step 0')")  # fmt: skip
    args = parser.parse_args()
    rows = [row for f in sorted(args.files) for row in rows_of(f)]
    if args.summary is not None:
        lines = summary(rows, args.summary)
        print("region | rank | axis | op | calls | bytes")
        print("\n".join(lines) if lines else f"no recorded region's label contains {args.summary!r}")
    title = args.files[0].stem if len(args.files) == 1 else f"{len(args.files)} trace files"
    draw(rows, args.out or args.files[0].with_suffix(".png"), title)


if __name__ == "__main__":
    main()
