"""Hidden tests for part 3, FSDP (never shipped to students): FSDP over sub-groups.

    pytest tests/staff/hidden/test_fsdp_hidden.py --impl reference --world-sizes 4

The public tests shard over the whole world. Here world 4 runs two FSDP groups, {0, 1} and {2, 3}
(2-way data parallelism inside each group, as under HSDP): each group must train exactly like a
plain model on the mean of ITS two ranks' grads, which catches averages taken over the world
instead of the group (sharded and replicated parameters alike) and messages that leave the group.
"""

from __future__ import annotations

import pytest
import torch

from tests.harness import assert_close, run_ranks
from tests.oracles.fsdp import FSDP_OPTIMIZERS, FSDP_STEPS, fsdp_batch, fsdp_oracle, make_fsdp_model

GROUPS = [[0, 1], [2, 3]]
STEPS = FSDP_STEPS  # as many as the oracle takes


def fsdp_group_train_rank(ctx, name: str, opt_name: str):
    """FSDP over this rank's group of GROUPS; per step the loss and the gathered full state dict."""
    fsdp_mod = ctx.load("fsdp")
    made = [torch.distributed.new_group(g) for g in GROUPS]  # every rank creates every group, in order
    group = next(pg for pg, g in zip(made, GROUPS) if ctx.rank in g)
    fsdp = fsdp_mod.FSDP(make_fsdp_model(name).to(ctx.device), group=group)
    cls, kwargs = FSDP_OPTIMIZERS[opt_name]
    opt = cls(fsdp.parameters(), **kwargs)
    history = []
    for step in range(STEPS):
        x, y = (t.to(ctx.device) for t in fsdp_batch(name, step, ctx.rank))
        loss = torch.nn.functional.mse_loss(fsdp(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        history.append({"loss": loss.detach(), "state": fsdp.gather_full_params()})
    return history


@pytest.mark.task3_3
@pytest.mark.world_sizes(4)
@pytest.mark.parametrize("name", ["deep_mlp", "tied"])
def test_two_fsdp_groups_each_train_like_a_plain_model_on_their_own_batches(world_size, name):
    """Two FSDP groups of two ranks each train like a plain model on the mean of their own ranks' grads.

    SGD (its step is proportional to the grad, so an average over 4 ranks instead of 2 shows); the
    deep model has replicated biases and LayerNorms, the tied one a shared and a frozen weight."""
    outs = run_ranks(world_size, fsdp_group_train_rank, name, "sgd")
    for members in GROUPS:
        for step, expected in enumerate(fsdp_oracle(name, len(members), "sgd", ranks=members)):
            for i, r in enumerate(members):
                where = f"rank {r} (FSDP group {members}), {name}, step {step}"
                assert_close(outs[r][step]["loss"], expected["losses"][i], what=f"{where}: loss")
                for key, value in expected["state"].items():
                    assert_close(outs[r][step]["state"][key], value, what=f"{where}: {key} after the step")
