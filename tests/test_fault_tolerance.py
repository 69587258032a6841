"""Part 10, Tasks 10.5-10.6: a killed rank, a restart, and live recovery (handouts/10-failures.md §10.5-§10.6).

    pytest tests/test_fault_tolerance.py                   # your implementation, world sizes 1, 2, 4
    pytest tests/test_fault_tolerance.py -m task10_5       # failure detection and supervised restart only

Faults are real: the job's ranks are processes forked by ``launch`` inside one test rank, and a rank is
killed with SIGKILL (or frozen with SIGSTOP, a hung GPU) at a step drawn at random (seeded). Judged: every
survivor reports a ``PeerFailure`` naming the rank, its step and what it waited for, within the heartbeat
timeout plus slack; the restart resumes from the newest committed checkpoint at the right world size; the
job ends with the parameters of one uninterrupted process on every step's global batch
(tests/oracles/fault_tolerance.py). Live recovery is judged by its messages: who sends to whom, and that
the bytes on the wire are the replica's state, once.
"""

from __future__ import annotations

import random
import signal

import pytest
import torch

from tests.harness import run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.oracles.fault_tolerance import (
    CONFIG,
    SUPERVISED_DEADLINE_S,
    check_final_parameters,
    check_live_recovery,
    check_survivors_noticed,
    describe,
    detector_rank,
    global_batch_for,
    live_recovery_rank,
    plan_restart_rank,
    policy_rank,
    run_job,
    supervise_rank,
    uninterrupted,
)

DEADLINE_S = SUPERVISED_DEADLINE_S  # three attempts at launch's deadline each, and the rest of the test


def _kill_step(world_size: int, salt: int) -> int:
    """A random step in 1..steps-1 (seeded: a failure is reproducible), past the first checkpoint or not."""
    return random.Random(world_size * 1000 + salt).randint(1, CONFIG["steps"] - 1)


def _committed_before(step: int) -> int:
    """The newest checkpoint the job committed before dying during step ``step`` (0: none)."""
    return step // CONFIG["checkpoint_every"] * CONFIG["checkpoint_every"]


# -- Task 10.5: failure detection ----------------------------------------------------------------------


@pytest.mark.task10_5
def test_detector_fails_a_silent_peer_after_the_timeout_and_a_dead_one_at_once():
    """A peer whose heartbeat stops fails after ``timeout`` (not before), one the launcher saw die fails at
    once, a stopped peer never; the PeerFailure names the peer, its last step and how it was noticed."""
    (out,) = run_ranks(1, detector_rank, "peers", deadline=30)
    me = "rank 0's detector (timeout 0.3 s)"
    assert out["beating_peer_failed"] is None, f"{me} declared rank 3, which keeps beating, failed"
    assert out["early"] is None, f"{me} declared rank 1 failed before the timeout: {out['early']}"
    assert out["silent"] is not None, f"{me} never declared rank 1 failed, silent for 0.9 s"
    assert out["silent"][:2] == (1, 7), f"{me}: expected (rank 1, its last step 7), got {out['silent']}"
    assert "heartbeat" in out["silent"][2], f"{me} says rank 1 was noticed by {out['silent'][2]!r}: the heartbeat?"
    assert out["dead"] is not None and out["dead"][0] == 2, f"{me}: dead/2 was posted, yet it returned {out['dead']}"
    assert out["dead_took"] < 0.5, f"{me} took {out['dead_took']:.2f} s to see rank 2's death notice"
    assert "SIGKILL" in out["dead"][2], f"{me} should name rank 2's signal: {out['dead'][2]!r}"
    assert out["stopped"] is None, f"{me} declared rank 1 failed after it stopped its detector: {out['stopped']}"
    assert out["never_seen"] == (1, None), (
        f"a detector of world 2 whose peer never wrote a heartbeat returned {out['never_seen']} 0.5 s after start "
        "(timeout 0.3 s); expected (1, None): a peer never seen fails once `timeout` has passed since start, at "
        "step None"
    )


