"""Part 1's suite catches realistic collectives bugs, each quickly and with a message that teaches.

    pytest tests/staff/mutants/test_collectives_mutants.py -v        # staff only

Each mutant is the reference with one edit (tests/staff/mutants/collectives_*/); the selected slice of
tests/test_collectives.py must fail on it at the given world size (2 unless said) and show the text given here.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed

pytestmark = pytest.mark.staff

SUITE = "tests/test_collectives.py"

MUTANTS = [
    Mutant("collectives_ring_off_by_one", "all_reduce_sums and int64", "collective_rank failed"),
    Mutant("collectives_skip_send", "all_reduce_sums and float32", "hung: no answer within"),
    Mutant("collectives_builtin", "all_reduce_sums and int64", "only send/recv/isend/irecv"),
    Mutant("collectives_avg_forgotten", "all_reduce_avg and float32", "all_reduce(avg)"),
    Mutant("collectives_even_all_to_all", "all_to_all_delivers and float32", "all_to_all"),
    Mutant("collectives_group_rank_src", "subgroup", "broadcast src=", world_sizes="4"),
    Mutant("collectives_no_validation", "bad_input and reduce_scatter-dim", "expected ValueError"),
    Mutant("collectives_reduce_clobbers", "reduce_sums and float32 and first", "reduce to 0", world_sizes="4"),
    Mutant("collectives_gather_reversed", "all_gather and int64", "all_gather"),
]


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_suite_kills_the_mutant(mutant):
    """The slice of the suite selected for this mutant fails on it, in bounded time, with a message that teaches."""
    assert_killed(mutant, SUITE, names=("rank ",))
