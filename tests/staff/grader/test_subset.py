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
