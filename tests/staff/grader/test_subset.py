"""A kit of some parts (scripts/grading/subset.py): its rubric, files, given code and mixed accounting module.

pytest tests/staff/grader/test_subset.py -v   (the whole kit's check: python -m scripts.release.cut OUT --parts 2,4)
"""

from __future__ import annotations

import importlib.util

import pytest

from scripts.grading import subset
from scripts.grading.rubric import RUBRIC_PATH, load_rubric

pytestmark = pytest.mark.staff


def test_the_subset_rubric_keeps_exactly_the_kept_parts_tables_and_written_entries(tmp_path):
    """parts 2,4: [parts.ddp] and [parts.tensor_parallel] with their tasks, their [[written]] entries, the settings."""
    path = tmp_path / "rubric.toml"
    path.write_text(subset.subset_rubric(RUBRIC_PATH.read_text(), frozenset({2, 4})))
    full, small = load_rubric(), load_rubric(path)
    assert set(small.parts) == {"ddp", "tensor_parallel"}
    assert sorted((w.part, w.heading) for w in small.written) == sorted(
        (w.part, w.heading) for w in full.written if w.part in (2, 4)
    )
    assert small.partial_credit == full.partial_credit and small.parts["ddp"].tasks == full.parts["ddp"].tasks


def test_only_what_a_kept_part_builds_on_ships_as_given_code():
    """Part 7 gets parts 2-5's modules given (DEPENDS); parts 2 and 4 need nothing; DEPENDS matches the imports."""
    assert subset.given_modules(frozenset({7})) == set(subset.DEPENDS["mesh"])
    assert subset.given_modules(frozenset({2, 4})) == set()
    assert subset.given_modules(frozenset({2, 3, 4, 5, 7})) == set()
    scanned = subset.scanned_depends()
    assert all(tuple(sorted(subset.DEPENDS[m])) == d for m, d in scanned.items()), scanned


def test_files_follow_the_parts():
    """Tests, hidden tests, handouts, benchmarks and handout figures of other parts are left out; shared code stays."""
    keep = frozenset({4})
    assert subset.keeps("tests/test_tensor_parallel.py", keep) and not subset.keeps("tests/test_ddp.py", keep)
    assert not subset.keeps("tests/staff/hidden/test_ddp_hidden.py", keep)
    assert subset.keeps("handouts/04-tensor-parallel.md", keep) and not subset.keeps("handouts/02-ddp.md", keep)
    assert subset.keeps("handouts/figures/tp_mlp_f_g.png", keep)
    assert not subset.keeps("handouts/figures/zero_stages.png", keep)
    assert subset.keeps("scripts/bench/tensor_parallel.py", keep) and not subset.keeps("scripts/bench/ddp.py", keep)
    assert subset.keeps("tests/harness/pool.py", keep) and subset.keeps("tests/test_harness.py", keep)
    assert subset.keeps("scripts/bench/common.py", keep) and not subset.keeps("scripts/bench/zero.py", keep)


def test_accounting_keeps_the_kept_parts_tasks_as_stubs_and_gives_the_others(tmp_path):
    """A kit of part 6: Part 6's formulas raise the stub's error, §1.7's (with its private helpers) work."""
    path = tmp_path / "accounting_6.py"
    path.write_text(subset.subset_stub("accounting", frozenset({6})))
    spec = importlib.util.spec_from_file_location("accounting_6", path)
    acc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(acc)
    with pytest.raises(NotImplementedError, match=r"Task 6\.1"):
        acc.training_memory_bytes(1e9)
    assert acc.all_reduce_time(1e6, 4, "ring", 1e-5, 1e-9) == pytest.approx(6e-5 + 1.5e6 * 1e-9)
    assert acc.all_reduce_crossover_bytes(4, 1e-5, 1e-9) == pytest.approx(8 * 1e-5 / 1e-9)


def test_a_kit_that_gives_accounting_whole_says_so_in_every_text_and_grades_it_nowhere(tmp_path):
    """A Part 3 kit has no task of accounting.py: the README lists it as given (no "part yours (the tasks of parts
    )"), the handout's "it calls your accounting.py" reads "the given", kit.json (the submission tool's source)
    gives it, and the grader takes it from neither the submission nor calls it a missing stub; a kit of parts 2, 4
    and 6 still grades the student's copy (Part 6's tasks) and says it is part theirs."""
    from scripts.grading.sandbox import (
        ACCOUNTING_TASKS,
        StaffFiles,
        Submission,
        build_sandbox,
        graded_modules,
        kit_submission,
    )

    three, six = frozenset({3}), frozenset({2, 4, 6})
    stubs = {p.stem: p.read_text() for p in (subset.ROOT / "cs336_systems").glob("*.py")}  # the kits' written ones
    manifest = subset.kit_manifest(three)
    assert "accounting" in manifest["given"] and "accounting" not in manifest["written"], manifest
    readme = subset.kit_readme(subset.subset_readme((subset.ROOT / "README.md").read_text(), three), three, stubs,
                               manifest)  # fmt: skip
    assert "the tasks of parts )" not in readme and "part yours" not in readme
    assert "`accounting.py`" in readme.split("Given (the staff's code", 1)[1].split("\n", 1)[0], "not listed as given"
    mixed = subset.kit_readme(subset.subset_readme((subset.ROOT / "README.md").read_text(), six), six, stubs,
                              subset.kit_manifest(six))  # fmt: skip
    assert "`accounting.py` is part yours (the tasks of parts 6)" in mixed
    said = "Use `scripts/tools/memory.py` (it calls your `accounting.py`) and show the arithmetic."
    assert subset.kit_markdown(said, set(), manifest=manifest) == said.replace("your", "the given")
    assert subset.kit_markdown(said, set(), manifest=subset.kit_manifest(six)) == said, "a mixed kit's is theirs"
    handout = subset.kit_markdown((subset.ROOT / "handouts" / "03-zero.md").read_text(), set(), manifest=manifest)
    assert "your `accounting.py`" not in handout
    sub = Submission({"fsdp": b"X = 1\n", "accounting": b"Y = 2\n"})
    graded, _ = kit_submission(sub, ["sharded_optimizer", "fsdp"])
    assert "accounting" not in graded.modules and "accounting" not in graded.graded, graded
    notes = build_sandbox(tmp_path / "sandbox", StaffFiles({"cs336_systems/accounting.py": b""}), graded)
    assert not any("accounting" in n for n in notes), notes
    assert "accounting" in kit_submission(sub, ["ddp", "tensor_parallel", "accounting"])[0].graded
    # The grader's own table (a kit's grader has no reference) says the same as the reference, part by part.
    for name, number in subset.module_parts().items():
        theirs = "accounting" in subset.kit_manifest(frozenset({number}))["written"]
        assert (name in ACCOUNTING_TASKS) == theirs, f"sandbox.ACCOUNTING_TASKS is wrong about {name}"
        assert ("accounting" in graded_modules([name])) == theirs
