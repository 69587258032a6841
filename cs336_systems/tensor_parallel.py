"""Tensor parallelism (Megatron-LM) and sequence parallelism for the transformer MLP.

Your task (handouts/04-tensor-parallel.md): implement the six communication functions as
``torch.autograd.Function``s (each one's forward is its partner's backward), then the two parallel
linears and the tensor-parallel MLP built from them, and finally its sequence-parallel variant.
Use the built-in collectives of torch.distributed (``all_reduce``, ``all_gather_single``,
``reduce_scatter_single``: torch 2.13's names for the deprecated ``all_gather_into_tensor`` and
``reduce_scatter_tensor``) over ``group`` (None = WORLD); with one rank you may skip communicating.

T ranks of ``group`` share every weight matrix. The MLP ``fc2(gelu(fc1(x)))`` is split so that it
needs exactly one collective per pass (Shoeybi et al. 2019, §3):

    x (..., d) --f--> fc1 column shard (d_ff/T, d) --gelu--> fc2 row shard (d, d_ff/T) --g--> (..., d)
                      every rank: (..., d_ff/T)              partial sums, all-reduced by g

``f`` is the identity forward and an all-reduce backward; ``g`` is the reverse. They are
*conjugate*: each is the other's transpose, which is what autograd needs (the backward of a
linear map is its adjoint). Sequence parallelism (Korthikanti et al. 2022, §4.2) keeps x sharded
on dim 0 (the sequence) between blocks, replacing f by an all-gather and g by a reduce-scatter: the
same bytes on the wire as one all-reduce, but 1/T of the activations outside the block per rank.

Communication per MLP call, for an activation of M bytes (s*b*d values) on T ranks:
    plain TP      forward all-reduce of M, backward all-reduce of M     (ring: 2(T-1)/T*M each)
    TP + SP       forward all-gather + reduce-scatter, backward the same (ring: (T-1)/T*M each)

Bad input raises ValueError/TypeError naming the argument, on every rank, before any message.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from cs336_systems.models import MLP

__all__ = [
    "copy_to_tp_region",
    "reduce_from_tp_region",
    "scatter_to_tp_region",
    "gather_from_tp_region",
    "reduce_scatter_to_sp_region",
    "all_gather_from_sp_region",
    "ColumnParallelLinear",
    "RowParallelLinear",
    "TensorParallelMLP",
]


# ---------------------------------------------------------------------------------------------
# ## Task 4.1: the conjugate autograd functions
# Each pair moves the same data in opposite directions: forward of one = backward of the other.
# ---------------------------------------------------------------------------------------------


def copy_to_tp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Megatron's f: forward returns x unchanged (same shape); backward all-reduces (sums) the
    gradient over ``group``, because every rank's column shard consumed the same replicated x.

    Shapes: (...) -> (...). Used where a replicated activation enters a tensor-parallel region.
    """
    raise NotImplementedError("Task 4.1 (conjugate functions): see handouts/04-tensor-parallel.md §4.1")


def reduce_from_tp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Megatron's g: forward all-reduces (sums) x over ``group``; backward passes the gradient
    through unchanged (the output is replicated, so every rank already holds the full gradient).

    Shapes: (...) -> (...). The input is not modified in place.
    """
    raise NotImplementedError("Task 4.1 (conjugate functions): see handouts/04-tensor-parallel.md §4.1")


def scatter_to_tp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Keep this rank's chunk of the last dim: (..., n) -> (..., n/T), chunks in group-rank order.

    Backward all-gathers the gradient chunks on the last dim: (..., n/T) -> (..., n). The last dim
    must divide by T (``ValueError`` naming ``x`` otherwise, before any communication).
    """
    raise NotImplementedError("Task 4.1 (conjugate functions): see handouts/04-tensor-parallel.md §4.1")


