"""ZeRO (Rajbhandari et al. 2020): shard optimizer state (stage 1), gradients (stage 2), parameters (stage 3).

Your task (handouts/03-zero.md): implement ``ShardedOptimizer`` (§3.1, and its ``shard_gradients=True``
mode, §3.2: ``reduce_scatter_gradients``) from its docstrings (``FSDP``, stage 3, lives in ``fsdp.py``,
§3.3), with torch.distributed's built-in collectives (``all_gather_single`` and ``reduce_scatter_single``, the
names torch 2.13 gives ``all_gather_into_tensor`` and ``reduce_scatter_tensor``, which it deprecates;
``broadcast``, ``all_reduce``). The tests measure what each rank holds
(tensor storage, not attribute names) and record what each step sends.

Per parameter, mixed-precision Adam keeps 2 (fp16 weight) + 2 (grad) + 12 (fp32 master, m, v) bytes on
every data-parallel rank. ZeRO splits these N ways instead of replicating them:

    stage 1  ShardedOptimizer                      optimizer state of a parameter lives on its owner only
    stage 2  ShardedOptimizer(shard_gradients=True) and only the owner keeps the averaged gradient
    stage 3  FSDP (fsdp.py)                         and each rank stores 1/N of every big weight

Who talks to whom (group of N ranks, P parameters):
    stage 1  caller all-reduces grads (DDP); step: owners update, then one all-gather of updated params
    stage 2  step: reduce-scatter of grads (each owner gets its average), owners update, all-gather params;
             reduce-scatter + all-gather is exactly a ring all-reduce, so stage 2 costs what DDP costs
    stage 3  forward: all-gather a layer's weight just before it runs, free it after; backward: all-gather
             it again, then reduce-scatter its weight grad; 1.5x DDP's traffic for 1/N of the memory
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ShardedOptimizer"]


# ---------------------------------------------------------------------------------------------
# ## Task 3.1: ShardedOptimizer (ZeRO stage 1)
# ---------------------------------------------------------------------------------------------


class ShardedOptimizer(torch.optim.Optimizer):
    """An optimizer whose state is split across the ranks of ``group`` (ZeRO-1; ZeRO-2 with
    ``shard_gradients=True``).

    Every parameter (of every param group, including groups added later with ``add_param_group``) is
    owned by exactly one rank. Assignment is deterministic, computed identically on every rank from
    the parameters' sizes alone: parameters are taken in decreasing numel (ties in the order given)
    and each goes to the rank with the least numel so far (ties to the lower rank), so no rank owns
    more than P/N + (largest parameter) elements. Each rank builds ``optimizer_cls(**optimizer_kwargs)``
    over its owned parameters only: optimizer state exists only on the owner.

    ``step(closure=None, **kw)``: (stage 2 only: ``reduce_scatter_gradients()``, so the owner holds
    the mean over ranks of each of its grads and every other rank's copy becomes ``None``); the
    owner steps its parameters; then every rank receives every updated parameter from its owner
    (all-gather), so all ranks hold identical parameters on return. Stage 1 expects
    the caller to have averaged the grads already (e.g. DDP); stage 2 expects local grads.
    Hyperparameters changed in ``self.param_groups`` (lr schedules) take effect at the next step.

    Raises ``TypeError`` if ``optimizer_cls`` is not a ``torch.optim.Optimizer`` subclass or
    ``shard_gradients`` is not a bool, on every rank, before any communication.
    """

    def __init__(self, params, optimizer_cls, *, shard_gradients=False, group=None, **optimizer_kwargs):
        raise NotImplementedError("Task 3.1 (ZeRO stage 1): see handouts/03-zero.md §3.1")

    def add_param_group(self, param_group: dict) -> None:
        """Add a group (as ``torch.optim.Optimizer.add_param_group``); its parameters are assigned
        to ranks continuing the balance of the groups before it."""
        raise NotImplementedError("Task 3.1 (ZeRO stage 1): see handouts/03-zero.md §3.1")

    def owned_parameters(self) -> list[nn.Parameter]:
        """The parameters this rank updates (and keeps optimizer state for), in param-group order."""
        raise NotImplementedError("Task 3.1 (ZeRO stage 1): see handouts/03-zero.md §3.1")

    @torch.no_grad()
    def step(self, closure=None, **kwargs):
        """Step the owned parameters, then all-gather so every rank has every updated parameter.
        Returns ``closure()``'s loss (evaluated once, with grad enabled) or None."""
        raise NotImplementedError("Task 3.1 (ZeRO stage 1): see handouts/03-zero.md §3.1")

    # -----------------------------------------------------------------------------------------
    # ## Task 3.2: ZeRO stage 2, the reduce-scatter of the grads
    # -----------------------------------------------------------------------------------------

    @torch.no_grad()
    def reduce_scatter_gradients(self) -> None:
        """Stage 2's first half of ``step`` (``step`` calls it when ``shard_gradients=True``): average
        every trainable parameter's local grad over ``group`` with a reduce-scatter, which replaces the
        caller's all-reduce. The grads go into a flat buffer with an equal slot per rank (rank r's
        owned grads in slot r, zero-padded; one buffer per dtype and device); after
        ``reduce_scatter_tensor`` and a division by the group size, each owner copies its slot into
        its parameters' ``.grad``, and every rank sets the grads of the parameters it does not own to
        ``None`` (the memory stage 2 saves). A parameter without a grad adds zeros and keeps ``None``."""
        raise NotImplementedError("Task 3.2 (ZeRO stage 2): see handouts/03-zero.md §3.2")
