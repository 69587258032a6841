"""The Part 3 ZeRO-1/2 oracle: training with a sharded optimizer against one process's optimizer.

    from tests.oracles.sharded_optimizer import OPTIMIZERS, STAGES, assert_params_match_the_oracle

The test model and batches, ``train_rank`` (the sharded optimizer on N ranks, parameter groups
added mid-training), ``oracle_history`` (the same steps with the plain torch optimizer in one
process) and ``assert_params_match_the_oracle``, which runs both and compares every rank's
parameters after every step, for each of ``OPTIMIZERS`` and ZeRO ``STAGES``.

Used by tests/test_sharded_optimizer.py and its hidden counterpart.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from cs336_systems.models import DeepMLP
from cs336_systems.utils import random_batch
from tests.harness import assert_ranks_close, run_ranks

D_MODEL, D_FF, LAYERS, BATCH, STEPS = 16, 32, 3, 4, 4


ADD_GROUP_AT = 2  # the head joins the optimizer (add_param_group) before this step


OPTIMIZERS = {  # name -> (class, kwargs); each param group below overrides some of them
    "adamw": (torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1}),
    "sgd_momentum": (torch.optim.SGD, {"lr": 5e-2, "momentum": 0.9}),
}


# ZeRO stage 1 (task 3.1) and stage 2 (task 3.2), for tests that cover both.
STAGES = [
    pytest.param(1, id="stage1", marks=pytest.mark.task3_1),
    pytest.param(2, id="stage2", marks=pytest.mark.task3_2),
]


def make_model() -> DeepMLP:
    torch.manual_seed(0)  # every rank and the oracle build the same weights
    return DeepMLP(LAYERS, D_MODEL, D_FF)


def param_groups(model: DeepMLP) -> tuple[list[dict], dict]:
    """Two groups from the start (matrices with weight decay, vectors without, another lr) and the
    head's group, added mid-training."""
    body = [(n, p) for n, p in model.named_parameters() if not n.startswith(f"{LAYERS}.")]
    matrices = {"params": [p for n, p in body if p.ndim == 2]}
    vectors = {"params": [p for n, p in body if p.ndim < 2], "lr": 2e-2, "weight_decay": 0.0}
    head = {"params": list(model[LAYERS].parameters()), "lr": 3e-2}
    return [matrices, vectors], head


def rank_batch(step: int, rank: int):
    return random_batch(BATCH, D_MODEL, D_MODEL, seed=1000 * step + rank)


def loss_of(model, x, y) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(x), y)


def train_rank(ctx, opt_name: str, stage: int):
    """STEPS steps of data-parallel training; per step, every parameter and which grads survive."""
    zero = ctx.load("sharded_optimizer")
    model = make_model().to(ctx.device)
    groups, head = param_groups(model)
    cls, kwargs = OPTIMIZERS[opt_name]
    opt = zero.ShardedOptimizer(groups, cls, shard_gradients=stage == 2, **kwargs)
    history = []
    for step in range(STEPS):
        if step == ADD_GROUP_AT:
            opt.add_param_group(head)
        opt.zero_grad()
        x, y = (t.to(ctx.device) for t in rank_batch(step, ctx.rank))
        loss_of(model, x, y).backward()
        if stage == 1:  # stage 1 takes averaged grads, as DDP would leave them
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad.div_(ctx.world_size)
        opt.step()
        owned = {id(p) for p in opt.owned_parameters()}
        managed = {id(p) for g in opt.param_groups for p in g["params"]}
        history.append(
            {
                "params": {n: p.detach().clone() for n, p in model.named_parameters()},
                "owned": sorted(n for n, p in model.named_parameters() if id(p) in owned),
                "has_grad": sorted(n for n, p in model.named_parameters() if id(p) in managed and p.grad is not None),
            }
        )
    return history


def oracle_history(world_size: int, opt_name: str) -> list[dict[str, torch.Tensor]]:
    """The plain optimizer on one process, stepping on the mean of the ranks' gradients."""
    model = make_model()
    groups, head = param_groups(model)
    cls, kwargs = OPTIMIZERS[opt_name]
    opt = cls(groups, **kwargs)
    history = []
    for step in range(STEPS):
        if step == ADD_GROUP_AT:
            opt.add_param_group(head)
        grads = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
        for rank in range(world_size):
            model.zero_grad()
            loss_of(model, *rank_batch(step, rank)).backward()
            for n, p in model.named_parameters():
                grads[n] += p.grad / world_size
        for n, p in model.named_parameters():
            p.grad = grads[n]
        opt.step()
        history.append({n: p.detach().clone() for n, p in model.named_parameters()})
    return history


def assert_params_match_the_oracle(world_size: int, opt_name: str, stage: int) -> None:
    """Train on the ranks with ``stage``; after every step every rank's parameters equal the oracle's."""
    __tracebackhide__ = True
    outs = run_ranks(world_size, train_rank, opt_name, stage)
    for step, expected in enumerate(oracle_history(world_size, opt_name)):
        for name, value in expected.items():
            got = [o[step]["params"][name] for o in outs]
            assert_ranks_close(got, value, what=f"stage {stage}, {opt_name}, after step {step}, {name}")