def gather_from_tp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """All-gather on the last dim: (..., n/T) -> (..., n), concatenated in group-rank order.

    Backward keeps this rank's chunk of the gradient's last dim (no communication). Every rank
    must pass the same shape.
    """
    raise NotImplementedError("Task 4.1 (conjugate functions): see handouts/04-tensor-parallel.md §4.1")


def reduce_scatter_to_sp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sequence parallel g: sum x over ``group`` and keep this rank's chunk of dim 0:
    (s, ...) -> (s/T, ...). Backward all-gathers the gradient on dim 0: (s/T, ...) -> (s, ...).

    dim 0 must divide by T (``ValueError`` naming ``x`` otherwise, before any communication).
    """
    raise NotImplementedError("Task 4.1 (conjugate functions): see handouts/04-tensor-parallel.md §4.1")


def all_gather_from_sp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sequence parallel f: all-gather on dim 0, (s/T, ...) -> (s, ...) in group-rank order.

    Backward reduce-scatters the gradient on dim 0: (s, ...) -> (s/T, ...), summing the gradient
    every rank computed for this rank's rows.
    """
    raise NotImplementedError("Task 4.1 (conjugate functions): see handouts/04-tensor-parallel.md §4.1")


# ---------------------------------------------------------------------------------------------
# ## Task 4.2: ColumnParallelLinear
# ---------------------------------------------------------------------------------------------


class ColumnParallelLinear(nn.Module):
    """``y = x A^T + b`` with A (out_features, in_features) split by rows (output features):
    rank r of T holds ``weight`` = A[r*out/T:(r+1)*out/T] of shape (out_features/T, in_features)
    and ``bias`` of shape (out_features/T,).

    Forward: x (..., in_features), replicated on every rank, goes through ``copy_to_tp_region``
    (identity; its backward all-reduces the input gradient), then y_r = x A_r^T + b_r of shape
    (..., out_features/T). With ``gather_output=True`` the shards are all-gathered on the last dim
    into (..., out_features) on every rank. ``out_features`` must divide by T (``ValueError``).
    The weight is drawn like nn.Linear's (fan-in = in_features); the bias starts at zero.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, gather_output: bool = False,
                 group: dist.ProcessGroup | None = None) -> None:  # fmt: skip
        super().__init__()
        raise NotImplementedError("Task 4.2 (ColumnParallelLinear): see handouts/04-tensor-parallel.md §4.2")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in_features) replicated -> (..., out_features/T), or (..., out_features) if gathered."""
        raise NotImplementedError("Task 4.2 (ColumnParallelLinear): see handouts/04-tensor-parallel.md §4.2")

    @classmethod
    def from_dense(cls, dense: nn.Linear, group: dist.ProcessGroup | None = None, *,
                   gather_output: bool = False) -> ColumnParallelLinear:  # fmt: skip
        """This rank's shard of ``dense``: rows r*out/T:(r+1)*out/T of its weight and bias, copied
        (training the shard never changes ``dense``), on ``dense``'s device and dtype.
        ``TypeError`` if ``dense`` is not an nn.Linear."""
        raise NotImplementedError("Task 4.2 (ColumnParallelLinear): see handouts/04-tensor-parallel.md §4.2")


# ---------------------------------------------------------------------------------------------
# ## Task 4.3: RowParallelLinear
# ---------------------------------------------------------------------------------------------


