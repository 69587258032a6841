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

import math
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
        # BEGIN SOLUTION: Task 7.1 (process mesh)
        if not isinstance(shape, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in shape.items()
        ):
            raise TypeError(f"shape must be a dict of axis name -> int size, got {shape!r}")
        world = dist.get_world_size()
        if not shape or min(shape.values()) < 1 or math.prod(shape.values()) != world:
            raise ValueError(f"shape {shape} must be non-empty sizes >= 1 whose product is the world size ({world})")
        self.axes: tuple[str, ...] = tuple(shape)
        self.shape: dict[str, int] = dict(shape)
        me = dist.get_rank()
        grid = torch.arange(world, device="cpu").view(*shape.values())  # grid[c_0, ..., c_k] = global rank: bookkeeping
        self._coords = dict(zip(self.axes, (int(c) for c in (grid == me).nonzero()[0])))
        self._groups: dict[str, dist.ProcessGroup] = {}
        self._ranks: dict[str, list[int]] = {}
        for i, axis in enumerate(self.axes):
            # Move the axis last and flatten the others: each row is one slice, rows in rank order.
            for ranks in grid.movedim(i, -1).reshape(-1, shape[axis]).tolist():
                group = dist.new_group(ranks)  # collective: every rank creates every slice's group
                if me in ranks:
                    self._groups[axis], self._ranks[axis] = group, ranks
        # END SOLUTION

    # BEGIN SOLUTION
    def _axis(self, axis: str) -> str:
        if axis not in self.shape:
            raise ValueError(f"axis {axis!r} is not in the mesh, whose axes are {self.axes}")
        return axis

    # END SOLUTION

    def group(self, axis: str) -> dist.ProcessGroup:
        """The process group of this rank's slice along ``axis``."""
        # BEGIN SOLUTION: Task 7.1 (process mesh)
        return self._groups[self._axis(axis)]
        # END SOLUTION

    def ranks(self, axis: str) -> list[int]:
        """Global ranks of this rank's slice along ``axis``, in increasing coordinate on that axis."""
        # BEGIN SOLUTION: Task 7.1 (process mesh)
        return list(self._ranks[self._axis(axis)])
        # END SOLUTION

    def rank(self, axis: str) -> int:
        """This rank's coordinate on ``axis`` (= its rank within ``group(axis)``)."""
        # BEGIN SOLUTION: Task 7.1 (process mesh)
        return self._coords[self._axis(axis)]
        # END SOLUTION

    def size(self, axis: str) -> int:
        """Number of ranks along ``axis``."""
        # BEGIN SOLUTION: Task 7.1 (process mesh)
        return self.shape[self._axis(axis)]
        # END SOLUTION

    def coords(self) -> dict[str, int]:
        """This rank's coordinates, ``{axis: coordinate}`` in axis order."""
        # BEGIN SOLUTION: Task 7.1 (process mesh)
        return dict(self._coords)
        # END SOLUTION


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
        # BEGIN SOLUTION: Task 7.2 (HSDP)
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
        if not isinstance(mesh, ProcessMesh):
            raise TypeError(f"mesh must be a ProcessMesh, got {type(mesh).__name__}")
        for name, axis in [("shard_axis", shard_axis), ("replicate_axis", replicate_axis)]:
            if axis not in mesh.shape:
                raise ValueError(f"{name} ({axis!r}) is not an axis of the mesh {mesh.axes}")
        if shard_axis == replicate_axis:
            raise ValueError(f"shard_axis and replicate_axis must differ, both are {shard_axis!r}")
        super().__init__()
        self.replicate_group = mesh.group(replicate_axis)
        self.replicas = mesh.size(replicate_axis)
        self._sync = True  # whether backward all-reduces across replicas (set_requires_gradient_sync)
        # FSDP first: it checks compute_dtype and units before any message, then shards within the slice.
        self.fsdp = fsdp.FSDP(module, compute_dtype=compute_dtype, group=mesh.group(shard_axis), units=units)
        self.module = module
        if self.replicas > 1:
            src = mesh.ranks(replicate_axis)[0]
            with torch.no_grad():
                for t in [*module.parameters(), *module.buffers()]:  # shards: (0, s) holds this rank's chunk s
                    dist.broadcast(t, src=src, group=self.replicate_group)
            # Registered after FSDP's own hooks, so each runs on a gradient already averaged over
            # the shard slice (replicated parameters) or reduce-scattered to this shard.
            for p in module.parameters():
                if p.requires_grad:
                    p.register_post_accumulate_grad_hook(self._average_over_replicas)
        # END SOLUTION

    # BEGIN SOLUTION
    def _average_over_replicas(self, p: nn.Parameter) -> None:
        if not self._sync:  # FSDP keeps summing locally too; the backward that syncs reduces the sum
            return
        dist.all_reduce(p.grad, group=self.replicate_group)
        p.grad.div_(self.replicas)

    # END SOLUTION

    def set_requires_gradient_sync(self, requires_gradient_sync: bool) -> None:
        """FSDP's ``set_requires_gradient_sync`` (Part 3.4) and the all-reduces across replicas with it:
        ``False``: the following backwards reduce nothing, over either axis; ``True`` (the default): the
        next backward reduces within the shard slice, then across replicas, everything summed since.

        Raises ``TypeError`` if ``requires_gradient_sync`` is not a bool, before any communication."""
        # BEGIN SOLUTION: Task 7.2 (HSDP)
        if not isinstance(requires_gradient_sync, bool):
            raise TypeError(f"requires_gradient_sync must be a bool, got {type(requires_gradient_sync).__name__}")
        self.fsdp.set_requires_gradient_sync(requires_gradient_sync)
        self._sync = requires_gradient_sync
        # END SOLUTION

    def forward(self, *args, **kwargs):
        """``self.module(*args, **kwargs)``, through FSDP's gathering layers."""
        # BEGIN SOLUTION: Task 7.2 (HSDP)
        return self.fsdp(*args, **kwargs)
        # END SOLUTION

    def gather_full_params(self) -> dict[str, torch.Tensor]:
        """The full state dict of ``module`` on every rank (communicates within the shard slice)."""
        # BEGIN SOLUTION: Task 7.2 (HSDP)
        return self.fsdp.gather_full_params()
        # END SOLUTION


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
        # BEGIN SOLUTION: Task 7.3 (composed training)
        if not isinstance(model, nn.Sequential):
            raise TypeError(f"model must be an nn.Sequential, got {type(model).__name__}")
        if not isinstance(mesh, ProcessMesh):
            raise TypeError(f"mesh must be a ProcessMesh, got {type(mesh).__name__}")
        if not (isinstance(optimizer_cls, type) and issubclass(optimizer_cls, torch.optim.Optimizer)):
            raise TypeError(f"optimizer_cls must be a torch.optim.Optimizer subclass, got {optimizer_cls!r}")
        if not {"dp", "pp", "tp"} <= set(mesh.axes):
            raise ValueError(f"mesh must have axes 'dp', 'pp' and 'tp' (sizes may be 1), got {mesh.axes}")
        if zero_stage not in (0, 1, 2) or isinstance(zero_stage, bool):
            raise ValueError(f"zero_stage must be 0, 1 or 2, got {zero_stage!r}")
        if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int) or num_microbatches < 1:
            raise ValueError(f"num_microbatches must be an int >= 1, got {num_microbatches!r}")
        if schedule not in ("gpipe", "1f1b", "zb-h1", "interleaved"):
            raise ValueError(f"schedule must be 'gpipe', '1f1b', 'zb-h1' or 'interleaved', got {schedule!r}")
        self.mesh, self.num_microbatches, self.schedule = mesh, num_microbatches, schedule
        self.zero_stage, self.dp_group = zero_stage, mesh.group("dp")

        # 1. TP: shard every MLP of the dense model over this rank's tp slice (no communication).
        tp_group = mesh.group("tp")
        for parent in list(model.modules()):
            for name, child in parent.named_children():
                if isinstance(child, MLP):
                    setattr(parent, name, tensor_parallel.TensorParallelMLP.from_dense(child, group=tp_group))

        # 2. PP: keep this rank's contiguous stage; neighbours are in this rank's pp slice.
        stage, num_stages = mesh.rank("pp"), mesh.size("pp")
        self.module = pipeline.split_into_stages(model, num_stages)[stage]
        self.pipeline = pipeline.PipelineStage(self.module, stage, num_stages, loss_fn, group=mesh.group("pp"))

        # 3. DP: replicas average gradients; with ZeRO each keeps 1/dp of the optimizer state.
        params = list(self.module.parameters())
        if zero_stage == 0:
            self.optimizer = optimizer_cls(params, **optimizer_kwargs)
        else:
            self.optimizer = sharded_optimizer.ShardedOptimizer(
                params, optimizer_cls, shard_gradients=zero_stage == 2, group=self.dp_group, **optimizer_kwargs
            )
        # END SOLUTION

    def train_step(self, inputs: torch.Tensor | None, targets: torch.Tensor | None) -> float | None:
        """One optimizer step on this dp replica's batch ``inputs``/``targets`` (batch, d_model), the
        same tensors on every rank of the replica (only the first stage reads ``inputs`` and the last
        ``targets``). Returns this replica's mean loss on the last stage, ``None`` elsewhere."""
        # BEGIN SOLUTION: Task 7.3 (composed training)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.pipeline.train_step(inputs, targets, self.num_microbatches, self.schedule)
        if self.zero_stage < 2:  # ZeRO-2's step reduce-scatters the local grads itself
            ddp.all_reduce_gradients_flat(self.module, group=self.dp_group)
        self.optimizer.step()
        return loss
        # END SOLUTION


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
    # BEGIN SOLUTION: Task 7.5 (pick the scheme)
    return {
        "7b-on-one-node": dict(dp=8, tp=1, pp=1, zero_stage=1, microbatch=1, ep=1),
        "70b-on-two-nodes": dict(dp=2, tp=8, pp=1, zero_stage=2, microbatch=1, ep=1),
        "405b-on-16k-gpus": dict(dp=128, tp=8, pp=16, zero_stage=2, microbatch=1, ep=1),
        "moe-8x22b-on-64-nodes": dict(dp=32, tp=4, pp=4, zero_stage=1, microbatch=1, ep=8),
    }
    # END SOLUTION
