"""Part 10's figures (handouts/10-failures.md), into handouts/figures/ (pure geometry, no ranks).

    python -m scripts.figures.checkpoint          # writes both
    python -m scripts.figures.checkpoint --out-dir /tmp/figs

checkpoint_protocol.png    one save on 4 ranks, as time lanes: every rank writes its boxes under a
                           temporary name, fsyncs and renames, reports; rank 0 writes the metadata and,
                           last, the COMMITTED marker. Crosses mark where a rank can die and what the
                           next start finds (always the previous step, until the marker). Below, the
                           same save synchronous and asynchronous: the step waits only for staging.
checkpoint_resharding.png  a flat FSDP weight saved on 4 ranks and loaded on 3: each new rank's box,
                           the saved boxes it overlaps, and the bytes it reads (whole checksum blocks).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt

from scripts.figures.palette import COMM, DONE, FIGURE_DIR, IDLE, NOTE, RANKS, box, save

PROTOCOL = FIGURE_DIR / "checkpoint_protocol.png"
RESHARDING = FIGURE_DIR / "checkpoint_resharding.png"


def draw_protocol(path: Path, n: int = 4) -> Path:
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(11, 6.2), gridspec_kw={"height_ratios": [n + 1, 2.6]})
    write = [3.0, 4.2, 3.6, 2.6]  # each rank's write time (uneven shards, uneven disks)
    for r in range(n):
        y = n - 1 - r
        box(ax, 0, y + 0.1, 0.8, 0.8, COMM, "plan", fontsize=7)
        box(ax, 0.9, y + 0.1, write[r % 4], 0.8, RANKS[r], f"rank {r}: write boxes → .tmp", alpha=0.55, fontsize=7)
        x = 0.9 + write[r % 4]
        box(ax, x, y + 0.1, 0.7, 0.8, IDLE, "fsync\nrename", fontsize=6)
        box(ax, 5.9, y + 0.1, 0.8, 0.8, COMM, "report", fontsize=7)
    box(ax, 6.9, n - 0.9, 1.4, 0.8, DONE, "metadata", fontsize=7)
    box(ax, 8.4, n - 0.9, 1.3, 0.8, "tab:green", "COMMITTED", fontsize=7)
    for x, label in [(0.9, "killed here:\nstep k-1 is latest"), (3.2, "torn .tmp or\nmissing file"),
                     (7.6, "metadata but\nno marker: torn"), (9.9, "committed:\nstep k")]:  # fmt: skip
        ax.plot([x], [-0.35], marker="x", color="black" if x < 9 else "tab:green", markersize=9, mew=2)
        ax.text(x, -0.75, label, ha="center", va="top", fontsize=7, color=NOTE)
    ax.set_xlim(-0.2, 10.6)
    ax.set_ylim(-1.6, n + 0.1)
    ax.set_yticks([])
    ax.set_xticks([])
    ax.set_title("A sharded, atomic save: the marker is the last change to the filesystem", fontsize=10)
    for y, (name, stage, write_time) in [(0.0, ("synchronous save", 3.6, 0.0)), (1.4, ("AsyncCheckpointer", 0.5, 3.1))]:
        x = 0.0
        for step in range(3):
            box(ax2, x, y + 0.15, 1.4, 0.7, "tab:blue", f"step {step}", alpha=0.7, fontsize=7)
            x += 1.4
            if step == 1:
                box(ax2, x, y + 0.15, stage, 0.7, "tab:red", "stage" if write_time else "save (blocks)", fontsize=7)
                if write_time:
                    box(ax2, x + stage, y - 0.05, write_time, 0.18, IDLE, "", fontsize=6)
                    ax2.text(x + stage + write_time + 0.1, y + 0.03, "write in a background thread", ha="left",
                             va="center", fontsize=7, color=NOTE)  # fmt: skip
                x += stage
        ax2.text(-0.2, y + 0.5, name, ha="right", va="center", fontsize=8)
    ax2.set_xlim(-3.2, 10.6)
    ax2.set_ylim(-0.3, 2.4)
    ax2.axis("off")
    return save(fig, path)


def _boxes(n: int, numel: int) -> list[tuple[int, int]]:
    chunk = -(-numel // n)
    return [(min(r * chunk, numel), min((r + 1) * chunk, numel)) for r in range(n)]


def draw_resharding(path: Path, numel: int = 6144, old: int = 4, new: int = 3, block_elems: int = 400) -> Path:
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for r, (a, b) in enumerate(_boxes(old, numel)):
        box(ax, a, 2.2, b - a, 0.6, RANKS[r], f"saved by rank {r}", alpha=0.6, fontsize=8)
        for k in range(a, b, block_elems):  # checksum blocks start at each box's first byte
            ax.plot([k, k], [2.2, 2.8], color="white", lw=0.6)
    for r, (a, b) in enumerate(_boxes(new, numel)):
        box(ax, a, 0.2, b - a, 0.6, RANKS[r], f"new rank {r} of {new}", alpha=0.35, fontsize=8, hatch="//")
        for sa, sb in _boxes(old, numel):  # reads: the blocks of each saved box that hold needed elements
            lo, hi = max(a, sa), min(b, sb)
            if lo >= hi:
                continue
            ra = sa + (lo - sa) // block_elems * block_elems
            rb = min(sb, sa + -(-(hi - sa) // block_elems) * block_elems)
            ax.add_patch(plt.Rectangle((ra, 1.0 + 0.25 * r), rb - ra, 0.18, color=RANKS[r], alpha=0.9))
    ax.text(-60, 2.5, f"N = {old}", ha="right", va="center", fontsize=9)
    ax.text(-60, 0.5, f"N' = {new}", ha="right", va="center", fontsize=9)
    ax.text(-60, 1.35, "reads", ha="right", va="center", fontsize=9, color=NOTE)
    ax.set_xlim(-700, numel + 50)
    ax.set_ylim(0, 3.1)
    ax.set_yticks([])
    ax.set_xlabel("element of the flattened weight")
    ax.set_title(f"FSDP {old} → {new}: each new rank reads only the checksum blocks (white ticks) that hold "
                 "its elements", fontsize=10)  # fmt: skip
    fig.tight_layout()
    return save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=FIGURE_DIR, help=f"folder for the PNGs (default {FIGURE_DIR})")
    args = parser.parse_args()
    print(draw_protocol(args.out_dir / PROTOCOL.name))
    print(draw_resharding(args.out_dir / RESHARDING.name))


if __name__ == "__main__":
    main()
