"""Given models (not stubs) shared by the DDP, ZeRO, tensor- and pipeline-parallel parts.

Each carries the edge cases its part must handle: ``ToyModel`` has a frozen parameter and mixed
shapes, ``ToyModelWithTiedWeights`` uses one parameter twice, ``DeepMLP`` is an ``nn.Sequential``
that pipeline stages can be cut from.
"""

from __future__ import annotations

import torch
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
