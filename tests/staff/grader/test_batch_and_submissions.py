"""Batch grading, and how submissions are read: odd layouts, links, zip bombs (staff only).

pytest tests/staff/grader/test_batch_and_submissions.py -v
"""

from __future__ import annotations

import csv
import json
import os
import stat
import zipfile

import pytest

from scripts.grading import summary
from scripts.grading.fingerprint import fingerprint_at
from scripts.grading.sandbox import MAX_MODULE_BYTES, read_submission
from tests.harness.pool import ROOT as REPO

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
