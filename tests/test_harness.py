"""The harness itself: pools, deadlines, crash reports and the communication recorder.

    pytest tests/test_harness.py -v

These tests never touch the implementation under test (marker ``harness``).
"""

from __future__ import annotations

import os
import sys
import time

import pytest
import torch
import torch.distributed as dist

from tests.harness import RankFailure, run_ranks
from tests.harness.defaults import env_fresh_groups
from tests.harness.recorder import CommRecorder, bytes_sent, calls, collective_ops

pytestmark = pytest.mark.harness


# -- rank functions -----------------------------------------------------------------------------


def identity_rank(ctx, payload=None):
    return {
        "rank": ctx.rank,
        "world": ctx.world_size,
        "tensor": torch.full((2,), float(ctx.rank), device=ctx.device),
        "p": payload,
    }


def raise_on_rank_one(ctx):
    if ctx.rank == 1:
        raise ValueError("bad chunk index 3")
    return ctx.rank


def hang_rank(ctx):
    if ctx.rank == 0:
        buf = torch.empty(4, device=ctx.device)
        dist.recv(buf, src=1)  # rank 1 never sends: a deadlock
    return ctx.rank


def print_and_fail(ctx):
    print(f"hello from rank {ctx.rank}")
    raise RuntimeError("after printing")


def exit_rank(ctx, how):
    if ctx.rank == ctx.world_size - 1:
        if how == "os._exit":
            os._exit(0)
        if how == "sys.exit":
            sys.exit(0)
        if how == "segfault":
            import ctypes

            ctypes.string_at(0)
    return ctx.rank


def recorded_rank(ctx):
    peer = 1 - ctx.rank
    x = torch.arange(6.0, device=ctx.device)
    with CommRecorder() as rec:
        if ctx.rank == 0:
            dist.send(x, dst=peer)
            handle = dist.isend(x[:2].clone(), dst=peer)
            handle.wait()
        else:
            dist.recv(x, src=peer)
            dist.irecv(x[:2], src=peer).wait()
        dist.all_reduce(x, async_op=True).wait()
        ctx_group = dist.new_group([0, 1])
        ctx_group.allreduce([x]).wait()  # bypassing torch.distributed is still seen
        w = torch.ones(3, requires_grad=True, device=ctx.device)
        w.register_hook(lambda g: dist.all_reduce(g.clone()) and None)
        (w * 2).sum().backward()
    return rec.events


# -- tests ----------------------------------------------------------------------------------------


def test_results_come_back_per_rank_in_order(world_size):
    """Each rank's return value comes back in rank order, with its arguments and tensors intact."""
    outs = run_ranks(world_size, identity_rank, payload=[1, 2])
    assert [o["rank"] for o in outs] == list(range(world_size))
    assert all(o["world"] == world_size and o["p"] == [1, 2] for o in outs)
    assert all(torch.equal(o["tensor"], torch.full((2,), float(r))) for r, o in enumerate(outs))


@pytest.mark.world_sizes(2, 4)
def test_a_raising_rank_is_named_with_its_traceback_and_the_pool_recovers(world_size):
    """A rank that raises is named with its own traceback, the others are reported finished, and the next run works."""
    with pytest.raises(RankFailure) as info:
        run_ranks(world_size, raise_on_rank_one)
    msg = str(info.value)
    assert "rank 1: error: ValueError: bad chunk index 3" in msg
    assert "raise_on_rank_one" in msg and 'raise ValueError("bad chunk index 3")' in msg
    assert "--- rank 0: finished" in msg
    assert run_ranks(world_size, identity_rank)[0]["rank"] == 0


@pytest.mark.world_sizes(2)
def test_a_deadlock_fails_at_the_deadline_with_every_hung_ranks_stack(world_size):
    """A deadlock fails at the deadline with the hung rank's Python stack, and the next run gets a working pool."""
    start = time.monotonic()
    with pytest.raises(RankFailure) as info:
        run_ranks(world_size, hang_rank, deadline=3)
    elapsed = time.monotonic() - start
    msg = str(info.value)
    assert elapsed < 3 + 5, f"the deadline was 3 s but the failure took {elapsed:.1f} s"
    assert "rank 0: hung: no answer within the 3 s deadline" in msg
    assert "Python stack of rank 0" in msg and "hang_rank" in msg, msg
    assert "--- rank 1: finished" in msg
    # The pool was replaced: the next test runs normally.
    assert [o["rank"] for o in run_ranks(world_size, identity_rank)] == [0, 1]


