"""Each part's time budget (``budget_s`` in the rubric) bounds its grade, whatever the submission does (staff only).

    pytest tests/staff/grader/test_budgets.py -v

A submission in which every function of part 1 hangs is graded with a rubric that gives part 1 a budget of
a few seconds: the grade must end soon after the budget is spent, and every entry of the part, public and
hidden, must still be graded (0 points, with a message that says why).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts.grading.rubric import RubricError, load_rubric
from tests.harness.pool import ROOT as REPO

pytestmark = pytest.mark.staff

BUDGET_S = 12
# Every name the tests look up in the module is a function that never returns.
ALL_HANG = """
import time


def _hang(*args, **kwargs):
    time.sleep(3600)


def __getattr__(name):
    return _hang
"""


def _rubric_with_budget(tmp_path: Path, seconds: float) -> Path:
    text = (REPO / "scripts" / "grading" / "rubric.toml").read_text()
    assert "[parts.collectives]\n" in text
    path = tmp_path / "rubric.toml"
    path.write_text(text.replace("[parts.collectives]\n", f"[parts.collectives]\nbudget_s = {seconds}\n", 1))
    return path


def test_a_submission_that_hangs_everywhere_ends_with_its_part_budget_and_every_entry_graded(tmp_path):
    """Every function of part 1 hangs; with a 12 s budget the grade ends within a minute of it, all entries 0."""
    sub = tmp_path / "submission" / "cs336_systems"
    sub.mkdir(parents=True)
    (sub / "collectives.py").write_text(ALL_HANG)
    out = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "scripts.grade", str(sub.parent), "--out", str(out), "--parts", "collectives",
           "--rubric", str(_rubric_with_budget(tmp_path, BUDGET_S)), "--world-sizes", "2", "--deadline", "3",
           "--timeout", "600"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("CS336_")}
    start = time.monotonic()
    subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    results = json.loads(out.read_text())
    tests = results["tests"]
    assert tests and all(t["score"] == 0 for t in tests), [(t["name"], t["score"]) for t in tests]
    assert any("(hidden test)" in t["name"] for t in tests), "the hidden tests of the part were not graded"
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
