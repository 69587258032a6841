"""Redraw the handout figures into handouts/figures/ (the registry in scripts/figures/registry.py).

    python -m scripts.figures                          # every figure the handouts here link (about 20 s on 2 cores)
    python -m scripts.figures --only ring_attention.png --out-dir /tmp/figs

The figures show what the algorithms do, drawn from the handouts' definitions (and, for Part 5's
grids and Part 7's numbers, from the implementation's schedules and accounting where it is there). All but
one need no run: Part 11's step timeline (capstone_step_timeline.png) trains one step on 4 ranks and
draws its communication trace (about 5 s). Each part's module also draws its own figures alone
(``python -m scripts.figures.mesh``).

In a kit of some parts only its own parts' figures are drawn (those its handouts link). A figure drawn from
your code waits for it: while the task it needs is a stub, that figure is skipped with the task's name, the
others are drawn, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from scripts.figures.palette import FIGURE_DIR
from scripts.figures.registry import FIGURES, linked_figures

_TASK = re.compile(r"Task \d+\.\d+ \([^)]*\)")  # a stub's NotImplementedError("Task 5.2 (gpipe_schedule): ...")


def stub_task(error: BaseException) -> str | None:
    """The task a figure waits for when drawing it ran into a stub (raised here, or in a rank and reported by
    the harness), else None."""
    text = f"{type(error).__name__}: {error}"
    if not isinstance(error, NotImplementedError) and "NotImplementedError" not in text:
        return None
    found = _TASK.search(text)
    return found[0] if found else "a task that is still a stub"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = linked_figures(FIGURE_DIR.parent)
    parser.add_argument("--only", action="append", choices=names, help="draw this figure only (repeatable)")
    parser.add_argument("--out-dir", type=Path, default=FIGURE_DIR, help="folder (default handouts/figures/)")
    args = parser.parse_args()
    waiting = []
    for name in args.only or names:
        try:
            print(FIGURES[name](args.out_dir / name))
        except Exception as error:  # noqa: BLE001 (a stub is expected in a student's kit; anything else is raised)
            task = stub_task(error)
            if task is None:
                raise
            waiting.append(name)
            print(f"{name}: not drawn: {task} is not implemented yet")
    if waiting:
        print(f"{len(waiting)} figure(s) wait for a stub: {', '.join(waiting)}", file=sys.stderr)
    return 1 if waiting else 0


if __name__ == "__main__":
    sys.exit(main())