@pytest.mark.world_sizes(2)
def test_what_a_failing_rank_printed_is_shown(world_size):
    """What a failing rank printed is part of the failure message."""
    with pytest.raises(RankFailure, match="(?s)rank 1 printed:\nhello from rank 1"):
        run_ranks(world_size, print_and_fail)


@pytest.mark.world_sizes(2)
@pytest.mark.parametrize(
    "how, expected",
    [("os._exit", "the rank process exited with code 0"), ("segfault", "killed by signal SIGSEGV"),
     ("sys.exit", "error: SystemExit: 0")],
)  # fmt: skip
def test_a_rank_that_exits_or_crashes_fails_the_test(world_size, how, expected):
    """A rank that exits or crashes fails the run with its exit code or signal, and the next run works."""
    with pytest.raises(RankFailure) as info:
        run_ranks(world_size, exit_rank, how, deadline=10)
    assert f"rank {world_size - 1}: " in str(info.value) and expected in str(info.value), str(info.value)
    if how == "segfault":
        assert "exit_rank" in str(info.value)  # faulthandler's crash traceback
    assert [o["rank"] for o in run_ranks(world_size, identity_rank)] == list(range(world_size))


def return_object_rank(ctx):
    import argparse

    return argparse.Namespace(rank=ctx.rank)  # not plain data: the parent must not rebuild it


@pytest.mark.world_sizes(2)
def test_replies_holding_arbitrary_objects_are_refused_by_the_parent(world_size):
    """A reply holding anything but plain data is refused by the parent, which never rebuilds arbitrary objects."""
    with pytest.raises(RankFailure, match="reply was refused: a rank sent back an object of type argparse.Namespace"):
        run_ranks(world_size, return_object_rank)
    assert [o["rank"] for o in run_ranks(world_size, identity_rank)] == list(range(world_size))


def test_local_functions_are_refused_with_a_clear_message():
    """A rank function that cannot be pickled (a local function) is refused in the parent with a clear TypeError."""

    def local(ctx):
        return 0

    with pytest.raises(TypeError, match="module-level"):
        run_ranks(1, local)


@pytest.mark.world_sizes(2)
def test_the_recorder_sees_p2p_collectives_waits_bypasses_and_backward(world_size):
    """The recorder sees point-to-point calls, collectives, waits, ProcessGroup bypasses and calls made in backward."""
    events = run_ranks(world_size, recorded_rank)
    for rank, ev in enumerate(events):
        ops = [e.op for e in calls(ev)]
        first = ["send", "isend"] if rank == 0 else ["recv", "irecv"]
        assert ops == first + ["all_reduce", "pg.allreduce", "all_reduce"], ops
        p2p = calls(ev)[:2]
        assert [e.peer for e in p2p] == [1 - rank, 1 - rank]
        assert [e.async_op for e in p2p] == [False, True]
        assert [e.numel for e in p2p] == [6, 2] and p2p[0].nbytes == 24 and p2p[0].dtype == "float32"
        waits = [e for e in ev if e.op == "wait"]
        assert [ev[w.waits_for].op for w in waits] == [first[1], "all_reduce", "pg.allreduce"]
        assert [e.in_backward for e in calls(ev)] == [False, False, False, False, True]
        assert [e.op for e in collective_ops(ev)] == ["all_reduce", "pg.allreduce", "all_reduce"]
    assert bytes_sent(events[0]) == 32 and bytes_sent(events[1]) == 0


def record_twice_rank(ctx):
    for _ in range(2):
        with CommRecorder() as rec:
            dist.all_reduce(torch.ones(2, device=ctx.device))
    dist.all_reduce(torch.ones(2, device=ctx.device))  # torch works normally once the recorder is gone
    return rec.events