@pytest.mark.task10_5
def test_waiting_turns_a_peer_error_into_a_peer_failure_and_a_hang_into_on_failure():
    """``waiting``: an error while a peer has failed becomes a PeerFailure saying what was waited for; an error
    with every peer healthy goes through unchanged; a body blocked on a failed peer gets ``on_failure``."""
    (out,) = run_ranks(1, detector_rank, "waiting", deadline=30)
    assert out["converted"] is not None, (
        f"rank 0: rank 1 died during the wait, yet its error came out as {out['converted_other']!r}, not a PeerFailure"
    )
    got = out["converted"][:3]
    assert got == (0, 1, 4), f"rank 0's PeerFailure: (rank, dead_rank, step) = {got}, expected (0, 1, 4)"
    assert out["cause"] is not None and "Connection closed by peer" in out["cause"], (
        f"rank 0's PeerFailure must be raised `from` the collective's error (its __cause__), so the traceback "
        f"shows what the collective said; __cause__ is {out['cause']!r}"
    )
    waiting_for = out["converted"][3]
    assert waiting_for == "the all-reduce of step 4", f"rank 0's PeerFailure has waiting_for={waiting_for!r}"
    assert out["passed_through"] == "ZeroDivisionError", (
        f"rank 0: an error while rank 1 is healthy must go through unchanged, got {out['passed_through']!r}"
    )
    assert out["on_failure"] is not None, "rank 0, blocked while rank 1 fell silent, never got on_failure"
    assert out["on_failure"][0] == "the gradient all-reduce of step 2", f"rank 0's on_failure got {out['on_failure']}"
    took = out["on_failure_took"]
    assert took < 0.3 + 1.5, f"rank 0's on_failure came {took:.2f} s after rank 1 fell silent (timeout 0.3 s)"


@pytest.mark.task10_5
def test_on_failure_is_called_once_and_only_while_the_main_thread_waits():
    """The heartbeat thread calls ``on_failure`` only while the main thread is inside ``waiting``, and once per
    failure, not at every interval."""
    (out,) = run_ranks(1, detector_rank, "on_failure", deadline=30)
    me = "rank 0's detector (timeout 0.3 s, interval 0.02 s)"
    assert out["outside"] == 0, (
        f"{me}: on_failure was called {out['outside']} time(s) while the main thread waited for nothing; it is "
        "for a main thread blocked inside `waiting` (JobRank.fail ends the process: a rank between two waits "
        "would be killed instead of raising PeerFailure where it stands)"
    )
    assert out["inside"] >= 1, f"{me}: blocked 1 s inside `waiting` while rank 1 fell silent: no on_failure"
    assert out["inside"] == 1, (
        f"{me}: on_failure was called {out['inside']} times during one blocked wait on one failure; once per "
        "failure (the first call reports and ends the process; more would send more reports)"
    )
    took = out["first_took"]
    assert took < 0.3 + 0.5, f"{me}: on_failure came {took:.2f} s after rank 1 fell silent (timeout 0.3 s)"


# -- Task 10.5: the restart policy and the supervisor ------------------------------------------------


@pytest.mark.task10_5
def test_restart_plan_takes_the_newest_committed_step_at_the_largest_dividing_world_size():
    """``plan_restart``: torn saves newer than the last commit are skipped; the world size is the largest one
    that the healthy ranks allow and that divides the global batch."""
    (out,) = run_ranks(1, plan_restart_rank, deadline=30)
    assert out["empty"] == (0, 4), f"no checkpoint, 4 healthy, batch 12: expected (step 0, world 4), got {out['empty']}"
    for healthy, batch, world in [(4, 12, 4), (3, 12, 3), (5, 12, 4), (7, 12, 6), (3, 8, 2), (1, 12, 1)]:
        step, got = out["plans"][(healthy, batch)]
        assert step == 2, f"steps 2 (committed), 4 (no commit marker), 6 (truncated file) on disk: resumed {step}"
        assert got == world, f"healthy={healthy}, global_batch={batch}: world size {got}, expected {world}"