class RowParallelLinear(nn.Module):
    """``y = x A^T + b`` with A (out_features, in_features) split by columns (input features):
    rank r of T holds ``weight`` = A[:, r*in/T:(r+1)*in/T] of shape (out_features, in_features/T)
    and the whole ``bias`` (out_features,), replicated.

    Forward: x is (..., in_features/T), this rank's slice of the input features
    (``input_is_parallel=True``, e.g. a ColumnParallelLinear's output), or (..., in_features)
    replicated, which is first cut with ``scatter_to_tp_region``. Each rank computes the partial
    product x_r A_r^T (..., out_features); ``reduce_from_tp_region`` sums them over the group and the
    bias is added once, after the sum. Output (..., out_features), identical on every rank.
    ``in_features`` must divide by T (``ValueError``). Weight drawn like nn.Linear's (fan-in =
    in_features); the bias starts at zero, so it is identical on every rank without communication.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, input_is_parallel: bool = True,
                 group: dist.ProcessGroup | None = None) -> None:  # fmt: skip
        super().__init__()
        raise NotImplementedError("Task 4.3 (RowParallelLinear): see handouts/04-tensor-parallel.md §4.3")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in_features/T) (or (..., in_features) if not parallel) -> (..., out_features) replicated."""
        raise NotImplementedError("Task 4.3 (RowParallelLinear): see handouts/04-tensor-parallel.md §4.3")

    @classmethod
    def from_dense(cls, dense: nn.Linear, group: dist.ProcessGroup | None = None, *,
                   input_is_parallel: bool = True) -> RowParallelLinear:  # fmt: skip
        """This rank's shard of ``dense``: columns r*in/T:(r+1)*in/T of its weight and a copy of
        its whole bias, on ``dense``'s device and dtype. ``TypeError`` if ``dense`` is not an nn.Linear."""
        raise NotImplementedError("Task 4.3 (RowParallelLinear): see handouts/04-tensor-parallel.md §4.3")


# ---------------------------------------------------------------------------------------------
# ## Task 4.4: TensorParallelMLP, and ## Task 4.5: sequence parallelism (its forward's second branch)
# ---------------------------------------------------------------------------------------------


class TensorParallelMLP(nn.Module):
    """``models.MLP`` split over the T ranks of ``group``: ``fc1`` is a ColumnParallelLinear
    (d_model -> d_ff/T per rank), ``act`` a GELU applied to the local shard (elementwise, so no
    communication), ``fc2`` a RowParallelLinear (d_ff/T -> d_model, summed over ranks). Each rank
    stores 1/T of both weight matrices (plus the replicated fc2 bias). ``d_ff`` must divide by T.

    ``sequence_parallel=False``: x (..., d_model) replicated -> (..., d_model) replicated, with
    exactly one all-reduce in forward (fc2's g) and one in backward (fc1's f).

    ``sequence_parallel=True``: x (s/T, ..., d_model) is this rank's chunk of dim 0 (the sequence)
    -> (s/T, ..., d_model), this rank's chunk of the output. One all-gather (dim 0, before fc1) and
    one reduce-scatter (dim 0, after fc2) in forward, one of each in backward, no all-reduce. The
    replicated fc2 bias gets its full gradient on every rank with no extra collective (handout §4.4).
    """

    def __init__(self, d_model: int, d_ff: int, *, sequence_parallel: bool = False,
                 group: dist.ProcessGroup | None = None) -> None:  # fmt: skip
        super().__init__()
        raise NotImplementedError("Task 4.4 (tensor-parallel MLP): see handouts/04-tensor-parallel.md §4.4")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model); with sequence parallelism dim 0 is this rank's chunk."""
        if self.sequence_parallel:
            raise NotImplementedError("Task 4.5 (sequence parallelism): see handouts/04-tensor-parallel.md §4.5")
        raise NotImplementedError("Task 4.4 (tensor-parallel MLP): see handouts/04-tensor-parallel.md §4.4")

    @classmethod
    def from_dense(cls, dense: MLP, group: dist.ProcessGroup | None = None, *,
                   sequence_parallel: bool = False) -> TensorParallelMLP:  # fmt: skip
        """This rank's shard of a ``models.MLP``: fc1 by rows (ColumnParallelLinear.from_dense),
        fc2 by columns (RowParallelLinear.from_dense). ``TypeError`` if ``dense`` is not an MLP."""
        raise NotImplementedError("Task 4.4 (tensor-parallel MLP): see handouts/04-tensor-parallel.md §4.4")
