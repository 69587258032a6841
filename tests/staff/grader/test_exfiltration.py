"""A submission that hunts for the hidden tests finds none while public tests run, and what it finds
during the hidden run never reaches results.json (staff only).

    pytest tests/staff/grader/test_exfiltration.py -v

The planted ``broadcast`` searches, from inside a rank, the sandbox it runs in and its parent folders
(the grade's whole work dir), HOME, TMPDIR, /tmp and every ``sys.path`` entry for hidden test files,
and ``sys.modules`` for hidden test modules; if it finds any it raises their text. The public tests
run in a sandbox without hidden files, so there it finds nothing and passes; the hidden tests run
afterwards in a sandbox of their own, where it does find them, and their failures are redacted. A
full-disk search would also find the staff checkout the grader runs from, unless the grade runs as a
user that cannot read it (``--run-as``: handouts/grading.md, "Security").
"""

from __future__ import annotations

import json

import pytest

from tests.staff.grader.test_grade import REFERENCE, _by_name, _grade

pytestmark = pytest.mark.staff

HUNT = """

_reference_broadcast = broadcast


def broadcast(tensor, src=0, group=None):
    import os
    import sys

    here = os.getcwd()
    roots = {here, os.path.dirname(here), os.path.dirname(os.path.dirname(here)), os.environ.get("HOME", ""),
             os.environ.get("TMPDIR", ""), "/tmp", *sys.path}
    loot = []
    for root in filter(None, roots):
        for dirpath, dirs, files in os.walk(root):
            if dirpath.count(os.sep) - root.count(os.sep) >= (1 if root == "/tmp" else 6):
                dirs[:] = []
            for name in files:
                if name.endswith(".py") and "hidden" in name:
                    try:
                        loot.append(open(os.path.join(dirpath, name)).read())
                    except OSError:
                        pass
    loot += [repr(vars(m).get("__doc__")) for n, m in list(sys.modules.items()) if "hidden" in n]
    if loot:
        print("LOOT:", *loot)
        raise ValueError("LOOT: " + "\\n".join(loot)[:20000])
    return _reference_broadcast(tensor, src, group)
"""
SECRET = "never shipped to students"  # in every hidden test file's docstring, and in no public file


def test_a_submission_hunting_for_hidden_tests_leaks_nothing_into_the_results(tmp_path):
    """The hunting broadcast passes the public test (nothing to find) and fails the hidden one (found the
    file) without its loot, the hidden test's source or any rank output appearing in results.json."""
    select = "broadcast_copies_src_tensor_to_every_rank or back_to_back_collectives"
    results, seconds, proc = _grade(tmp_path, REFERENCE + HUNT, select=select)
    text = json.dumps(results)
    tests = _by_name(results)
    public = tests["test_broadcast_copies_src_tensor_to_every_rank"]
    hidden = tests["test_back_to_back_collectives_on_odd_world_sizes (hidden test)"]
    assert public["score"] == public["max_score"] > 0, f"the public run's sandbox held something to find:\n{public}"
    assert hidden["status"] == "failed", f"the hunt found nothing in the hidden run (is the test still real?): {hidden}"
    assert "rank did not finish normally" in hidden["output"], hidden["output"]
    for leak in (SECRET, "LOOT", "def test_back_to_back", "Traceback"):
        assert leak not in text, f"{leak!r} appears in results.json:\n{text[:3000]}"
