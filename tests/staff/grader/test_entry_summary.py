"""Each Gradescope entry's summary is its test's first sentence, whole (scripts/grading/plugin.py; staff only).

pytest tests/staff/grader/test_entry_summary.py -v
"""

from __future__ import annotations

import ast

import pytest

from scripts.grading.plugin import summary_of
from tests.harness.pool import ROOT

pytestmark = pytest.mark.staff


def test_a_summary_is_the_first_sentence_with_its_lines_joined():
    """A first line that ends mid-sentence is joined to the next; the summary stops at the sentence's end (not at
    an abbreviation, a number or a path), and a paragraph without one is taken whole."""
    doc = """Each unit all-gathers once before its forward and once before its backward, every microbatch, and
    reduce-scatters once per step (e.g. under 4 microbatches, 1.5x fewer). Then more.

    Details."""
    want = ("Each unit all-gathers once before its forward and once before its backward, every microbatch, and "
            "reduce-scatters once per step (e.g. under 4 microbatches, 1.5x fewer).")  # fmt: skip
    assert summary_of(doc) == want
    assert summary_of("No sentence end here\n    nor here\n\n    Other.") == "No sentence end here nor here"
    assert summary_of(None) == summary_of("") == ""


def test_no_test_of_the_kit_gets_a_summary_cut_mid_sentence():
    """Over every test function of tests/: its summary ends a sentence, or is its docstring's whole first paragraph
    (it has none to end). Cutting at the first line break, as the grader did, fails this on the kit's own tests."""
    cut = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test") and ast.get_docstring(node):
                doc = ast.get_docstring(node)
                got, paragraph = summary_of(doc), " ".join(doc.split("\n\n")[0].split())
                if not (got.endswith((".", "!", "?")) or got == paragraph):
                    cut.append(f"{path.relative_to(ROOT)}::{node.name}: {got!r}")
    assert not cut, "\n".join(cut[:10])
