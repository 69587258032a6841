"""Repeated grades of the reference give identical scores, alone and two at once (staff only).

    pytest tests/staff/grader/test_repeat.py -v

CI runs one grade alone and 2 at once of one cheap part (part 6: about 20 s a grade on a 2-core machine;
5 in a row and 2 at once took 164 s of CI's budget, 10 in a row 286 s). A grade alone that is not full
marks is caught by every other staff test that grades the reference (part 1 under low limits, a batch,
Gradescope's run_autograder, --run-as), so the repeats here are what only this test checks: grades at once
agree with a grade alone, entry by entry. The full check, every part, 10 in a row (~30 min), is
``python -m scripts.grading.repeat_grades`` (handouts/grading.md).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness.pool import ROOT as REPO

pytestmark = pytest.mark.staff


def test_repeated_and_concurrent_grades_of_the_reference_agree_entry_by_entry():
    """A grade alone and two at once give every entry the same score, all full marks."""
    proc = subprocess.run([sys.executable, "-m", "scripts.grading.repeat_grades", "--times", "1", "--concurrent", "2",
                           "--parts", "accounting", "--world-sizes", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "every entry scored the same in every grade" in proc.stdout, proc.stdout[-2000:]
