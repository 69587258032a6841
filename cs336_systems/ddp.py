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

import torch.distributed as dist
from torch import nn

__all__ = ["all_reduce_gradients", "all_reduce_gradients_flat", "DDPIndividualParameters", "DDPBucketed"]


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
    raise NotImplementedError("Task 2.1 (naive DDP): see handouts/02-ddp.md §2.1")


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
    raise NotImplementedError("Task 2.2 (flat DDP): see handouts/02-ddp.md §2.2")


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
        raise NotImplementedError("Task 2.3 (overlapping DDP): see handouts/02-ddp.md §2.3")

    def forward(self, *args, **kwargs):
        """Run the wrapped module: ``self.module(*args, **kwargs)``."""
        raise NotImplementedError("Task 2.3 (overlapping DDP): see handouts/02-ddp.md §2.3")

    def finish_gradient_synchronization(self) -> None:
        """Wait for every all-reduce launched in the last backward; leave averaged grads in ``.grad``."""
        raise NotImplementedError("Task 2.3 (overlapping DDP): see handouts/02-ddp.md §2.3")


# ---------------------------------------------------------------------------------------------
# ## Task 2.4: bucketed DDP
# ---------------------------------------------------------------------------------------------


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
        raise NotImplementedError("Task 2.4 (bucketed DDP): see handouts/02-ddp.md §2.4")

    def bucket_parameter_names(self) -> list[list[str]]:
        """The bucket layout: names (as in ``module.named_parameters()``), first bucket first."""
        raise NotImplementedError("Task 2.4 (bucketed DDP): see handouts/02-ddp.md §2.4")

    def forward(self, *args, **kwargs):
        """Run the wrapped module: ``self.module(*args, **kwargs)``."""
        raise NotImplementedError("Task 2.4 (bucketed DDP): see handouts/02-ddp.md §2.4")

    def finish_gradient_synchronization(self) -> None:
        """Launch partly-ready buckets, wait for all, and leave averaged grads in ``.grad``."""
        raise NotImplementedError("Task 2.4 (bucketed DDP): see handouts/02-ddp.md §2.4")
