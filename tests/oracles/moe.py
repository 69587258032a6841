"""The dense-MoE oracle of Part 8: the float64 ``models.MoE`` the expert-parallel layer must equal.

    from tests.oracles.moe import D, copy_moe, dense_moe, moe_rank, moe_state, rand
    dense = dense_moe(top_k=2, capacity_factor=0.75, seed=1)           # in the parent
    outs = run_ranks(W, moe_rank, moe_state(dense), 2, 0.75, xs, gs)   # from_dense in every rank
    y = copy_moe(dense)(torch.cat(xs))                                 # the oracle's output

The sizes (D, DFF, E experts, float64), a seeded ``rand``, the dense MoE (optionally with skewed
routing), copies of it through its state dict, and ``moe_rank``: the rank function that builds
``ExpertParallelMoE.from_dense`` from that state, runs forward and backward of sum(y * g) +
aux_loss on its tokens and returns outputs, gradients, its experts and the communication made.
The parent compares each rank with the matching rows of the dense layer run on every rank's
tokens concatenated (rank 0's first).

``ragged_oracle`` is the same oracle for ranks that hold different numbers of tokens: rank r's rows
of the dense output and input gradient.

Used by tests/test_expert_parallel.py and Part 8's hidden tests.
"""

from __future__ import annotations

import torch
from torch import nn

from cs336_systems.models import MoE
from tests.harness.recorder import CommRecorder

D, DFF, E = 12, 16, 8  # model width, expert hidden width, experts (E divides by 1, 2 and 4)
DT = torch.float64  # exact enough that a wrong weight or a token routed twice cannot hide


def rand(*shape, seed: int) -> torch.Tensor:
    """A float64 standard normal tensor of ``shape`` drawn from its own generator seeded ``seed``."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DT)


def dense_moe(top_k: int, capacity_factor: float | None, seed: int = 0, skew: bool = False) -> MoE:
    """A float64 MoE. ``skew``: expert 0 takes most first choices and the last two experts (the last
    rank's at EP 4) none at all, for inputs with a positive mean (the tests add 1 to their tokens)."""
    torch.manual_seed(seed)
    moe = MoE(D, DFF, E, top_k, capacity_factor).to(DT)
    if skew:
        with torch.no_grad():
            w = moe.router.weight
            w.mul_(0.3)
            w[0] += 1.0 / D**0.5
            w[1] += 0.5 / D**0.5
            w[-2:] -= 3.0 / D**0.5
    return moe


def moe_state(module: nn.Module) -> dict:
    """A detached copy of ``module``'s state dict (what ``moe_rank`` receives)."""
    return {k: v.clone() for k, v in module.state_dict().items()}


def load_moe(state: dict, top_k: int, capacity_factor: float | None, device) -> MoE:
    """A float64 dense MoE with the given state, on ``device``."""
    dense = MoE(D, DFF, E, top_k, capacity_factor).to(DT)
    dense.load_state_dict(state)
    return dense.to(device)


def copy_moe(dense: MoE, capacity_factor: float | None | str = "same") -> MoE:
    """A fresh copy (deepcopy refuses a module whose aux_loss still holds a graph)."""
    cf = dense.capacity_factor if capacity_factor == "same" else capacity_factor
    return load_moe(moe_state(dense), dense.top_k, cf, dense.router.weight.device)


NO_GRAD_RULE = (
    "an expert that got no token may leave .grad None, which counts as zeros; "
    "one whose gradient is not zero must have a .grad"
)


def expert_params(expert: nn.Module, grads: bool) -> dict:
    """Copies of ``expert``'s parameters (``grads``: of their gradients) by name. A ``.grad`` that is
    None stays None (an expert that got no token may have none; ``grad_or_zeros`` reads it as zeros)."""
    if grads:
        return {n: None if p.grad is None else p.grad.detach().clone() for n, p in expert.named_parameters()}
    return {n: p.detach().clone() for n, p in expert.named_parameters()}


def grad_or_zeros(got: torch.Tensor | None, want: torch.Tensor, what: str) -> tuple[torch.Tensor, str]:
    """(the gradient to compare, its description): a None ``got`` is zeros like ``want``, and then the
    description names the rule (``NO_GRAD_RULE``), so a failure says why None was not enough."""
    if got is None:
        return torch.zeros_like(want), f"{what} is None, read as zeros ({NO_GRAD_RULE})"
    return got, what


def moe_rank(ctx, state, top_k, capacity_factor, xs, gs):
    """In a rank: ``ExpertParallelMoE.from_dense`` of the dense MoE with ``state``, forward on this
    rank's tokens ``xs[rank]``, backward of sum(y * gs[rank]) + aux_loss; returns outputs, gradients,
    this rank's experts and the communication of each pass."""
    EP = ctx.load("expert_parallel")
    layer = EP.ExpertParallelMoE.from_dense(load_moe(state, top_k, capacity_factor, ctx.device))
    x = xs[ctx.rank].to(ctx.device).requires_grad_(True)
    with CommRecorder() as fwd:
        y = layer(x)
    aux = layer.aux_loss
    with CommRecorder() as bwd:
        if y.shape == x.shape:  # else the parent reports the wrong forward shape
            ((y * gs[ctx.rank].to(ctx.device)).sum() + aux).backward()
    return {
        "y": y, "x_grad": x.grad, "aux": aux.detach() if isinstance(aux, torch.Tensor) else aux,
        "router": layer.router.weight.detach(), "router_grad": layer.router.weight.grad,
        "experts": [expert_params(e, grads=False) for e in layer.experts],
        "expert_grads": [expert_params(e, grads=True) for e in layer.experts],
        "first_expert": layer.first_expert, "fwd": fwd.events, "bwd": bwd.events,
    }  # fmt: skip


def ragged_oracle(
    dense: MoE, xs: list[torch.Tensor], gs: list[torch.Tensor]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The dense MoE on every rank's tokens concatenated (rank 0's first), the ranks holding any numbers
    of tokens: per rank r, (its rows of the output, its rows of the input gradient of the sum of the
    ranks' losses sum(y_r * g_r) + aux_loss(rank r's tokens)), each shaped like ``xs[r]``."""
    x_all = torch.cat([x.reshape(-1, D) for x in xs]).requires_grad_(True)
    g_all = torch.cat([g.reshape(-1, D) for g in gs])
    model = copy_moe(dense)
    y = model(x_all)
    loss = (y * g_all).sum()
    offsets = [0]
    for x in xs:
        offsets.append(offsets[-1] + x.reshape(-1, D).shape[0])
    for r in range(len(xs)):  # a rank's aux_loss sees its own tokens only (no gradient crosses ranks)
        model(x_all[offsets[r] : offsets[r + 1]])
        loss = loss + model.aux_loss
    loss.backward()
    rows = [slice(offsets[r], offsets[r + 1]) for r in range(len(xs))]
    return [(y[s].detach().view(x.shape), x_all.grad[s].view(x.shape)) for s, x in zip(rows, xs)]
