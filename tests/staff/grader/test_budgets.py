"""Each part's time budget (``budget_s`` in the rubric) bounds its grade, whatever the submission does (staff only).

    pytest tests/staff/grader/test_budgets.py -v

A submission in which every function of part 1 hangs (each a different function) is graded with a rubric
that gives part 1 a budget of a few seconds: the grade must end soon after the budget is spent, and every
entry of the part, public and hidden, must still be graded (0 points, with a message that says why).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts.grading.rubric import RubricError, load_rubric
from tests.harness.pool import ROOT as REPO
from tests.staff.grader import grader_env

pytestmark = pytest.mark.staff

BUDGET_S = 12


def _hanging_everywhere(stub: str) -> str:
    """The stub module with every ``raise NotImplementedError(...)`` replaced by a sleep of an hour: each of
    its functions and methods hangs when called (the grader stops running each after its first hang, so only
    the budget bounds a submission with many such functions)."""
    lines = stub.splitlines(keepends=True)
    spans = []
    for node in ast.walk(ast.parse(stub)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            name = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(name, ast.Name) and name.id == "NotImplementedError":
                spans.append((node.lineno, node.end_lineno, node.col_offset))
    for first, last, col in sorted(spans, reverse=True):
        lines[first - 1 : last] = [" " * col + "__import__('time').sleep(3600)\n"]
    return "".join(lines)


def _rubric_with_budget(tmp_path: Path, seconds: float) -> Path:
    """The kit's rubric with part 1's ``budget_s`` set to ``seconds``."""
    text = (REPO / "scripts" / "grading" / "rubric.toml").read_text()
    head = text.index("[parts.collectives]\n")
    line = re.compile(r"^budget_s = .*$", re.M).search(text, head)
    assert line and line.start() < text.index("[parts.", head + 1), "part 1 has no budget_s line"
    path = tmp_path / "rubric.toml"
    path.write_text(text[: line.start()] + f"budget_s = {seconds}" + text[line.end() :])
    return path


def test_a_submission_that_hangs_everywhere_ends_with_its_part_budget_and_every_entry_graded(tmp_path):
    """Every function of part 1 hangs; with a 12 s budget the grade ends within a minute of it, all entries 0."""
    sub = tmp_path / "submission" / "cs336_systems"
    sub.mkdir(parents=True)
    (sub / "collectives.py").write_text(_hanging_everywhere((REPO / "cs336_systems" / "collectives.py").read_text()))
    out = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "scripts.grading", str(sub.parent), "--out", str(out), "--parts", "collectives",
           "--rubric", str(_rubric_with_budget(tmp_path, BUDGET_S)), "--world-sizes", "2", "--deadline", "3",
           "--timeout", "600"]  # fmt: skip
    env = grader_env()
    start = time.monotonic()
    subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    results = json.loads(out.read_text())
    tests = results["tests"]
    assert tests and all(t["score"] == 0 for t in tests), [(t["name"], t["score"]) for t in tests]
    hidden = [t for t in tests if "(hidden test)" in t["name"]]
    assert hidden, "the hidden tests of the part were not graded"
    assert all("used up its time budget" in t["output"] for t in hidden), [t["output"][:300] for t in hidden]
    cut = [t for t in tests if "used up its time budget" in t["output"]]
    assert len(cut) >= len(tests) // 2, "most entries should have been cut by the budget:\n" + "\n".join(
        f"{t['name']}: {t['output'][:200]}" for t in tests
    )
    # The budget, plus the case running when it ran out (one deadline and a new pool), plus two pytest starts.
    assert seconds < BUDGET_S + 60, f"the grade took {seconds:.0f} s with a {BUDGET_S} s budget for its only part"
    assert f"of its {BUDGET_S} s budget" in results["output"], results["output"]


def test_a_budget_must_be_a_positive_number_of_seconds(tmp_path):
    """A zero, negative or non-numeric budget_s is a rubric error naming the key."""
    for bad in ("0", "-5", '"fast"'):
        path = _rubric_with_budget(tmp_path, bad)  # type: ignore[arg-type]
        with pytest.raises(RubricError, match="budget_s"):
            load_rubric(path)
