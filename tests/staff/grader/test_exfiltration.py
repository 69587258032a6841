"""A submission that hunts for the hidden tests finds none while public tests run, and what it finds
during the hidden run never reaches results.json (staff only).

    pytest tests/staff/grader/test_exfiltration.py -v

The hunt is the broadcast of the "crashes" hostile bundle (tests/staff/grader/grading.py, HUNT), graded once
for this test and test_grade.py's attacks: it searches, from inside a rank, the sandbox it runs in and its
parent folders (the grade's whole work dir), HOME, TMPDIR, /tmp and every ``sys.path`` entry for hidden test
files, and ``sys.modules`` for hidden test modules; if it finds any it leaves a marker file and raises their
text. The public tests run in a sandbox without hidden files, so there it finds nothing and passes; the hidden
tests run afterwards in a sandbox of their own, where it does find them, and their failures are redacted. A
full-disk search would also find the staff checkout the grader runs from, unless the grade runs as a user that
cannot read it (``--run-as``: handouts/grading.md, "Security").
"""

from __future__ import annotations

import json

import pytest

from tests.staff.grader.grading import CONTROL, HIDDEN_TEST

pytestmark = pytest.mark.staff

SECRET = "never shipped to students"  # in every hidden test file's docstring, and in no public file


def test_a_submission_hunting_for_hidden_tests_leaks_nothing_into_the_results(bundles):
    """The hunting broadcast passes the public test (nothing to find) and fails the hidden one (found the
    file) without its loot, the hidden test's source or any rank output appearing in results.json."""
    graded = bundles("crashes")
    results = graded.results
    text = json.dumps(results)
    tests = graded.by_name
    public, hidden = tests[CONTROL], tests[HIDDEN_TEST]
    assert public["score"] == public["max_score"] > 0, f"the public run's sandbox held something to find:\n{public}"
    assert graded.hunt_found, f"the hunt found nothing in the hidden run (is the test still real?): {hidden}"
    assert hidden["status"] == "failed" and "rank did not finish normally" in hidden["output"], hidden["output"]
    for leak in (SECRET, "LOOT", "def test_back_to_back"):
        assert leak not in text, f"{leak!r} appears in results.json:\n{text[:3000]}"
    # Public entries show their own tracebacks (the bundle's other attacks); the hidden run shows none.
    hidden_text = results["output"] + json.dumps([t for t in results["tests"] if "(hidden test)" in t["name"]])
    assert "Traceback" not in hidden_text, f"rank output of the hidden run appears in results.json:\n{hidden_text}"
