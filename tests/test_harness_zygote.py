"""The pool forks its ranks from one warm zygote (tests/harness/zygote.py): a new pool costs milliseconds.

    pytest tests/test_harness_zygote.py -v

These tests never touch the implementation under test (marker ``harness``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.harness import run_ranks
from tests.harness.config import CONFIG
from tests.harness.pool import get_pool
from tests.harness.zygote import enabled

pytestmark = [
    pytest.mark.harness,
    pytest.mark.skipif(not enabled(), reason="the zygote is Linux-only (CS336_PLATFORM, CS336_ZYGOTE)"),
]


def lineage_rank(ctx):
    """This rank's pid, parent, session, and its parent's command line."""
    cmdline = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return os.getpid(), os.getppid(), os.getsid(0), cmdline


def test_ranks_are_forked_from_one_zygote_each_in_its_own_session(world_size):
    """Every rank's parent is the zygote (not pytest), and each rank leads its own session (killpg ends it)."""
    lineage = run_ranks(world_size, lineage_rank)
    parents = {parent for _, parent, _, _ in lineage}
    assert len(parents) == 1 and os.getpid() not in parents, f"ranks' parents {parents}, pytest is {os.getpid()}"
    for rank, (pid, _, session, cmdline) in enumerate(lineage):
        assert "zygote.py" in cmdline, f"rank {rank}'s parent runs {cmdline!r}, not the zygote"
        assert session == pid, f"rank {rank} (pid {pid}) is in session {session}, not its own"


def test_a_new_pool_after_a_killed_one_is_ready_in_well_under_a_second(world_size):
    """Replacing a pool (what every hung or crashed test costs) forks warm ranks instead of importing torch."""
    pool = get_pool(world_size, CONFIG.backend)
    pool.close()
    start = time.monotonic()
    run_ranks(world_size, lineage_rank)
    took = time.monotonic() - start
    assert took < 1.5 * world_size, f"a pool of {world_size} took {took:.1f} s to start and answer"
