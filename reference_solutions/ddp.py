"""Data parallelism: every rank holds the whole model and a slice of the batch, and gradients are
averaged with all-reduce so that every rank takes the same optimizer step.

Your task (handouts/02-ddp.md): implement the four versions below, slowest to fastest:
    all_reduce_gradients        after backward, one blocking all-reduce per gradient
    all_reduce_gradients_flat   after backward, one all-reduce over all gradients packed together
    DDPIndividualParameters     during backward, one async all-reduce per gradient as soon as it is ready
    DDPBucketed                 during backward, one async all-reduce per bucket of gradients

Use the built-in ``dist.all_reduce`` (with ``async_op=True`` for the last two). Useful tools:
``torch._utils._flatten_dense_tensors`` / ``_unflatten_dense_tensors``,
``Tensor.register_post_accumulate_grad_hook``, ``dist.broadcast``, ``dist.get_process_group_ranks``.
Bad input raises ValueError/TypeError naming the argument, on every rank, before any communication.

Why the average is right: with a mean loss over a batch of B examples split into N equal slices,
grad(mean over B) = (1/N) * sum over ranks of grad(mean over the rank's B/N examples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

__all__ = ["all_reduce_gradients", "all_reduce_gradients_flat", "DDPIndividualParameters", "DDPBucketed"]

# BEGIN SOLUTION
# Set on a module once a wrapper owns it: wrapping it again would register a second set of hooks
# and average every gradient twice.
_WRAPPED_FLAG = "_cs336_ddp_wrapped"
# END SOLUTION


# BEGIN SOLUTION
# ---------------------------------------------------------------------------------------------
# Shared plumbing: argument checks, the parameters DDP syncs, the broadcast at construction.
# ---------------------------------------------------------------------------------------------


def _check_module(module, wrapping: bool = False) -> None:
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if not wrapping:
        return
    for sub in module.modules():
        if getattr(sub, _WRAPPED_FLAG, False) or isinstance(sub, nn.parallel.DistributedDataParallel):
            raise ValueError(
                f"module is already wrapped for data parallelism ({type(sub).__name__}); wrap the bare model "
                "once, otherwise its gradients are averaged twice"
            )


def _trainable_parameters(module: nn.Module) -> list[nn.Parameter]:
    """Parameters that get gradients, each once (``parameters()`` already drops tied duplicates)."""
    return [p for p in module.parameters() if p.requires_grad]


def _broadcast_from_first_rank(module: nn.Module, group) -> None:
    """Make every rank's parameters and buffers (frozen ones too) equal to group rank 0's."""
    if dist.get_world_size(group) == 1:
        return
    src = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)[0]
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            buf = tensor.data if tensor.is_contiguous() else tensor.data.contiguous()
            dist.broadcast(buf, src=src, group=group)
            if buf is not tensor.data:
                tensor.data.copy_(buf)


# END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 2.1: naive DDP
# ---------------------------------------------------------------------------------------------


def all_reduce_gradients(module: nn.Module, group: dist.ProcessGroup | None = None) -> None:
    """Average every gradient of ``module`` over ``group``, one blocking all-reduce per parameter.

    Call after ``loss.backward()`` and before ``optimizer.step()`` on every rank. For each
    parameter with a ``.grad`` (in ``module.parameters()`` order, tied parameters once, frozen
    ones skipped), all ranks all-reduce (sum) the grad in place, then divide it by the group size.
    On return every rank holds the same averaged ``.grad``; ``None`` grads stay ``None``.
    """
    # BEGIN SOLUTION: Task 2.1 (naive DDP)
    _check_module(module)
    world_size = dist.get_world_size(group)
    if world_size == 1:
        return
    for p in module.parameters():
        if p.requires_grad and p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad.div_(world_size)
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 2.2: flat DDP
# ---------------------------------------------------------------------------------------------


def all_reduce_gradients_flat(module: nn.Module, group: dist.ProcessGroup | None = None) -> None:
    """Average every gradient of ``module`` over ``group`` with one all-reduce per dtype.

    Same result as ``all_reduce_gradients``, but the grads (those that are not ``None``, in
    ``module.parameters()`` order) are first packed into one flat buffer of shape (total numel,),
    all-reduced in a single call, divided by the group size and copied back into each ``.grad``.
    Grads of different dtypes (or devices) go in separate buffers, one all-reduce each.
    """
    # BEGIN SOLUTION: Task 2.2 (flat DDP)
    _check_module(module)
    world_size = dist.get_world_size(group)
    if world_size == 1:
        return
    by_kind: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for p in module.parameters():
        if p.requires_grad and p.grad is not None:
            by_kind.setdefault((p.grad.dtype, p.grad.device), []).append(p.grad)
    for grads in by_kind.values():
        flat = _flatten_dense_tensors(grads)  # (sum of numels,)
        dist.all_reduce(flat, group=group)
        flat.div_(world_size)
        for grad, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
            grad.copy_(synced)
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 2.3: DDP overlapping communication with backward, one parameter at a time
# ---------------------------------------------------------------------------------------------


class DDPIndividualParameters(nn.Module):
    """Wrap ``module`` so each gradient's all-reduce starts during backward, as soon as it is ready.

    On construction every rank's parameters and buffers (frozen ones too) are overwritten with
    group rank 0's (``dist.broadcast``), and a hook is registered on each trainable parameter
    (tied parameters once, frozen ones never) that launches an async all-reduce (sum) of its
    ``.grad`` the moment the grad has been accumulated, so communication of late layers overlaps
    the backward of earlier ones. ``forward`` runs the wrapped model, kept as ``self.module``.
    ``finish_gradient_synchronization()`` waits for every launched all-reduce and divides by the
    group size, leaving the averaged grads in ``.grad``: call it after backward, before the step.
    Raises ``TypeError`` if ``module`` is not an ``nn.Module`` and ``ValueError`` if it is (or
    contains) a module that is already wrapped for data parallelism, before any communication.
    """

    def __init__(self, module: nn.Module, group: dist.ProcessGroup | None = None) -> None:
        # BEGIN SOLUTION: Task 2.3 (overlapping DDP)
        _check_module(module, wrapping=True)
        super().__init__()
        self.module = module
        self.group = group
        self.world_size = dist.get_world_size(group)
        _broadcast_from_first_rank(module, group)
        setattr(module, _WRAPPED_FLAG, True)
        self._pending: list[tuple[dist.Work, nn.Parameter]] = []
        if self.world_size > 1:  # alone, the local grads already are the average
            for p in _trainable_parameters(module):
                p.register_post_accumulate_grad_hook(self._launch_all_reduce)
        # END SOLUTION

    # BEGIN SOLUTION
    def _launch_all_reduce(self, p: nn.Parameter) -> None:
        # Runs inside backward, right after p.grad is complete; do not wait here.
        self._pending.append((dist.all_reduce(p.grad, group=self.group, async_op=True), p))

    # END SOLUTION

    def forward(self, *args, **kwargs):
        """Run the wrapped module: ``self.module(*args, **kwargs)``."""
        # BEGIN SOLUTION: Task 2.3 (overlapping DDP)
        return self.module(*args, **kwargs)
        # END SOLUTION

    def finish_gradient_synchronization(self) -> None:
        """Wait for every all-reduce launched in the last backward; leave averaged grads in ``.grad``."""
        # BEGIN SOLUTION: Task 2.3 (overlapping DDP)
        for work, p in self._pending:
            work.wait()
            p.grad.div_(self.world_size)
        self._pending.clear()
        # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 2.4: bucketed DDP
# ---------------------------------------------------------------------------------------------


# BEGIN SOLUTION
@dataclass
class _Bucket:
    """Parameters whose grads travel together in one flat buffer of shape (sum of numels,)."""

    params: list[nn.Parameter]
    names: list[str]
    buffer: torch.Tensor
    offsets: list[int]
    ready: set[int] = field(default_factory=set)  # positions in ``params`` whose grad is complete
    work: dist.Work | None = None


def _bucket_layout(named: list[tuple[str, nn.Parameter]], cap_bytes: float) -> list[list[int]]:
    """Split parameter positions into buckets, walking ``named`` in reverse (roughly the order
    backward produces grads): a parameter starts a new bucket when adding it would push the bucket
    past ``cap_bytes``, or when its dtype or device differs from the bucket's."""
    buckets: list[list[int]] = []
    size = 0.0
    for i in reversed(range(len(named))):
        p = named[i][1]
        nbytes = p.numel() * p.element_size()
        first = named[buckets[-1][0]][1] if buckets else None
        if not buckets or size + nbytes > cap_bytes or (p.dtype, p.device) != (first.dtype, first.device):
            buckets.append([])
            size = 0.0
        buckets[-1].append(i)
        size += nbytes
    return buckets


