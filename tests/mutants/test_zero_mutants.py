"""Parts 3 (ZeRO) and 6 (accounting): the suites catch realistic bugs, quickly and with a message that
teaches (staff only).

    pytest tests/mutants/test_zero_mutants.py -v
"""

from __future__ import annotations

import pytest

from tests.mutants.runner import assert_mutant_killed

pytestmark = pytest.mark.staff

ZERO, FSDP, ACCOUNTING = "tests/test_sharded_optimizer.py", "tests/test_fsdp.py", "tests/test_accounting.py"

# mutant package -> (suite, -k selection, text the failure must show); world size 2 throughout
MUTANTS = {
    "zero_unsharded_optimizer": (ZERO, "one_nth_of_the_optimizer_state and 1-adamw", "owned parameters only"),
    "zero_no_param_sync": (ZERO, "stage1_matches and adamw", "stage 1, adamw, after step 0"),
    "zero_random_assignment": (ZERO, "exactly_one_owner", "not ids, hashes or random"),
    "zero_stage2_sum_not_mean": (ZERO, "stage2_averages and sgd", "stage 2, sgd_momentum, after step 0"),
    "zero_stage2_all_reduce": (ZERO, "step_sends_each", "step all-reduced"),
    "zero_stage2_keeps_grads": (ZERO, "keeps_only_the_owned", "frees the grads a rank does not own"),
    "zero_add_group_ignored": (ZERO, "stage1_matches and sgd", "after step 2, 3."),
    "zero_fsdp_keeps_gathered_weights": (FSDP, "fsdp_holds", "Something keeps full weights"),
    "zero_fsdp_autograd_gather": (FSDP, "fsdp_holds", "must be freed once the layer has run"),
    "zero_fsdp_grad_not_averaged": (
        FSDP,
        "fsdp_training and deep_mlp-fp32-sgd",
        "deep_mlp fp32, after step 0",
    ),
    "zero_fsdp_ignores_compute_dtype": (FSDP, "fsdp_training and bf16", "matmuls ran in ['float32']"),
    "zero_fsdp_gathers_everything_first": (FSDP, "fsdp_gathers", "not all at once"),
    "accounting_stage2_as_stage1": (ACCOUNTING, "figure_1", "stage=2"),
    "accounting_bubble_ratio": (ACCOUNTING, "bubble_and_ring", "p4 m8: expected"),
    "accounting_ring_one_pass": (ACCOUNTING, "bubble_and_ring", "N8: expected"),
    "accounting_forward_flops_only": (ACCOUNTING, "flops_and_mfu_examples", "training_flops(175e9, 300e9)"),
    "accounting_sp_like_tp": (ACCOUNTING, "korthikanti", "tensor + sequence parallel, t=8"),
    "accounting_no_stage_check": (ACCOUNTING, "bad_input and stage", "instead of raising"),
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_the_suite_kills_the_mutant(mutant):
    suite, selection, expect = MUTANTS[mutant]
    assert_mutant_killed(f"tests.mutants.{mutant}", suite, "-k", selection, world_sizes="2", expect=expect)
