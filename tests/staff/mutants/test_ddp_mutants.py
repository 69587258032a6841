"""Part 2's suite catches realistic DDP bugs, each quickly and with a message that teaches.

    pytest tests/staff/mutants/test_ddp_mutants.py -v        # staff only

Each mutant is the reference with one edit (tests/staff/mutants/ddp_*/); the selected slice of
tests/test_ddp.py must fail on it at the given world size (2 unless said) and show the text given here.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed

pytestmark = pytest.mark.staff

SUITE = "tests/test_ddp.py"

TRAIN = "::test_sgd_steps_match_one_process_on_the_whole_batch"
LAYOUT = "::test_bucket_layout_follows_the_reverse_order_cap_rule[deep]"
OVERLAP = "::test_each_bucket_is_all_reduced_once_asynchronously_as_soon_as_it_is_full"

MUTANTS = [
    Mutant("ddp_avg_twice", f"{TRAIN}[w2-bucketed-inf-deep]", "the average divided by 2 again: average only once"),
    Mutant("ddp_no_avg", f"{TRAIN}[w2-naive-toy]", "this is the SUM over ranks: divide by the world size (2)"),
    Mutant("ddp_flat_no_copy_back", f"{TRAIN}[w2-flat-toy]", "(flat, toy, sgd)"),
    Mutant("ddp_wait_in_hook", f"{OVERLAP}[w2-deep-individual]", "waiting during backward serializes communication"),
    Mutant("ddp_launch_at_finish", f"{OVERLAP}[w2-deep-bucketed-0.002MiB]",
           "async_op=True from a hook during backward"),
    Mutant("ddp_tied_twice", f"{OVERLAP}[w2-tied-individual]", "expected one all_reduce per gradient"),
    Mutant("ddp_bucket_ignores_cap", LAYOUT, "deep, bucket_size_mb=0.00030517578125: expected buckets"),
    Mutant("ddp_bucket_megabytes", LAYOUT, "expected buckets"),
    Mutant("ddp_last_bucket_unflushed", f"{TRAIN}[w2-bucketed-0.002MiB-deep]", "0.norm.weight.grad (bucketed-0.002MiB"),
    Mutant("ddp_no_broadcast", "::test_construction_broadcasts_rank_0_parameters_and_buffers[w2-bucketed-0MiB]",
           "(must be rank 0's)"),
    Mutant("ddp_partial_bucket_dropped",
           "::test_a_parameter_without_grad_in_a_step_keeps_none_and_nothing_hangs[w2-bucketed-inf]", "step 1"),
    Mutant("ddp_stale_ready",
           "::test_repeated_steps_work_with_either_kind_of_zero_grad[w2-bucketed-0.002MiB-zero_grad-zeros]", "step 1"),
    Mutant("ddp_no_validation", "::test_bad_input_raises_on_every_rank_before_communicating[w2-negative-bucket-size]",
           "expected ValueError, but the call returned normally"),
]  # fmt: skip


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_suite_kills_the_mutant(mutant):
    """The slice of the suite selected for this mutant fails on it, in bounded time, with a message that teaches."""
    assert_killed(mutant, SUITE, deadline=20)  # 10 s: a loaded machine can spend that importing torch._dynamo
