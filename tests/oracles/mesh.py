"""The Part 7 oracles: the row-major mesh layout as arithmetic, and dense training of the mesh model.

    from tests.oracles.mesh import check_mesh_training, coords_of, mesh_batches, mesh_rank, slice_of, trainer_rank

``coords_of``, ``rank_of`` and ``slice_of`` give a rank's coordinates and the ranks of its slice
along an axis of a row-major mesh, independent of any implementation; ``mesh_rank`` reports what a
``ProcessMesh`` says about each. ``dense_oracle`` trains the mesh model in one process on the whole
batch; ``trainer_rank`` trains it on a DP x PP x TP mesh (``stage_layers``, ``tp_shard``: each rank's
layers and tensor-parallel pieces) and ``check_mesh_training`` compares every rank with the oracle.
``hsdp_setup_rank`` and ``check_hsdp_setup``: HSDP's start (buffers from rank 0 across replicas too)
and its ``compute_dtype``; ``hsdp_microbatch_rank`` and ``check_hsdp_microbatches``: HSDP with units under
microbatches (gradient sync on for the last only), its numbers and what each microbatch's backward reduces.
``op_kind``: a recorded call's collective, whichever API spelled it.

Used by tests/test_mesh.py and its hidden counterpart.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from cs336_systems.models import DeepMLP
from tests.harness import assert_close
from tests.harness.recorder import CommRecorder, calls, format_events


def coords_of(rank: int, shape: dict[str, int]) -> dict[str, int]:
    """Global rank -> coordinates, last axis fastest: rank = sum_i c_i * prod_{j>i} n_j."""
    out = {}
    for axis in reversed(list(shape)):
        rank, out[axis] = divmod(rank, shape[axis])
    return {axis: out[axis] for axis in shape}


def rank_of(coords: dict[str, int], shape: dict[str, int]) -> int:
    rank = 0
    for axis, n in shape.items():
        rank = rank * n + coords[axis]
    return rank


def slice_of(rank: int, shape: dict[str, int], axis: str) -> list[int]:
    """The ranks sharing every coordinate but ``axis`` with ``rank``, by increasing coordinate on it."""
    c = coords_of(rank, shape)
    return [rank_of({**c, axis: i}, shape) for i in range(shape[axis])]


def mesh_rank(ctx, shapes):
    M = ctx.load("mesh")
    from torch.distributed.device_mesh import init_device_mesh

    out = []
    for shape in shapes:
        mesh = M.ProcessMesh(shape)
        torch_mesh = init_device_mesh("cuda" if ctx.backend == "nccl" else "cpu", tuple(shape.values()),
                                     mesh_dim_names=tuple(shape))  # fmt: skip
        got = {"coords": mesh.coords(), "axes": {}}
        for axis in shape:
            group_ranks = dist.get_process_group_ranks(mesh.group(axis))
            # Traffic check: the sum of the global ranks over the group is the slice's sum.
            x = torch.tensor([float(ctx.rank)], device=ctx.device)
            dist.all_reduce(x, group=mesh.group(axis))
            got["axes"][axis] = {
                "ranks": mesh.ranks(axis), "rank": mesh.rank(axis), "size": mesh.size(axis),
                "group_ranks": group_ranks, "sum": x.item(),
                "torch": dist.get_process_group_ranks(torch_mesh.get_group(axis)),
                "torch_rank": torch_mesh.get_local_rank(axis),
            }  # fmt: skip
        out.append(got)
    return out


D_MODEL, D_FF, LAYERS = 8, 16, 3


OPTIMIZERS = {"sgd": (torch.optim.SGD, {"lr": 0.1}), "adamw": (torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1})}


def mesh_batches(steps: int, batch: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, D_MODEL, generator=g), torch.randn(batch, D_MODEL, generator=g)) for _ in range(steps)]


def dense_oracle(batches, opt_name: str, slices: int, seed: int = 0):
    """One process, the whole batch: per step, the loss of each of ``slices`` equal slices of the
    batch (before the step) and the state dict after the step."""
    torch.manual_seed(seed)
    model = DeepMLP(LAYERS, D_MODEL, D_FF)
    cls, kwargs = OPTIMIZERS[opt_name]
    opt = cls(model.parameters(), **kwargs)
    losses, states = [], []
    for x, y in batches:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        with torch.no_grad():
            losses.append(
                [nn.functional.mse_loss(model(xs), ys).item() for xs, ys in zip(x.chunk(slices), y.chunk(slices))]
            )
        opt.step()
        states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    return losses, states


MICROBATCHES = 2


def stage_layers(num_layers: int, pp: int, stage: int) -> range:
    sizes = [num_layers // pp + (s < num_layers % pp) for s in range(pp)]
    return range(sum(sizes[:stage]), sum(sizes[: stage + 1]))


def tp_shard(name: str, full: torch.Tensor, tp: int, tp_rank: int) -> torch.Tensor:
    """This tp rank's piece of a dense parameter: fc1 by rows (output features), fc2's weight by
    columns (input features), everything else replicated."""
    if ".mlp.fc1." in name:
        return full.chunk(tp, dim=0)[tp_rank]
    if name.endswith(".mlp.fc2.weight"):
        return full.chunk(tp, dim=1)[tp_rank]
    return full


def trainer_rank(ctx, shape, opt_name, zero_stage, batches, record_step=-1):
    M = ctx.load("mesh")
    torch.manual_seed(0)  # the same dense model on every rank
    model = DeepMLP(LAYERS, D_MODEL, D_FF).to(ctx.device)  # drawn on the CPU (as the oracle's), used on the rank's
    mesh = M.ProcessMesh(shape)
    cls, kwargs = OPTIMIZERS[opt_name]
    trainer = M.MeshTrainer(model, mesh, nn.MSELoss(), cls, num_microbatches=MICROBATCHES, zero_stage=zero_stage,
                            **kwargs)  # fmt: skip
    dp = coords_of(ctx.rank, shape)["dp"]
    out = []
    for step, (x, y) in enumerate(batches):
        xs, ys = x.chunk(shape["dp"])[dp], y.chunk(shape["dp"])[dp]  # this replica's batch
        with CommRecorder() as rec:
            loss = trainer.train_step(xs, ys)
        params = {k: v.detach().clone() for k, v in trainer.module.named_parameters()}
        out.append({"loss": loss, "params": params, "events": rec.events if step == record_step else None})
    return out


def check_mesh_training(outs, shape, opt_name, batches, label):
    losses, states = dense_oracle(batches, opt_name, slices=shape["dp"])
    pp, tp = shape["pp"], shape["tp"]
    for rank, steps in enumerate(outs):
        c = coords_of(rank, shape)
        layers = stage_layers(LAYERS + 1, pp, c["pp"])
        for step, got in enumerate(steps):
            where = f"rank {rank} {c}, step {step} ({label}, {opt_name})"
            want_names = {k for k in states[step] if int(k.split(".")[0]) in layers}
            assert set(got["params"]) == want_names, (
                f"{where}: this stage holds {sorted(got['params'])}, expected layers {list(layers)}: "
                f"{sorted(want_names)}"
            )
            for name, value in got["params"].items():
                assert_close(value, tp_shard(name, states[step][name], tp, c["tp"]), what=f"{where}, {name}")
            if c["pp"] == pp - 1:
                want = losses[step][c["dp"]]
                assert got["loss"] is not None and abs(got["loss"] - want) < 1e-5, (
                    f"{where}: loss {got['loss']}, expected the replica's mean loss {want:.6f}"
                )
            else:
                assert got["loss"] is None, f"{where}: only the last stage returns the loss, got {got['loss']}"


def hsdp_setup_rank(ctx, shape, compute_dtype, x):
    """HSDP over ``shape`` ({"replicate": R, "shard": S}) of a two-layer MLP whose weights and buffer
    ``offset`` differ on every rank before wrapping; returns the buffer after construction, the
    output of ``x`` with ``compute_dtype``, and the full state the model started from (rank 0's)."""
    M = ctx.load("mesh")
    torch.manual_seed(ctx.rank)  # a different model on every rank: HSDP must start from rank 0's
    model = nn.Sequential(nn.Linear(D_MODEL, D_FF), nn.ReLU(), nn.Linear(D_FF, D_MODEL))
    model.register_buffer("offset", torch.full((3,), float(ctx.rank) + 1.0, device=ctx.device))
    model = model.to(ctx.device)
    hsdp = M.HSDP(model, M.ProcessMesh(shape), shard_axis="shard", replicate_axis="replicate",
                  compute_dtype=compute_dtype)  # fmt: skip
    y = hsdp(x.to(ctx.device))
    return {"offset": hsdp.module.offset.detach().clone(), "y": y.detach(), "state": hsdp.gather_full_params()}


def check_hsdp_setup(outs, shape, compute_dtype, x) -> None:
    """Every rank holds rank 0's buffer (broadcast across replicas too), and the output is the full
    model's run in ``compute_dtype`` (weights, input and bias cast, output cast back), not float32's."""
    __tracebackhide__ = True
    state = outs[0]["state"]

    def run(dtype):
        h = x
        for i in (0, 2):
            w, b = state[f"{i}.weight"].cpu(), state[f"{i}.bias"].cpu()
            h = nn.functional.linear(h.to(dtype), w.to(dtype), b.to(dtype)).to(x.dtype)
            h = torch.relu(h) if i == 0 else h
        return h

    low, full = run(compute_dtype), run(torch.float32)
    assert (low - full).abs().max() > 1e-4, "test setup: compute_dtype changes nothing here"
    for rank, out in enumerate(outs):
        where = f"rank {rank}, mesh {shape}, compute_dtype={compute_dtype}"
        assert_close(out["offset"], torch.ones(3), what=f"{where}: buffer offset after construction (rank 0's: "
                     "parameters AND buffers are broadcast within the shard slice and across the replicate slice)",
                     rtol=0, atol=0)  # fmt: skip
        assert not torch.allclose(out["y"].cpu().float(), full, rtol=0, atol=1e-5), (
            f"{where}: the output is the float32 forward's: HSDP must hand compute_dtype to FSDP"
        )
        assert_close(out["y"].cpu().float(), low, what=f"{where}: output (the model run in {compute_dtype})",
                     rtol=2e-2, atol=2e-2)  # fmt: skip


def check_zero_traffic(outs, shape, zero_stage) -> None:
    """Step 1's calls in each rank's dp slice (``trainer_rank(..., record_step=1)``): with ZeRO-1 one
    all-reduce of all this stage's gradient elements and no reduce-scatter; with ZeRO-2 a
    reduce-scatter and no all-reduce. Any stage, any layout."""
    __tracebackhide__ = True
    for rank, steps in enumerate(outs):
        c = coords_of(rank, shape)
        dp_slice = tuple(slice_of(rank, shape, "dp"))
        events = [e for e in calls(steps[1]["events"]) if e.group_ranks == dp_slice]
        reduces = [e for e in events if e.op == "all_reduce"]
        scatters = [e for e in events if "reduce_scatter" in e.op]
        stage_numel = sum(p.numel() for p in steps[1]["params"].values())
        where = (f"rank {rank} {c} (stage {c['pp']}), ZeRO-{zero_stage}, dp slice {list(dp_slice)}, step 1 "
                 f"(saw {sorted({e.op for e in events})}):\n{format_events(steps[1]['events'], limit=60)}")  # fmt: skip
        if zero_stage == 1:
            assert [e.numel for e in reduces] == [stage_numel] and not scatters, (
                f"{where}\nZeRO-1 shards the optimizer state only: the gradients are all-reduced once "
                f"({stage_numel} elements, this stage's), never reduce-scattered as well"
            )
        else:
            assert not reduces and scatters, (
                f"{where}\nZeRO-2 averages the gradients with the optimizer's reduce-scatter only, no all-reduce"
            )


def op_kind(event) -> str:
    """all_reduce / all_gather / reduce_scatter / ... whichever API spelled the call (``pg.reduce_scatter_single``:
    torch's ``reduce_scatter_single`` calls the group's method itself)."""
    op = event.op.removeprefix("pg.").lower().replace("_", "")
    for name, canonical in [("allreduce", "all_reduce"), ("allgather", "all_gather"),
                            ("reducescatter", "reduce_scatter")]:  # fmt: skip
        if name in op:
            return canonical
    return event.op


def hsdp_microbatch_rank(ctx, shape, batches, microbatches, opt_name):
    """HSDP over ``shape`` ({"replicate": R, "shard": S}) of a DeepMLP with one unit per residual block (the
    head per layer); each step runs ``microbatches`` backwards (mean loss / microbatches), gradient sync off for
    all but the last. Returns the full parameters after each step and each microbatch's calls in the last step."""
    M = ctx.load("mesh")
    torch.manual_seed(ctx.rank)  # a different model on every rank: HSDP must start from rank 0's
    model = DeepMLP(LAYERS, D_MODEL, D_FF).to(ctx.device)
    hsdp = M.HSDP(model, M.ProcessMesh(shape), shard_axis="shard", replicate_axis="replicate",
                  units=list(model)[:-1])  # fmt: skip
    cls, kwargs = OPTIMIZERS[opt_name]
    opt = cls(hsdp.parameters(), **kwargs)
    states, events = [], []
    for x, y in batches:
        xs, ys = x.chunk(ctx.world_size)[ctx.rank], y.chunk(ctx.world_size)[ctx.rank]
        opt.zero_grad()
        events = []
        for k, (xm, ym) in enumerate(zip(xs.chunk(microbatches), ys.chunk(microbatches))):
            hsdp.set_requires_gradient_sync(k == microbatches - 1)
            with CommRecorder() as rec:
                (nn.functional.mse_loss(hsdp(xm), ym) / microbatches).backward()
            events.append(calls(rec.events))
        opt.step()
        states.append(hsdp.gather_full_params())
    return {"states": states, "events": events}


def check_hsdp_microbatches(outs, shape, batches, microbatches, opt_name) -> None:
    """``hsdp_microbatch_rank``'s results: the full parameters equal one process's on the whole batch after every
    step; the backwards with sync off reduce nothing, on any group; the last reduce-scatters once per unit and per
    weight outside units within the shard slice, and all-reduces each parameter once across the replicate slice."""
    __tracebackhide__ = True
    _, states = dense_oracle(batches, opt_name, slices=1)
    dense = dict(DeepMLP(LAYERS, D_MODEL, D_FF).named_parameters())
    params = len(dense) - 2 * LAYERS + LAYERS  # a block's two linear weights become its one flat_shard
    sharded = LAYERS + 1  # the units' flat buffers, the head's weight
    replicas, shards, m = shape["replicate"], shape["shard"], microbatches
    for rank, out in enumerate(outs):
        for step, got in enumerate(out["states"]):
            for name, want in states[step].items():
                assert_close(got[name], want, what=f"rank {rank}, mesh {shape}, step {step}, {name} ({m} "
                             f"microbatches, {opt_name})")  # fmt: skip
        shard_slice = tuple(slice_of(rank, shape, "shard"))
        replica_slice = tuple(slice_of(rank, shape, "replicate"))
        for k, events in enumerate(out["events"]):
            log = format_events(events)
            reducing = [e for e in events if op_kind(e) in ("all_reduce", "reduce_scatter")]
            if k < m - 1:
                assert not reducing, (
                    f"rank {rank}, mesh {shape}: microbatch {k} of {m} ran with gradient sync off, yet its "
                    f"backward reduced gradients ({len(reducing)} calls): set_requires_gradient_sync(False) "
                    f"must stop FSDP's reduce-scatters and HSDP's all-reduces across replicas alike:\n{log}"
                )
                continue
            scattered = [e for e in reducing if op_kind(e) == "reduce_scatter" and e.group_ranks == shard_slice]
            across = [e for e in reducing if op_kind(e) == "all_reduce" and e.group_ranks == replica_slice]
            want_scattered = sharded if shards > 1 else 0
            want_across = params if replicas > 1 else 0
            assert len(scattered) == want_scattered and len(across) == want_across, (
                f"rank {rank}, mesh {shape}: the last of {m} microbatches (sync on) made {len(scattered)} "
                f"reduce-scatters in the shard slice {list(shard_slice)} and {len(across)} all-reduces across "
                f"the replicate slice {list(replica_slice)}; expected {want_scattered} (one per unit and per "
                f"weight outside units) and {want_across} (one per parameter: each unit's flat_shard, the "
                f"head's weight shard, every bias and norm), the sum of all {m} microbatches reduced once:\n{log}"
            )
