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

import csv
import json
import subprocess
import sys
import time
import zlib

import pytest

from scripts.grading import points
from scripts.grading.__main__ import MergeError, build_results, merge_regrade
from scripts.grading.fingerprint import fingerprint_at, graded_record
from scripts.grading.rubric import excluded, load_rubric
from scripts.grading.runner import RunRecord
from scripts.grading.sandbox import Submission, graded_modules, read_submission
from scripts.tools.submission import PART_MODULES
from tests.harness.pool import ROOT as REPO
from tests.staff.grader import grader_env

pytestmark = pytest.mark.staff

SETTINGS = {"backend": "gloo", "world_sizes": "1,2,4", "device_faithful": True}
KIT = load_rubric()
CODE = {m: f"# the student's {m}\n".encode() for m in PART_MODULES}  # the submission every grade here reads


def _code(rubric, code: dict[str, bytes] = CODE) -> dict:
    """The graded-code record of a grade of ``rubric``'s parts from ``code`` (what the grader records)."""
    modules = graded_modules(list(rubric.parts))
    return graded_record(Submission({m: code[m] for m in modules if m in code}, graded=modules))


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


def _grade(rubric, items, outcomes, code: dict[str, bytes] = CODE) -> dict:
    return build_results(rubric, RunRecord(items=list(items), outcomes=dict(outcomes)), [], 60.0, SETTINGS,
                         _code(rubric, code))  # fmt: skip


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
    """Other world sizes, device-faithful mode or parts, other bytes of a module both grades took, results that
    record no graded code or do not list their cases (an older grader's) are refused, each saying what differs; a
    regrade of the same bytes keeps the earlier grade's fingerprint."""
    mine = [i for i in items if i["file"].startswith("tests/test_accounting")]
    full = _grade(KIT, items, _outcomes(items, "before"))
    accounting = KIT.select(["accounting"])
    regrade = _grade(accounting, mine, _outcomes(mine, "after"))
    merged = merge_regrade(full, regrade, KIT)
    assert merged["extra_data"]["graded"] == full["extra_data"]["graded"], "the merged grade names other code"
    for settings, named in (({"backend": "nccl", "world_sizes": "2,4,8", "device_faithful": False}, "--world-sizes"),
                            ({**SETTINGS, "device_faithful": False}, "--device-faithful")):  # fmt: skip
        other = build_results(accounting, RunRecord(items=mine, outcomes=_outcomes(mine, "after")), [], 1.0,
                              settings, _code(accounting))  # fmt: skip
        with pytest.raises(MergeError, match=named):
            merge_regrade(full, other, KIT)
    changed = _grade(accounting, mine, _outcomes(mine, "after"), {**CODE, "accounting": b"# fixed since\n"})
    with pytest.raises(MergeError, match=r"accounting\.py differs"):
        merge_regrade(full, changed, KIT)
    ddp_only = _grade(KIT.select(["ddp"]), [i for i in items if i["file"] == "tests/test_ddp.py"],
                      _outcomes(items, "after"))  # fmt: skip
    with pytest.raises(MergeError, match="ddp, which the earlier grade did not"):
        merge_regrade(_grade(accounting, mine, _outcomes(mine, "before")), ddp_only, KIT)
    unsigned = {**full, "extra_data": {k: v for k, v in full["extra_data"].items() if k != "graded"}}
    with pytest.raises(MergeError, match="no fingerprint"):
        merge_regrade(unsigned, regrade, KIT)
    legacy = {**full, "extra_data": {**full["extra_data"], "entries": [{"name": "test_a", "case_results": []}]}}
    with pytest.raises(MergeError, match="do not list their cases"):
        merge_regrade(legacy, regrade, KIT)


def _cli_regrade(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    """The grader on the folder ``tmp_path/sub``: accounting's one test at world size 1, merged into old.json."""
    cmd = [sys.executable, "-m", "scripts.grading", str(tmp_path / "sub"), "--parts", "accounting", "--select",
           SELECT, "--world-sizes", "1", "--merge-into", str(tmp_path / "old.json"), "--out",
           str(tmp_path / "new.json"), *extra]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=grader_env(), capture_output=True, text=True, timeout=300)


SELECT = "test_training_flops_and_mfu_examples"


