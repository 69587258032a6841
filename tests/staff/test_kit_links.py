"""Every kit works for a student on its own (staff only).

    pytest tests/staff/test_kit_links.py

The release cut (scripts/release/cut.py) writes the full release or a kit of some parts; its check
``kit_problems`` fails on what a student of that kit would trip on: a markdown link to a file the kit lacks, a
test file, script or ``python -m`` module that the README or a handout names and the kit lacks, a staff-only
name (``reference_solutions``, ``scripts/grading``, ``.ci/run``, ``grading.md``), §1.0's ground rules missing
from a kit without Part 1, ``build/`` or ``*.egg-info`` left by the install. These tests write the full release
and the kits CI builds (and the advanced 4 + 5 + 7 kit) and expect no problem, then plant each mistake once.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile

import pytest

from scripts.grading import subset
from scripts.release import cut

pytestmark = pytest.mark.staff


@pytest.fixture(scope="module")
def kit457(tmp_path_factory):
    out = tmp_path_factory.mktemp("kit") / "kit-4-5-7"
    cut.write_release(out, frozenset({4, 5, 7}))
    return out


@pytest.mark.parametrize("parts", [None, "4,7", "2,6", "10"], ids=["full", "kit-4-7", "kit-2-6", "kit-10"])
def test_a_release_has_no_dead_link_missing_command_or_staff_name(tmp_path, parts):
    """A release of these parts has no dead link, no command or module it lacks, and no staff name."""
    out = tmp_path / "release"
    cut.write_release(out, subset.parse_parts(parts))
    assert cut.kit_problems(out) == []


def test_the_advanced_kit_names_only_its_own_commands_and_says_what_is_given(kit457):
    """The 4+5+7 kit's README runs only its own tests, ships the ground rules, and names what is given."""
    assert cut.kit_problems(kit457) == []
    readme = (kit457 / "README.md").read_text()
    assert "tests/test_collectives.py" not in readme and "tests/test_ddp.py" not in readme
    assert "pytest tests/test_tensor_parallel.py -m task4_1" in readme
    assert "(handouts/ground-rules.md)" in readme and (kit457 / "handouts" / "ground-rules.md").exists()
    assert "on every rank, before any" in (kit457 / "handouts" / "ground-rules.md").read_text()
    assert "you write `tensor_parallel.py`, `pipeline.py`, `accounting.py`, `mesh.py`" in readme
    assert "Given (the staff's code" in readme and "`ddp.py`, `fsdp.py`, `sharded_optimizer.py`" in readme
    assert "**Part 1 " not in readme and "Task 1.7" not in readme  # no stray Part 1 paragraph
    kit = json.loads((kit457 / "kit.json").read_text())
    assert kit["written"] == ["tensor_parallel", "pipeline", "accounting", "mesh"]
    assert kit["given"] == ["ddp", "fsdp", "sharded_optimizer"]


def test_the_newcomer_walk_runs_the_kits_own_commands(kit457):
    """``cut --walk`` types what the README and the handouts' first blocks say: here, only the kit's files."""
    cmds = [cmd for _, cmd in cut.walk_commands(kit457)]
    assert "pytest tests/test_tensor_parallel.py -m task4_1 -x --world-sizes 2" in cmds
    assert any(c.startswith("python -m scripts.bench.pipeline") for c in cmds)
    for cmd in cmds:
        for path in re.findall(r"(?:tests|scripts)/[\w/]+\.py", cmd):
            assert (kit457 / path).exists(), cmd


def test_the_submission_tool_zips_what_the_kit_student_writes(kit457, tmp_path):
    """The kit's submission tool zips exactly the modules its student writes and says which are given."""
    out = tmp_path / "submission.zip"
    run = subprocess.run([sys.executable, "-m", "scripts.tools.submission", "--out", str(out)], cwd=kit457,
                         capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(kit457)})  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "you write: tensor_parallel.py, pipeline.py, accounting.py, mesh.py" in run.stdout
    assert "given, not graded" in run.stdout and "ddp.py" in run.stdout.split("given, not graded")[1]
    names = sorted(zipfile.ZipFile(out).namelist())
    assert names == [f"cs336_systems/{m}.py" for m in ("accounting", "mesh", "pipeline", "tensor_parallel")]


@pytest.mark.parametrize(
    "plant, expected",
    [
        (lambda k: (k / "README.md").write_text("run `pytest tests/test_ddp.py -x`\n"), "names tests/test_ddp.py"),
        (lambda k: (k / "handouts" / "05-pipeline.md").write_text("see [the guide](grading.md)\n"), "links grading.md"),
        (
            lambda k: (k / "README.md").write_text("`python -m scripts.bench.collectives`\n"),
            "scripts.bench.collectives",
        ),
        (lambda k: (k / "README.md").write_text("the staff's `reference_solutions/`\n"), "staff-only"),
        (lambda k: (k / "handouts" / "ground-rules.md").unlink(), "ground rules"),
        (lambda k: (k / "build").mkdir(), "build leftover"),
        (lambda k: (k / "cs336_systems.egg-info").mkdir(), "build leftover"),
    ],
    ids=["missing-test", "staff-link", "missing-module", "staff-name", "no-ground-rules", "build", "egg-info"],
)
def test_each_kit_mistake_is_caught(tmp_path, plant, expected):
    """Each planted kit mistake (a dead link, a missing command or module, a staff name) is reported."""
    out = tmp_path / "kit"
    cut.write_release(out, frozenset({4, 5, 7}))
    plant(out)
    found = cut.kit_problems(out)
    assert any(expected in p for p in found), found


def test_a_handout_link_to_a_part_outside_the_kit_becomes_plain_text():
    """A link to a handout the kit lacks becomes plain text naming the part; links inside the kit stay."""
    text = "See [§3.3](03-zero.md#33-fsdp) and handouts/02-ddp.md; [§1.0](01-collectives.md#10-ground-rules-all-tasks)."
    got = subset.kit_markdown(text, {"handouts/05-pipeline.md", "handouts/ground-rules.md"}, "handouts")
    assert got == ("See §3.3 (Part 3's handout, not in this kit) and Part 2's handout (not in this kit); "
                   "[§1.0](ground-rules.md).")  # fmt: skip
