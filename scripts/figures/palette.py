"""The one palette of the handout figures, and the few primitives they all draw with.

Every module of scripts/figures/ takes its colours from here, so that a colour means the same thing
in every handout: rank r is ``RANKS[r]`` everywhere, a forward is blue and a backward orange in every
pipeline picture, communication is plum, idle or replicated data is grey.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

FIGURE_DIR = Path(__file__).resolve().parents[2] / "handouts" / "figures"

RANKS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray"]
WORK = {"F": "tab:blue", "B": "tab:orange", "W": "tab:green"}  # forward, backward (input grad), weight grad
STATE = {"params": "tab:blue", "grads": "tab:orange", "optimizer state": "tab:green"}  # what a rank stores
AXES = {"dp": "tab:green", "pp": "tab:blue", "tp": "tab:red"}  # the mesh's three axes
COMM = "plum"  # a collective (all-gather, all-reduce, ...)
REDUCE = "khaki"  # a reduce-scatter of gradients, where it must differ from COMM
DONE = "gold"  # a finished result (a chunk's full sum)
IDLE = "lightgrey"  # idle time, replicated data, a background
NOTE = "0.3"  # secondary text: coordinates, captions inside a plot
SPARE = "#f4f4f4"  # a panel's background band


def box(ax, x, y, w, h, colour, text="", alpha=1.0, fontsize=8, hatch=None) -> None:
    """A labelled rectangle with a black edge (a chunk, a block of work, a buffer)."""
    ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, edgecolor="black", alpha=alpha, hatch=hatch, lw=0.8))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def arrow(ax, start, end, colour="black") -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, color=colour, lw=1.0))


def save(fig, path: Path, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` (folders made as needed) and close it."""
    from matplotlib import pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
