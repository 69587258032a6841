"""Part 5's figures: GPipe against 1F1B (gpipe_vs_1f1b.png), every schedule's grid (pipeline_schedules.png),
the V placement (pipeline_v_placement.png) and the V schedules' grids, ZB-V and DualPipeV (pipeline_v_schedules.png).

    python -m scripts.figures.pipeline                                   # both, p = 4, m = 8, into handouts/figures/
    python -m scripts.figures.pipeline --impl student --out /tmp/grids.png   # the grids from your schedules

``draw_gpipe_vs_1f1b`` draws the two schedules from their definitions, idle time hatched.
``draw_schedules`` runs each schedule's per-stage action lists through the tests' unit-time simulator
(tests/oracles/pipeline_sim.py: a stage waits only for its input: F of chunk g for F of chunk g - 1,
B for B of chunk g + 1, W for its own B); ``draw_gpipe_vs_1f1b`` times its two orders the same way.
Times: F = 1, a whole backward 2 (GPipe, 1F1B, interleaved, where a chunk costs 1/v of that),
B = W = 1 (ZB-H1). The title of each row gives the bubble read off the grid.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from matplotlib import pyplot as plt
from matplotlib.colors import to_rgb
from matplotlib.patches import Rectangle

from scripts.bench.common import default_impl, load_impl
from scripts.figures.palette import FIGURE_DIR, IDLE, WORK, box, save
from tests.oracles.pipeline_sim import action_key, timeline


def draw_schedules(path: Path, impl: str | None = None, p: int = 4, m: int = 8) -> Path:
    """Every schedule's grid in unit time, from ``impl``'s schedule functions (default: the reference
    where there is one)."""
    P = load_impl(impl or default_impl(), "pipeline")
    rows = [
        ("GPipe", [P.gpipe_schedule(p, m, s) for s in range(p)], 1, {"F": 1, "B": 2, "W": 0}),
        ("1F1B", [P.one_f_one_b_schedule(p, m, s) for s in range(p)], 1, {"F": 1, "B": 2, "W": 0}),
        ("interleaved 1F1B, v = 2", [P.interleaved_1f1b_schedule(p, m, s, 2) for s in range(p)], 2,
         {"F": 0.5, "B": 1, "W": 0}),
        ("ZB-H1 (B = W = 1)", [P.zero_bubble_h1_schedule(p, m, s) for s in range(p)], 1, {"F": 1, "B": 1, "W": 1}),
    ]  # fmt: skip
    fig, axes = plt.subplots(len(rows), 1, figsize=(12, 2.0 * len(rows)), sharex=True)
    for ax, (name, stages, v, cost) in zip(axes, rows):
        rows_of_stages = timeline(stages, v, cost)  # per stage: (action, start, end)
        makespan = max(end for row in rows_of_stages for *_, end in row)
        busy = sum(end - start for row in rows_of_stages for _, start, end in row)
        for s, row in enumerate(rows_of_stages):
            for action, start, end in row:
                kind, mb, chunk = action_key(action)
                shade = 1 - 0.5 * chunk / max(v - 1, 1)
                colour = tuple(1 - shade * (1 - c) for c in to_rgb(WORK[kind]))
                ax.broken_barh([(start, end - start)], (s - 0.4, 0.8), color=colour, edgecolor="white")
                label = f"{mb}" if v == 1 else f"{mb}.{chunk}"
                ax.text((start + end) / 2, s, label, ha="center", va="center", fontsize=6)
        ax.set_yticks(range(p), [f"stage {s}" for s in range(p)])
        ax.invert_yaxis()
        ax.set_title(f"{name}: step {makespan:g} units, bubble {1 - busy / (p * makespan):.1%}", fontsize=9, loc="left")
    axes[-1].set_xlabel("time (units of one stage's forward)   F blue, B orange, W green; label: microbatch[.chunk]")
    fig.tight_layout()
    return save(fig, path)


def _timed(orders) -> list[tuple[int, str, int, float]]:
    """(stage, kind, microbatch, start) of every action of the per-stage ``orders``, timed by the
    tests' unit-time simulator (F = 1, B = 2)."""
    return [(s, kind, i, start) for s, row in enumerate(timeline(orders)) for (kind, i), start, _ in row]


def _gpipe(p: int, m: int):
    """GPipe: every stage runs all forwards, then all backwards (the last microbatch's first)."""
    return _timed([[("F", i) for i in range(m)] + [("B", i) for i in reversed(range(m))] for _ in range(p)])


def _one_f_one_b(p: int, m: int):
    """1F1B: stage s warms up with p - 1 - s forwards, then alternates F and B."""
    order = []
    for s in range(p):
        warm = min(p - 1 - s, m)
        acts = [("F", i) for i in range(warm)]
        f, b = warm, 0
        while b < m:
            if f < m:
                acts.append(("F", f))
                f += 1
            acts.append(("B", b))
            b += 1
        order.append(acts)
    return _timed(order)


