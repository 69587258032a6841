"""Part 6's suite catches realistic accounting bugs with a message that teaches.

    pytest tests/staff/mutants/test_accounting_mutants.py -v        # staff only

Each mutant is the reference with one edit (tests/staff/mutants/accounting_*/); the selected slice of
tests/test_accounting.py must fail on it at world size 2 and show the text given here.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import assert_mutant_killed

pytestmark = pytest.mark.staff

SUITE = "tests/test_accounting.py"

# mutant package -> (-k selection, text the failure output must contain)
MUTANTS = {
    "accounting_stage2_as_stage1": ("figure_1", "stage=2"),
    "accounting_bubble_ratio": ("bubble_and_ring", "p4 m8: expected"),
    "accounting_ring_one_pass": ("bubble_and_ring", "N8: expected"),
    "accounting_forward_flops_only": ("flops_and_mfu_examples", "training_flops(175e9, 300e9)"),
    "accounting_sp_like_tp": ("korthikanti", "tensor + sequence parallel, t=8"),
    "accounting_no_stage_check": ("bad_input and stage", "instead of raising"),
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_the_suite_kills_the_mutant(mutant):
    """The selected slice of the suite fails on this mutant, in bounded time, with a message that teaches."""
    selection, expect = MUTANTS[mutant]
    assert_mutant_killed(f"tests.staff.mutants.{mutant}", SUITE, "-k", selection, world_sizes="2", expect=expect)
