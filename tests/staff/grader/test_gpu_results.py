"""Grades made on the GPU node reach Gradescope (staff only).

    pytest tests/staff/grader/test_gpu_results.py -v

A batch graded on the node is packed into a bundle keyed by each submission's graded bytes
(scripts/grading/gpu_results.py); Gradescope's run_autograder, given a zip that holds the bundle, hands out
those results for a submission found in it and grades any other on the CPU. No rank and no test runs here.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from scripts.grading import gpu_results
from scripts.grading.fingerprint import UPLOAD, fingerprint, graded_record, read_graded
from scripts.grading.sandbox import graded_modules, keep_graded, read_submission
from tests.harness.pool import ROOT

pytestmark = pytest.mark.staff

METADATA = """\
---
submission_101:
  :submitters:
  - :name: Ada Lovelace
    :sid: '1815'
    :email: ada@example.edu
  :created_at: 2026-11-20 23:59:01.000000000 -08:00
  :score: 0.0
submission_102:
  :submitters:
  - :name: Alan Turing
    :sid: '1912'
    :email: alan@example.edu
  - :name: Grace Hopper
    :sid: '1906'
    :email: grace@example.edu
  :score: 0.0
"""


KIT_RUBRIC = """\
[parts.ddp]
number = 2
points = 10
files = ["tests/test_ddp*.py"]
"""  # a kit of part 2 worth 10 points, which the results below match


def _results(score: float, backend: str = "nccl", sizes: str = "2,4,8", most: float = 10, part="ddp",
             graded: Path | None = None) -> dict:  # fmt: skip
    """Results as the grader writes them; ``graded``: the submission whose code they graded (as the kit reads it)."""
    extra = {"settings": {"backend": backend, "world_sizes": sizes}}
    if graded is not None:
        extra["graded"] = graded_record(keep_graded(read_graded(graded), graded_modules(["ddp"])))
    return {
        "score": score,
        "output": "part lines",
        "extra_data": extra,
        "tests": [{"name": "t", "score": score, "max_score": most, "tags": [part]}],
    }


def _kit_zip(path):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("run_autograder", "#!/bin/sh\n")
        zf.writestr(gpu_results.KIT_RUBRIC, KIT_RUBRIC)
    return path


@pytest.fixture
def graded_batch(tmp_path):
    """A Gradescope export of three submissions, two of them graded on the node."""
    export, results = tmp_path / "export", tmp_path / "export-results"
    for sid, text in (("101", "A = 1\n"), ("102", "B = 2\n"), ("103", "C = 3\n")):
        (export / f"submission_{sid}" / "cs336_systems").mkdir(parents=True)
        (export / f"submission_{sid}" / "cs336_systems" / "ddp.py").write_text(text)
        (export / f"submission_{sid}" / "README.md").write_text("not graded\n")
    (export / "submission_metadata.yml").write_text(METADATA)
    results.mkdir()
    (results / "submission_101.json").write_text(json.dumps(_results(7, graded=export / "submission_101")))
    (results / "submission_102.json").write_text(json.dumps(_results(9.5, "gloo", "1,2,4", graded=export /
                                                                     "submission_102")))  # fmt: skip
    (tmp_path / "kit.toml").write_text(KIT_RUBRIC)
    return export, results


def test_pack_keys_each_graded_submission_by_its_graded_bytes_and_writes_a_row_per_student(graded_batch, tmp_path):
    """pack: one bundle entry per graded submission, a CSV row per student, the bundle added to the zip once."""
    export, results = graded_batch
    out, table, kit = tmp_path / "gpu-results.json", tmp_path / "grades.csv", _kit_zip(tmp_path / "autograder.zip")
    argv = ["pack", str(export), str(results), "--out", str(out), "--csv", str(table), "--into", str(kit),
            "--allow-cpu", "submission_102"]  # fmt: skip
    assert gpu_results.main(argv) == 0
    bundle = json.loads(out.read_text())
    assert len(bundle) == 2, f"two submissions were graded on the node, the bundle holds {len(bundle)}"
    found = gpu_results.lookup(out, read_submission(export / "submission_102"))
    assert (
        found
        and found["score"] == 9.5
        and found["output"].startswith("Graded by the staff (gloo on CPUs, world sizes 1, 2, 4)")
    ), found
    first = gpu_results.lookup(out, read_submission(export / "submission_101"))["output"]
    assert first.startswith("Graded by the staff (NCCL on the staff's GPU node, world sizes 2, 4, 8)"), first
    assert gpu_results.lookup(out, read_submission(export / "submission_103")) is None, "an ungraded one was found"
    rows = list(csv.DictReader(table.open()))
    assert [(r["name"], r["sid"], r["email"], r["score"], r["max_score"]) for r in rows] == [
        ("Ada Lovelace", "1815", "ada@example.edu", "7", "10"),
        ("Alan Turing", "1912", "alan@example.edu", "9.5", "10"),
        ("Grace Hopper", "1906", "grace@example.edu", "9.5", "10"),
    ], rows
    assert all(r["fingerprint"] in bundle for r in rows), "a row names other code than the bundle's key"
    assert gpu_results.BUNDLE_NAME in zipfile.ZipFile(kit).namelist()
    with pytest.raises(SystemExit, match="already holds"):
        gpu_results.main(argv)


def test_one_changed_graded_byte_loses_the_node_grade_a_renamed_or_extra_file_keeps_it(graded_batch, tmp_path):
    """The key is the graded modules' bytes: a renamed folder or extra file keeps the grade, a byte loses it."""
    export, results = graded_batch
    bundle = tmp_path / "b.json"
    assert gpu_results.main(["pack", str(export), str(results), "--out", str(bundle), "--rubric",
                             str(tmp_path / "kit.toml"), "--allow-cpu", "submission_102"]) == 0  # fmt: skip
    moved = tmp_path / "renamed"
    shutil.copytree(export / "submission_101", moved)
    (moved / "notes.txt").write_text("extra\n")
    assert gpu_results.lookup(bundle, read_submission(moved)) is not None
    (moved / "cs336_systems" / "ddp.py").write_text("A = 1 \n")
    assert gpu_results.lookup(bundle, read_submission(moved)) is None


