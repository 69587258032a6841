"""Given models (not stubs) shared by the DDP, ZeRO, tensor- and pipeline-parallel parts.

Each carries the edge cases its part must handle: ``ToyModel`` has a frozen parameter and mixed
shapes, ``ToyModelWithTiedWeights`` uses one parameter twice, ``DeepMLP`` is an ``nn.Sequential``
that pipeline stages can be cut from, ``MoE`` is the dense mixture-of-experts layer that expert
parallelism (part 8) must reproduce exactly, dropped tokens included.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    """The transformer feed-forward block: ``fc2(gelu(fc1(x)))``.

    Shapes: x (..., d_model) -> (..., d_ff) -> (..., d_model).
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool = True) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class ResidualMLPBlock(nn.Module):
    """``x + MLP(LayerNorm(x))``: a pre-norm residual block, shape-preserving (..., d_model)."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class DeepMLP(nn.Sequential):
    """``num_layers`` residual MLP blocks followed by a Linear head, as one ``nn.Sequential``.

    Shapes: (batch, d_model) -> (batch, d_model). ``len(model) == num_layers + 1``.
    """

    def __init__(self, num_layers: int, d_model: int, d_ff: int) -> None:
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        super().__init__(*[ResidualMLPBlock(d_model, d_ff) for _ in range(num_layers)], nn.Linear(d_model, d_model))


class ToyModel(nn.Module):
    """A small classifier with mixed shapes and a frozen parameter (``no_grad_fixed_param``).

    Shapes: (batch, in_features) -> (batch, out_features).
    """

    def __init__(self, in_features: int = 10, out_features: int = 5) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, 10, bias=False)
        self.ln = nn.LayerNorm(10)
        self.fc2 = nn.Linear(10, 50, bias=False)
        self.fc3 = nn.Linear(50, out_features, bias=False)
        # Never trained: DDP must skip it, ZeRO must not allocate optimizer state for it.
        self.no_grad_fixed_param = nn.Parameter(torch.tensor([2.0, 2.0]), requires_grad=False)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.ln(self.fc1(x)))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


class ToyModelWithTiedWeights(nn.Module):
    """Like ``ToyModel`` but ``fc4.weight is fc2.weight`` (one parameter, used twice).

    ``module.parameters()`` yields the tied weight once; ``named_parameters()`` calls it ``fc2.weight``.
    Shapes: (batch, in_features) -> (batch, out_features).
    """

    def __init__(self, in_features: int = 10, out_features: int = 5) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, 10, bias=False)
        self.fc2 = nn.Linear(10, 50, bias=False)
        self.fc3 = nn.Linear(50, 10, bias=False)
        self.fc4 = nn.Linear(10, 50, bias=False)
        self.fc4.weight = self.fc2.weight  # tied: (50, 10)
        self.fc5 = nn.Linear(50, out_features, bias=False)
        self.no_grad_fixed_param = nn.Parameter(torch.tensor([2.0, 2.0]), requires_grad=False)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        x = self.relu(self.fc3(x))
        x = self.relu(self.fc4(x))
        return self.fc5(x)


def expert_capacity(num_tokens: int, num_experts: int, top_k: int, capacity_factor: float) -> int:
    """Assignments one expert may take in one forward: ``ceil(capacity_factor * num_tokens * top_k / num_experts)``.

    ``num_tokens`` counts every token the layer routes in that forward (with expert parallelism: the
    tokens of every rank of the group), so with capacity_factor 1 and perfectly even routing no
    assignment is dropped (Fedus et al. 2021, "Switch Transformers", eq. 3 / §2.2).
    """
    return math.ceil(capacity_factor * num_tokens * top_k / num_experts)


class MoE(nn.Module):
    """A mixture-of-experts MLP computed densely in one process: the oracle of part 8.

    Shapes: x (..., d_model) -> (..., d_model); the leading dims are flattened into n tokens, in
    row-major order (that order is the token order of the drop rule below).

    Routing: ``router`` is an ``nn.Linear(d_model, num_experts, bias=False)``; probs =
    softmax(router(x)) over the experts, (n, E); each token picks its ``top_k`` most probable experts
    (``torch.topk``: choice 0 is the most probable) with weights = their probs, divided by their sum
    when top_k > 1 (renormalised over the chosen k; with top_k = 1 the weight is the prob itself, so
    the router still gets a gradient). Token t's output is ``sum_c weight[t, c] * experts[e_c](x_t)``
    over its kept choices c; ``experts`` are ``MLP(d_model, d_ff)``.

    Capacity (``capacity_factor`` not None): expert e takes at most C = ``expert_capacity(n,
    num_experts, top_k, capacity_factor)`` assignments. Its queue is ordered choice-major: every
    token's first choice in token order, then every second choice in token order, ...; the first C
    of the queue are kept, the rest are dropped: they contribute zero to the output (no gradient
    flows through them either; a transformer's residual connection carries the token on).

    ``aux_loss`` (set by every forward): the Switch Transformer load-balancing loss
    ``num_experts * sum_i f_i * P_i``, f_i = the fraction of the n * top_k choices that picked
    expert i (counted before capacity drops; no gradient), P_i = the mean over tokens of probs[:, i]
    (differentiable: the router learns from it). Perfectly even routing gives 1.
    """

    def __init__(self, d_model: int, d_ff: int, num_experts: int, top_k: int = 1,
                 capacity_factor: float | None = None) -> None:  # fmt: skip
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k must be in [1, num_experts={num_experts}], got {top_k}")
        if capacity_factor is not None and not capacity_factor > 0:
            raise ValueError(f"capacity_factor must be > 0 or None, got {capacity_factor}")
        self.num_experts, self.top_k, self.capacity_factor = num_experts, top_k, capacity_factor
        self.router = nn.Linear(d_model, num_experts, bias=False)
        self.experts = nn.ModuleList([MLP(d_model, d_ff) for _ in range(num_experts)])
        self.aux_loss: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])  # (n, d)
        n, E, k = tokens.shape[0], self.num_experts, self.top_k
        probs = self.router(tokens).softmax(dim=-1)  # (n, E)
        weights, chosen = probs.topk(k, dim=-1)  # (n, k) each
        if k > 1:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        keep = torch.ones_like(chosen, dtype=torch.bool)  # (n, k)
        if self.capacity_factor is not None:
            queue = chosen.t().reshape(-1)  # (k*n,) choice-major: entry c*n + t is token t's choice c
            position = (F.one_hot(queue, E).cumsum(0) - 1).gather(1, queue[:, None])[:, 0]  # place in e's queue
            keep = (position < expert_capacity(n, E, k, self.capacity_factor)).view(k, n).t()
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token, choice = torch.nonzero((chosen == e) & keep, as_tuple=True)
            out = out.index_add(0, token, weights[token, choice, None] * expert(tokens[token]))
        fraction = torch.bincount(chosen.reshape(-1), minlength=E).to(probs.dtype) / (n * k)  # f_i, (E,)
        self.aux_loss = E * (fraction * probs.mean(dim=0)).sum()
        return out.view(x.shape)
