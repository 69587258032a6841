"""Run a slice of the suite against a mutant implementation, and judge the outcome (staff only).

    assert_caught("ddp_no_avg", Check("tests/test_ddp.py", "::test_sgd_steps_match[w2-naive-toy]", "divide by"))

``run_suite`` runs ``pytest <selection> --impl <impl>`` in the suite server (server.py); ``assert_caught``
runs one ``Check`` of a table row (table.py) against ``tests.staff.mutants.<id>`` and asserts its outcome.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass

from tests.harness.pool import ROOT
from tests.staff.mutants.table import Check


@dataclass
class SuiteRun:
    returncode: int
    output: str
    seconds: float


def run_suite(impl: str, *selection: str, world_sizes: str = "2", deadline: float = 20, timeout: float = 240,
              extra: tuple[str, ...] = ()) -> SuiteRun:  # fmt: skip
    """``pytest <selection> --impl <impl>``, run by the suite server (one pytest process kept for the whole
    staff session, tests/staff/mutants/server.py); its output and time. ``CS336_SUITE_SERVER=0``: a fresh
    ``python -m pytest`` subprocess for each run instead (slower, for when the server is in doubt)."""
    args = [*selection, f"--impl={impl}", f"--world-sizes={world_sizes}", f"--deadline={deadline}", "-q", "-x",
            "--no-header", "-p", "no:cacheprovider", *extra]  # fmt: skip
    start = time.monotonic()
    if os.environ.get("CS336_SUITE_SERVER", "1") == "0":
        proc = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=ROOT, env=_suite_env(), capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip
        return SuiteRun(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)
    returncode, output = _SERVER.run(args, timeout)
    return SuiteRun(returncode, output, time.monotonic() - start)


def _suite_env() -> dict[str, str]:
    """This environment without the suite's own settings: the selection's options alone decide."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CS336_")}


class _SuiteServer:
    """The client side of tests/staff/mutants/server.py: started on first use, restarted after a timeout."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def run(self, args: list[str], timeout: float) -> tuple[int, str]:
        if self.proc is None or self.proc.poll() is not None:
            cmd = [sys.executable, "-m", "tests.staff.mutants.server"]
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=_suite_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         text=True)  # fmt: skip
        self.proc.stdin.write(json.dumps({"args": args}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:  # timed out, or the server died: the next run starts a new one
            self.close(kill=True)
            raise subprocess.TimeoutExpired(["pytest", *args], timeout)
        reply = json.loads(line)
        return reply["returncode"], reply["output"]

    def close(self, kill: bool = False) -> None:
        """End of input lets the server close its pools; a kill ends its ranks too (they die with it)."""
        if self.proc is None:
            return
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=1 if kill else 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


_SERVER = _SuiteServer()
atexit.register(_SERVER.close)


def assert_mutant_killed(impl: str, *selection: str, expect: str | tuple[str, ...], names: tuple[str, ...] = (),
                         within: float = 120, **kw) -> SuiteRun:  # fmt: skip
    """The selected tests must FAIL against ``impl`` (pytest exit code 1, not an error or a pass), within
    ``within`` seconds; the output must contain ``expect`` (the teaching part; a tuple: any one of them,
    for a bug whose symptom depends on timing) and, when ``names`` is given, one of ``names`` (where it
    went wrong: "rank ", "stage"...). ``kw`` goes to ``run_suite``."""
    __tracebackhide__ = True
    run = run_suite(impl, *selection, **kw)
    tail = run.output[-3000:]
    assert run.returncode == 1, f"mutant {impl} survived or broke the run (exit {run.returncode}):\n{tail}"
    assert run.seconds < within, f"mutant {impl} took {run.seconds:.0f} s to be caught (limit {within} s)"
    expected = expect if isinstance(expect, tuple) else (expect,)
    assert any(e in run.output for e in expected), f"mutant {impl} was caught but the output lacks {expect!r}:\n{tail}"
    if names:
        assert any(n in run.output for n in names), f"mutant {impl}: the failure does not say where ({names}):\n{tail}"
    return run


def assert_caught(mutant_id: str, check: Check) -> SuiteRun:
    """``check``'s slice of its suite must fail on ``tests.staff.mutants.<mutant_id>`` (``assert_mutant_killed``
    with the check's settings), or, for ``check.passes``, pass on it."""
    __tracebackhide__ = True
    s = check.select
    selection = (check.suite + s,) if s.startswith("::") else (check.suite, "-k", s)
    impl = f"tests.staff.mutants.{mutant_id}"
    if check.passes:
        run = run_suite(impl, *selection, world_sizes=check.world_sizes, deadline=check.deadline, extra=check.options)
        assert run.returncode == 0, f"the slice {selection} was meant to miss {mutant_id}:\n{run.output[-3000:]}"
        return run
    return assert_mutant_killed(impl, *selection, expect=check.expect, names=check.names, within=check.within,
                                world_sizes=check.world_sizes, deadline=check.deadline,
                                extra=check.options)  # fmt: skip
