"""Every image a handout links is drawn by ``python -m scripts.figures``, and every figure it draws is linked.

    pytest tests/staff/test_figures.py

Cheap (no drawing): the handouts' ``![...](figures/X.png)`` links against the registry,
scripts/figures/registry.py, and each registered file present in handouts/figures/. A figure that
only an old script drew, or one drawn for no handout, fails here instead of going stale.
"""

from __future__ import annotations

import re

import pytest

from scripts.figures.registry import FIGURES
from tests.harness.pool import ROOT

pytestmark = pytest.mark.staff

IMAGE = re.compile(r"!\[[^\]]*\]\((?:\./)?figures/([^)\s]+)\)")


def _linked() -> dict[str, list[str]]:
    """figure file -> the handouts that show it."""
    linked: dict[str, list[str]] = {}
    for handout in sorted((ROOT / "handouts").glob("*.md")):
        for name in IMAGE.findall(handout.read_text()):
            linked.setdefault(name, []).append(handout.name)
    return linked


def test_every_linked_figure_is_drawn_by_the_registry():
    """Every image a handout links is a file python -m scripts.figures draws (its registry)."""
    linked = _linked()
    assert linked, "no handout links a figure: has the link syntax changed?"
    missing = {name: where for name, where in linked.items() if name not in FIGURES}
    assert not missing, f"handouts link figures that python -m scripts.figures does not draw: {missing}"


def test_every_registered_figure_is_linked_and_committed():
    """Every figure the registry draws is linked from a handout and committed under handouts/figures/."""
    linked = _linked()
    unused = sorted(set(FIGURES) - set(linked))
    assert not unused, f"scripts/figures/registry.py draws figures no handout links: {unused}"
    absent = sorted(name for name in FIGURES if not (ROOT / "handouts" / "figures" / name).is_file())
    assert not absent, f"registered figures missing from handouts/figures/ (run python -m scripts.figures): {absent}"
