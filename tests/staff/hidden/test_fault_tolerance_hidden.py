"""Hidden tests for Part 10, Tasks 10.5-10.6 (never shipped to students): other ranks, other points, sub-groups.

    pytest tests/staff/hidden/test_fault_tolerance_hidden.py --impl reference

The public checks in other situations: rank 0 (the rank that commits checkpoints) killed at an odd world
size; a rank killed just before a save, so the survivors are waiting in the checkpoint when they notice
and the restart goes back one commit; FSDP frozen with SIGSTOP at world 3, restarting at 2; live recovery
of rank 0 (its source is rank 1) at world 3, and on two replica sub-groups of a world of 4 ({0, 2} and
{1, 3}: rank 2 recovers from rank 0, and group {1, 3} does not communicate); the supervisor's policy on other
scripts of losses (two spares used up over three losses, a bug beside a PeerFailure, a rank both dead and
named at world 6).
"""

from __future__ import annotations

import signal

import pytest

from tests.harness import run_ranks
from tests.oracles.fault_tolerance import (
    SUPERVISED_DEADLINE_S,
    check_final_parameters,
    check_live_recovery,
    check_survivors_noticed,
    describe,
    live_recovery_rank,
    policy_rank,
    run_job,
    supervise_rank,
    uninterrupted,
)

DEADLINE_S = SUPERVISED_DEADLINE_S  # three attempts at launch's deadline each, and the rest of the test


@pytest.mark.task10_5
def test_rank_zero_killed_at_world_three_is_replaced_by_a_spare():
    """DDP at world 3, rank 0 (the committer) SIGKILLed at step 5: a spare restarts at world 3 from step 4."""
    fault = {"rank": 0, "step": 5, "point": "sync", "signal": signal.SIGKILL}
    (summary,) = run_job(supervise_rank, 3, {"strategy": "ddp"}, spares=1, fault=fault, deadline=DEADLINE_S)
    check_survivors_noticed(summary, fault, expect_step=5, expect_waiting="the gradient all-reduce of step 5",
                            expect_how="exited")  # fmt: skip
    attempts = [(a["world_size"], a["start_step"]) for a in summary["attempts"]]
    assert attempts == [(3, 0), (3, 4)], f"attempts {attempts}\n{describe(summary)}"
    check_final_parameters(summary, uninterrupted())


@pytest.mark.task10_5
def test_a_rank_killed_before_a_save_sends_the_restart_back_one_commit():
    """FSDP at world 4, rank 2 SIGKILLed just before the checkpoint of step 4: the survivors report they waited
    for that checkpoint, and the job restarts at world 3 from step 2 (4 never committed)."""
    fault = {"rank": 2, "step": 4, "point": "save", "signal": signal.SIGKILL}
    (summary,) = run_job(supervise_rank, 4, {"strategy": "fsdp"}, spares=0, fault=fault, deadline=DEADLINE_S)
    check_survivors_noticed(summary, fault, expect_step=3, expect_waiting="the checkpoint of step 4",
                            expect_how="exited")  # fmt: skip
    attempts = [(a["world_size"], a["start_step"]) for a in summary["attempts"]]
    assert attempts == [(4, 0), (3, 2)], f"attempts {attempts}\n{describe(summary)}"
    check_final_parameters(summary, uninterrupted())


@pytest.mark.task10_5
def test_a_hung_fsdp_rank_at_world_three_restarts_the_job_at_two():
    """FSDP at world 3, rank 2 frozen (SIGSTOP) at step 1: survivors notice the silence, the job restarts at
    world 2 (no spare; 2 divides the batch of 12) from scratch and ends as an uninterrupted run."""
    fault = {"rank": 2, "step": 1, "point": "sync", "signal": signal.SIGSTOP}
    (summary,) = run_job(supervise_rank, 3, {"strategy": "fsdp"}, spares=0, fault=fault, deadline=DEADLINE_S)
    check_survivors_noticed(summary, fault, expect_step=1, expect_waiting="step 1 (FSDP)", expect_how="heartbeat")
    attempts = [(a["world_size"], a["start_step"]) for a in summary["attempts"]]
    assert attempts == [(3, 0), (2, 0)], f"attempts {attempts}\n{describe(summary)}"
    check_final_parameters(summary, uninterrupted())


@pytest.mark.task10_6
def test_rank_zero_recovers_from_rank_one_at_world_three():
    """Live recovery of rank 0 at world 3: its source is rank 1; rank 2 does not communicate."""
    outs = run_ranks(3, live_recovery_rank, 0, 3, 1, deadline=30)
    check_live_recovery(outs, replaced=0, healthy=1, steps_before=3, steps_after=1)


@pytest.mark.task10_6
def test_live_recovery_within_a_replica_sub_group():
    """Replica groups {0, 2} and {1, 3} at world 4: rank 2 recovers from rank 0 (global ranks), group {1, 3}
    carries on without a message."""
    outs = run_ranks(4, live_recovery_rank, 2, 2, 2, [[0, 2], [1, 3]], deadline=30)
    check_live_recovery(outs, replaced=2, healthy=0, steps_before=2, steps_after=2)


# -- the supervisor's policy (scripted jobs without training: tests/oracles/fault_tolerance.py scripted_job) --


@pytest.mark.task10_5
def test_two_spares_replace_two_losses_and_the_third_shrinks():
    """World 3, two spares, a rank lost in each of three attempts: worlds 3, 3, 3, then 2 (both spares used up)."""
    script = {"0": {"2": "die"}, "1": {"0": "die"}, "2": {"1": "die"}}
    (out,) = run_job(policy_rank, 3, script, 2, 3, deadline=30)
    assert out["raised"] is None, f"supervise raised:\n{out['raised']}"
    assert out["attempts"] == [(3, 0), (3, 0), (3, 0), (2, 0)], (
        f"(world size, start step) per attempt: {out['attempts']}; two spares replace the first two losses and "
        "are then used up: the third loss leaves 2 healthy ranks"
    )


@pytest.mark.task10_5
def test_a_bug_beside_a_peer_failure_is_reported_not_restarted():
    """World 3: rank 2 raises its own error while rank 0 reports a PeerFailure naming rank 1: still a bug."""
    (out,) = run_job(policy_rank, 3, {"0": {"2": "bug", "0": "name:1"}}, 1, deadline=30)
    assert out["raised"] is not None and "ZeroDivisionError" in out["raised"], (
        f"rank 2 raised ZeroDivisionError beside rank 0's PeerFailure; supervise must raise (a bug: a restart would "
        f"hit it again), got attempts {out['attempts']}, raised {out['raised']!r}"
    )
    assert out["launched"] == [(0, 3, 0)], f"launched {out['launched']}: a bug must not be restarted"


@pytest.mark.task10_5
def test_failed_ranks_at_world_six_count_a_dead_and_named_rank_once():
    """World 6, no spare: rank 5 dies, ranks 0, 1 and 2 name ranks 4 and 3 (both finished) and 5 (dead):
    failed {3, 4, 5}, the restart at world 3 (which divides the batch of 12)."""
    script = {"0": {"5": "die", "0": "name:4", "1": "name:5", "2": "name:3"}}
    (out,) = run_job(policy_rank, 6, script, 0, deadline=30)
    assert out["raised"] is None, f"supervise raised:\n{out['raised']}"
    assert out["attempts"] == [(6, 0), (3, 0)], (
        f"(world size, start step) per attempt: {out['attempts']}; the failed ranks are the union of the dead "
        "{5} and the named {3, 4, 5}, each counted once: 3 healthy ranks"
    )
