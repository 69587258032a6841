"""Part 8's figure (handouts/08-expert-parallel.md): the dispatch and combine all-to-alls of an MoE layer.

    python -m scripts.figures.expert_parallel           # writes handouts/figures/expert_parallel_dispatch.png

Two ranks, four experts (E0, E1 on rank 0; E2, E3 on rank 1), top-1 routing, capacity 2 per expert.
Each rank sorts its tokens by expert, the count exchange tells everyone how many rows go where, the
dispatch all-to-all moves the rows, the experts run, and the combine all-to-all (the same exchange with
the splits swapped) brings the results home, where they are weighted and put back in token order.
Token t1 of rank 1 is the third E0 assignment of the group: over capacity, it is dropped (output 0).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

from scripts.figures.palette import FIGURE_DIR, RANKS, SPARE, save

OUT = FIGURE_DIR / "expert_parallel_dispatch.png"
COLORS = RANKS[:4]  # experts E0..E3
ROUTES = {0: [0, 2, 0, 1], 1: [3, 0, 2, 1]}  # rank -> expert of each token t0..t3 (top-1)
CAPACITY = 2  # per expert, over both ranks: rank 0's E0 tokens come first in the queue


def _box(ax, x, y, label, color, dropped=False, w=0.9, h=0.7):
    ax.add_patch(Rectangle((x, y), w, h, facecolor="white" if dropped else color, edgecolor=color, lw=1.5,
                           hatch="//" if dropped else None))  # fmt: skip
    ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=7.5,
            color=color if dropped else "white", weight="bold")  # fmt: skip


def _arrow(ax, a, b, color="gray"):
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=8, color=color, lw=0.8, alpha=0.8))


def draw_dispatch(path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(11, 5.2))
    ax.set_xlim(-0.5, 19.5)
    ax.set_ylim(-1.4, 9.6)
    ax.axis("off")
    columns = {"tokens": 0, "sorted": 3.5, "received": 8, "experts": 11.5, "returned": 15, "out": 18}
    titles = {"tokens": "tokens\n(routed here)", "sorted": "sorted by expert\n(over capacity: dropped)",
              "received": "after dispatch\nall-to-all", "experts": "local experts\nrun", "returned":
              "after combine\nall-to-all", "out": "x weight,\nback in order"}  # fmt: skip
    for key, x in columns.items():
        ax.text(x + 0.45, 9.2, titles[key], ha="center", va="center", fontsize=8.5)
    # The group's capacity queue per expert: rank 0's assignments first, then rank 1's, in token order.
    seen: dict[int, int] = {}
    dropped = set()
    for rank in (0, 1):
        for t, e in enumerate(ROUTES[rank]):
            seen[e] = seen.get(e, 0) + 1
            if seen[e] > CAPACITY:
                dropped.add((rank, t))
    base = {0: 4.6, 1: 0.0}  # y of each rank's lane
    sorted_pos, recv_pos = {}, {}
    for rank in (0, 1):
        y0 = base[rank]
        ax.add_patch(Rectangle((-0.4, y0 - 0.3), 19.8, 4.1, facecolor=SPARE, edgecolor="none", zorder=-1))
        ax.text(-0.45, y0 + 3.55, f"rank {rank}  (experts E{2 * rank}, E{2 * rank + 1})", fontsize=9, weight="bold")
        for t, e in enumerate(ROUTES[rank]):
            _box(ax, columns["tokens"], y0 + 2.7 - 0.85 * t, f"t{t}→E{e}", COLORS[e])
        order = sorted(range(4), key=lambda t: ROUTES[rank][t])
        for slot, t in enumerate(order):
            e, y = ROUTES[rank][t], y0 + 2.7 - 0.85 * slot
            _box(ax, columns["sorted"], y, f"t{t}", COLORS[e], dropped=(rank, t) in dropped)
            _arrow(ax, (columns["tokens"] + 0.9, y0 + 3.05 - 0.85 * t), (columns["sorted"], y + 0.35))
            sorted_pos[(rank, t)] = y
    for dst in (0, 1):  # arrival order: by source rank, then expert
        rows = [(src, t) for src in (0, 1) for t in sorted(range(4), key=lambda t: ROUTES[src][t])
                if ROUTES[src][t] // 2 == dst and (src, t) not in dropped]  # fmt: skip
        for slot, (src, t) in enumerate(rows):
            e, y = ROUTES[src][t], base[dst] + 2.7 - 0.85 * slot
            _box(ax, columns["received"], y, f"r{src}.t{t}", COLORS[e])
            _box(ax, columns["experts"], y, f"E{e}(·)", COLORS[e])
            _arrow(ax, (columns["sorted"] + 0.9, sorted_pos[(src, t)] + 0.35), (columns["received"], y + 0.35),
                   COLORS[e])  # fmt: skip
            recv_pos[(src, t)] = y
    for rank in (0, 1):
        y0 = base[rank]
        order = sorted(range(4), key=lambda t: ROUTES[rank][t])
        for slot, t in enumerate(order):
            e, y = ROUTES[rank][t], y0 + 2.7 - 0.85 * slot
            if (rank, t) in dropped:
                continue
            _box(ax, columns["returned"], y, f"E{e}(t{t})", COLORS[e])
            _arrow(ax, (columns["experts"] + 0.9, recv_pos[(rank, t)] + 0.35), (columns["returned"], y + 0.35),
                   COLORS[e])  # fmt: skip
        for t, e in enumerate(ROUTES[rank]):
            y = y0 + 2.7 - 0.85 * t
            if (rank, t) in dropped:
                _box(ax, columns["out"], y, "0", COLORS[e], dropped=True)
            else:
                _box(ax, columns["out"], y, f"w·E{e}", COLORS[e])
    ax.text(9.5, -1.0, "counts all-gather first (tiny): every rank learns every (rank, expert) count, hence the "
            "splits and the capacity queue (rank 0's E0 tokens before rank 1's: r1.t1 is E0's third, dropped)",
            ha="center", fontsize=8, style="italic")  # fmt: skip
    fig.tight_layout()
    return save(fig, path, dpi=130)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT, help="PNG (default: the handout's)")
    args = parser.parse_args()
    print(draw_dispatch(args.out))


if __name__ == "__main__":
    main()
