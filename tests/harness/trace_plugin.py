"""pytest side of the communication traces (see trace.py): one Chrome trace per test, and failures that
say where it is.

Loaded by tests/conftest.py. With ``--comm-trace DIR`` (or ``CS336_TRACE=DIR``) the parent times each
test's setup, call and teardown and, once the test is over, merges what its ranks recorded into
``DIR/<test id>.json``. A failing test that ran ranks gets a "comm trace" section: the file's path
and how to draw it, or, with tracing off, how to get one.
"""

from __future__ import annotations

import os
import shlex
import time

import pytest

from tests.harness import trace

_PHASES: dict[str, list[tuple[str, float, float]]] = {}  # nodeid -> (pytest phase, start, end)


def _directory() -> str | None:
    return os.environ.get("CS336_TRACE") or None  # conftest sets it from --comm-trace at configure


def _timed(item: pytest.Item, phase: str):
    start = time.perf_counter()
    yield
    if _directory():
        _PHASES.setdefault(item.nodeid, []).append((phase, start, time.perf_counter()))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _timed(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _timed(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _timed(item, "teardown")
    directory = _directory()
    phases = _PHASES.pop(item.nodeid, [])
    if directory and "world_size" in getattr(item, "fixturenames", ()):
        trace.merge_test_trace(directory, item.nodeid, phases, outcome=getattr(item, "_cs336_outcome", ""))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item._cs336_outcome = report.outcome
    if report.when != "call" or not report.failed or "world_size" not in getattr(item, "fixturenames", ()):
        return
    directory = _directory()
    if directory:
        path = trace.trace_file_of(directory, item.nodeid)
        draw = f"python -m scripts.tools.trace {shlex.quote(str(path))}"
        text = f"this test's ranks' communication, as a Chrome trace: {path}\n"
        text += f"(open it in https://ui.perfetto.dev, or draw it: {draw})"
    else:
        text = (
            "for a timeline of every rank's communication calls (in backward or not, issue to wait), "
            "rerun this test with --comm-trace DIR and open DIR/<test>.json in https://ui.perfetto.dev "
            "(or python -m scripts.tools.trace DIR/<test>.json)"
        )
    report.sections.append(("comm trace", text))
