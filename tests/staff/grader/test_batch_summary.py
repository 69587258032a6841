"""The staff dashboard a batch writes: pass rates per task and per test, commonest failures, a grade histogram.

pytest tests/staff/grader/test_batch_summary.py -v
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest

from scripts.grading.summary import headline, summarize, write_summary
from tests.harness.pool import ROOT as REPO

pytestmark = pytest.mark.staff


def _results(score: float, entries: list[dict]) -> dict:
    return {"score": score, "tests": [{"max_score": 5.0}, {"max_score": 5.0}], "extra_data": {"entries": entries}}


def _entry(name: str, task: str, passed: int, cases: int, failures=()) -> dict:
    return {"name": name, "part": 1, "pool": "public", "tasks": [task], "passed": passed, "cases": cases,
            "failures": list(failures)}  # fmt: skip


def test_summary_gives_pass_rates_per_task_and_test_and_the_commonest_failure_numbers_blanked(tmp_path):
    """Task rate = cases passed / counted over all submissions; test rate = submissions passing it all; the
    commonest failure groups messages that differ only in their numbers."""
    results = {
        "a": _results(10, [_entry("test_ring", "1.5", 4, 4), _entry("test_tree", "1.1", 2, 2)]),
        "b": _results(5, [_entry("test_ring", "1.5", 1, 4, ["rank 1: expected 3.0 got 2.0", "rank 0 hung"] * 1
                                 + ["rank 3: expected 7.0 got 1.0"]), _entry("test_tree", "1.1", 2, 2)]),
        "c": _results(0, [_entry("test_ring", "1.5", 0, 4, ["rank 2: expected 1.0 got 0.0", "rank 0 hung"]),
                          _entry("test_tree", "1.1", 0, 2, ["NotImplementedError: Task 1.1"])]),
    }  # fmt: skip
    s = summarize(results)
    tasks = {t["task"]: t["case_pass_rate"] for t in s["tasks"]}
    assert tasks == {"1.1": round(4 / 6, 3), "1.5": round(5 / 12, 3)}
    tests = {t["test"]: t for t in s["tests"]}
    assert tests["test_ring"]["pass_rate"] == round(1 / 3, 3) and tests["test_tree"]["pass_rate"] == round(2 / 3, 3)
    assert tests["test_ring"]["commonest_failure_count"] == 3  # three "rank N: expected X got Y", whatever N, X, Y
    assert tests["test_ring"]["commonest_failure"].startswith("rank 1: expected")
    assert [g["percent"] for g in s["grades"]] == [100.0, 50.0, 0.0]
    assert s["tests"][0]["test"] == "test_ring", "hardest test first"
    write_summary(results, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert "| 1.5 | 42% | 12 |" in md and "`rank 1: expected 3.0 got 2.0` (3)" in md
    assert (tmp_path / "grades.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "summary.json").read_text())["submissions"] == 3


def test_headline_is_pytests_last_error_line_or_the_first_line():
    """A failure's headline is the last `E ` line pytest printed, else the first non-empty line."""
    text = "def test_x():\n>   assert f() == 2\nE   AssertionError: rank 0: sum\nE   assert 1 == 2\n"
    assert headline(text) == "assert 1 == 2"
    assert headline("\n  deadline: rank 1 hung in recv\n  stack...") == "deadline: rank 1 hung in recv"
    assert headline("") == "(no message)"


def test_a_batch_writes_the_dashboard_beside_the_results(tmp_path):
    """--batch writes summary.md, summary.json and grades.png in its results folder, from every submission."""
    batch = tmp_path / "subs"
    (batch / "alice" / "cs336_systems").mkdir(parents=True)
    (batch / "alice" / "cs336_systems" / "collectives.py").write_bytes(
        (REPO / "reference_solutions" / "collectives.py").read_bytes()
    )
    with zipfile.ZipFile(batch / "bob.zip", "w") as zf:
        zf.write(REPO / "cs336_systems" / "collectives.py", "cs336_systems/collectives.py")
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.grading", "--batch", str(batch), "--parts", "collectives",
         "--select", "broadcast and float32 and first", "--world-sizes", "2", "--timeout", "120"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "subs-results"
    s = json.loads((out / "summary.json").read_text())
    assert s["submissions"] == 2 and (out / "grades.png").exists() and (out / "summary.md").exists()
    assert {t["task"]: t["case_pass_rate"] for t in s["tasks"]}["1.1"] == 0.5, s["tasks"]
    (test,) = [t for t in s["tests"] if "1.1" in t["tasks"]]
    assert test["pass_rate"] == 0.5 and "NotImplementedError" in test["commonest_failure"], test
