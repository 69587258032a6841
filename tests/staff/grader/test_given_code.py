"""A kit's given code is always the staff's copy at grading (staff only).

    pytest tests/staff/grader/test_given_code.py -v

A kit of some parts ships the modules its parts build on as given code (scripts/grading/subset.py). A student who
edits one (say ``ddp.py`` in a kit of parts 4 and 7) must be graded on the staff's copy, with a line saying so.
Fast, single-process checks: no rank and no grade runs here; the kit's Gradescope zip check in CI grades a
submission that ships an edited given module end to end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.grading import subset
from scripts.grading.rubric import RUBRIC_PATH, load_rubric
from scripts.grading.sandbox import StaffFiles, build_sandbox, graded_modules, keep_graded, read_submission
from scripts.tools.submission import PART_MODULES

pytestmark = pytest.mark.staff

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
