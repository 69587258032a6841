"""The harness ends what a rank started: a replaced worker's children die with it (tests/harness/pool.py).

    pytest tests/test_harness_children.py -v

Part 10's restart tests fork training ranks inside a test rank; a hung test must not leave them behind.
``WorkerPool.close`` kills each rank's process group and, found beforehand (through /proc on Linux, ``ps`` on
macOS: cs336_systems/platform_support.py), every descendant that left it (a new session). These tests never
touch the implementation under test (marker ``harness``).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness import RankFailure, run_ranks

pytestmark = pytest.mark.harness


def start_children_then_hang(ctx, folder: str) -> None:
    """Start a child in this rank's process group and one in a session of its own, write their pids, hang."""
    same_group = subprocess.Popen(["sleep", "300"])
    own_session = subprocess.Popen(["sleep", "300"], start_new_session=True)
    Path(folder, f"rank{ctx.rank}").write_text(f"{same_group.pid} {own_session.pid}")
    time.sleep(300)  # past the deadline: the pool is replaced


def _alive(pid: int) -> bool:
    """Running (a zombie has already been killed and waits only for its reaper): ``ps`` says, on Linux and macOS."""
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


def test_replacing_a_hung_pool_kills_the_children_of_its_ranks_even_in_a_new_session(tmp_path):
    """A hung rank's children die with the pool: the one in its process group and the one that called setsid."""
    world_size = 2  # one case: it costs a deadline and the next test a fresh pool
    with pytest.raises(RankFailure, match="no answer within"):
        run_ranks(world_size, start_children_then_hang, str(tmp_path), deadline=3)
    pids = [int(pid) for r in range(world_size) for pid in (tmp_path / f"rank{r}").read_text().split()]
    give_up = time.monotonic() + 5
    while any(_alive(pid) for pid in pids) and time.monotonic() < give_up:
        time.sleep(0.05)
    survivors = [pid for pid in pids if _alive(pid)]
    for pid in survivors:  # do not leak them into the rest of the session, whatever the verdict
        os.kill(pid, 9)
    assert not survivors, f"children left running after their pool was replaced: {survivors} of {pids}"
