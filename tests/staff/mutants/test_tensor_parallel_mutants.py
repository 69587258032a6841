"""Part 4's suite catches realistic tensor-parallel bugs, each quickly and with a message that teaches.

    pytest tests/staff/mutants/test_tensor_parallel_mutants.py -v        # staff only

Each mutant is the reference with one edit (tests/staff/mutants/tensor_parallel_*/); the selected slice of
tests/test_tensor_parallel.py must fail on it at the given world size (2 unless said) and show the text given here.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed

pytestmark = pytest.mark.staff

SUITE = "tests/test_tensor_parallel.py"

MUTANTS = [
    Mutant("tensor_parallel_column_split_by_input", "column_parallel and sharded-output and no-bias",
           "cannot be multiplied"),
    Mutant("tensor_parallel_row_bias_every_rank", "row_parallel and parallel-input and not no-bias",
           "the bias must be added once"),
    Mutant("tensor_parallel_no_backward_all_reduce", "conjugate and forward_backward and copy_to",
           "backward: gradient of x"),
    Mutant("tensor_parallel_all_reduce_both_ways", "conjugate and forward_backward and reduce_from",
           "backward: gradient of x"),
    Mutant("tensor_parallel_average_not_sum", "tp_mlp_matches and not no-bias", "TP MLP output"),
    Mutant("tensor_parallel_sp_bias_unscaled", "sequence_parallel_mlp_matches", "sequence-parallel output"),
    Mutant("tensor_parallel_row_init_shard_fan_in", "fresh_layers", "initialize with the full layer's fan-in"),
    Mutant("tensor_parallel_scatter_wrong_dim", "conjugate and forward_backward and scatter_to",
           "forward output: shape"),
    Mutant("tensor_parallel_sp_all_reduce", "swaps_each_all_reduce",
           "should make exactly ['all_gather', 'reduce_scatter']"),
    Mutant("tensor_parallel_mlp_extra_gather", "one_all_reduce_per_pass", "should make exactly ['all_reduce']"),
    Mutant("tensor_parallel_no_validation", "bad_input and column-out_features",
           "expected ValueError, but the call returned"),
    Mutant("tensor_parallel_gather_grad_first_chunk", "conjugate and forward_backward and gather_from",
           "rank 1, gather_from"),
    Mutant("tensor_parallel_ignores_group", "stays_inside_its_group and reduce_from", "in group [0, 1], forward output",
           world_sizes="4"),
]  # fmt: skip


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_suite_kills_the_mutant(mutant):
    """The slice of the suite selected for this mutant fails on it, in bounded time, with a message that teaches."""
    assert_killed(mutant, SUITE, names=("rank ",), within=30)
