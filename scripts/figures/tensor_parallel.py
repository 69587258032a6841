"""Part 4's figure: the tensor-parallel MLP with f and g, and its sequence-parallel form (tp_mlp_f_g.png).

    python -m scripts.figures.tensor_parallel       # writes handouts/figures/tp_mlp_f_g.png

Drawn from the handout's definitions (handouts/04-tensor-parallel.md), not from a run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from matplotlib import pyplot as plt

from scripts.figures.palette import COMM, FIGURE_DIR, IDLE, RANKS, arrow, box, save


def draw_tp(path: Path) -> Path:
    """Megatron's MLP: f (identity forward, all-reduce backward) before the column-parallel fc1, g
    (all-reduce forward, identity backward) after the row-parallel fc2; with sequence parallelism f
    becomes an all-gather on dim 0 and g a reduce-scatter on dim 0."""
    fig, axes = plt.subplots(2, 1, figsize=(10, 5.2))
    rows = [
        (
            "tensor parallel",
            "x (s, h)\nreplicated",
            "f\nfwd: identity\nbwd: all-reduce",
            "g\nfwd: all-reduce\nbwd: identity",
            "y (s, h)\nreplicated",
        ),
        (
            "tensor + sequence parallel",
            "x (s/T, h)\nthis rank's rows",
            "all-gather dim 0\n(bwd: reduce-scatter)",
            "reduce-scatter dim 0\n(bwd: all-gather)",
            "y (s/T, h)\nthis rank's rows",
        ),
    ]
    for ax, (title, x_in, f, g, y_out) in zip(axes, rows):
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 2.4)
        ax.axis("off")
        ax.set_title(title, fontsize=10)
        box(ax, 0.1, 0.8, 1.4, 0.8, IDLE, x_in)
        box(ax, 1.9, 0.8, 1.5, 0.8, COMM, f, fontsize=7)
        for t in range(2):
            y = 1.4 - 1.0 * t
            box(ax, 3.9, y, 1.6, 0.7, RANKS[t], f"rank {t}: fc1 cols\nGELU (d_ff/T)", alpha=0.45, fontsize=7)
            box(ax, 5.8, y, 1.4, 0.7, RANKS[t], f"rank {t}: fc2 rows\npartial sum", alpha=0.45, fontsize=7)
            arrow(ax, (3.4, 1.2), (3.9, y + 0.35))
            arrow(ax, (5.5, y + 0.35), (5.8, y + 0.35))
            arrow(ax, (7.2, y + 0.35), (7.5, 1.2))
        box(ax, 7.5, 0.8, 1.3, 0.8, COMM, g, fontsize=7)
        box(ax, 8.9, 0.8, 1.05, 0.8, IDLE, y_out, fontsize=7)
        arrow(ax, (1.5, 1.2), (1.9, 1.2))
    fig.tight_layout()
    return save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=FIGURE_DIR, help="folder (default handouts/figures/)")
    args = parser.parse_args()
    print(draw_tp(args.out_dir / "tp_mlp_f_g.png"))


if __name__ == "__main__":
    main()
