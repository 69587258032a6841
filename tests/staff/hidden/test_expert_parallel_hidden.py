"""Hidden tests for part 8 (never shipped to students): ranks with different numbers of tokens.

    pytest tests/staff/hidden/test_expert_parallel_hidden.py --impl reference

The public ragged test (``test_ranks_with_different_token_counts_share_one_capacity``) gives rank r
2(W - r) tokens, fewest on the last rank, top-1 with capacity; here rank r holds 3(r + 1), fewest on
rank 0, in three configurations. The capacity is computed from N, the tokens of the WHOLE group
(the stub's promise), not from this rank's count times the group size; with capacity the dense MoE
on the concatenated tokens (rank 0's first) drops exactly the assignments the layer must drop.
"""

from __future__ import annotations

import pytest
import torch

from tests.harness import assert_close, run_ranks
from tests.oracles.moe import D, copy_moe, dense_moe, moe_rank, moe_state, ragged_oracle, rand

CONFIGS = {"top1-capacity1.0": (1, 1.0), "top2-capacity0.75": (2, 0.75), "top2": (2, None)}


def _ragged(world_size: int, seed: int) -> list[torch.Tensor]:
    """Rank r's tokens: (r + 1, 3, D), so 3, 6, 9, ... tokens."""
    return [rand(r + 1, 3, D, seed=seed + r) for r in range(world_size)]


@pytest.mark.task8_2
@pytest.mark.world_sizes(2, 4)
@pytest.mark.parametrize("config", CONFIGS)
def test_ranks_with_different_token_counts_share_one_capacity_over_the_group(world_size, config):
    """With 3, 6, 9... tokens per rank, outputs and x.grad equal the dense MoE's on the concatenated
    tokens: one capacity from the group's total token count, and the same assignments dropped."""
    top_k, capacity_factor = CONFIGS[config]
    dense = dense_moe(top_k, capacity_factor, seed=1)
    xs, gs = _ragged(world_size, seed=300), _ragged(world_size, seed=400)
    if capacity_factor is not None:  # the test means something only if the dense layer drops tokens
        x_all = torch.cat([x.reshape(-1, D) for x in xs])
        assert not torch.allclose(dense(x_all), copy_moe(dense, capacity_factor=None)(x_all)), "setup: nothing dropped"
    outs = run_ranks(world_size, moe_rank, moe_state(dense), top_k, capacity_factor, xs, gs)
    for r, (out, (y, x_grad)) in enumerate(zip(outs, ragged_oracle(dense, xs, gs))):
        where = f"rank {r} of {world_size} ({xs[r].shape[0] * 3} tokens), {config}"
        assert_close(out["y"], y, what=f"{where}: output (rows of rank {r})")
        assert_close(out["x_grad"], x_grad, what=f"{where}: gradient of x")
