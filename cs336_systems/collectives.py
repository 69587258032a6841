"""Collectives built only from point-to-point messages (send/recv/isend/irecv/batch_isend_irecv).

Your task (handouts/01-collectives.md): implement each function below using ONLY
``dist.send``, ``dist.recv``, ``dist.isend``, ``dist.irecv``, ``dist.P2POp`` and
``dist.batch_isend_irecv``. The tests record every torch.distributed call your code makes and fail
on any built-in collective (``dist.all_reduce``, ``dist.broadcast``, ...).

Every function takes ``group`` (None = WORLD) and works for any group size N >= 1, any shape
(empty and 0-d included) and float32/float64/bfloat16/int64 tensors, on gloo (CPU) or NCCL (CUDA).
Peers are addressed by global rank; positions in lists follow the rank *within* the group.
Bad input raises ValueError/TypeError naming the argument, on every rank, before any message.

Costs for M bytes on N ranks (alpha = per-message latency, beta = seconds per byte):
    broadcast, reduce   binomial tree: ceil(log2 N) rounds, M bytes per round
    all_gather          ring: N-1 steps, each rank sends (N-1)/N of the result
    reduce_scatter      ring: N-1 steps, each rank sends (N-1)/N of its input
    all_reduce          ring reduce-scatter + ring all-gather: each rank sends 2(N-1)/N * M,
                        which no algorithm beats for large M (the "bandwidth-optimal" bound);
                        recursive doubling: log2 N exchanges of all M bytes (latency-optimal);
                        "auto" picks the cheaper of the two under the alpha-beta model
    all_to_all          pairwise: N-1 steps, step k talks to rank +k and rank -k
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = [
    "broadcast",
    "reduce",
    "all_gather",
    "reduce_scatter",
    "all_reduce",
    "all_to_all",
    "ALL_REDUCE_ALGORITHMS",
    "ALPHA_BETA",
    "choose_all_reduce_algorithm",
]


# ---------------------------------------------------------------------------------------------
# ## Task 1.1: broadcast
# ---------------------------------------------------------------------------------------------


def broadcast(tensor: torch.Tensor, src: int, group: dist.ProcessGroup | None = None) -> None:
    """Copy ``tensor`` from global rank ``src`` into ``tensor`` on every rank of ``group``, in place.

    Binomial tree over ranks relative to ``src``: in round k, every rank that already holds the
    data (relative rank < 2**k) sends it to relative rank + 2**k; ceil(log2 N) rounds in all.
    All ranks must pass tensors of the same shape and dtype.
    """
    raise NotImplementedError("Task 1.1 (broadcast): see handouts/01-collectives.md §1.1")


# ---------------------------------------------------------------------------------------------
# ## Task 1.2: reduce
# ---------------------------------------------------------------------------------------------


def reduce(tensor: torch.Tensor, dst: int, group: dist.ProcessGroup | None = None) -> None:
    """Sum ``tensor`` over all ranks of ``group`` into ``tensor`` on global rank ``dst``, in place.

    Other ranks' tensors are left unchanged. Binomial tree, the broadcast run backwards: in round
    k, relative ranks with bit k set send their partial sum to relative rank - 2**k and drop out.
    """
    raise NotImplementedError("Task 1.2 (reduce): see handouts/01-collectives.md §1.2")


# ---------------------------------------------------------------------------------------------
# ## Task 1.3: all_gather (ring)
# ---------------------------------------------------------------------------------------------


def all_gather(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Concatenate every rank's ``tensor`` along dim 0, in group-rank order; returned on every rank.

    Shapes: each rank passes (d0, *rest) -> returns (N * d0, *rest); a 0-d tensor gives (N,).
    Ring algorithm: N - 1 steps, each rank sends its neighbour one rank's piece per step.
    """
    raise NotImplementedError("Task 1.3 (all_gather (ring)): see handouts/01-collectives.md §1.3")


# ---------------------------------------------------------------------------------------------
# ## Task 1.4: reduce_scatter (ring)
# ---------------------------------------------------------------------------------------------


