"""Draw recursive doubling's exchanges for the handout (handouts/figures/recursive_doubling.png).

    python scripts/draw_recursive_doubling.py            # N = 6: two extra ranks fold in and out
    python scripts/draw_recursive_doubling.py --world-size 8 --out /tmp/rd8.png

One row per rank, one column per step. Each dot is labelled with the ranks whose tensors it has
summed so far; arrows are the messages of that step (a double arrow is an exchange: both send their
whole partial sum, both add). The schedule is the one ``all_reduce(algorithm="recursive_doubling")``
specifies: extra ranks p + i fold into rank i, ranks 0..p-1 exchange with rank XOR 2**k, and the
result goes back to the extra ranks.
"""

from __future__ import annotations

import argparse
from pathlib import Path

FIGURE = Path(__file__).resolve().parents[2] / "handouts" / "figures" / "recursive_doubling.png"


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


def draw(n: int, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = schedule(n)
    held = [{r} for r in range(n)]  # whose tensors each rank has summed
    fig, ax = plt.subplots(figsize=(1.9 * (len(steps) + 1) + 1, 0.6 * n + 1.2))
    p = 1 << (n.bit_length() - 1)

    def dots(col: int) -> None:
        for r in range(n):
            extra = r >= p
            ax.plot(col, -r, "o", ms=9, color="C1" if extra else "C0", zorder=3)
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
                        arrowprops=dict(arrowstyle=style, color="C2" if two_way else "C3", lw=1.3))  # fmt: skip
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
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=6, help="number of ranks (default 6: two extra ranks)")
    parser.add_argument("--out", type=Path, default=FIGURE, help=f"PNG to write (default {FIGURE})")
    args = parser.parse_args()
    print(draw(args.world_size, args.out))


if __name__ == "__main__":
    main()
