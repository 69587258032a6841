"""The grader's single sources of truth agree with the tree: staff paths, part modules, rubric, channel (staff only).

    pytest tests/staff/grader/test_layout.py -v

Fast, single-process checks: no rank and no grade runs here.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from scripts.grading import channel
from scripts.grading.rubric import load_rubric
from scripts.grading.runner import ChannelReader
from scripts.grading.sandbox import PLUGIN_FILES, StaffFiles
from scripts.grading.staff import STAFF_ONLY, STAFF_TESTS, is_staff_only, path_of, reaches_grading_machine
from scripts.tools.submission import GIVEN_MODULES, PART_MODULES
from tests.harness.pool import ROOT

pytestmark = pytest.mark.staff

GIVEN_HELPERS = set(GIVEN_MODULES)  # cs336_systems modules that are not graded


def _git_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return [f for f in out.splitlines() if (ROOT / f).is_file()]


def test_every_staff_test_file_belongs_to_one_kind():
    """Each file under tests/staff/ is covered by exactly one entry of staff.py's table (no stray staff test)."""
    files = [f for f in _git_files() if f.startswith(STAFF_TESTS)]
    assert files, f"no files under {STAFF_TESTS}"
    for f in files:
        owners = [e.path for e in STAFF_ONLY if f == e.path or (e.path.endswith("/") and f.startswith(e.path))]
        assert len(owners) == 1, f"{f}: covered by {owners} in scripts/grading/staff.py (want exactly one entry)"
    for kind in ("hidden", "mutants", "grader", "stubs"):
        assert (ROOT / path_of(kind)).exists(), f"staff kind {kind!r}: {path_of(kind)} does not exist"


def test_the_grading_machine_gets_the_hidden_tests_but_not_the_reference_or_what_needs_it():
    """The sandbox holds the hidden tests and the plugin, and nothing staff.py keeps off the grading machine."""
    assert is_staff_only("tests/staff/hidden/test_x.py") and reaches_grading_machine("tests/staff/hidden/test_x.py")
    for rel in ("reference_solutions/ddp.py", "tests/staff/mutants/runner.py", "tests/staff/grader/test_grade.py",
                "tests/staff/test_stubs.py", "scripts/release/stubs.py"):  # fmt: skip
        assert is_staff_only(rel) and not reaches_grading_machine(rel), rel
    files = StaffFiles.snapshot(ROOT).files
    kept_off = [f for f in files if not reaches_grading_machine(f) and f != "reference_solutions/__init__.py"]
    assert not kept_off, f"the sandbox would hold staff files that need the reference: {kept_off}"
    assert b"raise ImportError" in files["reference_solutions/__init__.py"], "the reference must be a placeholder"
    hidden = [f for f in _git_files() if f.startswith(path_of("hidden")) and f.endswith(".py")]
    assert set(hidden) <= set(files), f"hidden tests missing from the sandbox: {sorted(set(hidden) - set(files))}"
    assert set(PLUGIN_FILES) <= set(files), "the grading plugin's files must be in the sandbox"


def test_part_modules_are_the_stubs_and_rubric_entries_are_named_after_them():
    """PART_MODULES lists exactly the stub modules; each rubric entry is one of them, in order, grading its tests."""
    stubs = {p.stem for p in (ROOT / "cs336_systems").glob("*.py")} - GIVEN_HELPERS
    assert set(PART_MODULES) == stubs, f"scripts/tools/submission.py PART_MODULES {PART_MODULES} != stubs {stubs}"
    rubric = load_rubric()
    graded = [m for m in PART_MODULES if m in rubric.parts]
    assert list(rubric.parts) == graded, f"rubric entries {list(rubric.parts)} must be part modules, in part order"
    for module in graded:
        part, pool = rubric.part_of(f"tests/test_{module}.py") or (None, None)
        assert part is not None and part.name == module and pool == "public", f"tests/test_{module}.py -> {part}"
        assert rubric.part_of(f"tests/staff/hidden/test_{module}_hidden.py")[0].name == module


def test_the_channel_accepts_only_signed_lines_in_sequence():
    """A line verifies under its key only, unaltered; the reader drops forged, replayed and out-of-order lines."""
    key, other = b"k" * 32, b"o" * 32
    line = channel.encode(key, 1, "result", nodeid="t::x", outcome="passed")
    assert line.endswith(b"\n") and channel.decode(key, line[:-1])["outcome"] == "passed"
    assert channel.decode(other, line[:-1]) is None, "a line signed under another key must not verify"
    assert channel.decode(key, line[:-1].replace(b"passed", b"failed")) is None, "an altered line must not verify"
    r, w = os.pipe()
    try:
        forged = channel.encode(other, 2, "result", nodeid="t::y", outcome="passed")
        os.write(w, line + forged + line + channel.encode(key, 2, "finished", exitstatus=0))
        reader = ChannelReader(r, key)
        events = reader.read(timeout=1.0)
    finally:
        os.close(r)
        os.close(w)
    assert [e["event"] for e in events] == ["result", "finished"], events
    assert reader.rejected == 2, "the forged line and the replayed line must each be counted as rejected"
