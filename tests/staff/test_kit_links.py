"""Every kit works for a student on its own (staff only).

    pytest tests/staff/test_kit_links.py

The release cut (scripts/release/cut.py) writes the full release or a kit of some parts; its check
``kit_problems`` fails on what a student of that kit would trip on: a markdown link to a file the kit lacks, a
test file, script or ``python -m`` module that the README or a handout names and the kit lacks, a staff-only
name in any shipped text file (a staff path, module or file name such as ``reference_solutions``,
``scripts.grading``, ``grading.md``, a hidden test's file, the mutants), §1.0's ground rules missing from a kit
without Part 1, ``build/`` or ``*.egg-info`` left by the install. These tests write the full release and the
kits CI builds (and the advanced 4 + 5 + 7 kit) and expect no problem, then plant each mistake once. Issue 43's
and 44's kit promises follow: a kit's figures are its own parts', a check that leaves a file is caught, given
modules read as given code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile

import pytest

from scripts.figures.registry import FIGURES, linked_figures
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


def _writes(rel: str, line: str):
    return lambda kit: (kit / rel).write_text(line + "\n")


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
        (_writes("tests/harness/defaults.py", '"""see tests/staff/hidden/"""'), "staff-only"),
        (_writes("tests/oracles/fsdp.py", '"""Used by test_fsdp_hidden."""'), "test_fsdp_hidden"),
        (_writes("tests/harness/compare.py", "# the staff mutants call this"), "'mutants'"),
        (_writes("scripts/__init__.py", '"""python -m scripts.grading SUB"""'), "scripts.grading"),
        (_writes("scripts/setup.sh", "# see handouts/grading.md"), "grading.md"),
        (lambda k: (k / "build").mkdir(), "build leftover"),
        (lambda k: (k / "cs336_systems.egg-info").mkdir(), "build leftover"),
    ],
    ids=[
        "missing-test",
        "staff-link",
        "missing-module",
        "staff-name",
        "no-ground-rules",
        "staff-path-in-code",
        "hidden-test-file",
        "mutants",
        "staff-module",
        "staff-doc-in-shell",
        "build",
        "egg-info",
    ],
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


# -- issue 43 (a kit carries nothing of the staff's, its README's commands run) and 44 (given code reads as given) --


@pytest.fixture(scope="module")
def kit10(tmp_path_factory):
    out = tmp_path_factory.mktemp("kit") / "kit-10"
    cut.write_release(out, frozenset({10}))
    return out


def test_a_kit_draws_its_own_parts_figures_only(kit10):
    """``python -m scripts.figures`` in a kit of Part 10 draws Part 10's figures (those its handouts link)."""
    assert linked_figures(kit10 / "handouts") == [
        "checkpoint_protocol.png",
        "checkpoint_resharding.png",
        "fault_tolerance_recovery.png",
    ]
    assert linked_figures(cut.REPO / "handouts") == list(FIGURES)  # the staff checkout: every figure


def test_a_figure_waiting_for_a_stub_is_skipped_naming_its_task(tmp_path, monkeypatch, capsys):
    """A figure whose code raises a stub's NotImplementedError (here or in a rank) is skipped with the task's name,
    the others are drawn, and the exit status is 1; any other error is raised."""
    from scripts.figures import __main__ as figures

    def drawn(path):
        path.write_text("png")
        return path

    def stub(path):
        raise NotImplementedError("Task 5.2 (schedules): see handouts/05-pipeline.md §5.2")

    def in_a_rank(path):  # the harness's report of a rank that raised it (Part 11's step timeline)
        raise RuntimeError("rank 0 raised:\nNotImplementedError: Task 11.2 (pieces and stages): see handouts/...")

    monkeypatch.setattr(figures, "FIGURES", {"a.png": drawn, "b.png": stub, "c.png": in_a_rank})
    monkeypatch.setattr(figures, "linked_figures", lambda handouts: ["b.png", "a.png", "c.png"])
    monkeypatch.setattr(sys, "argv", ["figures", "--out-dir", str(tmp_path)])
    assert figures.main() == 1
    printed = capsys.readouterr().out
    assert "b.png: not drawn: Task 5.2 (schedules) is not implemented yet" in printed
    assert "c.png: not drawn: Task 11.2 (pieces and stages) is not implemented yet" in printed
    assert (tmp_path / "a.png").exists()

    def broken(path):
        raise ValueError("a bug in the figure")

    monkeypatch.setattr(figures, "FIGURES", {"a.png": broken, "b.png": stub, "c.png": in_a_rank})
    with pytest.raises(ValueError, match="a bug in the figure"):
        figures.main()


