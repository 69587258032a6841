"""Part 5's suite catches realistic pipeline bugs, each quickly and with a message that teaches.

    pytest tests/staff/mutants/test_pipeline_mutants.py -v        # staff only

Each mutant is the reference with one edit (tests/staff/mutants/pipeline_*/); the selected slice of the
suite file it is listed under must fail on it at the given world size (2 unless said) and show the text
given here.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed

pytestmark = pytest.mark.staff

MUTANTS = {
    "tests/test_pipeline.py": [
        Mutant("pipeline_split_extra_last", "split_into_stages", "first stages take the extra"),
        Mutant("pipeline_warmup_off_by_one", "warms_up", "warm-up forwards; got"),
        Mutant("pipeline_backward_first", "one_forward_then_one_backward and 1f1b", "B0 runs before F0"),
        Mutant("pipeline_gpipe_as_1f1b", "peak_activations and 1f1b and m-above-p", "activations were alive at once"),
        Mutant("pipeline_activations_kept", "peak_activations and 1f1b and m-above-p", ".peak_activations is"),
        Mutant("pipeline_loss_not_averaged", "training_matches and deep and m-equal-p", "loss"),
        Mutant("pipeline_group_rank_as_global", "subgroups", "is not part of group", world_sizes="4"),
        Mutant(
            "pipeline_grad_to_next", "training_matches and deep and m-equal-p and 1f1b", "train_rank", world_sizes="4"
        ),  # fmt: skip
        Mutant("pipeline_zeroes_grads", "adds_to_grad and 1f1b", "two train steps per step"),
        Mutant("pipeline_no_validation", "bad_input and divisible", "batch-not-divisible-by-microbatches"),
    ],
    # Interleaved 1F1B, ZB-H1 and checkpointing (Tasks 5.4-5.6).
    "tests/test_pipeline_schedules.py": [
        Mutant("pipeline_interleaved_chunk_per_microbatch", "follows_megatron_order", "interleaved_1f1b_schedule(p="),
        Mutant("pipeline_interleaved_warmup_as_1f1b", "follows_megatron_order", "forwards before the first backward"),
        Mutant(
            "pipeline_interleaved_backward_chunks_not_reversed", "never_deadlocks_and_idles_exactly", "interleaved, p="
        ),  # fmt: skip
        Mutant("pipeline_zb_w_before_b", "f_then_b_then_w", "then B, then W"),
        Mutant("pipeline_zb_deadlocks", "idles_a_third", "wait on each other forever"),
        Mutant("pipeline_zb_w_late", "idles_a_third", "zb-h1, p="),
        Mutant(
            "pipeline_zb_b_accumulates_weight_grads", "trains_like_one_process and zb-h1 and not checkpoint", ".grad"
        ),  # fmt: skip
        Mutant(
            "pipeline_checkpoint_keeps_activations",
            "activations_held and 1f1b-checkpoint",
            "checkpointing keeps only each microbatch's stage input",
        ),  # fmt: skip
        Mutant(
            "pipeline_recompute_without_rng_state",
            "recomputes_with_the_forward_rng_state and 1f1b",
            "draws other dropout masks",
        ),
        Mutant("pipeline_accounting_zb_bubble_as_1f1b", "accounting_bubble", "simulated"),
    ],
    # Only the hidden tests cut a model into chunks whose activations differ in width.
    "tests/staff/hidden/test_pipeline_hidden.py": [
        Mutant("pipeline_shape_of_first_chunk", "keep", "train_rank"),
    ],
}


@pytest.mark.parametrize(
    "suite,mutant", [(suite, mutant) for suite, rows in MUTANTS.items() for mutant in rows], ids=lambda x: str(x)
)
def test_the_suite_kills_the_mutant(suite, mutant):
    """The slice of the suite selected for this mutant fails on it, in bounded time, with a message that teaches."""
    assert_killed(mutant, suite, names=("rank", "stage"))
