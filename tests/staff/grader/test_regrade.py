"""A regrade of one part or one test keeps the rest of a student's earlier grade, exactly (staff only).

    pytest tests/staff/grader/test_regrade.py -v

``python -m scripts.grading SUB --parts ddp --merge-into old.json --out new.json``: each case the regrade ran
replaces the earlier one (by pytest node id), every other case is kept, and the whole is scored again. The oracle
is a full regrade: for every part, a regrade of that part merged into a full grade must equal, entry by entry, a
full grade with the regraded outcomes.

What is real here: the test cases are the suite's own, as the grader collects them (public and hidden, every
part, 1500-odd cases, the names 15 parts share), scored by the grader's own ``build_results``; the outcomes are
synthetic (a few percent fail or skip, chosen by a hash of the node id), since a real grade of every part is
minutes. ``test_a_real_regrade_through_the_command_line`` runs the grader on one test, to check the command's glue.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zlib

import pytest

from scripts.grading import points
from scripts.grading.__main__ import MergeError, build_results, merge_regrade
from scripts.grading.rubric import excluded, load_rubric
from scripts.grading.runner import RunRecord
from tests.harness.pool import ROOT as REPO
from tests.staff.grader import grader_env

pytestmark = pytest.mark.staff

SETTINGS = {"backend": "gloo", "world_sizes": "1,2,4"}
KIT = load_rubric()


@pytest.fixture(scope="module")
def items() -> list[dict]:
    """Every graded case of the suite, as the grader collects them (pytest's collection: ~5 s)."""
    return [i for i in points.collect_items() if KIT.part_of(i["file"]) and not excluded(KIT, i)]


def _outcomes(items: list[dict], salt: str) -> dict[str, tuple[str, str]]:
    """A student's synthetic outcomes: about 1 case in 8 fails (with a pytest-like failure), 1 in 20 skips."""
    out = {}
    for item in items:
        roll = zlib.crc32(f"{salt}:{item['nodeid']}".encode()) % 40
        if roll < 5:
            out[item["nodeid"]] = ("failed", f"E   AssertionError: rank {roll} step 2: {salt} differs by 0.{roll}5")
        elif roll < 7:
            out[item["nodeid"]] = ("skipped", "needs 8 ranks")
        else:
            out[item["nodeid"]] = ("passed", "")
    return out


def _grade(rubric, items, outcomes) -> dict:
    return build_results(rubric, RunRecord(items=list(items), outcomes=dict(outcomes)), [], 60.0, SETTINGS)


def _assert_same_grade(merged: dict, full: dict) -> None:
    """Entry by entry (name, number, score, maximum, status, output...), then the totals, the dashboard's data and
    the output's lines for every part."""
    assert len(merged["tests"]) == len(full["tests"]), (len(merged["tests"]), len(full["tests"]))
    for got, want in zip(merged["tests"], full["tests"]):
        assert got == want, f"{want['number']} {want['name']}: merged {got}, a full regrade {want}"
    assert merged["score"] == full["score"]
    for key in ("parts", "entries", "warnings"):
        assert merged["extra_data"][key] == full["extra_data"][key], key
    part_lines = [ln for ln in full["output"].splitlines() if ln.startswith("  part ")]
    assert part_lines and all(ln in merged["output"].splitlines() for ln in part_lines), merged["output"]
    assert full["output"].splitlines()[0].split("(")[0] in merged["output"], merged["output"]


@pytest.mark.parametrize("part", list(KIT.parts))
def test_a_parts_regrade_merged_into_a_full_grade_equals_a_full_regrade(items, part):
    """--parts P --merge-into FULL: every entry, number, point and maximum is a full regrade's; the other parts'
    entries are the earlier grade's (with names that parts share, e.g. test_bad_input_raises_...). Hidden files
    are named by an alias in results.json, and the merge still finds them."""
    before = _outcomes(items, "before")
    after = {**before, **{n: o for n, o in _outcomes(items, "after").items() if KIT.part_of(n.split("::")[0])[0].name
                          == part}}  # fmt: skip
    mine = [i for i in items if KIT.part_of(i["file"])[0].name == part]
    regrade = _grade(KIT.select([part]), mine, {i["nodeid"]: after[i["nodeid"]] for i in mine})
    earlier = _grade(KIT, items, before)
    merged = merge_regrade(earlier, regrade, KIT)
    _assert_same_grade(merged, _grade(KIT, items, after))
    assert "hidden/test_" not in json.dumps(merged), "results.json names a hidden test file (an alias must)"
    assert [t for t in merged["tests"] if t["tags"] != [part]] == [t for t in earlier["tests"] if t["tags"] != [part]]
    assert [t for t in merged["tests"] if t["tags"] == [part]] != [t for t in earlier["tests"] if t["tags"] == [part]]
    assert f"{len(regrade['tests'])} entries" in merged["output"].splitlines()[0], merged["output"]


def test_a_selected_tests_regrade_of_some_cases_keeps_the_other_cases(items):
    """--select (a -k expression): a regrade of some cases of one test function (the w2 cases of one of the
    15 test_bad_input_... functions) replaces only those cases; the maximum stays the kit's."""
    name = "test_bad_input_raises_on_every_rank_before_communicating"
    chosen = [i for i in items if i["function"] == name and i["file"] == "tests/test_ddp.py" and "w2" in i["nodeid"]]
    assert chosen, "no w2 case of tests/test_ddp.py's bad-input test: update this test"
    before = _outcomes(items, "before")
    fixed = {i["nodeid"]: ("failed", "E   ValueError: a new failure") for i in chosen}
    regrade = _grade(KIT.select(["ddp"]), chosen, fixed)
    merged = merge_regrade(_grade(KIT, items, before), regrade, KIT)
    _assert_same_grade(merged, _grade(KIT, items, {**before, **fixed}))


def test_twice_merged_is_the_same_as_once(items):
    """Merging the same regrade again changes nothing (a TA who runs the command twice)."""
    mine = [i for i in items if i["file"].startswith("tests/test_accounting")]
    regrade = _grade(KIT.select(["accounting"]), mine, _outcomes(mine, "after"))
    once = merge_regrade(_grade(KIT, items, _outcomes(items, "before")), regrade, KIT)
    twice = merge_regrade(once, regrade, KIT)
    assert twice["tests"] == once["tests"] and twice["score"] == once["score"]
    assert twice["extra_data"]["notes"] == once["extra_data"]["notes"]


def test_a_merge_that_would_mix_grades_is_refused(items):
    """Other world sizes, or earlier results that do not list their cases (an older grader's), are refused."""
    mine = [i for i in items if i["file"].startswith("tests/test_accounting")]
    full = _grade(KIT, items, _outcomes(items, "before"))
    regrade = _grade(KIT.select(["accounting"]), mine, _outcomes(mine, "after"))
    other = build_results(KIT.select(["accounting"]), RunRecord(items=mine, outcomes=_outcomes(mine, "after")), [],
                          1.0, {"backend": "nccl", "world_sizes": "2,4,8"})  # fmt: skip
    with pytest.raises(MergeError, match="world_sizes"):
        merge_regrade(full, other, KIT)
    legacy = {**full, "extra_data": {**full["extra_data"], "entries": [{"name": "test_a", "case_results": []}]}}
    with pytest.raises(MergeError, match="do not list their cases"):
        merge_regrade(legacy, regrade, KIT)


def test_a_real_regrade_through_the_command_line(items, tmp_path):
    """The grader itself: the reference's accounting.py regraded on one test (--select, world size 1) and merged
    into a full grade (synthetic, every case failed) keeps every other entry, a failure, and scores that test;
    the batch dashboard in the results' folder is rewritten."""
    kit_items = [i for i in items if "[w" not in i["nodeid"] or "[w1" in i["nodeid"]]  # what world size 1 collects
    old = build_results(KIT, RunRecord(items=kit_items, outcomes={i["nodeid"]: ("failed", "E   AssertionError: x")
                                                                  for i in kit_items}), [], 1.0,
                        {"backend": "gloo", "world_sizes": "1"})  # fmt: skip
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "summary.json").write_text("{}")  # the folder is a batch's: its dashboard must follow the merge
    sub = tmp_path / "sub" / "cs336_systems"
    sub.mkdir(parents=True)
    (sub / "accounting.py").write_text((REPO / "reference_solutions" / "accounting.py").read_text())
    select = "test_training_flops_and_mfu_examples"
    cmd = [
        sys.executable,
        "-m",
        "scripts.grading",
        str(sub.parent),
        "--parts",
        "accounting",
        "--select",
        select,
        "--world-sizes",
        "1",
        "--merge-into",
        str(tmp_path / "old.json"),
        "--out",
        str(tmp_path / "new.json"),
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=grader_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    new = json.loads((tmp_path / "new.json").read_text())
    ids = [e["id"] for e in new["extra_data"]["entries"]]
    assert ids == [e["id"] for e in old["extra_data"]["entries"]], "entries were dropped, added or reordered"
    changed = [(o["name"], o["score"], n["score"]) for o, n in zip(old["tests"], new["tests"]) if o != n]
    assert changed and all(select in name and got > 0 for name, _, got in changed), changed
    assert new["score"] == round(sum(t["score"] for t in new["tests"]), 3) > 0
    assert sum(ln.startswith("  part ") for ln in new["output"].splitlines()) == len(KIT.parts), new["output"]
    grades = {g["submission"]: g["score"] for g in json.loads((tmp_path / "summary.json").read_text())["grades"]}
    assert grades == {"old": 0, "new": new["score"]}, grades
