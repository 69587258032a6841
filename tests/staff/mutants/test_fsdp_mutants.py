"""Part 3's FSDP suite catches realistic ZeRO-3 bugs, quickly and with a message that teaches.

    pytest tests/staff/mutants/test_fsdp_mutants.py -v        # staff only

Each mutant is the reference with one edit (tests/staff/mutants/fsdp_*/); the selected slice of
tests/test_fsdp.py must fail on it at the given world size (2 unless said) and show the text given here.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed

pytestmark = pytest.mark.staff

SUITE = "tests/test_fsdp.py"

MUTANTS = [
    Mutant("fsdp_keeps_gathered_weights", "fsdp_holds", "Something keeps full weights"),
    Mutant("fsdp_autograd_gather", "fsdp_holds", "must be freed once the layer has run"),
    Mutant("fsdp_grad_not_averaged", "fsdp_training and deep_mlp-fp32-sgd", "deep_mlp fp32, after step 0"),
    Mutant("fsdp_ignores_compute_dtype", "fsdp_training and bf16", "matmuls ran in ['float32']"),
    Mutant("fsdp_gathers_everything_first", "fsdp_gathers", "not all at once"),
]


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_suite_kills_the_mutant(mutant):
    """The slice of the suite selected for this mutant fails on it, in bounded time, with a message that teaches."""
    assert_killed(mutant, SUITE, deadline=20)
