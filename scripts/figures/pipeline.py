"""Part 5's figures: GPipe against 1F1B (gpipe_vs_1f1b.png), and every schedule's grid (pipeline_schedules.png).

    python -m scripts.figures.pipeline                                   # both, p = 4, m = 8, into handouts/figures/
    python -m scripts.figures.pipeline --impl student --out /tmp/grids.png   # the grids from your schedules

``draw_gpipe_vs_1f1b`` draws the two schedules from their definitions, idle time hatched.
``draw_schedules`` runs each schedule's per-stage action lists are executed as the tests' simulator does (a stage waits
only for its input: F of chunk g for F of chunk g - 1, B for B of chunk g + 1, W for its own B).
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
        timeline = simulate(stages, v, cost)
        makespan = max(end for tl in timeline for *_, end in tl)
        busy = sum(end - start for tl in timeline for *_, start, end in tl)
        for s, tl in enumerate(timeline):
            for kind, mb, chunk, start, end in tl:
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


def _gpipe(p: int, m: int):
    """(stage, kind, microbatch, start) in unit time (F = 1, B = 2): all forwards, then all backwards."""
    out = []
    for s in range(p):
        out += [(s, "F", i, s + i) for i in range(m)]
        t0 = (m + p - 1) + 2 * (p - 1 - s)
        out += [(s, "B", i, t0 + 2 * k) for k, i in enumerate(reversed(range(m)))]
    return out


def _one_f_one_b(p: int, m: int):
    """1F1B by simulation: stage s warms up with p - 1 - s forwards, then alternates B and F."""
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
    done, free, out, pos = {}, [0] * p, [], [0] * p
    progress = True
    while progress:
        progress = False
        for s in range(p):
            while pos[s] < len(order[s]):
                kind, i = order[s][pos[s]]
                dep = (s - 1, "F", i) if kind == "F" else ((s + 1, "B", i) if s < p - 1 else (s, "F", i))
                if kind == "F" and s == 0:
                    dep = None
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep] if dep else 0)
                end = start + (1 if kind == "F" else 2)
                done[(s, kind, i)], free[s] = end, end
                out.append((s, kind, i, start))
                pos[s] += 1
                progress = True
    return out


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", default=None, help="student, reference, or a package name (default: reference)")
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None, help="the grids' PNG (default: the handout's)")
    args = parser.parse_args()
    if args.out is None:  # the handout's two figures
        print(draw_gpipe_vs_1f1b(FIGURE_DIR / "gpipe_vs_1f1b.png"))
    out = args.out or FIGURE_DIR / "pipeline_schedules.png"
    print(draw_schedules(out, args.impl, args.stages, args.microbatches))


if __name__ == "__main__":
    main()
