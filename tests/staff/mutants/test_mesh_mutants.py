"""Part 7's suite catches realistic composition bugs, each quickly and with a message that teaches (staff only).

pytest tests/staff/mutants/test_mesh_mutants.py -v
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import assert_mutant_killed

pytestmark = pytest.mark.staff

SUITE = "tests/test_mesh.py"
SLICES = f"{SUITE}::test_mesh_slices_match_row_major_order_and_init_device_mesh[w4]"
HSDP_TRAIN = f"{SUITE}::test_hsdp_training_matches_one_process_on_the_whole_batch[w4-sgd]"
HSDP_TRAFFIC = f"{SUITE}::test_hsdp_gathers_within_shard_slices_and_averages_across_replicas[w4]"
TRAIN = f"{SUITE}::test_mesh_training_matches_one_process_on_the_whole_batch[w4-sgd]"
TRAFFIC = f"{SUITE}::test_each_axis_traffic_stays_in_its_groups_with_the_formula_counts[w4]"
ZERO = f"{SUITE}::test_mesh_training_with_zero_over_dp_matches_one_process[w4-1]"
PLAN = "tests/test_accounting_mesh.py"
SUBGROUPS = "tests/test_mesh_subgroups.py"

# mutant package -> (the test that must fail, at world size 4; text the failure must show)
MUTANTS = {
    "mesh_column_major": (SLICES, "expected [0, 2] (row-major)"),
    # Ranks wait in new_group for peers that never come; or, when every rank happens to make the same number
    # of calls (each is in 2 of the 4 slices of dp2xtp2), the groups pair up wrongly and the all_reduce over
    # them hangs: which of the two depends on timing (CI saw the second), and both stacks show where.
    "mesh_group_only_on_members": (SLICES, ("in new_group", "in all_reduce")),
    "mesh_hsdp_no_replicate_all_reduce": (HSDP_TRAFFIC, "without them replicas drift apart"),
    "mesh_hsdp_axes_swapped": (HSDP_TRAFFIC, "expected the shard slice"),
    "mesh_hsdp_divides_by_world": (HSDP_TRAIN, "step 0"),
    "mesh_hsdp_no_replicate_broadcast": (HSDP_TRAIN, "step 0"),
    "mesh_dp_over_tp_axis": (TRAIN, "(dp2xtp2, sgd)"),
    "mesh_no_dp_all_reduce": (TRAIN, "(dp2xtp2, sgd)"),
    "mesh_tp_on_world": (TRAFFIC, "calls outside the tp/dp slices"),
    "mesh_pipeline_across_dp": (TRAIN, "trainer_rank failed"),  # PipelineStage refuses the wrong group
    "mesh_zero_on_world": (ZERO, "zero 1"),
    "mesh_subgroup_ddp_broadcast_from_rank_0": (
        f"{SUBGROUPS}::test_ddp_on_a_subgroup_broadcasts_from_its_first_rank_and_averages_over_its_size[w4-bucketed]",
        "Global rank 0 is not part of group"),
    "mesh_subgroup_fsdp_average_by_world": (
        f"{SUBGROUPS}::test_zero_on_a_subgroup_steps_like_one_process_on_the_groups_batch[w4-fsdp]",
        "fsdp, fc1.weight after one step on [0, 2]"),
    "mesh_zero2_also_all_reduces": (  # same numbers (average of averages): only the hidden traffic test sees it
        "tests/staff/hidden/test_mesh_hidden.py::test_zero2_reduce_scatters_instead_of_all_reducing_over_dp",
        "ZeRO-2 averages with the optimizer's reduce-scatter"),
    "accounting_planner_tp_across_nodes": (f"{PLAN}::test_planner_keeps_tp_inside_a_node_and_grows_pp_across_nodes",
                                           "TP crosses nodes"),
    "accounting_planner_activations_of_one_microbatch": (
        f"{PLAN}::test_parallel_memory_of_llama3_405b_matches_the_hand_computation", "activations"),
}  # fmt: skip


@pytest.mark.parametrize("mutant", MUTANTS)
def test_the_suite_kills_the_mutant(mutant):
    """The selected slice of the suite fails on this mutant, quickly, with a message that teaches."""
    selection, expect = MUTANTS[mutant]
    assert_mutant_killed(f"tests.staff.mutants.{mutant}", selection, world_sizes="4", expect=expect, deadline=20)
