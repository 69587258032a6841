"""ZeRO (Rajbhandari et al. 2020): shard optimizer state (stage 1), gradients (stage 2), parameters (stage 3).

Your task (handouts/03-zero.md): implement ``ShardedOptimizer`` (§3.1, and its ``shard_gradients=True``
mode, §3.2) and ``FSDP`` (§3.3) from their docstrings, with torch.distributed's built-in collectives
(``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``broadcast``, ``all_reduce``). The tests
measure what each rank holds (tensor storage, not attribute names) and record what each step sends.

Per parameter, mixed-precision Adam keeps 2 (fp16 weight) + 2 (grad) + 12 (fp32 master, m, v) bytes on
every data-parallel rank. ZeRO splits these N ways instead of replicating them:

    stage 1  ShardedOptimizer                      optimizer state of a parameter lives on its owner only
    stage 2  ShardedOptimizer(shard_gradients=True) and only the owner keeps the averaged gradient
    stage 3  FSDP                                   and each rank stores 1/N of every big weight
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ShardedOptimizer", "FSDP"]


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

    ``step(closure=None, **kw)``: (stage 2 only: average the grads with a reduce-scatter, so the
    owner holds the mean over ranks of each of its grads and every other rank's copy becomes
    ``None``); the owner steps its parameters; then every rank receives every updated parameter
    from its owner (all-gather), so all ranks hold identical parameters on return. Stage 1 expects
    the caller to have averaged the grads already (e.g. DDP); stage 2 expects local grads.
    Hyperparameters changed in ``self.param_groups`` (lr schedules) take effect at the next step.

    Raises ``TypeError`` if ``optimizer_cls`` is not a ``torch.optim.Optimizer`` subclass or
    ``shard_gradients`` is not a bool, on every rank, before any communication.
    """

    def __init__(self, params, optimizer_cls, *, shard_gradients=False, group=None, **optimizer_kwargs):
        raise NotImplementedError("Task 3.1 (ZeRO stages 1 and 2): see handouts/03-zero.md §3.1")

    def add_param_group(self, param_group: dict) -> None:
        """Add a group (as ``torch.optim.Optimizer.add_param_group``); its parameters are assigned
        to ranks continuing the balance of the groups before it."""
        raise NotImplementedError("Task 3.1 (ZeRO stages 1 and 2): see handouts/03-zero.md §3.1")

    def owned_parameters(self) -> list[nn.Parameter]:
        """The parameters this rank updates (and keeps optimizer state for), in param-group order."""
        raise NotImplementedError("Task 3.1 (ZeRO stages 1 and 2): see handouts/03-zero.md §3.1")

    @torch.no_grad()
    def step(self, closure=None, **kwargs):
        """Step the owned parameters, then all-gather so every rank has every updated parameter.
        Returns ``closure()``'s loss (evaluated once, with grad enabled) or None."""
        raise NotImplementedError("Task 3.1 (ZeRO stages 1 and 2): see handouts/03-zero.md §3.1")


# ---------------------------------------------------------------------------------------------
# ## Task 3.3: FSDP (ZeRO stage 3)
# ---------------------------------------------------------------------------------------------


class FSDP(nn.Module):
    """Fully sharded data parallelism (ZeRO-3) over the ranks of ``group``; ``.module`` is the model.

    On construction, rank 0's parameters and buffers are broadcast, then every ``nn.Linear`` /
    ``nn.Embedding`` weight of shape S is replaced by a 1-D shard of ``ceil(numel / N)`` elements
    (the flattened weight, zero-padded to a multiple of N, chunk ``rank``). Its name is unchanged
    (``module.fc1.weight`` is now the shard), so ``FSDP.parameters()`` yields the shards plus the
    small replicated parameters (biases, norms), and an optimizer built on it steps shards only.

    Forward: each such layer all-gathers its full weight just before it runs and frees it right
    after. Backward: the layer all-gathers it again, computes its grads, frees it, and
    reduce-scatters the weight grad so each rank's shard ``.grad`` holds its chunk of the mean over
    ranks. Replicated parameters' grads are all-reduced and averaged as they are produced. With
    ``compute_dtype`` (e.g. ``torch.bfloat16``) the gathered weights, the layer's input and bias are
    cast to it for the matmul and the output is cast back to the input's dtype; shards, grads and
    optimizer state stay fp32. Tied weights are sharded once.

    Raises ``TypeError`` for a ``module`` that is not an ``nn.Module`` or a ``compute_dtype`` that is
    not a floating-point ``torch.dtype``, on every rank, before any communication.
    """

    def __init__(self, module: nn.Module, *, compute_dtype: torch.dtype | None = None, group=None) -> None:
        raise NotImplementedError("Task 3.3 (FSDP): see handouts/03-zero.md §3.3")

    def forward(self, *args, **kwargs):
        """``self.module(*args, **kwargs)``; each sharded layer gathers its weight as it runs."""
        raise NotImplementedError("Task 3.3 (FSDP): see handouts/03-zero.md §3.3")

    @torch.no_grad()
    def gather_full_params(self) -> dict[str, torch.Tensor]:
        """The wrapped module's full state dict (same keys as ``module.state_dict()``, no ``module.``
        prefix), sharded weights all-gathered in fp32 (their storage dtype), on every rank. Every
        rank must call it (it communicates)."""
        raise NotImplementedError("Task 3.3 (FSDP): see handouts/03-zero.md §3.3")