def test_the_checks_report_what_they_leave_in_the_release(tmp_path):
    """A file the release's checks add (a figure a --help drew, a bytecode cache) or change is a problem."""
    out = tmp_path / "kit"
    (out / "handouts" / "figures").mkdir(parents=True)
    (out / "README.md").write_text("kit\n")
    before = cut.tree_state(out)
    assert cut.changed_by_checks(before, cut.tree_state(out)) == []
    (out / "handouts" / "figures" / "checkpoint_protocol.png").write_bytes(b"png")
    (out / "README.md").write_text("kit, redrawn\n")
    assert cut.changed_by_checks(before, cut.tree_state(out)) == [
        "README.md: changed by the checks",
        "handouts/figures/checkpoint_protocol.png: added by the checks",
    ]


def test_staff_lines_are_cut_and_no_staff_test_ships(kit10):
    """``# <staff>`` lines (Python) and ``<!-- staff -->`` sections (every markdown file) stay in the staff checkout;
    nothing below tests/staff/ ships, whether staff.py lists the file or not."""
    defaults = (kit10 / "tests" / "harness" / "defaults.py").read_text()
    assert "<staff>" not in defaults and "reference_solutions" not in defaults and "IMPL_ALIASES = {" in defaults
    assert "reference_solutions" in (cut.REPO / "tests" / "harness" / "defaults.py").read_text()
    readme = (kit10 / "tests" / "README.md").read_text()
    assert "Mutants" not in readme and "staff -->" not in readme and "## The communication recorder" in readme
    assert not (kit10 / "tests" / "staff").exists()
    code = "a = 1\n    # <staff> why\n    b = 2\n    # </staff>\nc = 3\n"
    assert cut.STAFF_LINES.sub("", code) == "a = 1\nc = 3\n"


def test_pending_excuses_only_what_its_files_still_name(kit10, tmp_path):
    """PENDING excuses named mentions while their owners' edits are awaited: without it they are problems, and
    each entry still matches its file in the full release (delete an entry once its file is fixed)."""
    assert cut.staff_problems(kit10) == []
    planted = tmp_path / "planted"  # a shipped comment that names the reference (the kit itself names nothing now)
    (planted / "tests").mkdir(parents=True)
    (planted / "tests" / "x.py").write_text("# like reference_solutions/ddp.py\n")
    assert any("names the staff-only 'reference_solutions'" in p for p in cut.staff_problems(planted, pending={}))
    assert cut.staff_problems(planted, pending={"tests/x.py": ("reference_solutions",)}) == []
    assert cut.stale_pending(kit10, {"handouts/10-failures.md": ("reference_solutions",)}) == [
        "handouts/10-failures.md: 'reference_solutions'"
    ]
    full = kit10.parent / "full"
    cut.write_release(full)
    assert cut.stale_pending(full) == []


def test_given_modules_read_as_given_code(tmp_path):
    """In a kit of Part 11 the given modules (parts 2-5, 7-9) say whose code they are and speak to nobody."""
    out = tmp_path / "kit-11"
    cut.write_release(out, frozenset({11}))
    kit = json.loads((out / "kit.json").read_text())
    owner = subset.module_parts()
    assert len(kit["given"]) >= 5
    for module in kit["given"]:
        text = (out / "cs336_systems" / f"{module}.py").read_text()
        doc = text.split('"""')[1]
        assert f"Given code in this kit (Part {owner[module]} is not assigned)" in doc, module
        for words in (r"\b[Yy]ou(r)?\b", r"\bTask \d+\.\d+", r"\bUse\b", "Useful tools", r"\(not in this kit\)\)"):
            assert not re.search(words, text), f"{module}.py: {re.search(words, text)[0]!r}"


def test_the_walk_runs_the_commands_the_readme_names_in_its_text(kit10):
    """``cut --walk`` also runs what the README names in its sentences: the figures and the kit's benchmark."""
    cmds = [cmd for doc, cmd in cut.walk_commands(kit10) if doc == "README.md"]
    assert "python -m scripts.figures" in cmds
    assert "python -m scripts.bench.checkpoint --impl student" in cmds
    assert not [c for c in cmds if "<" in c and "<one of its files>" not in c]