def test_run_autograder_hands_out_the_node_grade_without_running_anything(graded_batch, tmp_path):
    """Gradescope's entry point, in a scratch /autograder tree whose source holds a bundle: the grade of a
    submission found in it is the node's, exactly, in seconds (no pytest starts)."""
    export, results = graded_batch
    root = tmp_path / "autograder"
    source = root / "source"
    for folder in ("scripts", "tests", "cs336_systems"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "staff"))
    shutil.copy(ROOT / "pyproject.toml", source)
    assert gpu_results.main(["pack", str(export), str(results), "--out", str(source / gpu_results.BUNDLE_NAME),
                             "--rubric", str(tmp_path / "kit.toml"), "--allow-cpu", "submission_102"]) == 0  # fmt: skip
    shutil.copytree(export / "submission_101", root / "submission")
    (root / "results").mkdir()
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "CS336_PYTHON": sys.executable, "CS336_RUN_AS": ""}
    script = ROOT / "scripts/grading/gradescope/run_autograder"
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads((root / "results" / "results.json").read_text())
    want = json.loads((source / gpu_results.BUNDLE_NAME).read_text())
    assert got in want.values() and got["score"] == 7, got


def test_the_node_check_names_the_torch_build_and_fails_without_the_gpus_it_expects(capsys):
    """``python -m scripts.tools.torch_build --expect-gpus N``: the first check on a node (the guide's step 1)."""
    import torch

    from scripts.tools import torch_build

    assert torch_build.main([]) == 0
    line = capsys.readouterr().out
    assert torch.__version__ in line and ("CPU build" in line or "CUDA" in line), line
    too_many = torch.cuda.device_count() + 1
    assert torch_build.main(["--expect-gpus", str(too_many)]) == 1
    assert "CS336_TORCH" in capsys.readouterr().err, "the failure does not say how to install a CUDA build"


@pytest.mark.parametrize(
    "results, expected",
    [
        (_results(7, most=13), "part ddp: maximum 13, the kit's 10"),
        (_results(7, part="tensor_parallel"), "not in the kit: tensor_parallel; not graded: ddp"),
        ({**_results(7), "extra_data": {}}, "do not record their backend and world sizes"),
    ],
    ids=["other-maximum", "other-parts", "no-settings"],
)
def test_pack_refuses_results_that_do_not_fit_the_kit_and_names_what_differs(graded_batch, tmp_path, results,
                                                                              expected, capsys):  # fmt: skip
    """A batch graded with other parts or another maximum than the zip's kit (``--parts 2,4,6`` results in a full
    kit's zip gave students 35.8 / 39), or results that do not say how they ran: refused, nothing written."""
    export, folder = graded_batch
    (folder / "submission_102.json").write_text(json.dumps(results))
    kit, out = _kit_zip(tmp_path / "autograder.zip"), tmp_path / "b.json"
    assert gpu_results.main(["pack", str(export), str(folder), "--out", str(out), "--into", str(kit)]) == 1
    err = capsys.readouterr().err
    assert "submission_102" in err and expected in err and "submission_101" not in err, err
    assert not out.exists() and gpu_results.BUNDLE_NAME not in zipfile.ZipFile(kit).namelist()


