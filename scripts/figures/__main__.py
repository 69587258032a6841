"""Redraw every handout figure into handouts/figures/ (the registry in scripts/figures/registry.py).

    python -m scripts.figures                          # all of them (about 20 s on 2 cores)
    python -m scripts.figures --only ring_attention.png --out-dir /tmp/figs

The figures show what the algorithms do, drawn from the handouts' definitions (and, for Part 5's
grids and Part 7's numbers, from the reference's schedules and accounting where it is there). All but
one need no run: Part 11's step timeline (capstone_step_timeline.png) trains one step on 4 ranks and
draws its communication trace (about 5 s). Each part's module also draws its own figures alone
(``python -m scripts.figures.mesh``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scripts.figures.palette import FIGURE_DIR
from scripts.figures.registry import FIGURES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=sorted(FIGURES), help="draw this figure only (repeatable)")
    parser.add_argument("--out-dir", type=Path, default=FIGURE_DIR, help="folder (default handouts/figures/)")
    args = parser.parse_args()
    for name, draw in FIGURES.items():
        if not args.only or name in args.only:
            print(draw(args.out_dir / name))


if __name__ == "__main__":
    main()