@pytest.mark.task10_5
def test_supervise_uses_a_spare_up_once():
    """Two attempts in a row lose rank 1, with one spare: the first restart keeps world 2 (the spare), the
    second has no spare left and restarts at world 1."""
    script = {"0": {"1": "die"}, "1": {"1": "die"}}
    (out,) = run_job(policy_rank, 2, script, 1, deadline=30)
    assert out["raised"] is None, f"supervise raised after two lost ranks and one spare:\n{out['raised']}"
    assert out["attempts"] == [(2, 0), (2, 0), (1, 0)], (
        f"(world size, start step) per attempt: {out['attempts']}; with spares=1, the first loss is replaced "
        "(world 2) and the spare is then used up: the second loss leaves 1 healthy rank (world 1)"
    )


@pytest.mark.task10_5
def test_supervise_reports_a_ranks_own_error_without_restarting():
    """A rank that raises something other than PeerFailure has a bug: supervise raises RuntimeError with every
    rank's outcome (the bug's traceback) and launches nothing more."""
    (out,) = run_job(policy_rank, 2, {"0": {"1": "bug"}}, 1, deadline=30)
    assert out["raised"] is not None, (
        f"rank 1 raised ZeroDivisionError (its own bug), yet supervise returned: attempts {out['attempts']}; "
        "a bug is not a failure, a restart would hit it again: raise RuntimeError with the outcomes"
    )
    assert out["raised"].startswith("RuntimeError") and "ZeroDivisionError" in out["raised"], (
        f"supervise should raise RuntimeError showing rank 1's ZeroDivisionError, raised:\n{out['raised']}"
    )
    assert out["launched"] == [(0, 2, 0)], (
        f"attempts launched (attempt, world size, start step): {out['launched']}; a rank's own error must not be "
        "restarted (nor use up a spare): only attempt 0 should run"
    )


@pytest.mark.task10_5
def test_the_failed_ranks_are_those_that_died_and_those_the_survivors_named():
    """World 4, no spare: rank 3 dies, ranks 0 and 1 name rank 2 (which finished, but a survivor's word is
    enough): failed = {2, 3}, so the restart runs on 2 ranks."""
    script = {"0": {"3": "die", "0": "name:2", "1": "name:2"}}
    (out,) = run_job(policy_rank, 4, script, 0, deadline=30)
    assert out["raised"] is None, f"supervise raised:\n{out['raised']}"
    assert out["attempts"] == [(4, 0), (2, 0)], (
        f"(world size, start step) per attempt: {out['attempts']}; rank 3 died without a report and ranks 0 and 1 "
        "named rank 2 in their PeerFailure: the failed ranks are {2, 3} (the union, each counted once), leaving "
        "2 healthy ranks"
    )


@pytest.mark.task10_5
def test_survivors_report_a_killed_rank_and_a_spare_restarts_from_the_last_commit(world_size):
    """DDP, one rank SIGKILLed at a random step: every survivor reports it (rank, step, the gradient all-reduce)
    at once, a spare takes its place, the job resumes from the last commit and ends as an uninterrupted run."""
    step, rows = _kill_step(world_size, 1), global_batch_for(world_size)
    fault = {"rank": world_size - 1, "step": step, "point": "sync", "signal": signal.SIGKILL}
    (summary,) = run_job(supervise_rank, world_size, {"strategy": "ddp", "global_batch": rows}, spares=1,
                         fault=fault, deadline=DEADLINE_S)  # fmt: skip
    check_survivors_noticed(summary, fault, expect_step=step, expect_waiting=f"the gradient all-reduce of step {step}",
                            expect_how="exited")  # fmt: skip
    attempts = [(a["world_size"], a["start_step"]) for a in summary["attempts"]]
    assert attempts == [(world_size, 0), (world_size, _committed_before(step))], (
        f"(world size, start step) per attempt: {attempts}, expected the spare to restart at world {world_size} "
        f"from step {_committed_before(step)}, the last committed before the kill at step {step}\n{describe(summary)}"
    )
    check_final_parameters(summary, uninterrupted(global_batch=rows))