def test_a_zip_left_inside_the_submission_folder_is_graded_and_keyed_by_its_modules(graded_batch, tmp_path):
    """Gradescope unpacks an uploaded zip once: a submission.zip uploaded beside other files, or zipped again,
    arrives as a zip inside the folder. Its modules are graded (with a note saying what to upload) and the GPU
    bundle finds it; two such zips are not guessed between, and the notes say what to upload."""
    export, _ = graded_batch
    folder = tmp_path / "upload"
    folder.mkdir()
    with zipfile.ZipFile(folder / "submission.zip", "w") as zf:
        zf.write(export / "submission_101" / "cs336_systems" / "ddp.py", "cs336_systems/ddp.py")
    (folder / "README.md").write_text("notes\n")
    sub = gpu_results.read_graded(folder)
    assert sub.modules == read_submission(export / "submission_101").modules
    assert "submission.zip, a zip inside your submission" in sub.notes[0] and UPLOAD in sub.notes[0]
    assert fingerprint(sub) == fingerprint(read_submission(export / "submission_101"))
    shutil.copy(folder / "submission.zip", folder / "again.zip")
    two = gpu_results.read_graded(folder)
    assert not two.modules and any("2 zips" in n and UPLOAD in n for n in two.notes), two.notes


def test_pack_refuses_cpu_results_unless_each_is_named(graded_batch, tmp_path, capsys):
    """A gloo grade (a CPU run, world sizes 1, 2, 4) in the node's results folder is not the node's grade: refused,
    nothing written, the message naming the submission and --allow-cpu; named, it is packed (labelled as CPU);
    a name that is not in the export is refused rather than ignored."""
    export, results = graded_batch
    kit, out = _kit_zip(tmp_path / "autograder.zip"), tmp_path / "b.json"
    argv = ["pack", str(export), str(results), "--out", str(out), "--rubric", str(tmp_path / "kit.toml")]
    assert gpu_results.main(argv) == 1
    err = capsys.readouterr().err
    assert "submission_102: graded on CPUs (gloo)" in err and "--allow-cpu submission_102" in err, err
    assert "submission_101" not in err and not out.exists()
    assert gpu_results.main([*argv, "--allow-cpu", "submission_103,submission_999"]) == 1
    assert "--allow-cpu submission_999: no such submission" in capsys.readouterr().err and not out.exists()
    assert gpu_results.main([*argv, "--allow-cpu", "submission_102", "--into", str(kit)]) == 0
    assert len(json.loads(out.read_text())) == 2


def test_pack_refuses_results_graded_from_other_bytes_which_precomputed_would_hand_out(graded_batch, tmp_path,
                                                                                        capsys):  # fmt: skip
    """The case of issue 55: submission_101's results come from a regrade of a changed copy (fixed since), and
    the export holds the original. Packed, ``--precomputed`` would give the original the fixed copy's grade;
    pack refuses, naming the file that differs and what to do, and writes nothing. Results that record no
    graded code (an older grader's) are refused too."""
    export, results = graded_batch
    fixed = tmp_path / "fixed"
    shutil.copytree(export / "submission_101", fixed)
    (fixed / "cs336_systems" / "ddp.py").write_text("A = 1  # fixed after the export\n")
    (results / "submission_101.json").write_text(json.dumps(_results(10, graded=fixed)))
    kit, out = _kit_zip(tmp_path / "autograder.zip"), tmp_path / "b.json"
    argv = ["pack", str(export), str(results), "--out", str(out), "--into", str(kit), "--allow-cpu", "submission_102"]
    assert gpu_results.main(argv) == 1
    err = capsys.readouterr().err
    assert "submission_101: its results graded other code than the export holds" in err and "ddp.py" in err, err
    assert "grade this submission again" in err and "submission_102" not in err, err
    assert not out.exists() and gpu_results.BUNDLE_NAME not in zipfile.ZipFile(kit).namelist()
    (results / "submission_101.json").write_text(json.dumps(_results(10)))
    assert gpu_results.main(argv) == 1
    assert "record no fingerprint of the code they graded" in capsys.readouterr().err


def test_pack_names_the_argument_that_is_wrong(graded_batch, tmp_path, capsys):
    """A missing export or results folder, or an --into that is not a zip: exit 2 naming the argument, no traceback."""
    export, results = graded_batch
    (tmp_path / "notes.txt").write_text("not a zip\n")
    for argv, named in (([str(tmp_path / "nowhere"), str(results)], "export: "),
                        ([str(export), str(tmp_path / "nowhere")], "results: "),
                        ([str(export), str(results), "--into", str(tmp_path / "notes.txt")], "--into: ")):  # fmt: skip
        with pytest.raises(SystemExit) as exit_:
            gpu_results.main(["pack", *argv])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and named in err and "Traceback" not in err, err
