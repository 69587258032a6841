"""Part 5's suite catches realistic pipeline bugs, each quickly and with a message that teaches.

    pytest tests/staff/mutants/test_pipeline_mutants.py -v        # staff only

Each mutant is the reference with one edit (tests/staff/mutants/pipeline_*/); the selected slice of
tests/test_pipeline.py must fail on it at the given world size (2 unless said) and show the text given here.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed

pytestmark = pytest.mark.staff

SUITE = "tests/test_pipeline.py"

MUTANTS = [
    Mutant("pipeline_split_extra_last", "split_into_stages", "first stages take the extra"),
    Mutant("pipeline_warmup_off_by_one", "warms_up", "warm-up forwards; got"),
    Mutant("pipeline_backward_first", "one_forward_then_one_backward and 1f1b", "B0 runs before F0"),
    Mutant("pipeline_gpipe_as_1f1b", "peak_activations and 1f1b and m-above-p", "activations were alive at once"),
    Mutant("pipeline_activations_kept", "peak_activations and 1f1b and m-above-p", ".peak_activations is"),
    Mutant("pipeline_loss_not_averaged", "training_matches and deep and m-equal-p", "loss"),
    Mutant("pipeline_group_rank_as_global", "subgroups", "is not part of group", world_sizes="4"),
    Mutant("pipeline_grad_to_next", "training_matches and deep and m-equal-p and 1f1b", "train_rank failed"),
    Mutant("pipeline_zeroes_grads", "adds_to_grad and 1f1b", "two train steps per step"),
    Mutant("pipeline_no_validation", "bad_input and divisible", "batch-not-divisible-by-microbatches"),
]


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_suite_kills_the_mutant(mutant):
    """The slice of the suite selected for this mutant fails on it, in bounded time, with a message that teaches."""
    assert_killed(mutant, SUITE, names=("rank", "stage"))