@pytest.mark.world_sizes(2)
def test_the_recorder_restores_torch_distributed_on_exit(world_size):
    """Leaving the recorder restores torch.distributed: later calls are not recorded and still work."""
    for events in run_ranks(world_size, record_twice_rank):
        assert [e.op for e in events] == ["all_reduce"]


# -- the default process group between tests (tests/harness/pool.py) -----------------------------

_REMEMBERED: list = []  # in each rank process: the default group an earlier run saw


def remember_group_rank(ctx):
    _REMEMBERED[:] = [dist.group.WORLD]
    return ctx.rank


def same_group_rank(ctx):
    """Whether this run got the group ``remember_group_rank`` saw, and that the group works."""
    x = torch.ones(1, device=ctx.device)
    dist.all_reduce(x)
    return {"same": bool(_REMEMBERED) and dist.group.WORLD is _REMEMBERED[0], "sum": x.item()}


def change_group_rank(ctx, how):
    if how == "destroy":
        dist.destroy_process_group()
    elif how == "destroy on rank 0" and ctx.rank == 0:
        dist.destroy_process_group()  # only one rank changed it: every rank must still agree on a fresh group
    elif how == "subgroup":
        dist.new_group(list(range(ctx.world_size)))
    return ctx.rank


def random_rank(ctx):
    return torch.rand(3, device=ctx.device)


@pytest.mark.world_sizes(2)
def test_a_test_that_passed_leaves_its_default_group_to_the_next(world_size):
    """After a run where every rank finished with the group as it found it, the next run reuses that group
    (unless CS336_FRESH_GROUPS=1 asks for a fresh group every time)."""
    run_ranks(world_size, remember_group_rank)
    outs = run_ranks(world_size, same_group_rank)
    kept = not env_fresh_groups()
    assert [o["same"] for o in outs] == [kept] * world_size, f"expected the group {'kept' if kept else 'new'}: {outs}"
    assert [o["sum"] for o in outs] == [float(world_size)] * world_size


@pytest.mark.world_sizes(2)
def test_after_a_failed_test_the_next_gets_a_fresh_working_group(world_size):
    """After a rank raised, every rank joins a fresh default group, so nothing the failure left reaches the next run."""
    run_ranks(world_size, remember_group_rank)
    with pytest.raises(RankFailure):
        run_ranks(world_size, raise_on_rank_one)
    outs = run_ranks(world_size, same_group_rank)
    assert [o["same"] for o in outs] == [False] * world_size, outs
    assert [o["sum"] for o in outs] == [float(world_size)] * world_size


@pytest.mark.world_sizes(2)
@pytest.mark.parametrize("how", ["destroy", "destroy on rank 0", "subgroup"])
def test_a_test_that_changed_the_default_group_is_followed_by_a_fresh_working_one(world_size, how):
    """A run that destroyed the default group (on some ranks or all) or made subgroups is followed by a fresh group."""
    run_ranks(world_size, remember_group_rank)
    assert run_ranks(world_size, change_group_rank, how) == list(range(world_size))
    outs = run_ranks(world_size, same_group_rank)
    assert [o["same"] for o in outs] == [False] * world_size, outs
    assert [o["sum"] for o in outs] == [float(world_size)] * world_size


@pytest.mark.world_sizes(2)
def test_every_run_starts_from_the_same_per_rank_random_state(world_size):
    """Each run seeds torch with the rank, ``torch.manual_seed(rank)``: the same numbers every run, others per rank."""
    first, second = run_ranks(world_size, random_rank), run_ranks(world_size, random_rank)
    for rank in range(world_size):
        assert torch.equal(first[rank], second[rank]), f"rank {rank}: {first[rank]} then {second[rank]}"
        seeded = torch.rand(3, generator=torch.Generator().manual_seed(rank))
        assert torch.equal(first[rank], seeded), f"rank {rank} was not seeded with {rank}"
    assert not torch.equal(first[0], first[1]), "ranks 0 and 1 drew the same numbers"


