"""A kit's given code is always the staff's copy at grading, wherever the grader runs (staff only).

    pytest tests/staff/grader/test_given_code.py -v

A kit of some parts ships the modules its parts build on as given code (scripts/grading/subset.py). A student who
edits one (say ``ddp.py`` in a kit of parts 4 and 7) must be graded on the staff's copy, with a line saying so;
a student who hands in only the kit's own modules (what ``python -m scripts.tools.submission`` zips) must get the
same grade through the three ways a course grades: the staff checkout's CLI with ``--parts``, a ``--batch`` with
it, and the kit's Gradescope zip. For the kits of Parts 11, 10 and 4 + 5 + 7 the sandbox the CLI (and a batch,
which runs the CLI per submission) builds holds exactly the zip's part modules, the submission's in place of the
kit's own; then one short grade per way, each on one kit and on a test that runs given code, gives the reference's
kit modules full marks (the three side by side: about 30 s on 2 cores). Without the fix, the sandbox checks
and the CLI and batch grades fail (given modules are the staff checkout's stubs).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.grading import make_autograder_zip, subset
from scripts.grading.rubric import RUBRIC_PATH, load_rubric
from scripts.grading.sandbox import StaffFiles, build_sandbox, graded_modules, keep_graded, kit_of_run, read_submission
from scripts.tools.submission import PART_MODULES
from tests.harness.pool import ROOT as REPO
from tests.staff.grader import grader_env

pytestmark = pytest.mark.staff

KITS = {"11": frozenset({11}), "10": frozenset({10}), "4,5,7": frozenset({4, 5, 7})}
# Per kit, public tests that run its given code (-k), and the one world size each grade runs: the smallest at which
# the test runs (device-faithful mode skips a job of more ranks than the largest --world-sizes).
GIVEN_CODE_TESTS = {
    "11": ("composed_meshes_train", "1"),  # the capstone on the given mesh (and whatever the mesh's shape needs)
    "10": ("without_a_spare_fsdp_restarts_smaller", "2"),  # a job restarted by fault_tolerance on the given FSDP
    "4,5,7": ("hsdp_training_matches_one_process", "1"),  # the mesh's HSDP on the given fsdp
}

EDITED = b'raise RuntimeError("a student edited this given module")\n'


def _kit_rubric(tmp_path: Path, parts: frozenset[int]):
    path = tmp_path / "rubric.toml"
    path.write_text(subset.subset_rubric(RUBRIC_PATH.read_text(), parts))
    return load_rubric(path)


def _submission(tmp_path: Path, modules: dict[str, bytes]) -> Path:
    folder = tmp_path / "sub" / "cs336_systems"
    folder.mkdir(parents=True)
    for module, data in modules.items():
        (folder / f"{module}.py").write_bytes(data)
    return folder.parent


def test_a_kit_grades_only_its_own_modules_and_the_mixed_accounting(tmp_path):
    """A kit of parts 4 and 7 grades tensor_parallel, mesh and accounting from the submission; the whole kit
    grades every part module."""
    kit = _kit_rubric(tmp_path, frozenset({4, 7}))
    assert graded_modules(list(kit.parts)) == {"tensor_parallel", "mesh", "accounting"}
    assert graded_modules(list(load_rubric().parts)) == set(PART_MODULES)


def test_an_edited_given_module_is_ignored_with_a_note_and_the_staff_copy_is_graded(tmp_path):
    """In a kit of parts 4 and 7, a submitted ddp.py (given) is dropped with a note; the sandbox holds the staff's."""
    kit = _kit_rubric(tmp_path, frozenset({4, 7}))
    given = sorted(subset.given_modules(frozenset({4, 7})))
    assert "ddp" in given, f"a kit of parts 4 and 7 gives ddp (its mesh builds on it); given: {given}"
    sub = read_submission(_submission(tmp_path, {"ddp": EDITED, "tensor_parallel": b"# mine\n"}))
    sub = keep_graded(sub, graded_modules(list(kit.parts)))
    assert set(sub.modules) == {"tensor_parallel"}, f"graded from the submission: {sorted(sub.modules)}"
    note = next((n for n in sub.notes if n.startswith("ddp.py")), None)
    assert note and "given" in note and "ignored" in note, f"no note tells the student ddp.py is ignored: {sub.notes}"

    staff_ddp = b"# the staff's given ddp\n"
    staff = StaffFiles({"cs336_systems/ddp.py": staff_ddp, "cs336_systems/tensor_parallel.py": b"# stub\n",
                        "cs336_systems/mesh.py": b"# stub\n"})  # fmt: skip
    notes = build_sandbox(tmp_path / "sandbox", staff, sub)
    assert (tmp_path / "sandbox/cs336_systems/ddp.py").read_bytes() == staff_ddp, "the edited given module was graded"
    assert (tmp_path / "sandbox/cs336_systems/tensor_parallel.py").read_bytes() == b"# mine\n"
    assert not any(n.startswith("ddp.py") for n in notes), f"a given module is reported as missing: {notes}"
    assert any(n.startswith("mesh.py is not in the submission") for n in notes), notes


