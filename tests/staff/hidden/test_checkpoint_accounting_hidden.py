"""Hidden tests for task 10.7 (failure accounting); the public counterpart is tests/test_checkpoint_accounting.py.

Other jobs than the handout's: a 405B model under FSDP at 16k ranks, a job whose failures come faster than
it can save (goodput clamped at 0), an asynchronous job whose write outlasts Young-Daly, and goodput
monotone in each cost.
"""

from __future__ import annotations

import math

import pytest

from tests.oracles.accounting import assert_value, call, evaluate


@pytest.mark.task10_7
def test_failure_accounting_on_a_405b_job_at_16k_ranks():
    """405B parameters at 16k ranks: bytes per rank by stage, one GPU's MTBF divided by the job's size."""
    p, n = 405e9, 16384
    stage1, stage3 = evaluate(*[call("checkpoint_bytes_per_rank", p, n, stage, optimizer_bytes=12) for stage in (1, 3)])
    assert_value(stage1, p * 2 + p * 12 / n, "stage 1: parameters from rank 0 plus its optimizer shard")
    assert_value(stage3, p * 14 / n, "stage 3: one N-th of everything")
    gpu_mtbf = 50_000 * 3600.0  # one GPU fails every 50k hours: the job of 16k fails every ~3 h
    (tau,) = evaluate(call("checkpoint_interval", 30.0, gpu_mtbf / n))
    assert_value(tau, math.sqrt(2 * 30.0 * gpu_mtbf / n), "Young-Daly with the job's MTBF")


@pytest.mark.task10_7
def test_goodput_is_zero_when_failures_outpace_saving_and_falls_with_every_cost():
    """Goodput never goes below 0, and grows when any cost shrinks."""
    (dead,) = evaluate(call("checkpoint_goodput", 100.0, 60.0, 600.0, 300.0))
    assert_value(dead, 0.0, "failures every 300 s with a 600 s restart: no progress")
    base, cheaper_save, cheaper_restart, rarer = evaluate(
        call("checkpoint_goodput", 500.0, 20.0, 300.0, 20_000.0),
        call("checkpoint_goodput", 500.0, 10.0, 300.0, 20_000.0),
        call("checkpoint_goodput", 500.0, 20.0, 100.0, 20_000.0),
        call("checkpoint_goodput", 500.0, 20.0, 300.0, 40_000.0),
    )
    assert base < min(cheaper_save, cheaper_restart, rarer), (base, cheaper_save, cheaper_restart, rarer)
    (slow_write,) = evaluate(call("async_checkpoint_interval", 2.0, 900.0, 10_000.0))
    assert_value(slow_write, 900.0, "async interval: the 900 s write outlasts sqrt(2 S M) = 200 s")
