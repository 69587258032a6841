"""The given launcher of Part 10 (cs336_systems/launcher.py) keeps its promises (staff only: given code, not graded).

    pytest tests/staff/grader/test_launcher.py

A rank frozen with SIGSTOP and still running at the deadline is ended by the launcher: its Python stack is
taken first (a stopped process must be continued to run its signal handler), and it must not run on
after that (finish its step, save a checkpoint, exit 0 as if nothing happened).
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest

from cs336_systems import launcher

pytestmark = pytest.mark.staff


def _freeze_then_write(rank, folder: str) -> int:
    if rank.rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)  # a hung GPU: sockets open, no progress
        Path(folder, "ran_on").write_text("the launcher let the frozen rank run on")
    return rank.rank


def test_a_frozen_rank_at_the_deadline_is_killed_after_its_stack_without_running_on():
    """A rank frozen at the deadline gives its stack and is killed, never running on to write its file."""
    with tempfile.TemporaryDirectory() as folder:
        outcomes = launcher.launch(_freeze_then_write, 2, folder, deadline=2.0, grace=0.5)
        frozen = outcomes[1]
        assert outcomes[0].ok and outcomes[0].value == 0, launcher.describe_outcomes(outcomes)
        assert not Path(folder, "ran_on").exists(), (
            "the frozen rank ran on after the launcher took its stack (SIGCONT) and wrote its file:\n"
            + launcher.describe_outcomes(outcomes)
        )
        ended = (-signal.SIGUSR1, -signal.SIGKILL)  # SIGUSR1: its stack dump's chained default action
        assert frozen.exitcode in ended, f"exit code {frozen.exitcode}, expected one of {ended}"
        assert frozen.error and "killed by the launcher" in frozen.error, launcher.describe_outcomes(outcomes)
        assert "_freeze_then_write" in frozen.stacks, f"its stack should show where it hung:\n{frozen.stacks}"
        assert len(frozen.stacks) <= launcher.STACK_CHARS + 4
        assert frozen.stacks.endswith("\n") and "pytest" not in frozen.stacks, (
            f"the stack should end at a line, without the frames of the process it was forked from:\n{frozen.stacks}"
        )


def _return_rank(rank) -> int:
    return rank.rank


def test_starting_the_ranks_does_not_count_against_the_deadline(monkeypatch):
    """Spawned ranks (macOS) import torch for seconds before they join: the deadline counts from when every rank
    has joined, so a job that takes no time passes a 1 s deadline even when joining took 2 s."""
    barrier = launcher.dist.barrier

    def slow_barrier(*args, **kwargs):
        import time

        time.sleep(2.0)  # a slow start, inherited by the forked ranks
        return barrier(*args, **kwargs)

    monkeypatch.setattr(launcher.dist, "barrier", slow_barrier)
    outcomes = launcher.launch(_return_rank, 2, deadline=1.0, grace=0.5)
    assert [o.value for o in outcomes] == [0, 1] and all(o.ok for o in outcomes), launcher.describe_outcomes(outcomes)