def test_the_whole_kit_grades_every_part_module_from_the_submission(tmp_path):
    """The whole kit gives no part module: the submission's ddp.py is graded, with no note about given code."""
    sub = read_submission(_submission(tmp_path, {"ddp": b"# mine\n"}))
    sub = keep_graded(sub, graded_modules(list(load_rubric().parts)))
    assert sub.modules == {"ddp": b"# mine\n"} and not any("given" in n for n in sub.notes), sub.notes


def _kit_modules(parts: frozenset[int]) -> list[str]:
    """The part modules a student of the kit writes: its parts' modules and the mixed accounting."""
    owner = subset.module_parts()
    return sorted({m for m, n in owner.items() if n in parts} | {"accounting"})


def _reference_submission(folder: Path, parts: frozenset[int]) -> Path:
    """A submission of the reference's copies of the kit's own modules, nothing else."""
    return _submission(
        folder, {m: (REPO / "reference_solutions" / f"{m}.py").read_bytes() for m in _kit_modules(parts)}
    )


def _zip_modules(zip_path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(zip_path) as zf:
        return {n: zf.read(n) for n in zf.namelist() if n.startswith("cs336_systems/") and n.endswith(".py")
                and Path(n).stem in PART_MODULES}  # fmt: skip


@pytest.mark.parametrize("kit", list(KITS))
def test_a_grade_with_parts_builds_the_sandbox_of_the_kits_zip(tmp_path, kit):
    """The sandbox of ``--parts`` from the staff checkout holds the zip's part modules (given code, the
    reference; accounting with the kit's tasks as stubs), the submission's own modules in place of the kit's,
    and no staff stub of a module the kit gives."""
    parts = KITS[kit]
    sub = keep_graded(
        read_submission(_reference_submission(tmp_path, parts)), graded_modules(list(load_rubric().parts))
    )
    selected = load_rubric().select(kit.split(","))
    staff, sub, notes = kit_of_run(StaffFiles.snapshot(REPO), sub, set(selected.parts))
    build_sandbox(tmp_path / "sandbox", staff, sub)
    make_autograder_zip.build(tmp_path / "autograder.zip", parts)
    want = _zip_modules(tmp_path / "autograder.zip")
    want.update({f"cs336_systems/{m}.py": data for m, data in sub.modules.items()})
    assert set(sub.modules) == set(_kit_modules(parts)), f"graded from the submission: {sorted(sub.modules)}"
    for rel, data in sorted(want.items()):
        got = (tmp_path / "sandbox" / rel).read_bytes()
        assert got == data, f"kit {kit}: the sandbox's {rel} is not the zip's (or the submission's)"
    for module in sorted(subset.given_modules(parts)):
        text = (tmp_path / "sandbox/cs336_systems" / f"{module}.py").read_text()
        assert "raise NotImplementedError" not in text, f"kit {kit}: given {module}.py is a stub in the sandbox"


@dataclass
class Grade:
    proc: subprocess.Popen
    out: Path  # its results.json


def _start(cmd: list[str], cwd: Path, out: Path) -> Grade:
    proc = subprocess.Popen(cmd, cwd=cwd, env=grader_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    return Grade(proc, out)


@pytest.fixture(scope="module")
def kit_grades(tmp_path_factory) -> dict[str, Grade]:
    """One short grade per way, started side by side (each is mostly the grader's and pytest's start-up), each on
    its test of ``GIVEN_CODE_TESTS``: the CLI with ``--parts 11``, a ``--batch`` with
    ``--parts 10``, and the zip of parts 4, 5 and 7 unpacked alone and graded with its own grader."""
    tmp = tmp_path_factory.mktemp("kit-grades")
    grader = [sys.executable, "-m", "scripts.grading"]

    def tests(kit: str) -> list[str]:
        select, world_size = GIVEN_CODE_TESTS[kit]
        return ["--select", select, "--world-sizes", world_size, "--timeout", "300"]

    grades = {}
    sub = _reference_submission(tmp / "cli", KITS["11"])
    grades["cli"] = _start([*grader, str(sub), "--out", str(tmp / "cli.json"), "--parts", "11", *tests("11")], REPO,
                           tmp / "cli.json")  # fmt: skip
    batch = tmp / "batch"
    _reference_submission(batch / "student", KITS["10"])
    grades["batch"] = _start([*grader, "--batch", str(batch), "--parts", "10", *tests("10")], REPO,
                             tmp / "batch-results" / "student.json")  # fmt: skip
    make_autograder_zip.build(tmp / "autograder.zip", KITS["4,5,7"])
    with zipfile.ZipFile(tmp / "autograder.zip") as zf:
        zf.extractall(tmp / "source")
    sub = _reference_submission(tmp / "zip-student", KITS["4,5,7"])
    grades["zip"] = _start([*grader, str(sub), "--out", str(tmp / "zip.json"), *tests("4,5,7")], tmp / "source",
                           tmp / "zip.json")  # fmt: skip
    yield grades
    for g in grades.values():
        if g.proc.poll() is None:
            g.proc.kill()
            g.proc.wait()


def _full_marks(grade: Grade, what: str) -> None:
    _, err = grade.proc.communicate(timeout=600)
    assert grade.out.exists(), f"{what}: no results (exit {grade.proc.returncode}):\n{err[-3000:]}"
    results = json.loads(grade.out.read_text())
    tests = results["tests"]
    most = sum(t["max_score"] for t in tests)
    assert most > 0 and results["score"] == pytest.approx(most), (
        f"{what}: {results['score']} / {most}\n{results['output']}\n"
        + "\n".join(t["output"][:1500] for t in tests if t["score"] < t["max_score"])
    )


def test_the_cli_with_parts_gives_the_kit_of_part_11_full_marks(kit_grades):
    """``python -m scripts.grading SUB --parts 11`` of parallelize.py and accounting.py alone: the mesh (and the
    DDP, FSDP, TP, pipeline and CP it composes) is the reference's (before: the stubs, 3.51 / 15)."""
    _full_marks(kit_grades["cli"], "CLI, kit 11")


def test_a_batch_with_parts_gives_the_kit_of_part_10_full_marks(kit_grades):
    """``--batch DIR --parts 10`` of checkpoint.py, fault_tolerance.py and accounting.py: FSDP (and DDP, TP) are
    the reference's."""
    _full_marks(kit_grades["batch"], "--batch, kit 10")


def test_the_gradescope_zip_gives_the_kit_of_parts_4_5_7_full_marks(kit_grades):
    """The zip of parts 4, 5 and 7, unpacked alone, grades tensor_parallel, pipeline, mesh and accounting with its
    own grader: FSDP (and DDP, ZeRO) are the zip's given code."""
    _full_marks(kit_grades["zip"], "Gradescope zip, kit 4,5,7")
