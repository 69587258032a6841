"""Part 10's figure for §10.5-§10.6 (handouts/10-failures.md), into handouts/figures/ (pure geometry, no ranks).

    python -m scripts.figures.fault_tolerance     # writes it
    python -m scripts.figures.fault_tolerance --out-dir /tmp/figs

fault_tolerance_recovery.png   one job of 4 ranks losing rank 3 at step 7 (checkpoints every 4 steps), as
                               time lanes, twice. Restart from disk: the survivors notice and report, every
                               rank is relaunched, loads the step-4 checkpoint and redoes steps 4-6 before
                               step 7. Live recovery: the survivors notice, drop the old group, a hot spare
                               joins in rank 3's place and receives one replica's state from rank 0; step 7
                               starts at once. Times are illustrative, the order of events is the kit's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt

from scripts.figures.palette import COMM, DONE, FIGURE_DIR, IDLE, NOTE, RANKS, SPARE, arrow, box, save

RECOVERY = FIGURE_DIR / "fault_tolerance_recovery.png"

STEP, DETECT, LAUNCH, LOAD, JOIN, SEND = 1.0, 0.5, 1.6, 1.1, 0.5, 0.4  # illustrative durations


def _steps(ax, y, x, first, count, colour) -> float:
    for s in range(first, first + count):
        box(ax, x, y + 0.15, STEP * 0.95, 0.7, colour, f"step {s}", alpha=0.6, fontsize=7)
        x += STEP
    return x


def draw_recovery(path: Path, n: int = 4) -> Path:
    fig, axes = plt.subplots(2, 1, figsize=(11, 6.4))
    kill = 2 * STEP  # steps 5 and 6 done since the checkpoint of step 4, the kill during step 7
    for ax, title in zip(axes, ["restart from disk (Task 10.5)", "live recovery from a healthy replica (Task 10.6)"]):
        ax.axvline(kill, color="black", lw=1, ls=":")
        ax.text(kill + 0.05, n + 0.1, "rank 3 killed during step 7 (SIGKILL)", ha="left", va="bottom", fontsize=7)
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_yticks([])
        ax.set_xticks([])
        ax.set_xlim(-1.4, 11.5)
        ax.set_ylim(-0.9, n + 1.0)
    restart, live = axes
    for r in range(n):  # restart: every rank goes through the same relaunch, load and redo
        y = n - 1 - r
        restart.text(-0.2, y + 0.5, f"rank {r}", ha="right", va="center", fontsize=8)
        _steps(restart, y, 0.0, 5, 2, RANKS[r])
        if r == n - 1:
            box(restart, kill, y + 0.15, DETECT, 0.7, "black", "", alpha=0.8)
        else:
            box(restart, kill, y + 0.15, DETECT, 0.7, IDLE, "notice", fontsize=7)
        x = kill + DETECT
        box(restart, x, y + 0.15, LAUNCH, 0.7, SPARE if r < n - 1 else "#e8e8e8", "relaunch", fontsize=7)
        x += LAUNCH
        box(restart, x, y + 0.15, LOAD, 0.7, DONE, "load step 4", fontsize=7)
        x = _steps(restart, y, x + LOAD, 4, 3, RANKS[r])
        _steps(restart, y, x, 7, 1, RANKS[r])
    restart.text(kill + DETECT + LAUNCH + LOAD + 1.5, -0.55, "steps 4-6 again: the work since the checkpoint",
                 ha="center", fontsize=7, color=NOTE)  # fmt: skip
    for r in range(n):  # live: survivors keep state; the spare takes rank 3's place and receives rank 0's state
        y = n - 1 - r
        live.text(-0.2, y + 0.5, f"rank {r}" if r < n - 1 else "rank 3 / spare", ha="right", va="center", fontsize=8)
        if r < n - 1:
            _steps(live, y, 0.0, 5, 2, RANKS[r])
            box(live, kill, y + 0.15, DETECT, 0.7, IDLE, "notice", fontsize=7)
        else:
            _steps(live, y, 0.0, 5, 2, RANKS[r])
            box(live, kill, y + 0.15, DETECT + JOIN, 0.35, "black", "", alpha=0.8)
            box(live, kill, y + 0.55, DETECT, 0.3, SPARE, "spare", fontsize=6)
        x = kill + DETECT
        box(live, x, y + 0.15, JOIN, 0.7, COMM, "new\ngroup", fontsize=6)
        x += JOIN
        if r in (0, n - 1):
            box(live, x, y + 0.15, SEND, 0.7, COMM, "send" if r == 0 else "recv", fontsize=7)
        x += SEND
        _steps(live, y, x, 7, 3, RANKS[r])
    arrow(live, (kill + DETECT + JOIN + SEND / 2, n - 0.85), (kill + DETECT + JOIN + SEND / 2, 0.95), colour="black")
    live.text(kill + DETECT + JOIN + SEND + 3 * STEP + 0.2, 0.5, "rank 0 → spare, point to point:\nparams + optimizer "
              "state + step\n(no disk, no step redone)", ha="left", va="center", fontsize=7, color=NOTE)  # fmt: skip
    fig.tight_layout()
    return save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=FIGURE_DIR, help=f"folder for the PNG (default {FIGURE_DIR})")
    args = parser.parse_args()
    print(f"wrote {draw_recovery(args.out_dir / RECOVERY.name)}")


if __name__ == "__main__":
    main()
