"""The suite's options and hooks for a test file anywhere in the repository, not only under tests/.

    pytest scratch/test_mine.py --world-sizes 2

tests/conftest.py holds them (--impl, --backend, --world-sizes, --deadline, the task markers, the
``world_size`` parametrization); pytest would load it only for test files below tests/. This file,
loaded for every test file under the repository root, registers it as a plugin under the name pytest
gives that conftest (its path), so a run of tests/ finds it already loaded and never loads it twice.
"""

from __future__ import annotations

from pathlib import Path

SUITE_CONFTEST = Path(__file__).parent / "tests" / "conftest.py"


def pytest_addhooks(pluginmanager) -> None:
    import tests.conftest as suite

    if pluginmanager.get_plugin(str(SUITE_CONFTEST)) is None and not pluginmanager.is_registered(suite):
        pluginmanager.register(suite, name=str(SUITE_CONFTEST))