@pytest.mark.task10_5
def test_without_a_spare_fsdp_restarts_smaller_through_resharding(world_size):
    """FSDP, one rank SIGKILLed at a random step, no spare: the job restarts at the largest world size that the
    survivors allow and that divides the global batch, reloading its shards resharded, and ends as an
    uninterrupted run."""
    if world_size < 2:
        pytest.skip("a smaller world needs a survivor: world size 2 or more")
    step, rows = _kill_step(world_size, 2), global_batch_for(world_size)
    fault = {"rank": 1, "step": step, "point": "sync", "signal": signal.SIGKILL}
    (summary,) = run_job(supervise_rank, world_size, {"strategy": "fsdp", "global_batch": rows}, spares=0,
                         fault=fault, deadline=DEADLINE_S)  # fmt: skip
    check_survivors_noticed(summary, fault, expect_step=step, expect_waiting=f"step {step} (FSDP)", expect_how="exited")
    smaller = max(w for w in range(1, world_size) if rows % w == 0)
    attempts = [(a["world_size"], a["start_step"]) for a in summary["attempts"]]
    assert attempts == [(world_size, 0), (smaller, _committed_before(step))], (
        f"(world size, start step) per attempt: {attempts}, expected a restart at world {smaller} from step "
        f"{_committed_before(step)}\n{describe(summary)}"
    )
    check_final_parameters(summary, uninterrupted(global_batch=rows))


@pytest.mark.task10_5
def test_a_hung_rank_is_noticed_by_its_missing_heartbeat():
    """A rank frozen with SIGSTOP keeps its sockets open, so the all-reduce blocks (as on NCCL): the survivor
    notices the missing heartbeat within the timeout, reports, and the job restarts and finishes."""
    step = _kill_step(2, 3)
    fault = {"rank": 1, "step": step, "point": "sync", "signal": signal.SIGSTOP}
    (summary,) = run_job(supervise_rank, 2, {"strategy": "ddp"}, spares=1, fault=fault, deadline=DEADLINE_S)
    check_survivors_noticed(summary, fault, expect_step=step, expect_waiting=f"the gradient all-reduce of step {step}",
                            expect_how="heartbeat")  # fmt: skip
    check_final_parameters(summary, uninterrupted())


# -- Task 10.6: live recovery from a healthy replica ---------------------------------------------------


@pytest.mark.task10_6
def test_a_replaced_replica_gets_the_healthy_replicas_state_over_the_network(world_size):
    """DDP, 2 steps, then the last rank is replaced (fresh model, empty AdamW, step 0) and recovers from the
    next rank (cyclically): only that rank sends, only to it, exactly the state's tensors (parameters, AdamW
    state) after a header; the others keep their state untouched; 2 more steps end as an uninterrupted run."""
    if world_size < 2:
        pytest.skip("live recovery needs a healthy replica: world size 2 or more")
    outs = run_ranks(world_size, live_recovery_rank, world_size - 1, 2, 2, deadline=30)
    check_live_recovery(outs, replaced=world_size - 1, healthy=0, steps_before=2, steps_after=2)


# -- bad input -----------------------------------------------------------------------------------------

BAD_INPUT = [
    BadInput(
        "detector-interval-not-below-timeout",
        lambda F, ctx: F.FailureDetector(torch.distributed.HashStore(), 0, 2, interval=1.0, timeout=0.5),
        "ValueError",
        names="interval",
        task="task10_5",
    ),  # fmt: skip
    BadInput(
        "plan-restart-no-healthy-rank",
        lambda F, ctx: F.plan_restart("/nonexistent", healthy=0, global_batch=8),
        "ValueError",
        names="healthy",
        task="task10_5",
    ),  # fmt: skip
    BadInput(
        "send-state-src-equals-dst",
        lambda F, ctx: F.send_replica_state({}, src=0, dst=0),
        "ValueError",
        names="src",
        task="task10_6",
    ),  # fmt: skip
    BadInput(
        "recover-replaced-outside-the-group",
        lambda F, ctx: F.recover_replica(
            torch.nn.Linear(2, 2),
            torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1),
            0,
            replaced=ctx.world_size,
        ),
        "ValueError",
        names="replaced",
        task="task10_6",
    ),  # fmt: skip
]


@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """Bad arguments raise a ValueError naming the argument on every rank, before any message."""
    outs = run_ranks(world_size, bad_input_rank, "fault_tolerance", case)
    assert_rejected_before_communicating(outs, case)
