"""Part 1's suite catches realistic bugs, each quickly and with a message that teaches (staff only).

pytest tests/staff/mutants/test_collectives_mutants.py -v
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import assert_mutant_killed

pytestmark = pytest.mark.staff

SUITE = "tests/test_collectives.py"

# mutant package -> (tests to run against it, world sizes, text the failure must show)
MUTANTS = {
    "collectives_ring_off_by_one": ("-k", "all_reduce_sums and int64", "2", "collective_rank failed"),
    "collectives_skip_send": ("-k", "all_reduce_sums and float32", "2", "hung: no answer within"),
    "collectives_builtin": ("-k", "all_reduce_sums and int64", "2", "only send/recv/isend/irecv"),
    "collectives_avg_forgotten": ("-k", "all_reduce_avg and float32", "2", "all_reduce(avg)"),
    "collectives_even_all_to_all": ("-k", "all_to_all_delivers and float32", "2", "all_to_all"),
    "collectives_group_rank_src": ("-k", "subgroup", "4", "broadcast src="),
    "collectives_no_validation": ("-k", "bad_input and reduce_scatter-dim", "2", "expected ValueError"),
    "collectives_reduce_clobbers": ("-k", "reduce_sums and float32 and first", "4", "reduce to 0"),
    "collectives_gather_reversed": ("-k", "all_gather and int64", "2", "all_gather"),
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_the_suite_kills_the_mutant(mutant):
    flag, selection, world_sizes, expect = MUTANTS[mutant]
    run = assert_mutant_killed(
        f"tests.staff.mutants.{mutant}", SUITE, flag, selection, world_sizes=world_sizes, expect=expect, deadline=10
    )
    assert "rank " in run.output  # failures name the rank
