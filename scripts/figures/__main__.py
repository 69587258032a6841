"""Redraw every handout figure into handouts/figures/ (the registry in scripts/figures/registry.py).

    python -m scripts.figures                          # all of them (a few seconds)
    python -m scripts.figures --only ring_attention.png --out-dir /tmp/figs

The figures show what the algorithms do, drawn from the handouts' definitions (and, for Part 5's
grids and Part 7's numbers, from the reference's schedules and accounting where it is there): they
need no run. Each part's module also draws its own figures alone (``python -m scripts.figures.mesh``).
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
