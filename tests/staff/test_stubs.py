"""The student stubs and handouts/api.md are generated from the reference, and current (staff only).

    pytest tests/staff/test_stubs.py
    python -m scripts.release.stubs --check       # the same check, as CI runs it

``reference_solutions/<part>.py`` is the one source of each part module: its solution code sits between
``# BEGIN SOLUTION`` / ``# END SOLUTION`` markers and ``scripts/release/stubs.py`` writes the stub from
the rest. These tests check the committed stubs are what it writes now, and that its rules hold: a
labelled block becomes the ``raise`` naming its handout section, an unlabelled one disappears, and a
marker that does not pair up is an error naming the line.
"""

from __future__ import annotations

import shutil

import pytest

from scripts.release import stubs
from tests.harness.pool import ROOT

pytestmark = pytest.mark.staff

SOURCE = '''def f(x):
    """Doubles x."""
    # BEGIN SOLUTION: Task 2.3 (overlapping DDP)
    return 2 * x
    # END SOLUTION


# BEGIN SOLUTION
def _helper():
    return 1


# END SOLUTION
'''


def test_committed_stubs_and_api_reference_are_what_the_reference_generates():
    """Every generated file on disk equals what the reference generates now (else: rerun the generator)."""
    stale = [str(path.relative_to(ROOT)) for path, text in stubs.generated().items() if path.read_text() != text]
    assert not stale, f"stale {stale}: edit reference_solutions/, then run python -m scripts.release.stubs"


def test_a_labelled_block_becomes_the_raise_naming_its_handout_section_and_a_plain_block_disappears():
    """A labelled block becomes the raise naming its handout section; an unlabelled one is left out."""
    stub = stubs.strip_solutions(SOURCE, "sample.py")
    assert 'raise NotImplementedError("Task 2.3 (overlapping DDP): see handouts/02-ddp.md §2.3")' in stub
    assert "return 2 * x" not in stub and "_helper" not in stub and "SOLUTION" not in stub
    assert '"""Doubles x."""' in stub


@pytest.mark.parametrize(
    "source, problem",
    [
        ("# BEGIN SOLUTION\nx = 1\n", "sample.py:1: BEGIN SOLUTION is never closed"),
        ("x = 1\n# END SOLUTION\n", "sample.py:2: END SOLUTION without a BEGIN"),
        ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n", "sample.py:2: BEGIN SOLUTION inside the block"),
        ("def f():\n    # BEGIN SOLUTION: Task 42.1 (none)\n    pass\n    # END SOLUTION\n", "part 42"),
    ],
    ids=["unclosed", "end-alone", "nested", "no-handout"],
)
def test_markers_that_do_not_pair_up_are_an_error_naming_the_line(source, problem):
    """Unclosed, lone, nested or handout-less markers are an error naming the file and line."""
    with pytest.raises(stubs.MarkerError, match=problem):
        stubs.strip_solutions(source, "sample.py")


def test_a_docstring_edited_in_the_reference_alone_makes_its_stub_stale(tmp_path, monkeypatch):
    """The check CI runs can fail: change a docstring in the one source, and the committed stub is stale."""
    shutil.copytree(ROOT / "reference_solutions", tmp_path / "reference_solutions")
    ddp = tmp_path / "reference_solutions" / "ddp.py"
    ddp.write_text(ddp.read_text().replace("Run the wrapped module", "Run the wrapped model", 1))
    monkeypatch.setattr(stubs, "REFERENCE", tmp_path / "reference_solutions")
    generated = stubs.generated()
    stale = {path.name for path, text in generated.items() if path.read_text() != text}
    assert stale == {"ddp.py", "api.md"}, stale
