"""The Gradescope autograder zip, unpacked into a scratch /autograder tree, grades end to end (staff only).

    pytest tests/staff/grader/test_gradescope_roundtrip.py -v

As Gradescope does: the zip (``python -m scripts.grading.make_autograder_zip``) is unpacked into
``<root>/source``, ``setup.sh`` runs once (here without installing packages: the test's interpreter
already has them), then, per submission, the student's files go to ``<root>/submission`` and
``run_autograder`` must leave ``<root>/results/results.json``. ``setup.sh`` must name the torch the kit pins.
Part 6 only, to stay cheap; grading as
an unprivileged user is left out here (``CS336_RUN_AS=""``: the scratch tree lives under a folder that
user may not reach).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from tests.harness.pool import ROOT as REPO
from tests.staff.grader import grader_env

pytestmark = pytest.mark.staff


@pytest.fixture(scope="module")
def autograder(tmp_path_factory) -> Path:
    """``<root>`` with the zip unpacked in source/ and setup.sh run."""
    root = tmp_path_factory.mktemp("autograder")
    zip_path = root / "autograder.zip"
    subprocess.run([sys.executable, "-m", "scripts.grading.make_autograder_zip", "--out", str(zip_path),
                    "--no-device-faithful"], cwd=REPO, check=True, capture_output=True)  # fmt: skip
    with zipfile.ZipFile(zip_path) as zf:
        names = zf.namelist()
        assert "setup.sh" in names and "run_autograder" in names, names[:10]
        assert zf.read("grade-args") == b"--no-device-faithful\n"
        assert not any(n.startswith("reference_solutions/") for n in names), "the reference is in the zip"
        zf.extractall(root / "source")  # Gradescope puts the whole zip in /autograder/source
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "CS336_SKIP_INSTALL": "1"}
    setup = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env, check=True, capture_output=True,
                           text=True)  # fmt: skip
    # It would install the torch the kit pins (scripts/setup.sh), the one this venv runs.
    assert f"torch pin: torch=={torch.__version__.split('+')[0]}\n" in setup.stdout, setup.stdout
    return root


def _grade(root: Path, accounting_source: str, zipped: bool = False) -> dict:
    """``zipped``: the module arrives in a submission.zip inside the submission folder, beside a README (a zip
    uploaded with other files, or zipped twice: Gradescope unpacks one level)."""
    for folder in ("submission", "results"):
        shutil.rmtree(root / folder, ignore_errors=True)
        (root / folder).mkdir()
    if zipped:
        with zipfile.ZipFile(root / "submission" / "submission.zip", "w") as zf:
            zf.writestr("cs336_systems/accounting.py", accounting_source)
        (root / "submission" / "README.md").write_text("my notes\n")
    else:
        (root / "submission" / "cs336_systems").mkdir()
        (root / "submission" / "cs336_systems" / "accounting.py").write_text(accounting_source)
    env = grader_env()
    env.update(AUTOGRADER_ROOT=str(root), CS336_PYTHON=sys.executable, CS336_RUN_AS="",
               CS336_GRADE_ARGS="--parts accounting --world-sizes 1")  # fmt: skip
    proc = subprocess.run(["bash", str(root / "run_autograder")], env=env, capture_output=True, text=True, timeout=300)
    out = root / "results" / "results.json"
    assert out.exists(), f"run_autograder wrote no results.json (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text())


def test_the_reference_gets_full_marks_through_run_autograder(autograder):
    """run_autograder on the reference's accounting.py writes results.json with full marks, hidden test included,
    though the module came in a zip inside the submission folder (graded, and the output says what to upload)."""
    results = _grade(autograder, (REPO / "reference_solutions" / "accounting.py").read_text(), zipped=True)
    assert "submission.zip, a zip inside your submission" in results["output"], results["output"]
    most = sum(t["max_score"] for t in results["tests"])
    assert results["score"] == pytest.approx(most, abs=0.01) and most > 0, results.get("output")  # 3-decimal rounding
    assert any(t["name"].endswith("(hidden test)") for t in results["tests"]), [t["name"] for t in results["tests"]]
    # The zip was built with --no-device-faithful: every grade of it runs so, and says so.
    assert results["extra_data"]["settings"]["device_faithful"] is False, results["extra_data"]["settings"]


def test_a_broken_submission_gets_zero_and_still_a_valid_results_file(autograder):
    """A module that raises at import scores 0 on every test, and results.json is still complete."""
    results = _grade(autograder, "raise RuntimeError('broken')\n")
    assert results["score"] == 0 and results["tests"], results.get("output")
    assert all(t["status"] == "failed" for t in results["tests"])
