"""Composing parallelisms: a process mesh, HSDP, and one trainer for DP x PP x TP (handouts/07-mesh.md).

The world's ranks are laid out as a grid with named axes, outermost first, row-major (the last axis
varies fastest), as ``torch.distributed.device_mesh.init_device_mesh`` and Megatron-LM do. For
``{"dp": 2, "pp": 2, "tp": 2}`` on 8 ranks:

    rank = dp * 4 + pp * 2 + tp          tp groups {0,1} {2,3} {4,5} {6,7}    (neighbours: one node)
                                         pp groups {0,2} {1,3} {4,6} {5,7}
                                         dp groups {0,4} {1,5} {2,6} {3,7}    (farthest apart)

Every part of the kit takes a ``group``; composing them is handing each part the group of its axis:

    ProcessMesh   one process group per slice of every axis (Task 7.1)
    HSDP          FSDP inside one axis, replicated (gradients averaged) across another (Task 7.2)
    MeshTrainer   TP MLPs inside pipeline stages, replicated across dp; parts 2-5 reused (Task 7.3)
    pick_configs  a (dp, tp, pp, ZeRO) configuration for each cluster of SCENARIOS (Task 7.5)

Your task (handouts/07-mesh.md): implement the three classes from their docstrings. Reuse your own
parts 2-5 (imported below) on the groups of the mesh; do not copy them. The tests compare the mesh
with torch's ``init_device_mesh`` and training with one process on the whole batch, and record
which group every message goes to.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from cs336_systems.models import MLP  # noqa: F401

from . import ddp, fsdp, pipeline, sharded_optimizer, tensor_parallel  # noqa: F401  (yours, from parts 2-5)

__all__ = ["ProcessMesh", "HSDP", "MeshTrainer", "SCENARIOS", "pick_configs"]


# ---------------------------------------------------------------------------------------------
# ## Task 7.1: ProcessMesh
# ---------------------------------------------------------------------------------------------


class ProcessMesh:
    """The world's ranks as a grid with named axes, and one process group per slice of each axis.

    ``shape`` maps axis names to sizes, outermost first (``{"dp": 2, "pp": 2, "tp": 2}``); the sizes'
    product must equal the world size. Global rank r has coordinates given by writing r in the
    mixed radix of the sizes, the last axis fastest (row-major, as ``init_device_mesh``): with sizes
    (n_0, ..., n_k), ``r = sum_i c_i * prod_{j > i} n_j``. The *slice* of ``axis`` through r is the
    ranks whose coordinates equal r's on every other axis, in increasing coordinate on ``axis``.

    Construction calls ``dist.new_group`` for every slice of every axis, axes in order, slices in
    increasing order of their smallest rank, on every rank (``new_group`` is collective: every rank
    must create every group, in the same order, even groups it is not in) and keeps the groups of
    the slices through this rank. Axes of size 1 get a group of one rank. ``mesh.axes`` is the tuple
    of axis names and ``mesh.shape`` a copy of ``shape``.

    Raises ``TypeError`` unless ``shape`` is a dict of str -> int, and ``ValueError`` for an empty
    dict, a size < 1 or sizes whose product is not the world size (naming ``shape``), on every rank,
    before any communication. Asking for an axis the mesh lacks is a ``ValueError`` naming it.
    """

    def __init__(self, shape: dict[str, int]) -> None:
        raise NotImplementedError("Task 7.1 (process mesh): see handouts/07-mesh.md §7.1")

    def group(self, axis: str) -> dist.ProcessGroup:
        """The process group of this rank's slice along ``axis``."""
        raise NotImplementedError("Task 7.1 (process mesh): see handouts/07-mesh.md §7.1")

    def ranks(self, axis: str) -> list[int]:
        """Global ranks of this rank's slice along ``axis``, in increasing coordinate on that axis."""
        raise NotImplementedError("Task 7.1 (process mesh): see handouts/07-mesh.md §7.1")

    def rank(self, axis: str) -> int:
        """This rank's coordinate on ``axis`` (= its rank within ``group(axis)``)."""
        raise NotImplementedError("Task 7.1 (process mesh): see handouts/07-mesh.md §7.1")

    def size(self, axis: str) -> int:
        """Number of ranks along ``axis``."""
        raise NotImplementedError("Task 7.1 (process mesh): see handouts/07-mesh.md §7.1")

    def coords(self) -> dict[str, int]:
        """This rank's coordinates, ``{axis: coordinate}`` in axis order."""
        raise NotImplementedError("Task 7.1 (process mesh): see handouts/07-mesh.md §7.1")


# ---------------------------------------------------------------------------------------------
# ## Task 7.2: HSDP (hybrid sharded data parallelism)
# ---------------------------------------------------------------------------------------------