# END SOLUTION


class DDPBucketed(nn.Module):
    """Like ``DDPIndividualParameters``, but grads travel in buckets: one all-reduce per bucket.

    Layout, fixed at construction: walk the trainable parameters (``module.parameters()``, tied
    ones once, frozen ones skipped) in reverse order and start a new bucket whenever adding the
    next parameter would make the bucket exceed ``bucket_size_mb * 2**20`` bytes (so a parameter
    larger than the cap gets a bucket of its own, ``0`` gives one parameter per bucket and
    ``float("inf")`` a single bucket); a parameter of another dtype than the bucket's also starts a
    new one. During backward, as soon as the last grad of a bucket is accumulated, the bucket's
    grads are packed into its flat buffer and one async all-reduce (sum) of the buffer starts.
    ``finish_gradient_synchronization()`` launches any bucket some of whose parameters got no grad
    this step (those grads stay ``None``), waits for all buckets, divides by the group size and
    copies the averages back into ``.grad``. Works for repeated steps and either kind of
    ``zero_grad``. On construction, group rank 0's parameters and buffers are broadcast.
    Raises ``TypeError``/``ValueError`` as ``DDPIndividualParameters`` does, and for a
    ``bucket_size_mb`` that is not a number (``TypeError``), negative or NaN (``ValueError``).
    """

    def __init__(self, module: nn.Module, bucket_size_mb: float, group: dist.ProcessGroup | None = None) -> None:
        # BEGIN SOLUTION: Task 2.4 (bucketed DDP)
        _check_module(module, wrapping=True)
        if isinstance(bucket_size_mb, bool) or not isinstance(bucket_size_mb, (int, float)):
            raise TypeError(f"bucket_size_mb must be a number of MiB, got {type(bucket_size_mb).__name__}")
        if math.isnan(bucket_size_mb) or bucket_size_mb < 0:
            raise ValueError(f"bucket_size_mb must be >= 0 (0 = one parameter per bucket), got {bucket_size_mb}")
        super().__init__()
        self.module = module
        self.group = group
        self.world_size = dist.get_world_size(group)
        _broadcast_from_first_rank(module, group)
        setattr(module, _WRAPPED_FLAG, True)
        names = {id(p): n for n, p in module.named_parameters()}
        named = [(names[id(p)], p) for p in _trainable_parameters(module)]
        self._buckets: list[_Bucket] = []
        for positions in _bucket_layout(named, bucket_size_mb * 2**20):
            params = [named[i][1] for i in positions]
            offsets = [0]
            for p in params:
                offsets.append(offsets[-1] + p.numel())
            buffer = torch.zeros(offsets[-1], dtype=params[0].dtype, device=params[0].device)  # (bucket numel,)
            self._buckets.append(_Bucket(params, [named[i][0] for i in positions], buffer, offsets))
        if self.world_size > 1:  # alone, the local grads already are the average
            for b in self._buckets:
                for j, p in enumerate(b.params):
                    p.register_post_accumulate_grad_hook(lambda p, b=b, j=j: self._mark_ready(b, j))
        # END SOLUTION

    def bucket_parameter_names(self) -> list[list[str]]:
        """The bucket layout: names (as in ``module.named_parameters()``), first bucket first."""
        # BEGIN SOLUTION: Task 2.4 (bucketed DDP)
        return [list(b.names) for b in self._buckets]
        # END SOLUTION

    # BEGIN SOLUTION
    def _mark_ready(self, bucket: _Bucket, j: int) -> None:
        bucket.ready.add(j)
        if len(bucket.ready) == len(bucket.params):
            self._launch(bucket)

    def _launch(self, bucket: _Bucket) -> None:
        if len(bucket.ready) == len(bucket.params):  # the usual case: one packing op for the bucket
            torch.cat([p.grad.reshape(-1) for p in bucket.params], out=bucket.buffer)
        else:
            for j, p in enumerate(bucket.params):
                piece = bucket.buffer[bucket.offsets[j] : bucket.offsets[j + 1]]  # (p.numel(),)
                if j in bucket.ready:
                    piece.copy_(p.grad.reshape(-1))
                else:
                    piece.zero_()  # no grad this step: contribute nothing, but keep the layout
        bucket.work = dist.all_reduce(bucket.buffer, group=self.group, async_op=True)

    # END SOLUTION

    def forward(self, *args, **kwargs):
        """Run the wrapped module: ``self.module(*args, **kwargs)``."""
        # BEGIN SOLUTION: Task 2.4 (bucketed DDP)
        return self.module(*args, **kwargs)
        # END SOLUTION

    def finish_gradient_synchronization(self) -> None:
        """Launch partly-ready buckets, wait for all, and leave averaged grads in ``.grad``."""
        # BEGIN SOLUTION: Task 2.4 (bucketed DDP)
        for b in self._buckets:
            if b.work is None and b.ready:  # every rank ran the same graph, so all ranks agree
                self._launch(b)
        for b in self._buckets:
            if b.work is None:
                continue
            b.work.wait()
            b.buffer.div_(self.world_size)
            ready = sorted(b.ready)
            grads = [b.params[j].grad for j in ready]
            averages = [b.buffer[b.offsets[j] : b.offsets[j + 1]].view(b.params[j].shape) for j in ready]
            torch._foreach_copy_(grads, averages)  # one call for the bucket, not one copy per parameter
            b.ready.clear()
            b.work = None
        # END SOLUTION
