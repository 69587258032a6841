"""Hidden tests for part 3, FSDP (never shipped to students): FSDP over sub-groups, units in bfloat16.

    pytest tests/staff/hidden/test_fsdp_hidden.py --impl reference --world-sizes 4

The public sub-group test runs {0, 1} and {2, 3} on the deep model. Here world 4 runs two FSDP groups, {0, 2} and {1, 3}
(2-way data parallelism inside each group, as under HSDP): each group must train exactly like a
plain model on the mean of ITS two ranks' grads, which catches averages taken over the world
instead of the group (sharded and replicated parameters alike) and messages that leave the group.
"""

from __future__ import annotations

import pytest
import torch

from tests.harness import run_ranks
from tests.oracles.fsdp import check_fsdp_groups, check_units_training, fsdp_group_train_rank, units_train_rank

GROUPS = [[0, 2], [1, 3]]  # the public test's groups are [[0, 1], [2, 3]]


@pytest.mark.task3_3
@pytest.mark.world_sizes(4)
@pytest.mark.parametrize("name", ["deep_mlp", "tied"])
def test_two_fsdp_groups_each_train_like_a_plain_model_on_their_own_batches(world_size, name):
    """Two FSDP groups of two ranks each train like a plain model on the mean of their own ranks' grads.

    SGD (its step is proportional to the grad, so an average over 4 ranks instead of 2 shows); the
    deep model has replicated biases and LayerNorms, the tied one a shared and a frozen weight."""
    outs = run_ranks(world_size, fsdp_group_train_rank, GROUPS, name, "sgd")
    check_fsdp_groups(outs, GROUPS, name, "sgd")


@pytest.mark.task3_4
@pytest.mark.world_sizes(4)
@pytest.mark.parametrize("name", ["deep_mlp", "tied"])
def test_two_fsdp_groups_with_units_and_deferred_sync_each_train_on_their_own_batches(world_size, name):
    """Two FSDP groups with units and 3 microbatches (sync on the last) each train like one process on theirs.

    Units' flat grads and the replicated grads summed over microbatches, then averaged over the group's two
    ranks, not the world's four (SGD); the tied model's unit (1350 elements) is not padded at group size 2:
    its layout is checked by the public test at w4, its averaging over the group here."""
    outs = run_ranks(world_size, units_train_rank, name, 3, None, GROUPS)
    check_units_training(outs, name, 3, groups=GROUPS)


@pytest.mark.task3_4
@pytest.mark.parametrize("num_microbatches", [1, 4])
def test_bf16_units_with_deferred_sync_match_one_process(world_size, num_microbatches):
    """compute_dtype=bfloat16 with units: the unit gathers in bf16, its flat grad and shard stay fp32, and
    training over 1 or 4 microbatches matches one process within bfloat16's tolerance."""
    outs = run_ranks(world_size, units_train_rank, "deep_mlp", num_microbatches, torch.bfloat16)
    check_units_training(outs, "deep_mlp", num_microbatches, rtol=1.6e-2, atol=1e-2)