def reduce_scatter(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sum ``tensor`` over the group and return this rank's chunk of the sum along dim 0.

    Shapes: each rank passes (N * c, *rest) -> returns (c, *rest), chunk i going to group rank i.
    ``tensor.shape[0]`` must divide by N (``ValueError`` otherwise); ``tensor`` is not modified.
    """
    raise NotImplementedError("Task 1.4 (reduce_scatter (ring)): see handouts/01-collectives.md §1.4")


# ---------------------------------------------------------------------------------------------
# ## Task 1.5: ring all_reduce
# ---------------------------------------------------------------------------------------------


def all_reduce(
    tensor: torch.Tensor, op: str = "sum", group: dist.ProcessGroup | None = None, *, algorithm: str = "auto"
) -> None:
    """Sum (``op="sum"``) or average (``op="avg"``) ``tensor`` over the group, in place, on every rank.

    Every algorithm sends point-to-point messages only, gives the same integer results bit for
    bit, and leaves the same bits on every rank. ``"avg"`` divides by N once, after the sum
    (averaging an integer tensor is a ``TypeError``); an unknown ``algorithm`` is a ``ValueError``.

    ``algorithm="ring"`` (Task 1.5, bandwidth-optimal): split the flattened tensor into N
    contiguous chunks (``torch.tensor_split``: sizes differ by at most one, some are empty when
    numel < N); a ring reduce-scatter leaves chunk i fully reduced on group rank i, then a ring
    all-gather circulates the reduced chunks. 2(N-1) steps, each sending one chunk to the next
    rank only: 2(N-1)/N of the data per rank in all. ``"avg"`` divides only this rank's reduced
    chunk, between the two phases (1/N of the work).

    ``algorithm="recursive_doubling"`` (Task 1.7, latency-optimal): with p = 2**floor(log2 N),
    the N - p extra group ranks p + i first send their whole tensor to group rank i, which adds
    it (the fold in). Group ranks 0..p-1 then, in step k = 0, 1, ..., log2(p) - 1, exchange their
    whole partial sum with group rank ``me XOR 2**k`` and add what they receive: after step k each
    holds the sum over its block of 2**(k+1) ranks. Last, group rank i sends the result to group
    rank p + i (the fold out). log2(p) steps, 2 more with a fold, each moving all M bytes (in one
    message up to 64 KiB; larger tensors may go in pieces).
    ``"avg"`` divides once, after the last exchange step (the extra ranks receive the average).

    ``algorithm="auto"`` (the default; Task 1.7): whichever ``choose_all_reduce_algorithm`` picks for this
    tensor's size in bytes and N, with the (alpha, beta) of ``ALPHA_BETA`` for the group's backend.
    """
    raise NotImplementedError("Task 1.5 (ring all_reduce): see handouts/01-collectives.md §1.5")


# ---------------------------------------------------------------------------------------------
# ## Task 1.6: all_to_all (uneven sizes)
# ---------------------------------------------------------------------------------------------


def all_to_all(tensors: list[torch.Tensor], group: dist.ProcessGroup | None = None) -> list[torch.Tensor]:
    """Personalised exchange: ``tensors[j]`` goes to group rank j; result ``[i]`` came from rank i.

    Shapes: ``tensors[j]`` is (n_j, *rest) with n_j free per pair; ``*rest`` and dtype must match.
    Dim-0 sizes are exchanged first (one int64 per pair), then the data, pairwise: in step k
    rank r sends to r + k and receives from r - k, so every pair talks exactly once per phase.
    """
    raise NotImplementedError("Task 1.6 (all_to_all (uneven sizes)): see handouts/01-collectives.md §1.6")


# ---------------------------------------------------------------------------------------------
# ## Task 1.7: latency-optimal all_reduce (recursive doubling) and the choice by size
# ---------------------------------------------------------------------------------------------

ALL_REDUCE_ALGORITHMS = ("ring", "recursive_doubling", "auto")

# (alpha, beta) per backend that algorithm="auto" uses: seconds per message and seconds per byte.
# Only alpha / beta matters for the choice (N = 4: crossover 8 alpha / beta). gloo: measured with
# python -m scripts.bench.collectives on the course's 2-core machine, where 4 ranks' times cross between
# 1 and 4 MiB; alpha / beta = 2e5 B puts the crossover there (1.5 MiB). The least-squares fit of
# the same run (alpha ~ 1.6e-3 s, beta ~ 1.4e-9 s/B) puts it at ~9 MiB, too late: the model has no
# term for the additions, which share the 2 cores with the messages (recursive doubling adds
# log2(N) * M per rank, the ring (N-1)/N * M). nccl: orders of magnitude for NVLink in one node
# (a few microseconds, ~100 GB/s per link), not measured here. Refit both on your own hardware.
ALPHA_BETA = {"gloo": (2.0e-4, 1.0e-9), "nccl": (5.0e-6, 1.0e-11)}


def choose_all_reduce_algorithm(num_bytes: int, world_size: int, *, alpha: float, beta: float) -> str:
    """The algorithm ``all_reduce(..., algorithm="auto")`` runs: the one with the smaller modelled time.

    The alpha-beta model (alpha = seconds per message, beta = seconds per byte) for M =
    ``num_bytes`` bytes on N = ``world_size`` ranks, with p = 2**floor(log2 N):

        ring                 2(N-1) * alpha + 2(N-1)/N * M * beta
        recursive_doubling   s * (alpha + M * beta),  s = log2 p, plus 2 if N != p (the fold in and out)

    Returns ``"recursive_doubling"`` when its time is strictly smaller, else ``"ring"`` (ties,
    and N = 1, go to the ring). ``all_reduce(..., algorithm="auto")`` calls it with the
    (alpha, beta) of ``ALPHA_BETA[backend]`` for the group's backend (gloo's for others).
    A negative ``num_bytes``, ``alpha`` or ``beta``, or a ``world_size`` below 1, is a ``ValueError``.
    """
    raise NotImplementedError("Task 1.7 (all_reduce algorithms): see handouts/01-collectives.md §1.7")
