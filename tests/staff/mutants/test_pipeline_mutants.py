"""Part 5's suite catches realistic bugs, each quickly and with a message that teaches (staff only).

pytest tests/staff/mutants/test_pipeline_mutants.py -v
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import assert_mutant_killed

pytestmark = pytest.mark.staff

SUITE = "tests/test_pipeline.py"

# mutant package -> (tests to run against it, world sizes, text the failure must show)
MUTANTS = {
    "pipeline_split_extra_last": ("split_into_stages", "2", "first stages take the extra"),
    "pipeline_warmup_off_by_one": ("warms_up", "2", "warm-up forwards; got"),
    "pipeline_backward_first": ("one_forward_then_one_backward and 1f1b", "2", "B0 runs before F0"),
    "pipeline_gpipe_as_1f1b": ("peak_activations and 1f1b and m-above-p", "2", "activations were alive at once"),
    "pipeline_activations_kept": ("peak_activations and 1f1b and m-above-p", "2", ".peak_activations is"),
    "pipeline_loss_not_averaged": ("training_matches and deep and m-equal-p", "2", "loss"),
    "pipeline_group_rank_as_global": ("subgroups", "4", "is not part of group"),
    "pipeline_grad_to_next": ("training_matches and deep and m-equal-p and 1f1b", "2", "train_rank failed"),
    "pipeline_zeroes_grads": ("adds_to_grad and 1f1b", "2", "two train steps per step"),
    "pipeline_no_validation": ("bad_input and divisible", "2", "batch-not-divisible-by-microbatches"),
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_the_suite_kills_the_mutant(mutant):
    selection, world_sizes, expect = MUTANTS[mutant]
    run = assert_mutant_killed(
        f"tests.staff.mutants.{mutant}", SUITE, "-k", selection, world_sizes=world_sizes, expect=expect, deadline=10
    )
    assert "rank" in run.output or "stage" in run.output  # failures say where