def draw_gpipe_vs_1f1b(path: Path) -> Path:
    """GPipe and 1F1B grids for p = 4, m = 8, idle time shaded: the same bubble, (p-1)/(m+p-1),
    but 1F1B holds at most p micro-batches' activations instead of m."""
    p, m = 4, 8
    fig, axes = plt.subplots(2, 1, figsize=(11, 4.4), sharex=True)
    for ax, (name, sched) in zip(axes, [("GPipe", _gpipe(p, m)), ("1F1B", _one_f_one_b(p, m))]):
        end = max(start + (1 if kind == "F" else 2) for _, kind, _, start in sched)
        for s in range(p):
            ax.add_patch(Rectangle((0, p - 1 - s), end, 0.9, facecolor=IDLE, hatch="//", edgecolor="grey", lw=0))
        for s, kind, i, start in sched:
            w = 1 if kind == "F" else 2
            box(ax, start, p - 1 - s, w, 0.9, WORK[kind], f"{kind}{i}", fontsize=7)
        busy = sum(1 if kind == "F" else 2 for _, kind, _, _ in sched)
        ax.set_xlim(0, end)
        ax.set_ylim(0, p)
        ax.set_yticks([p - 1 - s + 0.45 for s in range(p)], [f"stage {s}" for s in range(p)])
        ax.set_title(
            f"{name}: bubble (hatched) = {1 - busy / (p * end):.2f} of stage time "
            f"((p-1)/(m+p-1) = {(p - 1) / (m + p - 1):.2f})",
            fontsize=9,
        )
    axes[-1].set_xlabel("time (F = 1, B = 2)")
    fig.tight_layout()
    return save(fig, path)


def draw_v_placement(path: Path, p: int = 4) -> Path:
    """The V: 2p chunks over p ranks, rank r holding chunks r and 2p - 1 - r; activations go down
    chunk 0, turn inside rank p - 1 and come back up chunk 1 to the loss on rank 0."""
    fig, ax = plt.subplots(figsize=(7, 0.8 * p + 1.2))
    for r in range(p):
        for c, x in ((0, 0), (1, 3)):
            g = r if c == 0 else 2 * p - 1 - r
            box(ax, x, p - 1 - r, 2, 0.7, WORK["F"] if c == 0 else WORK["B"], f"chunk {g} (local {c})", fontsize=8)
        ax.text(-0.2, p - 1 - r + 0.35, f"rank {r}", ha="right", va="center", fontsize=9)
    for r in range(p - 1):  # down chunk 0, up chunk 1: the ranks beside
        ax.annotate("", (1, p - 2 - r + 0.7), (1, p - 1 - r), arrowprops={"arrowstyle": "->"})
        ax.annotate("", (4, p - 1 - r), (4, p - 2 - r + 0.7), arrowprops={"arrowstyle": "->"})
    ax.annotate("", (3, 0.35), (2, 0.35), arrowprops={"arrowstyle": "->", "color": "red"})
    ax.text(2.5, -0.25, "the turn: in memory", ha="center", fontsize=8, color="red")
    ax.text(5.2, p - 1 + 0.35, "loss", va="center", fontsize=9)
    ax.set_xlim(-1.2, 6)
    ax.set_ylim(-0.5, p)
    ax.axis("off")
    ax.set_title(f"V placement, p = {p}: rank r holds chunks r and 2p - 1 - r", fontsize=9)
    fig.tight_layout()
    return save(fig, path)


def draw_v_schedules(path: Path, impl: str | None = None, p: int = 4, m: int = 8) -> Path:
    """ZB-V and DualPipeV grids in the simulator's unit time (F = B = W = 1 per chunk; DualPipeV's
    F&B pair 2.5 units, a whole B 2); chunk 1 drawn darker, an F&B pair as one half-F half-B box."""
    P = load_impl(impl or default_impl(), "pipeline")
    rows = [
        ("ZB-V", [P.zero_bubble_v_schedule(p, m, r) for r in range(p)], {"F": 1, "B": 1, "W": 1}),
        ("DualPipeV (F&B = 2.5)", [P.dualpipe_v_schedule(p, 2 * m, r) for r in range(p)],
         {"F": 1, "B": 1, "W": 1, "F&B": 2.5}),
    ]  # fmt: skip
    fig, axes = plt.subplots(len(rows), 1, figsize=(13, 2.2 * len(rows)))
    for ax, (name, ranks, cost) in zip(axes, rows):
        grid = timeline(ranks, 2, cost, placement="v")
        makespan = max(end for row in grid for *_, end in row)
        for r, row in enumerate(grid):
            pairs = [(a, st, en) for a, st, en in row]
            for k, (action, start, end) in enumerate(pairs):
                kind, mb, chunk = action_key(action)
                paired = getattr(action, "overlap", False) or (k > 0 and getattr(pairs[k - 1][0], "overlap", False))
                lo, hi = (r - 0.4, r) if paired and kind == "F" else (r, r + 0.4) if paired else (r - 0.4, r + 0.4)
                shade = 0.55 if chunk == 1 else 1.0
                colour = tuple(1 - shade * (1 - c) for c in to_rgb(WORK[kind]))
                ax.broken_barh([(start, end - start)], (lo, hi - lo), color=colour, edgecolor="white")
                ax.text((start + end) / 2, (lo + hi) / 2, str(mb), ha="center", va="center", fontsize=5)
        ax.set_yticks(range(p), [f"rank {r}" for r in range(p)])
        ax.invert_yaxis()
        ax.set_title(f"{name}, p = {p}: step {makespan:g} units", fontsize=9, loc="left")
    axes[-1].set_xlabel("time (one chunk's F = 1)   F blue, B orange, W green; darker: chunk 1; half boxes: F&B pair")
    fig.tight_layout()
    return save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", default=None, help="student, reference, or a package name (default: reference)")
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None, help="the grids' PNG (default: the handout's)")
    args = parser.parse_args()
    if args.out is None:  # the handout's figures
        print(draw_gpipe_vs_1f1b(FIGURE_DIR / "gpipe_vs_1f1b.png"))
        print(draw_v_placement(FIGURE_DIR / "pipeline_v_placement.png"))
        print(draw_v_schedules(FIGURE_DIR / "pipeline_v_schedules.png", args.impl))
    out = args.out or FIGURE_DIR / "pipeline_schedules.png"
    print(draw_schedules(out, args.impl, args.stages, args.microbatches))


if __name__ == "__main__":
    main()
