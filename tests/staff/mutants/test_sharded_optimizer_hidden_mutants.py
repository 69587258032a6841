"""Part 3's hidden test (stages 1-2) kills a mutant the public suite catches with one optimizer only.

    pytest tests/staff/mutants/test_sharded_optimizer_hidden_mutants.py -v        # staff only
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed

pytestmark = pytest.mark.staff

SUITE = "tests/staff/hidden/test_sharded_optimizer_hidden.py"

MUTANTS = [
    Mutant("sharded_optimizer_add_group_ignored", "stage1 and adamw", "after step 2"),
]


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_hidden_test_kills_the_mutant(mutant):
    """The hidden test fails on this mutant, in bounded time, with a message that teaches."""
    assert_killed(mutant, SUITE, deadline=20)
