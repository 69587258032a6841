"""Part 2's hidden test kills mutants the public suite catches in one case only.

    pytest tests/staff/mutants/test_ddp_hidden_mutants.py -v        # staff only

ddp_stale_ready is caught publicly by one zero_grad case of test_repeated_steps_...; the hidden test's
five steps on 3 ranks catch it in training itself.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed

pytestmark = pytest.mark.staff

SUITE = "tests/staff/hidden/test_ddp_hidden.py"

MUTANTS = [
    Mutant("ddp_stale_ready", "::test_five_adamw_steps_on_three_ranks_match_one_process[bucketed-0.002MiB]", "step 1"),
]


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_hidden_test_kills_the_mutant(mutant):
    """The hidden test fails on this mutant, in bounded time, with a message that teaches."""
    assert_killed(mutant, SUITE, deadline=20)
