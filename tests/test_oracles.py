"""Tests of the shared oracles' rules (tests/oracles/): fast, no ranks, no implementation.

    pytest tests/test_oracles.py

What several test files (public or hidden) or scripts need lives in ``tests.oracles``; nothing
under tests/ imports from a public test module ``tests.test_*``, so moving, renaming or dropping
one test file cannot break another (or the hidden tests that ship separately).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.oracles.pipeline_sim import simulate, timeline

pytestmark = pytest.mark.harness

TESTS = Path(__file__).resolve().parent


def _public_test_module_imports(path: Path) -> list[str]:
    """The import statements of ``path`` that import from a public test module ``tests.test_*``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module] + ([f"tests.{a.name}" for a in node.names] if node.module == "tests" else [])
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        else:
            continue
        if any(m.startswith("tests.test_") for m in modules):
            found.append(f"{path.relative_to(TESTS.parent)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_test_module_imports_another_test_module():
    """No file under tests/ (public, hidden or staff) imports from a public test module ``tests.test_*``:
    what tests share belongs in tests/oracles/ (or tests/harness/)."""
    offenders = [line for path in sorted(TESTS.rglob("*.py")) for line in _public_test_module_imports(path)]
    assert not offenders, "move what these import into tests/oracles/ and import it from there:\n" + "\n".join(
        offenders
    )


def test_pipeline_simulator_times_1f1b_and_reports_a_deadlock():
    """2 stages, 2 microbatches of 1F1B: the step lasts 3(m + p - 1) = 9 units; B before F deadlocks."""
    stages = [[("F", 0), ("F", 1), ("B", 0), ("B", 1)], [("F", 0), ("B", 0), ("F", 1), ("B", 1)]]
    assert simulate(stages) == (9, [])
    rows = timeline(stages)
    assert rows[1] == [(("F", 0), 1, 2), (("B", 0), 2, 4), (("F", 1), 4, 5), (("B", 1), 5, 7)]
    assert rows[0][-1] == (("B", 1), 7, 9)
    stuck = [[("B", 0), ("F", 0)], [("F", 0), ("B", 0)]]
    assert simulate(stuck)[1] == [0, 1]
    with pytest.raises(RuntimeError, match="deadlocks"):
        timeline(stuck)