@pytest.fixture
def earlier(items, tmp_path) -> dict:
    """A batch's results folder: old.json, a synthetic full grade of ``sub`` (the reference's accounting.py) at
    world size 1, every case failed; its staff log; the dashboard's summary.json, naming the batch's CSV."""
    kit_items = [i for i in items if "[w" not in i["nodeid"] or "[w1" in i["nodeid"]]  # what world size 1 collects
    sub = tmp_path / "sub" / "cs336_systems"
    sub.mkdir(parents=True)
    (sub / "accounting.py").write_text((REPO / "reference_solutions" / "accounting.py").read_text())
    code = graded_record(Submission(read_submission(sub.parent).modules, graded=graded_modules(list(KIT.parts))))
    old = build_results(KIT, RunRecord(items=kit_items, outcomes={i["nodeid"]: ("failed", "E   AssertionError: x")
                                                                  for i in kit_items}), [], 1.0,
                        {"backend": "gloo", "world_sizes": "1", "device_faithful": True}, code)  # fmt: skip
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "old.staff.log").write_text("THE EARLIER GRADE'S LOG\n")
    (tmp_path / "summary.json").write_text(json.dumps({"csv": str(tmp_path / "grades.csv")}))
    return old


def test_a_real_regrade_through_the_command_line(earlier, tmp_path):
    """The grader itself: the reference's accounting.py regraded on one test (--select, world size 1) and merged
    into a full grade (synthetic, every case failed) keeps every other entry, a failure, and scores that test;
    it shows its progress on stderr only; then every file of the batch's folder is current: the staff log beside
    the merged results (the earlier one, then the regrade's), the dashboard and the batch's CSV (score and
    fingerprint)."""
    old = earlier
    # --staff-log naming the earlier grade's log (a batch's own name for it): the merged log still starts with it.
    proc = _cli_regrade(tmp_path, "--staff-log", str(tmp_path / "old.staff.log"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "part 6 accounting, public tests: " in proc.stderr and "budget" in proc.stderr, proc.stderr
    assert "public tests:" not in proc.stdout, "the progress lines reached stdout"
    new = json.loads((tmp_path / "new.json").read_text())
    ids = [e["id"] for e in new["extra_data"]["entries"]]
    assert ids == [e["id"] for e in old["extra_data"]["entries"]], "entries were dropped, added or reordered"
    changed = [(o["name"], o["score"], n["score"]) for o, n in zip(old["tests"], new["tests"]) if o != n]
    assert changed and all(SELECT in name and got > 0 for name, _, got in changed), changed
    assert new["score"] == round(sum(t["score"] for t in new["tests"]), 3) > 0
    assert sum(ln.startswith("  part ") for ln in new["output"].splitlines()) == len(KIT.parts), new["output"]
    assert new["extra_data"]["graded"]["fingerprint"] == fingerprint_at(tmp_path / "sub", PART_MODULES)
    grades = {g["submission"]: g["score"] for g in json.loads((tmp_path / "summary.json").read_text())["grades"]}
    assert grades == {"old": 0, "new": new["score"]}, grades
    log = (tmp_path / "new.staff.log").read_text()
    assert log.startswith("THE EARLIER GRADE'S LOG") and "[grader] regrade" in log and "1 passed" in log, log[-2000:]
    rows = {r["submission"]: r for r in csv.DictReader((tmp_path / "grades.csv").open())}
    assert float(rows["sub"]["score"]) == new["score"] and float(rows["old"]["score"]) == 0, rows
    assert rows["sub"]["fingerprint"] == new["extra_data"]["graded"]["fingerprint"], rows


def test_a_regrade_that_cannot_merge_is_refused_before_any_test_runs(earlier, tmp_path):
    """Other world sizes, another device-faithful mode, a part the earlier grade lacks or a changed byte of the
    graded module: each is refused at once (no pytest starts: seconds, not the test's run), naming what differs;
    nothing is written and the earlier results stay as they were."""
    before = (tmp_path / "old.json").read_bytes()
    for extra, named in ((["--world-sizes", "1,2"], "--world-sizes 1 (the regrade: 1,2)"),
                         (["--no-device-faithful"], "--device-faithful True (the regrade: False)")):  # fmt: skip
        start = time.monotonic()
        proc = _cli_regrade(tmp_path, *extra)
        assert proc.returncode == 2 and "no test run" in proc.stderr and named in proc.stderr, proc.stderr
        assert time.monotonic() - start < 30 and "[grader]" not in proc.stdout
    module = tmp_path / "sub" / "cs336_systems" / "accounting.py"
    module.write_text(module.read_text() + "# edited after the grade\n")
    proc = _cli_regrade(tmp_path)
    assert proc.returncode == 2 and "accounting.py differs" in proc.stderr, proc.stderr
    assert (tmp_path / "old.json").read_bytes() == before and not (tmp_path / "new.json").exists()
