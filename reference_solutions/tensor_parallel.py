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

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
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

# BEGIN SOLUTION
# The non-deprecated names where this torch has them (2.13 warns about the older ones).
_all_gather_tensor = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
_reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
# END SOLUTION


# BEGIN SOLUTION
# ---------------------------------------------------------------------------------------------
# Shared plumbing: group geometry, argument checks, the raw collectives on one dimension.
# ---------------------------------------------------------------------------------------------


def _world(group) -> int:
    """Ranks in ``group``; 1 without a process group, so the modules also run in one process."""
    return dist.get_world_size(group) if dist.is_initialized() else 1


def _rank(group) -> int:
    return dist.get_rank(group) if dist.is_initialized() else 0


def _check_tensor(x, name: str = "x", min_dim: int = 0) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dim(s), got shape {tuple(x.shape)}")


def _check_divisible(size: int, world: int, what: str) -> None:
    if size % world != 0:
        raise ValueError(f"{what} ({size}) must be divisible by the tensor-parallel size ({world})")


def _split_last(x: torch.Tensor, group) -> torch.Tensor:
    """This rank's contiguous chunk of the last dim: (..., n) -> (..., n/T)."""
    return x.chunk(_world(group), dim=-1)[_rank(group)].contiguous()


def _gather_last(x: torch.Tensor, group) -> torch.Tensor:
    """Concatenate every rank's x on the last dim, in group-rank order: (..., n/T) -> (..., n)."""
    stacked = _gather_first(x, group).view(_world(group), *x.shape)  # (T, ..., n/T)
    return torch.cat(stacked.unbind(0), dim=-1)


