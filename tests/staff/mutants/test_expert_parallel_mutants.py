"""Part 8's suite catches realistic expert-parallel bugs, each quickly and with a message that teaches.

    pytest tests/staff/mutants/test_expert_parallel_mutants.py -v        # staff only

Each mutant is the reference with one edit (tests/staff/mutants/expert_parallel_*/); the selected slice
of tests/test_expert_parallel.py must fail on it at world size 2 and show the text given here.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed

pytestmark = pytest.mark.staff

SUITE = "tests/test_expert_parallel.py"

MATCH = "::test_moe_matches_the_dense_moe_on_the_concatenated_tokens"
TRAIN = "::test_adamw_steps_match_the_dense_moe"

MUTANTS = [
    Mutant("expert_parallel_weights_not_renormalised", f"{MATCH}[w2-top2]", "output (rows of rank 0)"),
    Mutant("expert_parallel_counts_not_exchanged", f"{MATCH}[w2-top1]", "rank 0 of 2, top1"),
    Mutant("expert_parallel_combine_wrong_order", f"{MATCH}[w2-top2]", "output (rows of rank 0)"),
    Mutant("expert_parallel_backward_not_reversed",
           "::test_all_to_all_tokens_delivers_rows_and_sends_gradients_back[w2-uneven]", "all_to_all_rank"),
    Mutant("expert_parallel_capacity_per_rank", f"{MATCH}[w2-top1-capacity1.0]", "output (rows of rank"),
    Mutant("expert_parallel_aux_wrong_axis", f"{MATCH}[w2-top1]", "aux_loss (of this rank's tokens)"),
    Mutant("expert_parallel_expert_on_wrong_rank", f"{MATCH}[w2-top1]", "(must be expert 1)"),
    Mutant("expert_parallel_capacity_ignored", f"{MATCH}[w2-top1-capacity1.0]", "output (rows of rank 1)"),
    Mutant("expert_parallel_no_validation",
           "::test_bad_input_raises_on_every_rank_before_communicating[w2-num_experts-not-divisible]",
           "expected ValueError, but the call returned normally"),
    Mutant("expert_parallel_router_not_summed", f"{TRAIN}[w2]", "router grad after the sync"),
    Mutant("expert_parallel_experts_overcounted", f"{TRAIN}[w2]", ".grad (expert 0) after the sync"),
]  # fmt: skip


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_suite_kills_the_mutant(mutant):
    """The selected slice of the suite fails on this mutant, quickly, with a message that teaches."""
    assert_killed(mutant, SUITE, names=("rank ",))
