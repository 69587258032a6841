"""A grade's progress on stderr: one line per part as its tests finish (scripts/grading/progress.py; staff only).

    pytest tests/staff/grader/test_progress.py -v

Synthetic runs of the suite's real items (no test runs): the lines must come exactly when a part's last case has
its outcome, once, with the part's score, seconds and budget. A real grade's lines are checked by
test_regrade.py's command-line test (stderr has them, stdout does not).
"""

from __future__ import annotations

import io

import pytest

from scripts.grading.progress import Progress
from scripts.grading.rubric import load_rubric
from scripts.grading.runner import RunRecord

pytestmark = pytest.mark.staff


RUBRIC = load_rubric().select(["ddp", "tensor_parallel"])


def _item(file: str, function: str, case: str, part: str) -> dict:
    """A case whose function is marked with every task of ``part`` (so it holds the part's points)."""
    markers = [f"task{t.replace('.', '_')}" for t in RUBRIC.parts[part].tasks]
    return {"nodeid": f"{file}::{function}[{case}]", "file": file, "function": function, "markers": markers,
            "doc": ""}  # fmt: skip


@pytest.mark.parametrize("bar", [False, True], ids=["lines", "terminal-bar"])
def test_one_line_per_part_when_its_last_case_ends_then_the_hidden_run(bar):
    """Part 2 reports when its two cases are done (not before, not twice); part 4 after it; the hidden run's line
    adds the public run's seconds to its own against the same budget. With a bar the lines are the same."""
    rubric = RUBRIC
    items = [_item("tests/test_ddp.py", "test_a", "w2", "ddp"), _item("tests/test_ddp.py", "test_a", "w4", "ddp"),
             _item("tests/test_tensor_parallel.py", "test_b", "w2", "tensor_parallel")]  # fmt: skip
    out = io.StringIO()
    progress = Progress(rubric, out, bar=bar)
    record = RunRecord(items=items, spent={"ddp": 12.4})
    record.outcomes[items[0]["nodeid"]] = ("passed", "")
    progress.update("public", record)
    assert "part 2" not in out.getvalue(), "a part was reported before its last case ended"
    record.outcomes[items[1]["nodeid"]] = ("failed", "E   AssertionError")
    progress.update("public", record)
    progress.update("public", record)
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("part ")]
    budget = rubric.parts["ddp"].budget_s
    assert lines == [f"part 2 ddp, public tests: {rubric.parts['ddp'].points / 2:.2f} / "
                     f"{rubric.parts['ddp'].points:.2f}  (12 s of its {budget:.0f} s budget)"], lines  # fmt: skip
    record.outcomes[items[2]["nodeid"]] = ("passed", "")
    progress.update("public", record)
    hidden = RunRecord(items=[_item("tests/staff/hidden/test_ddp_hidden.py", "test_h", "w2", "ddp")],
                       spent={"ddp": 3.0})  # fmt: skip
    hidden.outcomes[hidden.items[0]["nodeid"]] = ("passed", "")
    progress.update("hidden", hidden)
    progress.close()
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("part ")]
    assert len(lines) == 3 and lines[1].startswith("part 4 tensor_parallel, public tests: "), lines
    assert lines[2].startswith("part 2 ddp, hidden tests: ") and "(15 s of its" in lines[2], lines
