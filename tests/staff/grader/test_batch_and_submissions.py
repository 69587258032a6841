"""Batch grading, and how submissions are read: odd layouts, links, zip bombs (staff only).

pytest tests/staff/grader/test_batch_and_submissions.py -v
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile

import pytest

from scripts.grading import summary
from scripts.grading.fingerprint import fingerprint_at
from scripts.grading.sandbox import MAX_MODULE_BYTES, read_submission
from tests.harness.pool import ROOT as REPO
from tests.staff.grader import grader_env

pytestmark = pytest.mark.staff

REFERENCE = (REPO / "reference_solutions" / "collectives.py").read_bytes()


def test_modules_are_found_at_any_depth_and_a_cs336_systems_folder_wins(tmp_path):
    """Part modules are taken at any depth of a zip; a copy inside cs336_systems/ wins, with a note; junk is ignored."""
    zpath = tmp_path / "sub.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("hw/cs336_systems/collectives.py", "A = 1\n")
        zf.writestr("hw/scratch/collectives.py", "A = 2\n")
        zf.writestr("ddp.py", "B = 1\n")
        zf.writestr("__MACOSX/cs336_systems/pipeline.py", "junk")
        zf.writestr("hw/cs336_systems/conftest.py", "raise SystemExit")  # never taken
    sub = read_submission(zpath)
    assert sub.modules == {"collectives": b"A = 1\n", "ddp": b"B = 1\n"}
    assert any("several copies" in n for n in sub.notes)


def test_links_and_oversized_modules_are_refused_with_a_note(tmp_path):
    """Symbolic links and modules over the size cap (also a zip bomb) are refused, each with a note saying why."""
    folder = tmp_path / "sub" / "cs336_systems"
    folder.mkdir(parents=True)
    os.symlink(REPO / "reference_solutions" / "collectives.py", folder / "collectives.py")
    (folder / "ddp.py").write_bytes(b"#" * (MAX_MODULE_BYTES + 1))
    sub = read_submission(folder.parent)
    assert sub.modules == {}
    assert any("symbolic link" in n for n in sub.notes) and any("limit" in n for n in sub.notes)
    zpath = tmp_path / "link.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        info = zipfile.ZipInfo("cs336_systems/collectives.py")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/work/main/reference_solutions/collectives.py")
        zf.writestr("cs336_systems/pipeline.py", b"0" * (50 * MAX_MODULE_BYTES))  # compresses to almost nothing
    sub = read_submission(zpath)
    assert sub.modules == {} and len(sub.notes) == 2


def test_batch_grades_every_submission_and_writes_a_csv(batch_of_reference_and_stub):
    """--batch grades each folder and zip (reference: full marks, stub: 0) into one CSV row each and a table
    (the batch is tests/staff/grader/conftest.py's, shared with the stub's check in test_grade.py)."""
    batch = batch_of_reference_and_stub
    proc = batch.proc
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["submission"]: r for r in csv.DictReader(batch.csv.open())}
    assert float(rows["alice"]["score"]) == float(rows["alice"]["max_score"]) > 0
    assert float(rows["bob.zip"]["score"]) == 0
    assert "| alice |" in proc.stdout and (batch.folder.with_name("subs-results") / "alice.json").exists()
    last = proc.stdout.strip().splitlines()[-1]
    assert all(f in last for f in ("summary.md", "dashboard.png", "grades.png")), last
    results = batch.folder.with_name("subs-results")
    graded = json.loads((results / "alice.json").read_text())["extra_data"]["graded"]
    assert rows["alice"]["fingerprint"] == graded["fingerprint"] == fingerprint_at(batch.folder / "alice",
                                                                                  graded["modules"])  # fmt: skip
    # The CSV is a function of the results alone: rebuilt from them (as after a regrade's merge), it is the same.
    rebuilt = results.parent / "rebuilt.csv"
    summary.refresh(results, rebuilt)
    assert list(csv.DictReader(rebuilt.open())) == list(csv.DictReader(batch.csv.open()))
    assert graded["fingerprint"][:16] in (results / "summary.md").read_text(), "the dashboard names no fingerprint"


def test_a_late_batch_into_the_same_results_keeps_the_earlier_ones(batch_of_reference_and_stub, tmp_path):
    """Late submissions graded as a batch into the folder of an earlier batch (the guide's regrade section): the
    CSV and the dashboard cover the whole folder, the earlier rows as they were, not only the late batch."""
    batch = batch_of_reference_and_stub
    results = tmp_path / "node-results"
    shutil.copytree(batch.folder.with_name("subs-results"), results)
    late = tmp_path / "late" / "carol"
    late.mkdir(parents=True)
    (late / "notes.txt").write_text("forgot the code\n")  # no part module: graded to 0 at once
    table = tmp_path / "grades.csv"
    proc = subprocess.run([sys.executable, "-m", "scripts.grading", "--batch", str(late.parent), "--results-dir",
                           str(results), "--csv", str(table), "--parts", "collectives", "--select",
                           "broadcast_copies_src_tensor_to_every_rank and float32 and not last", "--world-sizes", "2",
                           "--timeout", "120"], cwd=REPO, env=grader_env(), capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert "2 earlier results" in proc.stdout, proc.stdout + proc.stderr
    rows = {r["submission"]: r for r in csv.DictReader(table.open())}
    before = {r["submission"]: r for r in csv.DictReader(batch.csv.open())}
    assert set(rows) == {"alice", "bob.zip", "carol"}, rows
    assert {k: v for k, v in rows["alice"].items() if k != "status"} == {
        k: v for k, v in before["alice"].items() if k != "status"
    }
    grades = {g["submission"] for g in json.loads((results / "summary.json").read_text())["grades"]}
    assert grades == {"alice", "bob.zip", "carol"}, grades


def test_a_batch_passes_every_option_of_a_grade_on_to_each_grade(tmp_path):
    """Every option of a single grade (all but the batch's own) given to --batch reaches each grade with its value:
    --no-device-faithful and --memory-mb included. An option added to the grader and not passed on fails here."""
    from scripts.grading.__main__ import BATCH_ONLY, build_parser, grade_args

    p = build_parser()
    argv = ["--parts", "ddp", "--select", "bucket", "--backend", "nccl", "--world-sizes", "2,4", "--deadline", "7",
            "--test-timeout", "9", "--timeout", "11", "--memory-mb", "2048", "--run-as", "grader", "--python",
            "/opt/py", "--rubric", str(tmp_path / "r.toml"), "--no-device-faithful", "--keep"]  # fmt: skip
    batch = p.parse_args(["--batch", str(tmp_path), *argv])
    options = {a.dest for a in p._actions if a.dest not in (*BATCH_ONLY, "help")}
    unset = sorted(d for d in options if getattr(batch, d) == p.get_default(d))
    assert not unset, f"give these options a value here (and pass them on in grade_args): {unset}"
    one = p.parse_args(["sub", *grade_args(batch)])
    assert {d: getattr(one, d) for d in options} == {d: getattr(batch, d) for d in options}


def test_the_device_faithful_switch_reaches_pytest_and_the_results(tmp_path):
    """--no-device-faithful (and --device-faithful) go on pytest's command line in the sandbox, as given; unset,
    nothing is passed (the suite's default: on with gloo, off with nccl) and the results record that default."""
    from scripts.grading.__main__ import _settings, build_parser, settings_of
    from scripts.grading.runner import _pytest_cmd

    p = build_parser()
    for argv, flag, recorded in ((["--no-device-faithful"], "--no-device-faithful", False),
                                 (["--device-faithful", "--backend", "nccl"], "--device-faithful", True),
                                 ([], None, True), (["--backend", "nccl"], None, False)):  # fmt: skip
        args = p.parse_args(["sub", *argv])
        cmd = _pytest_cmd(_settings(args, tmp_path, 10.0, False), tmp_path, [], 3, 4)
        passed = [a for a in cmd if a.endswith("device-faithful")]
        assert passed == ([flag] if flag else []), (argv, passed)
        assert settings_of(args)["device_faithful"] is recorded, argv
