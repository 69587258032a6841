"""Hidden tests for part 3, FSDP (never shipped to students): FSDP over sub-groups.

    pytest tests/staff/hidden/test_fsdp_hidden.py --impl reference --world-sizes 4

The public sub-group test runs {0, 1} and {2, 3} on the deep model. Here world 4 runs two FSDP groups, {0, 2} and {1, 3}
(2-way data parallelism inside each group, as under HSDP): each group must train exactly like a
plain model on the mean of ITS two ranks' grads, which catches averages taken over the world
instead of the group (sharded and replicated parameters alike) and messages that leave the group.
"""

from __future__ import annotations

import pytest

from tests.harness import run_ranks
from tests.oracles.fsdp import check_fsdp_groups, fsdp_group_train_rank

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
