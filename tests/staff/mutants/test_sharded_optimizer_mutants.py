"""Part 3's ZeRO stage 1/2 suite catches realistic sharded-optimizer bugs, with a message that teaches.

    pytest tests/staff/mutants/test_sharded_optimizer_mutants.py -v        # staff only

Each mutant is the reference with one edit (tests/staff/mutants/sharded_optimizer_*/); the selected slice of
tests/test_sharded_optimizer.py must fail on it at the given world size (2 unless said) and show the text given here.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed

pytestmark = pytest.mark.staff

SUITE = "tests/test_sharded_optimizer.py"

MUTANTS = [
    Mutant("sharded_optimizer_unsharded_optimizer", "one_nth_of_the_optimizer_state and 1-adamw",
           "owned parameters only"),
    Mutant("sharded_optimizer_no_param_sync", "stage1_matches and adamw", "stage 1, adamw, after step 0"),
    Mutant("sharded_optimizer_random_assignment", "exactly_one_owner", "not ids, hashes or random"),
    Mutant("sharded_optimizer_stage2_sum_not_mean", "stage2_averages and sgd", "stage 2, sgd_momentum, after step 0"),
    Mutant("sharded_optimizer_stage2_all_reduce", "step_sends_each", "step all-reduced"),
    Mutant("sharded_optimizer_stage2_keeps_grads", "keeps_only_the_owned", "frees the grads a rank does not own"),
    Mutant("sharded_optimizer_add_group_ignored", "stage1_matches and sgd", "after step 2, 3."),
]  # fmt: skip


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_suite_kills_the_mutant(mutant):
    """The slice of the suite selected for this mutant fails on it, in bounded time, with a message that teaches."""
    assert_killed(mutant, SUITE, deadline=20)
