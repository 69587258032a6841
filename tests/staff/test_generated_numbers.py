"""Numbers in the guide, the handouts' headings and the README are generated, not typed (staff only).

    pytest tests/staff/test_generated_numbers.py
    python -m scripts.grading.points --write      # regenerate; --check (CI) fails on drift

The grading guide's totals (``<!--=autograded-->164<!--/-->``), the entries of a full grade
(``<!--=entries-->259<!--/-->``: test functions, public and hidden), the budgets' sum and time-budget table, a
handout heading's ``(12 autograded)`` and the README's hours table (sums of the handouts' ``**Workload:**`` lines)
come from the rubric, the suite and the handouts. A typed number that drifts (the guide's "nine parts, 136
autograded", its "152 entries", the README's "~40" hours for parts 35 hours long) is what these tests plant
and expect ``points`` to catch.
"""

from __future__ import annotations

import re
import shutil

import pytest

from scripts.grading import points
from scripts.grading.rubric import load_rubric

pytestmark = pytest.mark.staff


@pytest.fixture(scope="module")
def items() -> list[dict]:
    """The suite's tests as the grader collects them (for the number of entries), from the real checkout."""
    return points.collect_items()


@pytest.fixture
def kit_copy(tmp_path, monkeypatch):
    """The README, the handouts and the guide in a folder of their own, which ``points`` reads instead."""
    shutil.copy(points.ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(points.ROOT / "handouts", tmp_path / "handouts", ignore=shutil.ignore_patterns("answer-key"))
    monkeypatch.setattr(points, "ROOT", tmp_path)
    return tmp_path


def test_the_committed_docs_are_current(items):
    """The README's and the guide's generated numbers match the rubric and the suite as committed."""
    stale = [s for s in points.sync(load_rubric(), write=False, items=items) if "README" in s or "grading.md" in s]
    assert stale == [] and points.doc_problems(load_rubric(), items) == []


@pytest.mark.parametrize(
    "path, old, new",
    [
        ("handouts/grading.md", r"<!--=autograded-->\d+<!--/-->", "<!--=autograded-->136<!--/-->"),
        ("handouts/grading.md", r"\*\*\d+ s\*\* \(\+ one test's", "**1440 s** (+ one test's"),
        (
            "README.md",
            r"\| 4 \+ 5 \+ 7 \(TP, pipeline, composing them\) \| ~\d+",
            "| 4 + 5 + 7 (TP, pipeline, composing them) | ~40",
        ),
        ("handouts/08-expert-parallel.md", r"\(\d+ autograded\)", "(10 autograded)"),
        ("handouts/grading.md", r"<!--=entries-->\d+<!--/-->", "<!--=entries-->152<!--/-->"),
        ("handouts/grading.md", r"budgets of <!--=budget_total-->\d+", "budgets of <!--=budget_total-->1440"),
    ],
    ids=["guide-total", "guide-budget", "readme-hours", "handout-heading", "guide-entries", "guide-budget-sum"],
)
def test_a_typed_number_that_drifts_is_caught_and_rewritten(kit_copy, items, path, old, new):
    """A generated number edited by hand is reported by `points --check` and put back by `--write`."""
    target = kit_copy / path
    text = target.read_text()
    planted = re.sub(old, new, text, count=1)
    assert planted != text, f"{path} no longer has {old!r}: update this test"
    target.write_text(planted)
    rubric = load_rubric()
    assert any(path.split("/")[-1] in s for s in points.sync(rubric, write=False, items=items))
    points.sync(rubric, write=True, items=items)
    assert target.read_text() == text


def test_the_hours_are_the_sums_of_the_workload_lines(kit_copy):
    """Change a handout's Workload line: the README's sums follow."""
    handout = next((kit_copy / "handouts").glob("05-*.md"))
    handout.write_text(re.sub(r"(\*\*Workload:\*\* about )\d+", r"\g<1>20", handout.read_text(), count=1))
    table = points.hours_table(points.workload_hours())
    hours = points.workload_hours()
    assert hours[5] == 20 and f"| ~{hours[4] + 20 + hours[7]:g} |" in table


def test_an_unknown_inline_number_is_an_error(kit_copy):
    """An inline number with a name the generator does not know (a typo) is an error, not left alone."""
    guide = kit_copy / "handouts" / "grading.md"
    guide.write_text(guide.read_text() + "\n<!--=autogarded-->3<!--/-->\n")
    assert any("autogarded" in p for p in points.doc_problems(load_rubric()))


def test_gradescope_test_numbers_cannot_be_read_as_task_numbers():
    """results.json numbers its entries per part: P6-T01, never 6.1 (which reads as the handout's task 6.1)."""
    from scripts.grading.__main__ import build_results
    from scripts.grading.runner import RunRecord

    items = [{"nodeid": f"tests/test_accounting.py::test_{n}", "file": "tests/test_accounting.py",
              "function": f"test_{n}", "markers": ["task6_1"], "doc": ""} for n in ("a", "b")]  # fmt: skip
    record = RunRecord()
    record.items, record.outcomes = items, {i["nodeid"]: ("passed", "") for i in items}
    results = build_results(load_rubric().select(["accounting"]), record, [], 1.0)
    numbers = [t["number"] for t in results["tests"]]
    assert numbers == ["P6-T01", "P6-T02"], numbers
    assert not any(re.fullmatch(r"\d+\.\d+", n) for n in numbers)
