"""Task 1.7's tests catch realistic bugs in recursive doubling and the choice by size (staff only).

    pytest tests/staff/mutants/test_all_reduce_algorithms_mutants.py -v

Each mutant is the reference with one edit (tests/staff/mutants/collectives_*/ and
accounting_doubling_ceil_log2/); the selected slice of tests/test_all_reduce_algorithms.py (of the hidden
tests, for the last one) must fail on it at the given world size and show the text given here. World size 3
is the smallest with a fold.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed, run_suite

pytestmark = pytest.mark.staff

SUITE = "tests/test_all_reduce_algorithms.py"
HIDDEN = "tests/staff/hidden/test_all_reduce_algorithms_hidden.py"

SUMS = "::test_every_algorithm_sums_exactly_in_place"
AUTO = "::test_auto_runs_the_algorithm_the_model_picks_on_each_side_of_the_crossover"

MUTANTS = [
    Mutant("collectives_fold_wrong_partner", f"{SUMS}[w3-recursive_doubling]", "hung: no answer within", "3"),
    Mutant("collectives_fold_left_out", f"{SUMS}[w3-recursive_doubling]",
           "all_reduce(algorithm='recursive_doubling') of float32", "3"),
    Mutant("collectives_auto_always_ring", AUTO, "so auto must run 'recursive_doubling'"),
    Mutant("collectives_doubling_avg_every_step", "::test_avg_divides_by_world_size_once[w4-recursive_doubling]",
           "all_reduce(avg, 'recursive_doubling')", "4"),
    Mutant("collectives_doubling_half_exchanged",
           "::test_each_algorithm_sends_the_steps_and_bytes_it_promises[w2-recursive_doubling]",
           "recursive doubling at group position"),
    Mutant("collectives_algorithm_unchecked",
           "::test_bad_input_raises_on_every_rank_before_communicating[w2-all_reduce-unknown-algorithm]",
           "expected ValueError, but the call returned normally"),
    Mutant("accounting_doubling_ceil_log2", "::test_all_reduce_time_is_the_alpha_beta_model",
           "steps for recursive doubling at N = 3"),
]  # fmt: skip

# Missed by the public tests at every world size CI runs (1-4, 8): caught by the hidden tests at 6 and 7.
HIDDEN_MUTANTS = [
    Mutant("collectives_fold_one_extra_only", "::test_every_algorithm_at_world_sizes_with_several_extra_ranks",
           "rank ", "2"),
]  # fmt: skip


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_suite_kills_the_mutant(mutant):
    """The slice of the suite selected for this mutant fails on it, in bounded time, with a message that teaches."""
    where = ("rank ",) if mutant.package.startswith("collectives") else ("all_reduce_time(",)  # pure: names the call
    assert_killed(mutant, SUITE, names=where)


@pytest.mark.parametrize("mutant", HIDDEN_MUTANTS, ids=str)
def test_the_hidden_tests_kill_the_mutant_the_public_ones_miss(mutant):
    """The public tests pass on this mutant at world sizes 2, 3, 4 and 8; the hidden tests fail on it."""
    collectives_only = "not alpha_beta_model and not crossover_is and not fit_alpha_beta and not bad_model"
    public = run_suite(f"tests.staff.mutants.{mutant.package}", SUITE, "-k", collectives_only, world_sizes="2,3,4,8",
                       deadline=10)  # fmt: skip
    assert public.returncode == 0, f"the public tests were meant to miss {mutant.package}:\n{public.output[-3000:]}"
    assert_killed(mutant, HIDDEN, names=("rank ",))
