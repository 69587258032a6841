"""Draw the grid of every Part 5 schedule in unit time: handouts/figures/pipeline_schedules.png.

    python scripts/draw_pipeline_schedules.py              # p = 4, m = 8, from the reference schedules
    python scripts/draw_pipeline_schedules.py --impl student --out /tmp/grids.png

Each schedule's per-stage action lists are executed as the tests' simulator does (a stage waits
only for its input: F of chunk g for F of chunk g - 1, B for B of chunk g + 1, W for its own B).
Times: F = 1, a whole backward 2 (GPipe, 1F1B, interleaved, where a chunk costs 1/v of that),
B = W = 1 (ZB-H1). The title of each row gives the bubble read off the grid.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from matplotlib import pyplot as plt
from matplotlib.colors import to_rgb

from scripts.bench.common import ROOT, load_impl

COLOURS = {"F": "tab:blue", "B": "tab:orange", "W": "tab:green"}


def simulate(stages, v: int, cost: dict[str, float]):
    """[(kind, microbatch, chunk, start, end), ...] per stage, for actions run in each stage's order."""
    p, done, pos, free = len(stages), {}, [0] * len(stages), [0.0] * len(stages)
    out = [[] for _ in range(p)]
    progress = True
    while progress:
        progress = False
        for r in range(p):
            while pos[r] < len(stages[r]):
                a = stages[r][pos[r]]
                g = a.chunk * p + r
                dep = {"F": ("F", a.microbatch, g - 1) if g > 0 else None,
                       "B": ("B", a.microbatch, g + 1) if g < p * v - 1 else ("F", a.microbatch, g),
                       "W": ("B", a.microbatch, g)}[a.kind]  # fmt: skip
                if dep is not None and dep not in done:
                    break
                start = max(free[r], done.get(dep, 0.0))
                free[r] = done[(a.kind, a.microbatch, g)] = start + cost[a.kind]
                out[r].append((a.kind, a.microbatch, a.chunk, start, free[r]))
                pos[r], progress = pos[r] + 1, True
    if any(pos[r] < len(stages[r]) for r in range(p)):
        raise RuntimeError("the schedule deadlocks")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", default="reference", help="student, reference, or a package name")
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--out", type=Path, default=ROOT / "handouts" / "figures" / "pipeline_schedules.png")
    args = parser.parse_args()
    P = load_impl(args.impl, "pipeline")
    p, m = args.stages, args.microbatches
    rows = [
        ("GPipe", [P.gpipe_schedule(p, m, s) for s in range(p)], 1, {"F": 1, "B": 2, "W": 0}),
        ("1F1B", [P.one_f_one_b_schedule(p, m, s) for s in range(p)], 1, {"F": 1, "B": 2, "W": 0}),
        ("interleaved 1F1B, v = 2", [P.interleaved_1f1b_schedule(p, m, s, 2) for s in range(p)], 2,
         {"F": 0.5, "B": 1, "W": 0}),
        ("ZB-H1 (B = W = 1)", [P.zero_bubble_h1_schedule(p, m, s) for s in range(p)], 1, {"F": 1, "B": 1, "W": 1}),
    ]  # fmt: skip
    fig, axes = plt.subplots(len(rows), 1, figsize=(12, 2.0 * len(rows)), sharex=True)
    for ax, (name, stages, v, cost) in zip(axes, rows):
        timeline = simulate(stages, v, cost)
        makespan = max(end for tl in timeline for *_, end in tl)
        busy = sum(end - start for tl in timeline for *_, start, end in tl)
        for s, tl in enumerate(timeline):
            for kind, mb, chunk, start, end in tl:
                shade = 1 - 0.5 * chunk / max(v - 1, 1)
                colour = tuple(1 - shade * (1 - c) for c in to_rgb(COLOURS[kind]))
                ax.broken_barh([(start, end - start)], (s - 0.4, 0.8), color=colour, edgecolor="white")
                label = f"{mb}" if v == 1 else f"{mb}.{chunk}"
                ax.text((start + end) / 2, s, label, ha="center", va="center", fontsize=6)
        ax.set_yticks(range(p), [f"stage {s}" for s in range(p)])
        ax.invert_yaxis()
        ax.set_title(f"{name}: step {makespan:g} units, bubble {1 - busy / (p * makespan):.1%}", fontsize=9, loc="left")
    axes[-1].set_xlabel("time (units of one stage's forward)   F blue, B orange, W green; label: microbatch[.chunk]")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"Wrote {args.out}")


if __name__ == "__main__":
    main()