class HSDP(nn.Module):
    """FSDP within ``shard_axis``, plain data parallelism across ``replicate_axis`` (torch's
    ``fully_shard`` on a 2-D mesh; ZeRO++'s hierarchical partitioning).

    ``module`` is wrapped in ``fsdp.FSDP(module, compute_dtype=..., group=mesh.group(shard_axis),
    units=units)``: every big weight (or, with ``units``, every unit's flat buffer, Part 3.4) is sharded
    1/S over the S ranks of this rank's shard slice, all-gathers and reduce-scatters stay inside it. Each
    shard slice holds a full copy of the model (in shards), so the R = ``mesh.size(replicate_axis)``
    slices are data-parallel replicas: every gradient FSDP produces (weight shards, a unit's
    ``flat_shard`` and replicated parameters alike) is all-reduced over ``mesh.group(replicate_axis)``
    and divided by R as soon as FSDP has produced it in backward. On return from backward every rank
    holds the gradient of the mean loss over all S * R ranks' batches (of equal size) for its own shard.

    On construction FSDP is built first (it broadcasts from the first rank of the shard slice, then
    shards), then every parameter and buffer of the wrapped module (shards included: rank (r, s) holds
    chunk s, as the replicate slice's first rank (0, s) does) is broadcast from the first rank of the
    replicate slice: every rank starts from the model of the mesh's first rank, and the broadcast across
    replicas sends 1/S of the weights. ``.module`` is the wrapped model; ``gather_full_params()`` is
    FSDP's (all-gathers within the shard slice).

    ``set_requires_gradient_sync(flag)`` (Part 3.4's, for microbatches): ``False`` turns FSDP's gradient
    sync off (``fsdp.FSDP.set_requires_gradient_sync``) and the all-reduces across replicas with it, so
    backwards only sum gradients locally; ``True`` (the default) turns both on: the next backward
    reduce-scatters within the shard slice and all-reduces across replicas, once per unit, weight or
    replicated parameter, everything summed since. A step of m microbatches thus crosses the replicate
    slice once per parameter, not m times.

    Raises ``TypeError`` for a ``module`` that is not an ``nn.Module`` or a ``mesh`` that is not a
    ``ProcessMesh``, ``ValueError`` if an axis is not in the mesh or both are the same (naming the
    argument), and FSDP's errors for ``compute_dtype`` and ``units``; before any communication.
    """

    def __init__(self, module: nn.Module, mesh: ProcessMesh, shard_axis: str, replicate_axis: str, *,
                 compute_dtype: torch.dtype | None = None, units=None) -> None:  # fmt: skip
        raise NotImplementedError("Task 7.2 (HSDP): see handouts/07-mesh.md §7.2")

    def set_requires_gradient_sync(self, requires_gradient_sync: bool) -> None:
        """FSDP's ``set_requires_gradient_sync`` (Part 3.4) and the all-reduces across replicas with it:
        ``False``: the following backwards reduce nothing, over either axis; ``True`` (the default): the
        next backward reduces within the shard slice, then across replicas, everything summed since.

        Raises ``TypeError`` if ``requires_gradient_sync`` is not a bool, before any communication."""
        raise NotImplementedError("Task 7.2 (HSDP): see handouts/07-mesh.md §7.2")

    def forward(self, *args, **kwargs):
        """``self.module(*args, **kwargs)``, through FSDP's gathering layers."""
        raise NotImplementedError("Task 7.2 (HSDP): see handouts/07-mesh.md §7.2")

    def gather_full_params(self) -> dict[str, torch.Tensor]:
        """The full state dict of ``module`` on every rank (communicates within the shard slice)."""
        raise NotImplementedError("Task 7.2 (HSDP): see handouts/07-mesh.md §7.2")


# ---------------------------------------------------------------------------------------------
# ## Task 7.3: composed training, DP x PP x TP
# ---------------------------------------------------------------------------------------------


