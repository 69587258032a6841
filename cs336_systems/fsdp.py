"""FSDP, ZeRO stage 3 (Rajbhandari et al. 2020; Zhao et al. 2023): every big weight sharded 1/N per rank.

Your task (handouts/03-zero.md §3.3): implement ``FSDP`` from its docstring with torch.distributed's
built-in collectives (``all_gather_single`` and ``reduce_scatter_single``, the names torch 2.13 gives
``all_gather_into_tensor`` and ``reduce_scatter_tensor``, which it deprecates; ``broadcast``,
``all_reduce``). The tests measure what each rank holds (tensor storage, not attribute names) and record
what each forward and backward sends.

Who talks to whom (group of N ranks): forward all-gathers a layer's weight just before it runs and
frees it after; backward all-gathers it again (a Linear's: an Embedding's grad needs only its indices),
then reduce-scatters its weight grad, so each rank's shard holds its chunk of the mean. Replicated
parameters (biases, norms) have their grads all-reduced and averaged. That is 1.5x DDP's traffic for
1/N of the parameter memory.

Task 3.4 (§3.4) groups the weights of a submodule (a "unit", e.g. a transformer block) into one flat
shard: one all-gather before the unit runs, one before its backward, one reduce-scatter after it, instead
of one of each per layer. And it defers gradient reduction across microbatches
(``set_requires_gradient_sync(False)``): unsharded grads accumulate locally, then one reduce-scatter per
unit on the microbatch that syncs.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["FSDP"]


# ---------------------------------------------------------------------------------------------
# ## Task 3.3: FSDP (ZeRO stage 3)
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# ## Task 3.4: FSDP units (one flat shard per block) and deferred gradient sync
# ---------------------------------------------------------------------------------------------


class FSDP(nn.Module):
    """Fully sharded data parallelism (ZeRO-3) over the ranks of ``group``; ``.module`` is the model.

    On construction, the parameters and buffers of the group's first rank are broadcast (``src`` is a global
    rank: ``dist.get_global_rank(group, 0)``, rank 0 without a group), then every ``nn.Linear`` /
    ``nn.Embedding`` weight of shape S is replaced by a 1-D shard of ``ceil(numel / N)`` elements
    (the flattened weight, zero-padded to a multiple of N, chunk ``rank``). Its name is unchanged
    (``module.fc1.weight`` is now the shard), so ``FSDP.parameters()`` yields the shards plus the
    small replicated parameters (biases, norms), and an optimizer built on it steps shards only.

    Forward: each such layer all-gathers its full weight just before it runs and frees it right
    after. Backward: a Linear all-gathers its weight again, computes its grads, frees it, and
    reduce-scatters the weight grad so each rank's shard ``.grad`` holds its chunk of the mean over
    ranks; an Embedding does not gather its table again (its weight grad needs only the indices: the
    output grad's rows added at them), it only reduce-scatters that grad. Replicated parameters' grads
    are all-reduced and averaged as they are produced. With ``compute_dtype`` (e.g. ``torch.bfloat16``)
    each shard is cast to it *before* it is all-gathered (the gather moves ``compute_dtype``: half of
    fp32's bytes in bf16), a Linear's input and bias are cast to it for the matmul and its output is
    cast back to the input's dtype; an Embedding's int64 indices are not cast: it picks rows of the
    ``compute_dtype`` table and returns them in the weight's storage dtype (fp32). Shards, grads (reduced
    in fp32) and optimizer state stay fp32. Tied weights are sharded once.

    ``units`` (Task 3.4): disjoint submodules of ``module`` (e.g. its transformer blocks; ``[module]``
    makes the whole model one unit). The trainable ``nn.Linear`` / ``nn.Embedding`` weights inside
    unit u, in ``u.modules()`` order (a weight tied within u once), are concatenated into one flat
    buffer of T elements, zero-padded at its end to ``N * ceil(T / N)``; rank r keeps chunk r as the
    parameter ``u.flat_shard`` (1-D, ``ceil(T / N)`` elements), and those layers' ``weight`` stops
    being a parameter. The padding holds zeros always: in the flat shards, in their ``.grad`` (pack zeros
    there before reducing) and after every optimizer step. The unit all-gathers its flat buffer once
    just before its forward (cast to ``compute_dtype`` first, as above) and frees it when the forward
    returns, all-gathers it once again before its backward (whatever its layers, Embeddings included)
    and frees it when its backward is done, then reduce-scatters its flat weight grad once (fp32): one
    message each way per unit instead of one per layer. From the end of its forward to the refill just
    before its backward, and after its backward, a unit holds no gathered bytes: what FSDP holds stays
    within its shards, replicated parameters and, after backward, their grads (2 x the shards). A unit
    holding no trainable ``nn.Linear`` / ``nn.Embedding`` weight (only norms, or frozen layers) is
    skipped: it gets no ``flat_shard`` and sends nothing of its own. Layers outside every unit (and
    frozen weights) are sharded one by one as above. A unit returns a tensor or a tuple or list of tensors (its backward
    starts from their gradients). On a sub-group, every average (units, single weights, replicated
    parameters) is over the group's ranks.

    Raises ``TypeError`` for a ``module`` that is not an ``nn.Module``, a ``compute_dtype`` that is
    not a floating-point ``torch.dtype``, or ``units`` not a list or tuple of ``nn.Module``;
    ``ValueError`` for a unit that is not a submodule of ``module``, units that overlap (one inside
    another, or the same twice), or a trainable weight tied across a unit's boundary; on every rank,
    before any communication.
    """

    def __init__(self, module: nn.Module, *, compute_dtype: torch.dtype | None = None, group=None, units=None) -> None:
        raise NotImplementedError("Task 3.3 (FSDP): see handouts/03-zero.md §3.3")

    def forward(self, *args, **kwargs):
        """``self.module(*args, **kwargs)``; each sharded layer gathers its weight as it runs."""
        raise NotImplementedError("Task 3.3 (FSDP): see handouts/03-zero.md §3.3")

    def set_requires_gradient_sync(self, requires_gradient_sync: bool) -> None:
        """Task 3.4: with ``False``, the following backwards reduce no gradient: every rank sums its
        unsharded weight grads (one fp32 buffer per unit, or per weight outside units: the full
        model's grads, kept until the sync) and its replicated grads locally, and the shards' ``.grad``
        stays as it was. With ``True`` (the default), the next backward reduces, in the same messages
        as ever (one reduce-scatter per unit or weight, one all-reduce per replicated parameter), its
        own grads plus everything summed since: the last microbatch of a step turns sync back on.

        Raises ``TypeError`` if ``requires_gradient_sync`` is not a bool, before any communication."""
        raise NotImplementedError("Task 3.4 (FSDP units and deferred sync): see handouts/03-zero.md §3.4")

    @torch.no_grad()
    def gather_full_params(self) -> dict[str, torch.Tensor]:
        """The wrapped module's full state dict (same keys as ``module.state_dict()``, no ``module.``
        prefix), sharded weights all-gathered in fp32 (their storage dtype), on every rank. Every
        rank must call it (it communicates). With ``units``, the keys are those of the module before
        wrapping (``block.fc1.weight``, not ``block.flat_shard``)."""
        raise NotImplementedError("Task 3.3 (FSDP): see handouts/03-zero.md §3.3")
