"""Part 9's figure (handouts/09-context-parallel.md), into handouts/figures/ (pure geometry, no ranks).

    python -m scripts.figures.context_parallel            # writes handouts/figures/ring_attention.png
    python -m scripts.figures.context_parallel --ranks 8 --out /tmp/ring8.png   # another ring size

ring_attention.png   the causal score matrix of a sequence on N ranks, contiguous vs zigzag: each
                     (query chunk, key chunk) tile is coloured by the rank that computes it and
                     labelled with the ring step at which that key block is there (step t: the block
                     of rank r - t); blank tiles are hidden by the mask and skipped. The right panel
                     counts each rank's tiles (its attention work): zigzag gives every rank the same.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from scripts.figures.palette import FIGURE_DIR, RANKS, save

FIGURE = FIGURE_DIR / "ring_attention.png"


def chunk_owner(chunk: int, n: int, zigzag: bool) -> int:
    """Rank holding sequence chunk ``chunk`` of 2N (two chunks per rank in both layouts)."""
    if not zigzag:
        return chunk // 2
    return chunk if chunk < n else 2 * n - 1 - chunk


def tiles(n: int, zigzag: bool) -> list[tuple[int, int, int, int, float]]:
    """(query chunk, key chunk, computing rank, ring step, fraction computed) of every visible tile.

    A tile below the diagonal is computed whole, a diagonal tile half (its upper triangle is hidden).
    """
    out = []
    for qc in range(2 * n):
        for kc in range(qc + 1):
            rank, owner = chunk_owner(qc, n, zigzag), chunk_owner(kc, n, zigzag)
            out.append((qc, kc, rank, (rank - owner) % n, 0.5 if qc == kc else 1.0))
    return out


def draw_ring_attention(path: Path, n: int = 4) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.4), gridspec_kw={"width_ratios": [1, 1, 0.8]})
    work = {}
    for ax, zigzag in zip(axes[:2], (False, True)):
        name = "zigzag" if zigzag else "contiguous"
        work[name] = [0.0] * n
        for qc, kc, rank, step, frac in tiles(n, zigzag):
            work[name][rank] += frac
            color = RANKS[rank % len(RANKS)]
            if frac < 1:  # the diagonal tile: only its lower triangle is attended
                ax.add_patch(plt.Polygon([(kc, qc), (kc, qc + 1), (kc + 1, qc + 1)], color=color, alpha=0.8))
            else:
                ax.add_patch(Rectangle((kc, qc), 1, 1, color=color, alpha=0.8))
            ax.text(kc + 0.5 - 0.15 * (frac < 1), qc + 0.5 + 0.2 * (frac < 1), str(step), ha="center",
                    va="center", fontsize=8, color="white")  # fmt: skip
        ax.set_xlim(0, 2 * n)
        ax.set_ylim(2 * n, 0)
        ax.set_aspect("equal")
        ax.set_xticks(range(2 * n + 1))
        ax.set_yticks(range(2 * n + 1))
        ax.grid(True, color="0.85", linewidth=0.6)
        ax.set_xlabel("key chunk (sequence position →)")
        ax.set_ylabel("query chunk")
        owners = " ".join(str(chunk_owner(c, n, zigzag)) for c in range(2 * n))
        ax.set_title(f"{name}: chunk owners {owners}\n(colour: computing rank, number: ring step)", fontsize=9)
    ax = axes[2]
    width = 0.38
    for i, (name, per_rank) in enumerate(work.items()):
        ax.bar([r + (i - 0.5) * width for r in range(n)], per_rank, width, label=name,
               color=["0.6", RANKS[0]][i])  # fmt: skip
    ax.set_xticks(range(n))
    ax.set_xlabel("rank")
    ax.set_ylabel("attention work (chunk tiles)")
    ax.set_title(f"causal work per rank, N = {n}", fontsize=9)
    ax.legend(fontsize=8)
    fig.suptitle("Ring attention with a causal mask: who computes what, and when", fontsize=11)
    fig.tight_layout()
    return save(fig, path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4, help="ring size N (default 4; at most 8 colours)")
    parser.add_argument("--out", type=Path, default=FIGURE, help="PNG (default: the handout's)")
    args = parser.parse_args()
    print(draw_ring_attention(args.out, args.ranks))


if __name__ == "__main__":
    main()
