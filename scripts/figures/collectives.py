"""Part 1's figures: the ring all-reduce step by step, and recursive doubling's exchanges.

    python -m scripts.figures.collectives                 # both figures, into handouts/figures/
    python -m scripts.figures.collectives --world-size 8 --out /tmp/rd8.png   # recursive doubling on 8 ranks

``draw_ring`` (ring_reduce_scatter_all_gather.png): who holds which partial sum of which chunk, N = 3.
``draw_recursive_doubling`` (recursive_doubling.png): one row per rank, one column per step. Each
dot is labelled with the ranks whose tensors it has summed so far; arrows are the messages of that
step (a double arrow is an exchange: both send their whole partial sum, both add). The schedule is
the one ``all_reduce(algorithm="recursive_doubling")`` specifies: extra ranks p + i fold into rank
i, ranks 0..p-1 exchange with rank XOR 2**k, and the result goes back to the extra ranks.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from matplotlib import pyplot as plt

from scripts.figures.palette import DONE, FIGURE_DIR, RANKS, box, save


def schedule(n: int) -> list[tuple[str, list[tuple[int, int]]]]:
    """(step name, [(sender, receiver), ...]) for every step of recursive doubling on n ranks."""
    p = 1 << (n.bit_length() - 1)
    steps = []
    if n != p:
        steps.append(("fold in", [(p + i, i) for i in range(n - p)]))
    for k in range(p.bit_length() - 1):
        pairs = [(r, r ^ (1 << k)) for r in range(p)]
        steps.append((f"step {k}: rank XOR {1 << k}", pairs))
    if n != p:
        steps.append(("fold out", [(i, p + i) for i in range(n - p)]))
    return steps


def _label(ranks: set[int]) -> str:
    return "{" + ",".join(str(r) for r in sorted(ranks)) + "}"


def draw_recursive_doubling(path: Path, n: int = 6) -> Path:
    """Recursive doubling on ``n`` ranks (6: two extra ranks fold in and out), one column per step."""
    steps = schedule(n)
    held = [{r} for r in range(n)]  # whose tensors each rank has summed
    fig, ax = plt.subplots(figsize=(1.9 * (len(steps) + 1) + 1, 0.6 * n + 1.2))
    p = 1 << (n.bit_length() - 1)

    def dots(col: int) -> None:
        for r in range(n):
            extra = r >= p
            ax.plot(col, -r, "o", ms=9, color=RANKS[1] if extra else RANKS[0], zorder=3)
            ax.text(col, -r + 0.28, _label(held[r]), ha="center", va="bottom", fontsize=7)

    dots(0)
    for col, (name, pairs) in enumerate(steps, start=1):
        new = [set(h) for h in held]
        receivers = {d for _, d in pairs}
        for s, d in pairs:
            if name == "fold out":
                new[d] = set(held[s])
            else:
                new[d] |= held[s]
            two_way = (d, s) in pairs
            if two_way and s > d:
                continue  # drawn once, as a double arrow
            style = "<->" if two_way else "->"
            ax.annotate("", xy=(col, -d), xytext=(col - 1, -s),
                        arrowprops=dict(arrowstyle=style, color=RANKS[2] if two_way else RANKS[3], lw=1.3))  # fmt: skip
        for r in set(range(n)) - receivers:  # ranks that receive nothing in this step keep what they hold
            ax.plot([col - 1, col], [-r, -r], ":", color="gray", lw=0.8)
        held = new
        ax.text(col - 0.5, 0.9, name, ha="center", fontsize=8)
        dots(col)
    ax.set_yticks([-r for r in range(n)], [f"rank {r}" + (" (extra)" if r >= p else "") for r in range(n)])
    ax.set_xticks([])
    ax.set_xlim(-0.4, len(steps) + 0.4)
    ax.set_ylim(-n + 0.4, 1.3)
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"recursive doubling all-reduce, N = {n} (p = {p}): {len(steps)} steps, each moving the whole tensor",
                 fontsize=9)  # fmt: skip
    fig.tight_layout()
    return save(fig, path, dpi=130)


def draw_ring(path: Path) -> Path:
    """Ring reduce-scatter then all-gather on N = 3: who holds which partial sum of which chunk, step by step.

    Rank r sends chunk (r - s) mod N at reduce-scatter step s, and chunk (r + 1 - s) mod N at
    all-gather step s; after N - 1 steps of each, every rank holds every chunk's full sum."""
    n = 3
    # contributions[r][c]: the set of ranks whose chunk c has been summed into rank r's copy
    held = [[{r} for _ in range(n)] for r in range(n)]
    states, labels = [], []

    def snapshot(label):
        states.append([[set(s) for s in row] for row in held])
        labels.append(label)

    snapshot("start")
    sends = []
    for step in range(n - 1):
        moves = [(r, (r - step) % n) for r in range(n)]
        new = [[set(s) for s in row] for row in held]
        for r, c in moves:
            new[(r + 1) % n][c] |= held[r][c]
        held = new
        sends.append(moves)
        snapshot(f"reduce-scatter step {step + 1}")
    for step in range(n - 1):
        moves = [(r, (r + 1 - step) % n) for r in range(n)]
        new = [[set(s) for s in row] for row in held]
        for r, c in moves:
            new[(r + 1) % n][c] = set(held[r][c])
        held = new
        sends.append(moves)
        snapshot(f"all-gather step {step + 1}")

    fig, axes = plt.subplots(1, len(states), figsize=(3.0 * len(states), 3.2))
    for k, (ax, state, label) in enumerate(zip(axes, states, labels)):
        ax.set_xlim(-0.2, n + 0.2)
        ax.set_ylim(-0.6, n + 0.2)
        ax.axis("off")
        ax.set_title(label, fontsize=9)
        for r in range(n):
            y = n - 1 - r
            ax.text(-0.15, y + 0.4, f"r{r}", ha="right", va="center", fontsize=8)
            for c in range(n):
                full = len(state[r][c]) == n
                text = "+".join(str(i) for i in sorted(state[r][c]))
                box(ax, c, y, 0.9, 0.8, DONE if full else RANKS[c], text, alpha=1.0 if full else 0.35)
        if k > 0:
            moved = ", ".join(f"r{r}→r{(r + 1) % n}: c{c}" for r, c in sends[k - 1])
            ax.text(n / 2, -0.35, moved, ha="center", fontsize=7)
    axes[0].text(n / 2, -0.35, "columns: chunks c0 c1 c2", ha="center", fontsize=7)
    fig.suptitle(
        "Ring all-reduce, N = 3: reduce-scatter (N-1 steps) then all-gather (N-1 steps); "
        "gold = the full sum of that chunk",
        fontsize=10,
    )
    fig.tight_layout()
    return save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=6, help="number of ranks (default 6: two extra ranks)")
    parser.add_argument("--out", type=Path, default=None, help="recursive doubling's PNG (default: the handout's)")
    args = parser.parse_args()
    if args.out is None:  # the handout's two figures
        print(draw_ring(FIGURE_DIR / "ring_reduce_scatter_all_gather.png"))
    print(draw_recursive_doubling(args.out or FIGURE_DIR / "recursive_doubling.png", args.world_size))


if __name__ == "__main__":
    main()
