"""Run a slice of the suite against a mutant implementation in a fresh pytest process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

from tests.harness.pool import ROOT


@dataclass
class SuiteRun:
    returncode: int
    output: str
    seconds: float


def run_suite(impl: str, *selection: str, world_sizes: str = "2", deadline: float = 20, timeout: float = 240,
              extra: tuple[str, ...] = ()) -> SuiteRun:  # fmt: skip
    """``pytest <selection> --impl <impl>`` in a subprocess (its own worker pools); output and time."""
    cmd = [sys.executable, "-m", "pytest", *selection, f"--impl={impl}", f"--world-sizes={world_sizes}",
           f"--deadline={deadline}", "-q", "-x", "--no-header", "-p", "no:cacheprovider", *extra]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("CS336_")}
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return SuiteRun(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)


def assert_mutant_killed(impl: str, *selection: str, expect: str, within: float = 120, **kw) -> SuiteRun:
    """The selected tests must FAIL against ``impl`` (pytest exit code 1, not an error or a pass),
    within ``within`` seconds, and the failure output must contain ``expect`` (the teaching part)."""
    __tracebackhide__ = True
    run = run_suite(impl, *selection, **kw)
    tail = run.output[-3000:]
    assert run.returncode == 1, f"mutant {impl} survived or broke the run (exit {run.returncode}):\n{tail}"
    assert run.seconds < within, f"mutant {impl} took {run.seconds:.0f} s to be caught (limit {within} s)"
    assert expect in run.output, f"mutant {impl} was caught but the output lacks {expect!r}:\n{tail}"
    return run
