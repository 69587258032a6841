"""The staff dashboard a batch writes: failures by task and case in students, unfinished work apart, figures.

pytest tests/staff/grader/test_batch_summary.py -v
"""

from __future__ import annotations

import json

import pytest

from scripts.grading.summary import headline, staff_headlines, summarize, write_summary

pytestmark = pytest.mark.staff


def _results(score: float, entries: list[dict]) -> dict:
    return {"score": score, "tests": [{"max_score": 5.0}, {"max_score": 5.0}], "extra_data": {"entries": entries}}


def _entry(name: str, cases: list[tuple], part: int = 2, pool: str = "public") -> dict:
    """cases: (case id, tasks, failure headline or None for a pass)."""
    rows = [[cid, tasks, "passed" if head is None else "failed", head or ""] for cid, tasks, head in cases]
    return {"name": name, "part": part, "pool": pool, "tasks": sorted({t for _, ts, _ in cases for t in ts}),
            "passed": sum(h is None for *_, h in cases), "cases": len(cases), "case_results": rows}  # fmt: skip


STUB = "NotImplementedError: Task 2.4 (bucketed DDP): write it in cs336_systems/ddp.py"


def _ddp_test(bucketed_w2=None, bucketed_w4=None, flat=None) -> dict:
    return _entry("test_sgd", [("w2-flat-toy", ["2.2"], flat), ("w2-bucketed-toy", ["2.4"], bucketed_w2),
                               ("w4-bucketed-toy", ["2.4"], bucketed_w4)])  # fmt: skip


def test_failures_are_counted_in_students_per_task_and_case_with_unfinished_work_apart(tmp_path):
    """A student with a bucketed bug at two world sizes counts once, under task 2.4 and case bucketed-toy; a
    student whose bucketed cases raise NotImplementedError is unfinished, not failing; the row names the case."""
    results = {
        "ok": _results(10, [_ddp_test()]),
        "bug1": _results(6, [_ddp_test("rank 1 step 2: grads differ by 0.5", "rank 3 step 1: grads differ by 2")]),
        "bug2": _results(6, [_ddp_test(None, "rank 2 step 1: grads differ by 0.25")]),
        "stub": _results(3, [_ddp_test(STUB, STUB)]),
        "flat": _results(6, [_ddp_test(flat="AssertionError: flat buffer not copied back")]),
    }
    s = summarize(results)
    top = s["tasks"][0]
    assert (top["task"], top["students_failing"], top["students_unfinished"], top["students_passing"]) == (
        "2.4", 2, 1, 2), top  # fmt: skip
    assert top["case_words"] == ["bucketed", "toy"] and top["commonest_case"] == "bucketed-toy"
    assert top["commonest_failure"].startswith("rank") and "NotImplementedError" not in top["commonest_failure"]
    (case,) = [c for c in s["cases"] if c["case"] == "bucketed-toy"]
    assert (case["students_failing"], case["students_unfinished"], case["commonest_failure_count"]) == (2, 1, 3)
    flat = next(t for t in s["tasks"] if t["task"] == "2.2")
    assert (flat["students_failing"], flat["students_passing"]) == (1, 4)
    assert s["parts"] == [2] and [g["percent"] for g in s["grades"]][:1] == [60.0]
    write_summary(results, tmp_path, staff_logs={})
    md = (tmp_path / "summary.md").read_text()
    assert "part 2" in md.splitlines()[0]
    first_row = md.split("## Where the class fails, by task")[1].splitlines()[4]
    assert first_row.startswith("| 2.4 | 2 | 1 | 2 | bucketed toy | bucketed-toy | test_sgd"), first_row
    for figure in ("grades.png", "dashboard.png"):
        assert (tmp_path / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "summary.json").read_text())["submissions"] == 5


def test_a_later_task_failed_by_the_same_students_comes_after_the_earlier_one():
    """A bug in 4.1's copy_to_tp_region also fails 4.2's tests (which use it), for the same students: 4.1 is the
    row to read, 4.2 says it likely follows from it, even when 4.2 has more failing cases."""
    tp = [_entry("test_f", [("w2-copy", ["4.1"], "AssertionError: grad of x")], part=4),
          _entry("test_col", [(f"w2-{c}", ["4.2"], "AssertionError: grad of x") for c in "abc"], part=4)]  # fmt: skip
    results = {"bug": _results(5, tp), "ok": _results(10, [_entry("test_f", [("w2-copy", ["4.1"], None)], part=4)])}
    tasks = summarize(results)["tasks"]
    assert [(t["task"], t["follows"]) for t in tasks] == [("4.1", ""), ("4.2", "4.1")]


