"""Repeated grades of the reference give identical scores, alone and two at once (staff only).

    pytest tests/staff/grader/test_repeat.py -v

CI runs 5 grades in a row and 2 at once of one cheap part (part 6: about 20 s a grade on a 2-core
machine, under 3 minutes in all; 10 in a row took 286 s of CI's budget); the full check, every part
(~30 min), is ``python -m scripts.grading.repeat_grades``
(handouts/grading.md).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness.pool import ROOT as REPO

pytestmark = pytest.mark.staff


def test_repeated_and_concurrent_grades_of_the_reference_agree_entry_by_entry():
    """Five grades in a row and two at once give every entry the same score, all full marks."""
    proc = subprocess.run([sys.executable, "-m", "scripts.grading.repeat_grades", "--times", "5", "--concurrent", "2",
                           "--parts", "accounting", "--world-sizes", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "every entry scored the same in every grade" in proc.stdout, proc.stdout[-2000:]