class MeshTrainer:
    """Train an ``nn.Sequential`` (e.g. ``models.DeepMLP``) on a mesh with axes "dp", "pp" and "tp"
    (any order, sizes may be 1), reusing parts 2-5, one step at a time.

    Construction, on every rank, from the same dense ``model`` (same initial weights on every rank:
    build it after the same ``torch.manual_seed``):
      1. tensor parallelism: every ``models.MLP`` inside ``model`` is replaced by
         ``TensorParallelMLP.from_dense(mlp, group=mesh.group("tp"))`` (this rank's column/row shards);
      2. pipeline: ``split_into_stages(model, mesh.size("pp"))[mesh.rank("pp")]`` becomes
         ``self.module``, run by ``PipelineStage(module, mesh.rank("pp"), mesh.size("pp"), loss_fn,
         group=mesh.group("pp"))``: this rank talks only to the stages before and after it in its own
         (dp, tp) slice;
      3. data parallelism: the optimizer is ``optimizer_cls(self.module.parameters(), **optimizer_kwargs)``
         for ``zero_stage=0``, and ``ShardedOptimizer(..., group=mesh.group("dp"))`` for 1 and 2
         (``shard_gradients=True`` for 2), so optimizer state is split across the dp replicas.

    ``train_step(inputs, targets)`` zeroes the grads, runs the pipeline (``num_microbatches``,
    ``schedule``: "gpipe", "1f1b", "zb-h1" or "interleaved", as ``PipelineStage.train_step`` runs
    them; each stage is one chunk, so "interleaved" runs the 1F1B order) on this dp replica's batch,
    averages every gradient over ``mesh.group("dp")`` with ``ddp.all_reduce_gradients_flat`` (stages
    0 and 1; stage 2's optimizer reduce-scatters instead), and steps. The result is one step of
    ``optimizer_cls`` on the mean loss over the whole batch (all dp replicas' batches, of equal size,
    concatenated in dp order).

    Communication per step, on each rank (L_s = MLP blocks on this stage, m = microbatches):
    tp: 2 * L_s * m all-reduces of (microbatch, d_model) in the tp group; pp: m activations sent to
    the next stage and m gradients to the previous one (plus a shape header), nowhere else; dp:
    one all-reduce of all this stage's gradients (per dtype) in the dp group, plus, with ZeRO, the
    optimizer's all-gather (and reduce-scatter instead of the all-reduce for stage 2).

    Raises ``TypeError`` for a ``model`` that is not an ``nn.Sequential``, a ``mesh`` that is not a
    ``ProcessMesh`` or an ``optimizer_cls`` that is not an optimizer class, and ``ValueError`` if the
    mesh lacks one of "dp", "pp", "tp", ``zero_stage`` is not 0, 1 or 2, ``schedule`` is not one of
    those four, or ``num_microbatches < 1``, before any communication.
    """

    def __init__(self, model: nn.Sequential, mesh: ProcessMesh, loss_fn: Callable, optimizer_cls: type, *,
                 num_microbatches: int = 1, schedule: str = "1f1b", zero_stage: int = 0,
                 **optimizer_kwargs) -> None:  # fmt: skip
        raise NotImplementedError("Task 7.3 (composed training): see handouts/07-mesh.md §7.3")

    def train_step(self, inputs: torch.Tensor | None, targets: torch.Tensor | None) -> float | None:
        """One optimizer step on this dp replica's batch ``inputs``/``targets`` (batch, d_model), the
        same tensors on every rank of the replica (only the first stage reads ``inputs`` and the last
        ``targets``). Returns this replica's mean loss on the last stage, ``None`` elsewhere."""
        raise NotImplementedError("Task 7.3 (composed training): see handouts/07-mesh.md §7.3")


# ---------------------------------------------------------------------------------------------
# ## Task 7.5: pick the scheme
# ---------------------------------------------------------------------------------------------

# Clusters and models (given). Sizes from the models' published configurations; memory in bytes.
SCENARIOS: dict[str, dict] = {
    "7b-on-one-node": dict(num_params=7e9, num_layers=32, d_model=4096, heads=32, seq=4096, global_batch=512,
                           gpus_per_node=8, num_nodes=1, gpu_memory_bytes=80e9, recompute="selective"),
    "70b-on-two-nodes": dict(num_params=70e9, num_layers=80, d_model=8192, heads=64, seq=4096, global_batch=512,
                             gpus_per_node=8, num_nodes=2, gpu_memory_bytes=80e9, recompute="full"),
    "405b-on-16k-gpus": dict(num_params=405e9, num_layers=126, d_model=16384, heads=128, seq=8192,
                             global_batch=2048, gpus_per_node=8, num_nodes=2048, gpu_memory_bytes=80e9,
                             recompute="selective"),
    "moe-8x22b-on-64-nodes": dict(num_params=141e9, expert_params=135e9, num_experts=8, num_layers=56, d_model=6144,
                                  heads=48, seq=4096, global_batch=1024, gpus_per_node=8, num_nodes=64,
                                  gpu_memory_bytes=80e9, recompute="selective"),
}  # fmt: skip


def pick_configs() -> dict[str, dict[str, int]]:
    """Your configuration for each of ``SCENARIOS``: ``{name: {"dp", "tp", "pp", "zero_stage",
    "microbatch", "ep"}}`` (ints; ``ep`` is 1 for dense models).

    Each must use every GPU (dp * tp * pp = gpus_per_node * num_nodes), keep TP inside a node
    (tp <= gpus_per_node) and dividing ``heads``, have pp <= num_layers, let dp * microbatch divide
    ``global_batch``, use ep > 1 only for an MoE (ep dividing dp and ``num_experts``), fit in
    ``gpu_memory_bytes`` by ``accounting.parallel_memory_per_rank`` (with the scenario's
    ``recompute``, ``num_microbatches = global_batch / (dp * microbatch)``), and use the lowest ZeRO
    stage that fits for its (dp, tp, pp, ep). handouts/07-mesh.md §7.5.
    """
    raise NotImplementedError("Task 7.5 (pick the scheme): see handouts/07-mesh.md §7.5")