def devices_rank(ctx, tensors):
    return {"ctx": str(ctx.device), "args": [str(t.device) for t in tensors]}


def test_the_parents_tensors_arrive_on_the_ranks_device(world_size):
    """A tensor the test passes to ``run_ranks`` is on ``ctx.device`` in the rank (``cuda:r`` under NCCL)."""
    for rank, out in enumerate(run_ranks(world_size, devices_rank, [torch.ones(2), torch.zeros(1)])):
        assert out["args"] == [out["ctx"]] * 2, f"rank {rank}: arguments on {out['args']}, the rank works on {out}"


def test_the_parents_tensors_move_to_a_device_nested_and_named_tuples_kept_once():
    """The worker's move (on another device than the CPU: meta here) reaches tensors in dicts, lists and tuples,
    keeps a named tuple's type, ``requires_grad`` and the sharing of one tensor passed twice."""
    from collections import namedtuple

    from tests.harness.worker import to_device

    pair = namedtuple("pair", "x y")
    shared = torch.ones(3, requires_grad=True)
    moved = to_device({"a": [shared, (shared, 1)], "b": pair(torch.zeros(1), "s")}, torch.device("meta"))
    assert moved["a"][0].device.type == "meta" and moved["a"][0].requires_grad
    assert moved["a"][1][0] is moved["a"][0] and moved["a"][1][1] == 1, "one tensor passed twice became two"
    assert isinstance(moved["b"], pair) and moved["b"].x.device.type == "meta" and moved["b"].y == "s"
    cpu = {"t": torch.ones(1)}
    assert to_device(cpu, torch.device("cpu"))["t"] is cpu["t"], "on the CPU the tensors are not copied"


def test_trace_spans_an_async_call_from_its_issue_to_its_wait(tmp_path):
    """A traced async call spans issue to wait, carries its group, bytes and in-backward flag, and is a
    valid Chrome trace (CS336_TRACE / --comm-trace)."""
    import json

    from tests.harness.recorder import CommEvent
    from tests.harness.trace import write_rank_trace

    events = [
        CommEvent(0, "all_reduce", None, (0, 1), 4, 16, "float32", ((4,),), True, True, 10.001),
        CommEvent(1, "wait", None, (), 0, 0, None, (), False, True, 10.004, waits_for=0),
    ]
    path = write_rank_trace(events, 10.0, 10.005, directory=str(tmp_path))
    trace = json.loads(path.read_text())["traceEvents"]
    phase, call = trace
    assert phase["cat"] == "phase" and phase["dur"] == pytest.approx(5000.0), f"phase slice: {phase}"
    assert call["ts"] == pytest.approx(1000.0) and call["dur"] == pytest.approx(3000.0), (
        f"the all_reduce should span issue (1 ms) to wait (4 ms): {call}"
    )
    assert call["args"]["bytes"] == 16 and call["args"]["group"] == [0, 1] and call["args"]["in_backward"], call


SCRATCH_TEST = """import pytest


@pytest.mark.world_sizes(2, 3)
def test_mine(world_size, pytestconfig):
    assert pytestconfig.getoption("--world-sizes") == "1,2,3" and world_size in (2, 3)
"""


def test_the_options_reach_a_test_file_outside_tests():
    """``pytest scratch/test_mine.py --world-sizes 1,2,3`` from the repository root: the suite's options,
    markers and ``world_size`` parametrization (tests/conftest.py) reach a test file outside tests/
    (the root conftest.py registers them), and 1 is left out by the file's ``world_sizes`` marker."""
    import subprocess
    import tempfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(dir=root, prefix="scratch-") as scratch:
        (Path(scratch) / "test_mine.py").write_text(SCRATCH_TEST)
        # gloo whatever this run's backend: the scratch test checks the options, not a GPU per rank
        run = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--world-sizes", "1,2,3",
                              "--backend", "gloo", f"{Path(scratch).name}/test_mine.py"], cwd=root,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "2 passed" in out, f"a scratch test did not get the suite's options:\n{out[-3000:]}"
    assert "test_mine[w2] PASSED" in out and "test_mine[w3] PASSED" in out, out[-3000:]
