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
import torch.distributed as dist
from torch import nn

__all__ = ["ShardedOptimizer"]


# BEGIN SOLUTION
# The non-deprecated names where this torch has them (2.13 warns about the older ones).
_all_gather_tensor = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
_reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)


def _group_size_rank(group) -> tuple[int, int, list[int]]:
    """(size, my rank within the group, the group's global ranks in group order)."""
    ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
    return len(ranks), ranks.index(dist.get_rank()), ranks


# END SOLUTION


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
        # BEGIN SOLUTION: Task 3.1 (ZeRO stage 1)
        if not (isinstance(optimizer_cls, type) and issubclass(optimizer_cls, torch.optim.Optimizer)):
            raise TypeError(f"optimizer_cls must be a torch.optim.Optimizer subclass, got {optimizer_cls!r}")
        if not isinstance(shard_gradients, bool):
            raise TypeError(f"shard_gradients must be a bool, got {type(shard_gradients).__name__}")
        self._group = group
        self._world, self._rank, _ = _group_size_rank(group)
        self._optimizer_cls, self._optimizer_kwargs = optimizer_cls, optimizer_kwargs
        self._shard_gradients = shard_gradients
        self._owner: dict[nn.Parameter, int] = {}  # parameter -> owning rank within the group
        self._loads = [0] * self._world  # numel owned by each rank so far
        self._local: torch.optim.Optimizer | None = None  # built on the first group this rank owns in
        self._local_groups: list[dict | None] = []  # per global param group: its local twin
        super().__init__(params, optimizer_kwargs)  # calls add_param_group for each group
        # END SOLUTION

    def add_param_group(self, param_group: dict) -> None:
        """Add a group (as ``torch.optim.Optimizer.add_param_group``); its parameters are assigned
        to ranks continuing the balance of the groups before it."""
        # BEGIN SOLUTION: Task 3.1 (ZeRO stage 1)
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in sorted(group["params"], key=lambda p: -p.numel()):  # stable: ties keep their order
            owner = min(range(self._world), key=lambda r: (self._loads[r], r))
            self._owner[p] = owner
            self._loads[owner] += p.numel()
        owned = [p for p in group["params"] if self._owner[p] == self._rank]
        if not owned:  # torch optimizers refuse empty groups; this rank has nothing to step here
            self._local_groups.append(None)
            return
        local_group = {**{k: v for k, v in group.items() if k != "params"}, "params": owned}
        if self._local is None:
            self._local = self._optimizer_cls([local_group], **self._optimizer_kwargs)
        else:
            self._local.add_param_group(local_group)
        self._local_groups.append(self._local.param_groups[-1])
        # END SOLUTION

    def owned_parameters(self) -> list[nn.Parameter]:
        """The parameters this rank updates (and keeps optimizer state for), in param-group order."""
        # BEGIN SOLUTION: Task 3.1 (ZeRO stage 1)
        return [p for g in self.param_groups for p in g["params"] if self._owner[p] == self._rank]
        # END SOLUTION

    @torch.no_grad()
    def step(self, closure=None, **kwargs):
        """Step the owned parameters, then all-gather so every rank has every updated parameter.
        Returns ``closure()``'s loss (evaluated once, with grad enabled) or None."""
        # BEGIN SOLUTION: Task 3.1 (ZeRO stage 1)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group, local in zip(self.param_groups, self._local_groups):
            if local is not None:  # an lr scheduler writes to our groups; the local optimizer reads its own
                local.update({k: v for k, v in group.items() if k != "params"})
        if self._shard_gradients:
            self.reduce_scatter_gradients()
        if self._local is not None:
            self._local.step(**kwargs)
        for bucket in self._buckets():
            self._all_gather_params(*bucket)
        return loss
        # END SOLUTION

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
        # BEGIN SOLUTION: Task 3.2 (ZeRO stage 2)
        for bucket in self._buckets():
            self._reduce_scatter_grads(*bucket)
        # END SOLUTION

    # BEGIN SOLUTION
    def _reduce_scatter_grads(self, per_rank: list[list[nn.Parameter]], slot: int) -> None:
        mine = per_rank[self._rank]
        like = mine[0] if mine else next(p for ps in per_rank for p in ps)
        full = torch.zeros(self._world * slot, dtype=like.dtype, device=like.device)  # (N * slot,)
        for r, params in enumerate(per_rank):
            offset = r * slot
            for p in params:
                if p.grad is not None:  # the same on every rank: all ranks run the same graph
                    full[offset : offset + p.numel()] = p.grad.reshape(-1)
                offset += p.numel()
        chunk = torch.empty(slot, dtype=like.dtype, device=like.device)  # (slot,): my averaged grads
        if self._world > 1:
            _reduce_scatter_tensor(chunk, full, group=self._group)
        else:
            chunk.copy_(full)
        chunk.div_(self._world)  # gloo has no AVG op
        offset = 0
        for p in mine:
            if p.grad is not None:
                p.grad.copy_(chunk[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        for r, params in enumerate(per_rank):
            if r != self._rank:
                for p in params:
                    p.grad = None  # only the owner keeps a grad: this is what stage 2 saves

    # -- private: flat, padded buffers with one equal-size slot per rank ----------------------------

    def _buckets(self) -> list[tuple[list[list[nn.Parameter]], int]]:
        """Trainable parameters grouped by (dtype, device), then by owner: ``(per_rank, slot)``.

        Rank r's parameters occupy ``[r * slot, r * slot + their numel)`` of a flat buffer of
        ``N * slot`` elements; ``slot`` is the largest rank's numel, so collectives see equal chunks.
        """
        by_kind: dict[tuple, list[list[nn.Parameter]]] = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    per_rank = by_kind.setdefault((p.dtype, p.device), [[] for _ in range(self._world)])
                    per_rank[self._owner[p]].append(p)
        return [(pr, max(sum(p.numel() for p in ps) for ps in pr)) for pr in by_kind.values()]

    def _all_gather_params(self, per_rank: list[list[nn.Parameter]], slot: int) -> None:
        if self._world == 1:
            return
        like = next(p for ps in per_rank for p in ps)
        mine = torch.zeros(slot, dtype=like.dtype, device=like.device)  # (slot,)
        offset = 0
        for p in per_rank[self._rank]:
            mine[offset : offset + p.numel()] = p.reshape(-1)
            offset += p.numel()
        full = torch.empty(self._world * slot, dtype=like.dtype, device=like.device)  # (N * slot,)
        _all_gather_tensor(full, mine, group=self._group)
        for r, params in enumerate(per_rank):
            offset = r * slot
            for p in params:
                if r != self._rank:
                    p.copy_(full[offset : offset + p.numel()].view_as(p))
                offset += p.numel()

    # END SOLUTION
