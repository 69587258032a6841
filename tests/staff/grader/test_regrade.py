"""A regrade of one part or one test keeps the rest of a student's earlier grade (staff only).

    pytest tests/staff/grader/test_regrade.py -v

``python -m scripts.grading SUB --parts ddp --merge-into old.json --out new.json``: the entries the regrade graded
replace the earlier ones of the same name; every other entry is kept. Single-process; no grade runs here.
"""

from __future__ import annotations

import pytest

from scripts.grading.__main__ import merge_regrade

pytestmark = pytest.mark.staff


def _entry(name: str, part: str, score: float, most: float = 2.0) -> dict:
    return {"name": name, "number": "P0-T01", "score": score, "max_score": most, "tags": [part], "output": ""}


def test_a_regrade_replaces_its_entries_and_keeps_every_other():
    """--merge-into: the regraded entry replaces its namesake, the others stay, the score and parts are summed again."""
    old = {"score": 3.0, "output": "old", "tests": [_entry("test_a", "ddp", 0.0), _entry("test_b", "ddp", 2.0),
                                                    _entry("test_c", "fsdp", 1.0)],
           "extra_data": {"seconds": {"ddp": 9}}}  # fmt: skip
    new = {"score": 2.0, "output": "regraded", "tests": [_entry("test_a", "ddp", 2.0)], "extra_data": {}}
    merged = merge_regrade(old, new)
    assert [(t["name"], t["score"]) for t in merged["tests"]] == [("test_a", 2.0), ("test_b", 2.0), ("test_c", 1.0)]
    assert merged["score"] == 5.0 and merged["extra_data"]["parts"] == {"ddp": [4.0, 4.0], "fsdp": [1.0, 2.0]}
    assert "1 entries (2 kept" in merged["output"] and "regraded" in merged["output"], merged["output"]
    assert old["tests"][0]["score"] == 0.0, "the earlier results were changed in place"


def test_an_entry_only_the_regrade_has_is_added():
    """An entry the earlier grade lacked (a test added since) is appended and counted."""
    merged = merge_regrade({"tests": [_entry("test_a", "ddp", 1.0)]}, {"tests": [_entry("test_new", "ddp", 2.0)]})
    assert [t["name"] for t in merged["tests"]] == ["test_a", "test_new"] and merged["score"] == 3.0
