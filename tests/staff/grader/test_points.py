"""The points check (python -m scripts.grading.points --check) catches every way points can drop silently."""

from __future__ import annotations

import dataclasses

import pytest

from scripts.grading import points
from scripts.grading.rubric import Written, load_rubric

pytestmark = pytest.mark.staff


@pytest.fixture(scope="module")
def items():
    return points.collect_items()


def _with_part(rubric, name, **changes):
    parts = dict(rubric.parts)
    parts[name] = dataclasses.replace(parts[name], **changes)
    return dataclasses.replace(rubric, parts=parts)


def test_the_kit_as_committed_passes(items):
    """The committed rubric, tests and handouts agree: no problem and no stale handout."""
    rubric = load_rubric()
    assert points.problems(rubric, items) == [] and points.sync(rubric, write=False, items=items) == []


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda r: _with_part(r, "ddp", tasks={"2.1": 2, "2.2": 2, "2.3": 5, "2.4": 6}), "add up to 15"),
        (lambda r: _with_part(r, "ddp", tasks={"2.1": 2, "2.2": 2, "2.3": 5, "2.4": 6, "2.9": 1}), "task 2.9"),
        (lambda r: _with_part(r, "accounting", tasks={"6.1": 2, "6.2": 1, "6.3": 1}), "marked with task 6.4"),
        (lambda r: _with_part(r, "accounting", hidden_files=("tests/staff/hidden/none*.py",)), "no hidden test file"),
        (lambda r: _with_part(r, "accounting", points=4.5, tasks={"6.1": 1.5, "6.2": 1, "6.3": 1, "6.4": 1}),
         "use whole points"),
        (lambda r: dataclasses.replace(r, written=(Written(3, "No such section", 2),)), "no heading '## No such"),
        (lambda r: _with_part(r, "collectives", budget_s=900), "not under the grader's default --timeout"),
    ],
    ids=["tasks-do-not-add-up", "task-with-no-test", "marker-of-an-unlisted-task", "empty-hidden-pool",
         "fractional-points", "written-heading-missing", "budgets-over-the-timeout"],
)  # fmt: skip
def test_each_way_points_could_drop_fails_the_check(items, change, expected):
    """A rubric edit that would drop or invent points is reported, naming what is wrong."""
    found = points.problems(change(load_rubric()), items)
    assert any(expected in f for f in found), f"expected a problem mentioning {expected!r}, got {found}"


def test_a_test_without_a_task_marker_fails_the_check(items):
    """A graded test whose cases carry no task marker of its part is reported (its points would have no task)."""
    stripped = [dict(i, markers=[m for m in i["markers"] if not m.startswith("task6_")]) if "test_accounting.py" in
                i["file"] else i for i in items]  # fmt: skip
    found = points.problems(load_rubric(), stripped)
    assert any("no task marker of part 6" in f for f in found), found


def test_a_stale_handout_fails_the_check(items):
    """Changing a task's points without --write leaves a handout stale."""
    rubric = _with_part(load_rubric(), "accounting", tasks={"6.1": 2, "6.2": 1, "6.3": 1, "6.4": 0})
    assert any("06-accounting.md" in s for s in points.sync(rubric, write=False, items=items))


def test_each_parts_max_scores_in_results_json_sum_exactly_to_its_points(items):
    """results.json's per-test max_scores of a part add up to its points exactly (as decimals, the way
    Gradescope shows them), not 23.998 for 24; a reference that passes everything scores them all.
    Built from the collected tests, all passed, without running them."""
    from decimal import Decimal

    from scripts.grading.__main__ import build_results
    from scripts.grading.runner import RunRecord

    rubric = load_rubric()
    record = RunRecord(items=items, outcomes={i["nodeid"]: ("passed", "") for i in items})
    results = build_results(rubric, record, notes=[], seconds=0.0)
    for name, part in rubric.parts.items():
        tests = [t for t in results["tests"] if t["tags"] == [name]]
        most = sum(Decimal(str(t["max_score"])) for t in tests)
        got = sum(Decimal(str(t["score"])) for t in tests)
        want = Decimal(str(part.points + part.hidden_points))
        assert most == want and got == want, f"part {name}: max_scores sum to {most}, scores to {got}, not {want}"
        assert all(Decimal(str(t["max_score"])) == round(Decimal(str(t["max_score"])), 2) for t in tests), name
