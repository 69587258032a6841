"""Part 6's suite catches realistic accounting bugs with a message that teaches.

    pytest tests/staff/mutants/test_accounting_mutants.py -v        # staff only

Each mutant is the reference with one edit (tests/staff/mutants/accounting_*/); the selected slice of
tests/test_accounting.py must fail on it at the given world size (2 unless said) and show the text given here.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed

pytestmark = pytest.mark.staff

SUITE = "tests/test_accounting.py"

MUTANTS = [
    Mutant("accounting_stage2_as_stage1", "figure_1", "stage=2"),
    Mutant("accounting_bubble_ratio", "bubble_and_ring", "p4 m8: expected"),
    Mutant("accounting_ring_one_pass", "bubble_and_ring", "N8: expected"),
    Mutant("accounting_forward_flops_only", "flops_and_mfu_examples", "training_flops(175e9, 300e9)"),
    Mutant("accounting_sp_like_tp", "korthikanti", "tensor + sequence parallel, t=8"),
    Mutant("accounting_no_stage_check", "bad_input and stage", "instead of raising"),
]


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_suite_kills_the_mutant(mutant):
    """The slice of the suite selected for this mutant fails on it, in bounded time, with a message that teaches."""
    assert_killed(mutant, SUITE, deadline=20)