def test_a_case_marked_with_two_tasks_says_so():
    """A case marked with two tasks is one dashboard row named after both (2.3+2.4), counted once."""
    results = {"a": _results(0, [_entry("test_wrap", [("w2-x", ["2.3", "2.4"], "AssertionError: no")])])}
    (task,) = summarize(results)["tasks"]
    assert task["task"] == "2.3+2.4" and task["students_failing"] == 1


def test_hidden_failures_show_the_real_assertion_from_the_staff_log():
    """Students see the redacted line; the dashboard reads pytest's own output (the grade's staff log)."""
    redacted = "a rank did not finish normally (it raised, hung or died); in hidden tests ..."
    entry = _entry("test_hidden_ddp", [("w4-bucketed", ["2.4"], redacted)], pool="hidden")
    log = ("____________________ test_hidden_ddp[w4-bucketed] ____________________\n"
           "tests/staff/hidden/test_ddp_hidden.py:40: in test_hidden_ddp\n"
           "E   tests.harness.pool.RankFailure: rank 2: AssertionError: step 1: bucket 0 launched twice\n"
           "=========================== short test summary info ===========================\n")  # fmt: skip
    assert staff_headlines(log) == {
        "test_hidden_ddp[w4-bucketed]": "tests.harness.pool.RankFailure: rank 2: AssertionError: step 1: bucket 0 "
        "launched twice"}  # fmt: skip
    s = summarize({"a": _results(0, [entry])}, {"a": log})
    (case,) = s["cases"]
    assert case["test"] == "test_hidden_ddp (hidden)" and case["staff_failure"].endswith("launched twice")
    assert s["tasks"][0]["commonest_failure"].endswith("launched twice")


def test_results_without_case_rows_still_summarize():
    """Results JSONs of an older grader (failures only) are read: one case "?" per failure."""
    old = {"name": "test_ring", "part": 1, "pool": "public", "tasks": ["1.5"], "passed": 1, "cases": 2,
           "failures": ["rank 1: expected 3.0 got 2.0"]}  # fmt: skip
    (task,) = summarize({"a": _results(5, [old])})["tasks"]
    assert task["task"] == "1.5" and task["students_failing"] == 1


def test_headline_is_pytests_last_error_line_or_the_first_line():
    """A failure's headline is the last `E ` line pytest printed, else the first non-empty line."""
    text = "def test_x():\n>   assert f() == 2\nE   AssertionError: rank 0: sum\nE   assert 1 == 2\n"
    assert headline(text) == "assert 1 == 2"
    assert headline("\n  deadline: rank 1 hung in recv\n  stack...") == "deadline: rank 1 hung in recv"
    assert headline("") == "(no message)"


def test_a_batch_writes_the_dashboard_beside_the_results(batch_of_reference_and_stub):
    """--batch writes summary.md, summary.json, the figures and each grade's staff log in its results folder
    (the shared batch of tests/staff/grader/conftest.py: alice the reference, bob.zip the stub)."""
    proc = batch_of_reference_and_stub.proc
    tmp_path = batch_of_reference_and_stub.folder.parent
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "subs-results"
    s = json.loads((out / "summary.json").read_text())
    assert s["submissions"] == 2 and s["parts"] == [1]
    assert all((out / name).exists() for name in ("grades.png", "dashboard.png", "summary.md", "alice.staff.log"))
    task = next(t for t in s["tasks"] if t["task"] == "1.1")
    assert (task["students_failing"], task["students_unfinished"], task["students_passing"]) == (0, 1, 1), task


def test_entries_that_share_a_function_name_stay_apart():
    """Parts 2 and 4 each have a test_bad_input_...: the dashboard keys tests by id (file::function), so a student
    failing part 4's is not counted under part 2's, nor the two rows merged."""
    name = "test_bad_input_raises_on_every_rank_before_communicating"
    ddp = {**_entry(name, [("w2", ["2.1"], None)], part=2), "id": f"tests/test_ddp.py::{name}"}
    tp = {
        **_entry(name, [("w2", ["4.1"], "ValueError: wrong")], part=4),
        "id": f"tests/test_tensor_parallel.py::{name}",
    }
    s = summarize({"a": _results(5, [ddp, tp])})
    rows = {(c["task"], c["students_failing"], c["students_passing"]) for c in s["cases"] if c["test"] == name}
    assert rows == {("2.1", 0, 1), ("4.1", 1, 0)}, s["cases"]
