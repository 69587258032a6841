"""Checkpoints that survive failures: sharded atomic save, resharding load, exact resume, async save.

Your task (handouts/10-failures.md §10.1-10.4): implement the functions and the class marked below.
Large jobs fail all the time (Llama 3 405B: 419 unexpected interruptions in 54 days), so a job must
be able to stop at any moment and continue from its last checkpoint, possibly on a different number
of ranks. A checkpoint is a folder per step; every rank writes only its own piece of every tensor:

    <directory>/step_<step:08d>/          one folder per saved step
        (your files)                      each rank's tensor bytes, checksums, the metadata to reassemble
        COMMITTED                         the commit marker, written last, by group rank 0 only

What a state dict holds (``state: dict[str, value]``, keys are free-form strings):

    Shard(local, global_shape, offsets)   this rank's box of one global tensor (FSDP, TP, ZeRO pieces)
    torch.Tensor                          a tensor every rank holds whole (= a Shard with offsets 0)
    anything else (int, float, bytes, a picklable object)   saved by every rank for itself; load returns
                                          the values of the rank with the same group rank (or group
                                          rank 0's when the checkpoint has no such rank)

Boxes: a Shard's ``local`` covers ``global[offsets[0]:offsets[0]+local.shape[0], offsets[1]:...]``.
The boxes of all ranks together must cover the global tensor; boxes may repeat on several ranks
(replicas: data parallelism, a replicated bias), and then only one of them is written (the one of
the lowest group rank). Loading fills every requested box from whichever saved boxes overlap it, so
a checkpoint saved with one layout loads into another (FSDP on 4 ranks into FSDP on 3; DP x TP into
TP alone; ZeRO-2 optimizer shards into plain DDP).

Files go to a shared filesystem every rank sees (one machine in the tests; a cluster's parallel
filesystem in practice). ``latest_checkpoint`` and ``verify_checkpoint`` read files only and need no
process group; ``save_checkpoint`` and ``load_checkpoint`` are collective over ``group``.

The helpers at the bottom (given) turn the kit's models and optimizers into such state dicts:
``module_state`` (a replicated model: DDP, ZeRO-1/2), ``fsdp_state`` (FSDP's flat weight shards),
``tensor_parallel_state`` (Column/RowParallelLinear boxes), ``optimizer_state`` (an optimizer's
per-parameter state, boxed like its parameter) and ``init_optimizer_state``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

__all__ = [
    "Shard",
    "TornCheckpoint",
    "COMMIT_MARKER",
    "CHECKSUM_BLOCK_BYTES",
    "step_directory",
    "save_checkpoint",
    "latest_checkpoint",
    "verify_checkpoint",
    "load_checkpoint",
    "DistributedSampler",
    "capture_training_state",
    "restore_training_state",
    "AsyncCheckpointer",
    "module_state",
    "fsdp_state",
    "tensor_parallel_state",
    "optimizer_state",
    "init_optimizer_state",
]

COMMIT_MARKER = "COMMITTED"  # the file whose presence (and valid content) makes a step folder a checkpoint
CHECKSUM_BLOCK_BYTES = 4096  # a checksum covers at most this many bytes: a load reads (and checks) whole blocks


@dataclass
class Shard:
    """This rank's box of one global tensor.

    ``local`` holds ``global[offsets[0] : offsets[0] + local.shape[0], offsets[1] : ...]`` of a tensor
    of shape ``global_shape`` (same number of dimensions; an empty box is allowed). A tensor held whole
    (replicated) is ``Shard(t, tuple(t.shape), (0,) * t.dim())``. When several ranks hold the same box
    (data-parallel replicas), all of them pass it to ``save_checkpoint`` and the one with the lowest
    group rank writes it. ``load_checkpoint`` writes into ``local`` in place, so ``local`` may be a
    view of a parameter (it must then be the parameter's own storage, not a copy).
    """

    local: torch.Tensor
    global_shape: tuple[int, ...]
    offsets: tuple[int, ...]

    def __post_init__(self) -> None:
        self.global_shape = tuple(int(s) for s in self.global_shape)
        self.offsets = tuple(int(o) for o in self.offsets)


class TornCheckpoint(RuntimeError):
    """A step folder that is not a complete, intact checkpoint; the message names what is missing or
    corrupt (the commit marker, a rank's file, a checksum that does not match, ...)."""


def step_directory(directory: str | os.PathLike, step: int) -> Path:
    """``<directory>/step_<step:08d>``: the folder of one step's checkpoint."""
    return Path(directory) / f"step_{step:08d}"


# ---------------------------------------------------------------------------------------------
# ## Task 10.1: sharded, atomic save
# ---------------------------------------------------------------------------------------------


def save_checkpoint(state: dict, directory: str | os.PathLike, step: int, *, group: dist.ProcessGroup | None = None
                    ) -> Path:  # fmt: skip
    """Save ``state`` as step ``step`` under ``directory``, every rank of ``group`` writing only its
    own boxes; collective over ``group``. Returns ``step_directory(directory, step)``.

    Layout and protocol (all ranks call it with the same keys, the same global shapes and dtypes):
      1. every rank writes its boxes' raw bytes (the ones it is the writer of: the lowest group rank
         holding an identical box; non-tensor values are written by every rank for itself), with one
         checksum (e.g. ``zlib.crc32``) per block of at most ``CHECKSUM_BLOCK_BYTES`` bytes of each
         box's data, and the metadata needed to find every box again: key, dtype, global shape,
         offsets, local shape, which file, at which byte, its checksums;
      2. every file is written under a temporary name, flushed and ``os.fsync``-ed, then renamed
         (``os.replace``) to its final name, so a name never points at a half-written file;
      3. group rank 0 commits only after every rank has reported its files complete (their sizes and
         checksums): it writes the global metadata, and last of all ``COMMIT_MARKER``, whose content
         identifies the metadata (e.g. its checksum), so a marker from another save does not commit it.
         Putting the marker in place (its rename) is the save's last change to the filesystem.

    Save does not check that the boxes cover their global tensors: a part nobody saved is found by the
    load that asks for it (a ``KeyError``).

    A rank killed at any moment leaves the previous checkpoint loadable and this one without a valid
    marker (torn); so does a power loss at any moment, given that a file's data is durable only once it is
    fsync-ed (names are durable once renamed: no directory fsync is needed here). A folder of the same
    step left by an earlier save (a torn one, or an older committed one) is removed by group rank 0
    before anyone writes.
    ``ValueError`` (on every rank, before writing anything) for a negative ``step``, a value that is
    neither a Shard, a tensor nor picklable, or a Shard whose box does not fit in its global shape;
    ranks disagreeing on a key's global shape or dtype is a ``ValueError`` naming the key, on every rank,
    found by the plan before any file is written (nothing is committed).
    """
    raise NotImplementedError("Task 10.1 (sharded atomic save): see handouts/10-failures.md §10.1")


def latest_checkpoint(directory: str | os.PathLike) -> int | None:
    """The newest step under ``directory`` whose checkpoint is committed: a valid ``COMMIT_MARKER``
    matching its metadata, and every rank's file present with the size the metadata records. Torn
    steps are skipped. ``None`` when there is none (or ``directory`` does not exist). Reads files
    only (no checksums of tensor data, no process group)."""
    raise NotImplementedError("Task 10.1 (sharded atomic save): see handouts/10-failures.md §10.1")


def verify_checkpoint(directory: str | os.PathLike, step: int) -> None:
    """Check step ``step`` completely: marker, metadata, every file, every checksum of every block.
    Returns ``None`` if intact, else raises ``TornCheckpoint`` whose message names what is missing
    or corrupt (e.g. ``"no COMMITTED marker"``, a rank's file, ``"checksum mismatch in key 'w'"``).
    A step that was never saved is torn too ("missing"). Reads files only."""
    raise NotImplementedError("Task 10.1 (sharded atomic save): see handouts/10-failures.md §10.1")


# ---------------------------------------------------------------------------------------------
# ## Task 10.2: load with resharding
# ---------------------------------------------------------------------------------------------


def load_checkpoint(state: dict, directory: str | os.PathLike, step: int | None = None, *,
                    group: dist.ProcessGroup | None = None, reads: list | None = None) -> dict:  # fmt: skip
    """Fill ``state``'s tensors in place from a committed checkpoint (``step=None``: the latest one)
    and return the non-tensor values. Collective over ``group`` (may be any size, not the saving one).

    For every Shard (or tensor, a whole box) in ``state``, the saved boxes of the same key that
    overlap it are found in the metadata and exactly the overlapping bytes are read: for each saved
    box, each maximal run of bytes that is contiguous in that box's row-major data and lies inside the
    requested box, rounded out to whole checksum blocks; the blocks of a saved box's runs merged into
    ranges, each range read once (one ``seek`` + ``read``, or several of consecutive pieces: no byte is read
    twice) and checked against the block checksums (a mismatch is a ``TornCheckpoint`` naming the key).
    Nothing else of the tensor data is read (metadata may be read whole). If ``reads`` is a list, every read
    of tensor data (each ``seek`` + ``read`` above) is appended to it as ``(file name relative to the step folder,
    start byte, stop byte)``; reads of the metadata and of the non-tensor values are not recorded.

    Returns ``{key: value}`` for the non-tensor keys of ``state`` (the saved values of this group
    rank, or of group rank 0 if the checkpoint had fewer ranks), with the saved value in place of the
    one passed; the non-tensor values' checksums are checked before they are unpickled (a
    ``TornCheckpoint`` otherwise: unpickling corrupt bytes is unsafe). ``FileNotFoundError`` if no
    committed checkpoint exists; ``TornCheckpoint`` if ``step`` is not committed; ``KeyError`` naming a
    key of ``state`` the checkpoint does not have, or whose requested box the saved boxes do not cover
    whole (never a partial load); ``ValueError`` naming the key when the global shape or dtype differs
    from the saved one.
    """
    raise NotImplementedError("Task 10.2 (resharding load): see handouts/10-failures.md §10.2")


# ---------------------------------------------------------------------------------------------
# ## Task 10.3: exact resume
# ---------------------------------------------------------------------------------------------


class DistributedSampler:
    """Given: the indices of a dataset of ``num_samples`` examples that this rank reads, epoch by epoch.

    Each epoch shuffles ``range(num_samples)`` with a generator seeded ``seed + epoch`` (the same
    order on every rank), and rank r of ``world_size`` takes positions r, r + world, r + 2 world, ...
    (the tail that does not divide evenly is dropped). ``next_batch(batch_size)`` returns the next
    ``batch_size`` indices of this rank, moving to the next epoch when this one is used up.
    ``state_dict()`` / ``load_state_dict()`` save and restore the position (epoch, index).
    """

    def __init__(self, num_samples: int, rank: int, world_size: int, *, seed: int = 0) -> None:
        self.num_samples, self.rank, self.world_size, self.seed = num_samples, rank, world_size, seed
        self.epoch, self.position = 0, 0  # position: how many of this epoch's indices were handed out

    def _order(self) -> list[int]:
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.num_samples, generator=g).tolist()
        per_rank = self.num_samples // self.world_size
        return order[self.rank :: self.world_size][:per_rank]

    def next_batch(self, batch_size: int) -> list[int]:
        """The next ``batch_size`` indices of this rank (an epoch's leftover smaller than a batch is skipped)."""
        order = self._order()
        if self.position + batch_size > len(order):
            self.epoch, self.position = self.epoch + 1, 0
            order = self._order()
        batch = order[self.position : self.position + batch_size]
        self.position += batch_size
        return batch

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position, self.seed = state["epoch"], state["position"], state["seed"]


def capture_training_state(step: int, *, sampler: DistributedSampler | None = None) -> dict:
    """Everything besides parameters and optimizer state that training needs to continue exactly,
    as non-tensor values of a state dict (saved per rank by ``save_checkpoint``):

        "step"          the step counter ``step``
        "rng.python"    ``random.getstate()``
        "rng.torch"     ``torch.get_rng_state()`` (the CPU generator) as ``bytes``
        "rng.cuda"      ``torch.cuda.get_rng_state_all()`` as a list of ``bytes``, when CUDA is
                        initialized (else absent)
        "sampler"       ``sampler.state_dict()`` when a sampler is given (else absent)

    Each rank captures its own generators (they differ between ranks: dropout masks per rank).
    Values are copies: training on does not change them.
    """
    raise NotImplementedError("Task 10.3 (exact resume): see handouts/10-failures.md §10.3")


def restore_training_state(saved: dict, *, sampler: DistributedSampler | None = None) -> int:
    """Put back what ``capture_training_state`` captured (``saved``: e.g. ``load_checkpoint``'s return
    value): every RNG, the sampler's position (when ``sampler`` is given), and return the step.
    ``KeyError`` naming the missing entry ("rng.torch", "sampler", ...) if ``saved`` lacks one that
    is needed ("rng.cuda" is needed only when CUDA is initialized here)."""
    raise NotImplementedError("Task 10.3 (exact resume): see handouts/10-failures.md §10.3")


# ---------------------------------------------------------------------------------------------
# ## Task 10.4: asynchronous checkpointing
# ---------------------------------------------------------------------------------------------


class AsyncCheckpointer:
    """Save checkpoints in the background: ``save`` blocks only while the state is staged (every
    tensor copied off the training tensors, into CPU memory), then a background thread writes it.

    ``save(state, step)`` first waits for the previous save to finish (one save in flight at a time)
    and re-raises its error, then stages ``state`` (``Shard``s get a copied ``local``; non-tensor
    values a deep copy), starts the write in a thread, and returns: the caller may change the
    training tensors at once, the checkpoint holds the values at the call. The write is
    ``save_checkpoint`` over the group given at construction; its collectives run in the
    background thread, on a process group of its own, so they never mix with training's messages:
    create it in ``__init__`` with ``dist.new_group(<group's global ranks>,
    use_local_synchronization=True)``, which only the ranks of ``group`` call (every rank of ``group``
    constructs its checkpointer; the other ranks need not). On GPUs a new thread starts on ``cuda:0``:
    the thread first sets the device that was current in the caller of ``save``
    (``torch.cuda.set_device``), so its object collectives (NCCL) use this rank's GPU.
    ``wait()`` blocks until the save in flight is committed, re-raises its error (an error of the
    background save is raised by the next ``wait()`` or ``save``), and returns its step folder
    (``None`` if nothing was in flight). ``close()`` waits.
    """

    def __init__(self, directory: str | os.PathLike, *, group: dist.ProcessGroup | None = None) -> None:
        raise NotImplementedError("Task 10.4 (async save): see handouts/10-failures.md §10.4")

    def save(self, state: dict, step: int) -> None:
        """Stage ``state`` (blocking), then write it as ``step`` in the background."""
        raise NotImplementedError("Task 10.4 (async save): see handouts/10-failures.md §10.4")

    def wait(self) -> Path | None:
        """Block until the save in flight is committed; its step folder, or None."""
        raise NotImplementedError("Task 10.4 (async save): see handouts/10-failures.md §10.4")

    def close(self) -> None:
        """``wait()``, then release the background thread."""
        self.wait()


# ---------------------------------------------------------------------------------------------
# Given: state dicts of the kit's parts (no communication; they read shapes and group ranks only)
# ---------------------------------------------------------------------------------------------


def _group_rank_size(group) -> tuple[int, int]:
    return dist.get_rank(group), dist.get_world_size(group)


def module_state(module: nn.Module, *, prefix: str = "model.") -> dict[str, Shard]:
    """Every parameter and buffer of a model held whole on each rank (plain, DDP, ZeRO-1/2), as
    whole-box Shards keyed ``prefix + name`` (the names of ``module.state_dict()``); ``local`` is the
    tensor itself, so loading writes into the model."""
    return {prefix + k: Shard(t.detach(), tuple(t.shape), (0,) * t.dim())
            for k, t in module.state_dict(keep_vars=True).items()}  # fmt: skip


def fsdp_state(model: nn.Module, *, group: dist.ProcessGroup | None = None, prefix: str = "model.") -> dict[str, Shard]:
    """An ``FSDP`` model's state (``model.module``'s names): each ``nn.Linear``/``nn.Embedding``
    weight, which FSDP keeps as a flat shard (chunk ``rank`` of the flattened weight zero-padded to a
    multiple of N), as a box of the flattened weight: global shape ``(numel,)``, offset
    ``rank * chunk``, ``local`` = the shard without its padding (a view: loading writes into it).
    These boxes depend on N only through the offsets, so a checkpoint saved at N loads at any N'.
    Other parameters and buffers are whole boxes, as in ``module_state``."""
    rank, world = _group_rank_size(group)
    inner = model.module
    sharded: dict[int, int] = {}  # id(shard parameter) -> numel of the full weight
    for layer in inner.modules():
        if isinstance(layer, nn.Linear):
            sharded[id(layer.weight)] = layer.in_features * layer.out_features
        elif isinstance(layer, nn.Embedding):
            sharded[id(layer.weight)] = layer.num_embeddings * layer.embedding_dim
    out = {}
    for key, t in inner.state_dict(keep_vars=True).items():
        numel = sharded.get(id(t))
        if numel is None:
            out[prefix + key] = Shard(t.detach(), tuple(t.shape), (0,) * t.dim())
            continue
        chunk = -(-numel // world)
        start, stop = min(rank * chunk, numel), min((rank + 1) * chunk, numel)
        out[prefix + key] = Shard(t.detach()[: stop - start], (numel,), (start,))
    return out


def tensor_parallel_state(module: nn.Module, *, group: dist.ProcessGroup | None = None,
                          prefix: str = "model.") -> dict[str, Shard]:  # fmt: skip
    """A model holding ``ColumnParallelLinear``/``RowParallelLinear`` layers (e.g. ``TensorParallelMLP``,
    a ``MeshTrainer``'s stage), tensor-parallel over ``group``: a column layer's weight and bias are
    the rows ``r*out/T : (r+1)*out/T`` of the dense ones, a row layer's weight the columns
    ``r*in/T : (r+1)*in/T`` (its bias whole); everything else is a whole box. Keys are
    ``prefix + name`` with the names of ``module.state_dict()``, so a TP model and its dense twin
    (``models.MLP``) share keys and load into each other."""
    from . import tensor_parallel

    rank, world = _group_rank_size(group)
    boxes: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}  # id(tensor) -> (global shape, offsets)
    for layer in module.modules():
        if isinstance(layer, tensor_parallel.ColumnParallelLinear):
            rows = layer.weight.shape[0]
            boxes[id(layer.weight)] = ((rows * world, layer.weight.shape[1]), (rank * rows, 0))
            if layer.bias is not None:
                boxes[id(layer.bias)] = ((rows * world,), (rank * rows,))
        elif isinstance(layer, tensor_parallel.RowParallelLinear):
            cols = layer.weight.shape[1]
            boxes[id(layer.weight)] = ((layer.weight.shape[0], cols * world), (0, rank * cols))
    out = {}
    for key, t in module.state_dict(keep_vars=True).items():
        shape, offsets = boxes.get(id(t), (tuple(t.shape), (0,) * t.dim()))
        out[prefix + key] = Shard(t.detach(), shape, offsets)
    return out


def optimizer_state(optimizer: torch.optim.Optimizer, params: dict[str, Shard], *,
                    prefix: str = "optim.") -> dict[str, Shard | torch.Tensor]:  # fmt: skip
    """The per-parameter state of ``optimizer`` (e.g. Adam's ``exp_avg``, ``exp_avg_sq``, ``step``),
    boxed like the parameter: for each ``name -> Shard`` of ``params`` (from the helpers above) whose
    ``local`` is (a view of) a parameter that has state in ``optimizer``, every state tensor with the
    parameter's shape becomes a Shard with the same box, keyed ``prefix + name + "." + state_key``,
    and every other state tensor (a 0-d ``step``) a whole tensor under the same kind of key.
    Parameters without state (not owned, under ZeRO) contribute nothing: with ZeRO-1/2 each key is
    saved by its owner only. To load, first ``init_optimizer_state(optimizer)`` so the tensors exist."""
    by_storage = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if optimizer.state.get(p):
                by_storage[p.untyped_storage().data_ptr()] = p
    out: dict[str, Shard | torch.Tensor] = {}
    for name, shard in params.items():
        local = shard.local
        p = by_storage.get(local.untyped_storage().data_ptr()) if local.numel() or local.dim() else None
        if p is None:
            p = next((q for q in by_storage.values() if q is local), None)
        if p is None:
            continue
        start = local.storage_offset() - p.storage_offset()  # local is a contiguous view of p
        for key, value in optimizer.state[p].items():
            if isinstance(value, torch.Tensor) and value.shape == p.shape and p.dim() > 0:
                view = value.view(-1)[start : start + local.numel()].view(local.shape)
                out[f"{prefix}{name}.{key}"] = Shard(view, shard.global_shape, shard.offsets)
            elif isinstance(value, torch.Tensor):
                out[f"{prefix}{name}.{key}"] = value
    return out


def init_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Create ``optimizer``'s per-parameter state without changing the parameters (one step with zero
    grads and learning rate 0, grads then reset to ``None``), so ``optimizer_state`` has tensors to load
    into. Parameters that already have state are left as they are."""
    params = {id(p) for g in optimizer.param_groups for p in g["params"] if not optimizer.state.get(p)}
    if not params:
        return
    saved_lrs = [g["lr"] for g in optimizer.param_groups]
    saved_grads = {p: p.grad for g in optimizer.param_groups for p in g["params"]}
    for g in optimizer.param_groups:
        g["lr"] = 0.0
    for g in optimizer.param_groups:
        for p in g["params"]:
            p.grad = torch.zeros_like(p) if id(p) in params else None
    optimizer.step()
    for g, lr in zip(optimizer.param_groups, saved_lrs):
        g["lr"] = lr
    for p, grad in saved_grads.items():
        p.grad = grad


def _iter_tensors(state: dict) -> Iterator[tuple[str, Shard]]:
    """``(key, Shard)`` for every tensor entry of ``state`` (a plain tensor becomes a whole box)."""
    for key, value in state.items():
        if isinstance(value, Shard):
            yield key, value
        elif isinstance(value, torch.Tensor):
            yield key, Shard(value, tuple(value.shape), (0,) * value.dim())