def _gather_first(x: torch.Tensor, group) -> torch.Tensor:
    """Concatenate every rank's x on dim 0, in group-rank order: (s/T, ...) -> (s, ...)."""
    out = torch.empty((_world(group) * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
    _all_gather_tensor(out, x.contiguous(), group=group)
    return out


def _reduce_scatter_first(x: torch.Tensor, group) -> torch.Tensor:
    """Sum x over the ranks and keep this rank's chunk of dim 0: (s, ...) -> (s/T, ...)."""
    out = torch.empty((x.shape[0] // _world(group), *x.shape[1:]), dtype=x.dtype, device=x.device)
    _reduce_scatter_tensor(out, x.contiguous(), group=group)
    return out


def _all_reduce(x: torch.Tensor, group) -> torch.Tensor:
    out = x.contiguous().clone()  # never sum in place into a tensor autograd may still need
    dist.all_reduce(out, group=group)
    return out


# END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 4.1: the conjugate autograd functions
# Each pair moves the same data in opposite directions: forward of one = backward of the other.
# ---------------------------------------------------------------------------------------------


# BEGIN SOLUTION
class _CopyToTPRegion(torch.autograd.Function):
    """f in the paper: identity forward, all-reduce backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, ctx.group), None


class _ReduceFromTPRegion(torch.autograd.Function):
    """g in the paper: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        return _all_reduce(x, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _ScatterToTPRegion(torch.autograd.Function):
    """Keep this rank's chunk of the last dim; backward all-gathers the chunks' grads."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _split_last(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather_last(grad, ctx.group), None


class _GatherFromTPRegion(torch.autograd.Function):
    """All-gather on the last dim; backward keeps this rank's chunk of the grad."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _gather_last(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _split_last(grad, ctx.group), None


class _ReduceScatterToSPRegion(torch.autograd.Function):
    """Sum over ranks, keep this rank's chunk of dim 0; backward all-gathers dim 0."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _reduce_scatter_first(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather_first(grad, ctx.group), None


class _AllGatherFromSPRegion(torch.autograd.Function):
    """All-gather dim 0; backward reduce-scatters dim 0 (every rank's copy fed a different loss term)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _gather_first(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_first(grad, ctx.group), None


# END SOLUTION


def copy_to_tp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Megatron's f: forward returns x unchanged (same shape); backward all-reduces (sums) the
    gradient over ``group``, because every rank's column shard consumed the same replicated x.

    Shapes: (...) -> (...). Used where a replicated activation enters a tensor-parallel region.
    """
    # BEGIN SOLUTION: Task 4.1 (conjugate functions)
    _check_tensor(x)
    if _world(group) == 1:
        return x
    return _CopyToTPRegion.apply(x, group)
    # END SOLUTION


def reduce_from_tp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Megatron's g: forward all-reduces (sums) x over ``group``; backward passes the gradient
    through unchanged (the output is replicated, so every rank already holds the full gradient).

    Shapes: (...) -> (...). The input is not modified in place.
    """
    # BEGIN SOLUTION: Task 4.1 (conjugate functions)
    _check_tensor(x)
    if _world(group) == 1:
        return x
    return _ReduceFromTPRegion.apply(x, group)
    # END SOLUTION


def scatter_to_tp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Keep this rank's chunk of the last dim: (..., n) -> (..., n/T), chunks in group-rank order.

    Backward all-gathers the gradient chunks on the last dim: (..., n/T) -> (..., n). The last dim
    must divide by T (``ValueError`` naming ``x`` otherwise, before any communication).
    """
    # BEGIN SOLUTION: Task 4.1 (conjugate functions)
    _check_tensor(x, min_dim=1)
    _check_divisible(x.shape[-1], _world(group), "x.shape[-1]")
    if _world(group) == 1:
        return x
    return _ScatterToTPRegion.apply(x, group)
    # END SOLUTION


def gather_from_tp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """All-gather on the last dim: (..., n/T) -> (..., n), concatenated in group-rank order.

    Backward keeps this rank's chunk of the gradient's last dim (no communication). Every rank
    must pass the same shape.
    """
    # BEGIN SOLUTION: Task 4.1 (conjugate functions)
    _check_tensor(x, min_dim=1)
    if _world(group) == 1:
        return x
    return _GatherFromTPRegion.apply(x, group)
    # END SOLUTION


def reduce_scatter_to_sp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sequence parallel g: sum x over ``group`` and keep this rank's chunk of dim 0:
    (s, ...) -> (s/T, ...). Backward all-gathers the gradient on dim 0: (s/T, ...) -> (s, ...).

    dim 0 must divide by T (``ValueError`` naming ``x`` otherwise, before any communication).
    """
    # BEGIN SOLUTION: Task 4.1 (conjugate functions)
    _check_tensor(x, min_dim=1)
    _check_divisible(x.shape[0], _world(group), "x.shape[0] (the sequence)")
    if _world(group) == 1:
        return x
    return _ReduceScatterToSPRegion.apply(x, group)
    # END SOLUTION


def all_gather_from_sp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sequence parallel f: all-gather on dim 0, (s/T, ...) -> (s, ...) in group-rank order.

    Backward reduce-scatters the gradient on dim 0: (s, ...) -> (s/T, ...), summing the gradient
    every rank computed for this rank's rows.
    """
    # BEGIN SOLUTION: Task 4.1 (conjugate functions)
    _check_tensor(x, min_dim=1)
    if _world(group) == 1:
        return x
    return _AllGatherFromSPRegion.apply(x, group)
    # END SOLUTION


# BEGIN SOLUTION
# ---------------------------------------------------------------------------------------------
# Module plumbing: sizes, nn.Linear's initialization, shards of a dense layer.
# ---------------------------------------------------------------------------------------------


def _check_features(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _init_weight(weight: nn.Parameter, fan_in: int) -> None:
    """nn.Linear's distribution, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), with the *full* fan-in."""
    bound = 1.0 / math.sqrt(fan_in)
    with torch.no_grad():
        weight.uniform_(-bound, bound)


def _check_linear(dense) -> nn.Linear:
    if not isinstance(dense, nn.Linear):
        raise TypeError(f"dense must be an nn.Linear, got {type(dense).__name__}")
    return dense


def _shard(tensor: torch.Tensor, dim: int, group) -> nn.Parameter:
    """A fresh parameter holding this rank's chunk of ``tensor`` along ``dim`` (same device, dtype)."""
    return nn.Parameter(tensor.detach().chunk(_world(group), dim=dim)[_rank(group)].clone())


# END SOLUTION


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
        # BEGIN SOLUTION: Task 4.2 (ColumnParallelLinear)
        world = _world(group)
        self.in_features = _check_features(in_features, "in_features")
        self.out_features = _check_features(out_features, "out_features")
        _check_divisible(out_features, world, "out_features")
        self.gather_output, self.group = gather_output, group
        self.weight = nn.Parameter(torch.empty(out_features // world, in_features))  # (out/T, in)
        _init_weight(self.weight, in_features)
        self.bias = nn.Parameter(torch.zeros(out_features // world)) if bias else None  # (out/T,)
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in_features) replicated -> (..., out_features/T), or (..., out_features) if gathered."""
        # BEGIN SOLUTION: Task 4.2 (ColumnParallelLinear)
        x = copy_to_tp_region(x, self.group)
        y = F.linear(x, self.weight, self.bias)  # (..., out/T)
        return gather_from_tp_region(y, self.group) if self.gather_output else y
        # END SOLUTION

    @classmethod
    def from_dense(cls, dense: nn.Linear, group: dist.ProcessGroup | None = None, *,
                   gather_output: bool = False) -> ColumnParallelLinear:  # fmt: skip
        """This rank's shard of ``dense``: rows r*out/T:(r+1)*out/T of its weight and bias, copied
        (training the shard never changes ``dense``), on ``dense``'s device and dtype.
        ``TypeError`` if ``dense`` is not an nn.Linear."""
        # BEGIN SOLUTION: Task 4.2 (ColumnParallelLinear)
        dense = _check_linear(dense)
        layer = cls(dense.in_features, dense.out_features, dense.bias is not None, gather_output, group)
        layer.weight = _shard(dense.weight, 0, group)
        if dense.bias is not None:
            layer.bias = _shard(dense.bias, 0, group)
        return layer
        # END SOLUTION


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
        # BEGIN SOLUTION: Task 4.3 (RowParallelLinear)
        world = _world(group)
        self.in_features = _check_features(in_features, "in_features")
        self.out_features = _check_features(out_features, "out_features")
        _check_divisible(in_features, world, "in_features")
        self.input_is_parallel, self.group = input_is_parallel, group
        self.weight = nn.Parameter(torch.empty(out_features, in_features // world))  # (out, in/T)
        _init_weight(self.weight, in_features)
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None  # (out,) replicated
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in_features/T) (or (..., in_features) if not parallel) -> (..., out_features) replicated."""
        # BEGIN SOLUTION: Task 4.3 (RowParallelLinear)
        if not self.input_is_parallel:
            x = scatter_to_tp_region(x, self.group)  # (..., in/T)
        y = reduce_from_tp_region(F.linear(x, self.weight), self.group)  # (..., out), summed over ranks
        # After the sum, not before: adding b on every rank before it would add it T times.
        return y + self.bias if self.bias is not None else y
        # END SOLUTION

    @classmethod
    def from_dense(cls, dense: nn.Linear, group: dist.ProcessGroup | None = None, *,
                   input_is_parallel: bool = True) -> RowParallelLinear:  # fmt: skip
        """This rank's shard of ``dense``: columns r*in/T:(r+1)*in/T of its weight and a copy of
        its whole bias, on ``dense``'s device and dtype. ``TypeError`` if ``dense`` is not an nn.Linear."""
        # BEGIN SOLUTION: Task 4.3 (RowParallelLinear)
        dense = _check_linear(dense)
        layer = cls(dense.in_features, dense.out_features, dense.bias is not None, input_is_parallel, group)
        layer.weight = _shard(dense.weight, 1, group)
        if dense.bias is not None:
            layer.bias = nn.Parameter(dense.bias.detach().clone())
        return layer
        # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 4.4: TensorParallelMLP, and ## Task 4.5: sequence parallelism (its forward's second branch)
# ---------------------------------------------------------------------------------------------


# BEGIN SOLUTION
class _SharedBias(torch.autograd.Function):
    """Forward b/T, backward the gradient unchanged (sequence-parallel bias of fc2, see below)."""

    @staticmethod
    def forward(ctx, bias, world):
        return bias / world

    @staticmethod
    def backward(ctx, grad):
        return grad, None


# END SOLUTION


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
        # BEGIN SOLUTION: Task 4.4 (tensor-parallel MLP)
        _check_features(d_model, "d_model")
        _check_features(d_ff, "d_ff")
        _check_divisible(d_ff, _world(group), "d_ff")
        self.sequence_parallel, self.group = bool(sequence_parallel), group
        self.fc1 = ColumnParallelLinear(d_model, d_ff, group=group)
        self.act = nn.GELU()
        self.fc2 = RowParallelLinear(d_ff, d_model, input_is_parallel=True, group=group)
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model); with sequence parallelism dim 0 is this rank's chunk."""
        if self.sequence_parallel:
            # BEGIN SOLUTION: Task 4.5 (sequence parallelism)
            x = all_gather_from_sp_region(x, self.group)  # (s, ..., d_model): replaces f
            h = self.act(F.linear(x, self.fc1.weight, self.fc1.bias))  # (s, ..., d_ff/T)
            y = F.linear(h, self.fc2.weight)  # (s, ..., d_model) partial sums
            if self.fc2.bias is not None:
                y = y + _SharedBias.apply(self.fc2.bias, _world(self.group))  # T shares sum to b: added once
            return reduce_scatter_to_sp_region(y, self.group)  # (s/T, ..., d_model): replaces g
            # END SOLUTION
        # BEGIN SOLUTION: Task 4.4 (tensor-parallel MLP)
        return self.fc2(self.act(self.fc1(x)))  # f inside fc1, g inside fc2
        # END SOLUTION

    @classmethod
    def from_dense(cls, dense: MLP, group: dist.ProcessGroup | None = None, *,
                   sequence_parallel: bool = False) -> TensorParallelMLP:  # fmt: skip
        """This rank's shard of a ``models.MLP``: fc1 by rows (ColumnParallelLinear.from_dense),
        fc2 by columns (RowParallelLinear.from_dense). ``TypeError`` if ``dense`` is not an MLP."""
        # BEGIN SOLUTION: Task 4.4 (tensor-parallel MLP)
        if not isinstance(dense, MLP):
            raise TypeError(f"dense must be a cs336_systems.models.MLP, got {type(dense).__name__}")
        mlp = cls(dense.fc1.in_features, dense.fc1.out_features, sequence_parallel=sequence_parallel, group=group)
        mlp.fc1 = ColumnParallelLinear.from_dense(dense.fc1, group)
        mlp.fc2 = RowParallelLinear.from_dense(dense.fc2, group, input_is_parallel=True)
        return mlp
        # END SOLUTION
