"""Part 7: composing parallelisms on a process mesh (handouts/07-mesh.md).

    pytest tests/test_mesh.py                           # world sizes 1, 2, 4
    pytest tests/test_mesh.py --world-sizes 8           # the 3-D mesh: DP 2 x PP 2 x TP 2
    pytest tests/test_mesh.py -m task7_1                # only the mesh

The mesh is judged against arithmetic done here (row-major coordinates, last axis fastest) and
against torch's own ``init_device_mesh``, built in the same ranks. HSDP and the trainer are judged
against one process training the dense model on the whole batch, after every step and on every
rank (each rank's shards compared with the same slices of the dense weights); the recorder shows
that each axis's traffic stays inside that axis's groups, with as many calls per step as the
formulas of the handout say.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from cs336_systems.models import DeepMLP
from tests.harness import assert_close, run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.harness.recorder import CommRecorder, calls, format_events
from tests.oracles.mesh import (
    D_FF,
    D_MODEL,
    LAYERS,
    MICROBATCHES,
    OPTIMIZERS,
    check_hsdp_microbatches,
    check_hsdp_setup,
    check_mesh_training,
    check_zero_traffic,
    coords_of,
    dense_oracle,
    hsdp_microbatch_rank,
    hsdp_setup_rank,
    mesh_batches,
    mesh_rank,
    op_kind,
    slice_of,
    stage_layers,
    trainer_rank,
)

# The oracles (the row-major layout as arithmetic, dense training) are in tests/oracles/mesh.py.

# Meshes of 2, 3 and 4 axes for every world size the suite runs (ids say the shape).
MESHES = [
    {"dp": 1}, {"dp": 2}, {"dp": 2, "tp": 1}, {"dp": 1, "tp": 2},
    {"dp": 2, "tp": 2}, {"dp": 1, "pp": 2, "tp": 2}, {"a": 2, "b": 1, "c": 2}, {"a": 1, "b": 2, "c": 1, "d": 2},
    {"dp": 2, "pp": 2, "tp": 2}, {"dp": 4, "tp": 2}, {"a": 2, "b": 1, "c": 2, "d": 2},
]  # fmt: skip


def _mesh_id(shape: dict[str, int]) -> str:
    return "x".join(f"{k}{v}" for k, v in shape.items())


def _meshes_for(world_size: int) -> list[dict[str, int]]:
    found = [s for s in MESHES if math.prod(s.values()) == world_size]
    if not found:
        pytest.skip(f"no mesh of {world_size} ranks in the list")
    return found


# ---------------------------------------------------------------------------------------------
# ## Task 7.1: ProcessMesh
# ---------------------------------------------------------------------------------------------


@pytest.mark.task7_1
def test_mesh_slices_match_row_major_order_and_init_device_mesh(world_size):
    """Every axis's slice, group, coordinate and size equal row-major arithmetic and torch's init_device_mesh."""
    shapes = _meshes_for(world_size)
    outs = run_ranks(world_size, mesh_rank, shapes)
    for rank, per_mesh in enumerate(outs):
        for shape, got in zip(shapes, per_mesh):
            where = f"rank {rank}, mesh {shape}"
            want = coords_of(rank, shape)
            assert got["coords"] == want, f"{where}: coords() {got['coords']}, expected {want} (last axis fastest)"
            for axis in shape:
                g, ranks = got["axes"][axis], slice_of(rank, shape, axis)
                assert g["torch"] == ranks, f"{where}: the oracle disagrees with init_device_mesh"  # sanity
                assert g["ranks"] == ranks, f"{where}: ranks({axis!r}) = {g['ranks']}, expected {ranks} (row-major)"
                assert g["group_ranks"] == ranks, (
                    f"{where}: group({axis!r}) holds ranks {g['group_ranks']}, expected the slice {ranks}"
                )
                assert (g["rank"], g["size"]) == (want[axis], shape[axis]) == (g["torch_rank"], len(ranks)), (
                    f"{where}: rank/size({axis!r}) = {g['rank']}/{g['size']}, expected {want[axis]}/{shape[axis]}"
                )
                assert g["sum"] == sum(ranks), (
                    f"{where}: all_reduce over group({axis!r}) summed to {g['sum']}, expected {sum(ranks)} "
                    f"(the sum of the ranks {ranks})"
                )


# ---------------------------------------------------------------------------------------------
# ## Task 7.2: HSDP
# ---------------------------------------------------------------------------------------------


def hsdp_meshes(world_size: int) -> list[tuple[int, int]]:
    """The (replicas R, shards S) meshes tried at a world size: R = the smallest factor above 1 when there is a
    2-D mesh (4: 2 x 2, 6: 2 x 3, 8: 2 x 4), else both 1-D extremes (a prime N: N x 1 and 1 x N)."""
    if world_size == 1:
        return [(1, 1)]
    r = next(f for f in range(2, world_size + 1) if world_size % f == 0)
    return [(r, world_size // r)] if r < world_size else [(world_size, 1), (1, world_size)]


def hsdp_rank(ctx, shape, opt_name, batches, record_step):
    M = ctx.load("mesh")
    torch.manual_seed(ctx.rank)  # a different model on every rank: HSDP must start from rank 0's
    model = DeepMLP(LAYERS, D_MODEL, D_FF).to(ctx.device)  # drawn on the CPU (as the oracle's), used on the rank's
    mesh = M.ProcessMesh(shape)
    hsdp = M.HSDP(model, mesh, shard_axis="shard", replicate_axis="replicate")
    shard_numel = {name: p.numel() for name, p in hsdp.module.named_parameters()}
    cls, kwargs = OPTIMIZERS[opt_name]
    opt = cls(hsdp.parameters(), **kwargs)
    states, events = [], None
    for step, (x, y) in enumerate(batches):
        xs, ys = x.chunk(ctx.world_size)[ctx.rank], y.chunk(ctx.world_size)[ctx.rank]
        opt.zero_grad()
        with CommRecorder() as rec:
            nn.functional.mse_loss(hsdp(xs), ys).backward()
        opt.step()
        if step == record_step:
            events = rec.events
        states.append(hsdp.gather_full_params())
    return {"states": states, "events": events, "shard_numel": shard_numel}


@pytest.mark.task7_2
@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_hsdp_training_matches_one_process_on_the_whole_batch(world_size, opt_name):
    """HSDP's full parameters equal one process's on the whole batch after every step, on every rank."""
    batches = mesh_batches(steps=2, batch=2 * world_size)
    _, states = dense_oracle(batches, opt_name, slices=1)
    for replicas, shards in hsdp_meshes(world_size):
        shape = {"replicate": replicas, "shard": shards}
        outs = run_ranks(world_size, hsdp_rank, shape, opt_name, batches, record_step=-1)
        for rank, out in enumerate(outs):
            for step, got in enumerate(out["states"]):
                for name, want in states[step].items():
                    assert_close(got[name], want, what=f"rank {rank}, mesh {shape}, step {step}, {name} ({opt_name})")


@pytest.mark.task7_2
@pytest.mark.world_sizes(4, 8)
def test_hsdp_gathers_within_shard_slices_and_averages_across_replicas(world_size):
    """Shards hold 1/S of each weight, gathers and reduce-scatters stay in shard slices, and every
    gradient is all-reduced once across the replicate slice."""
    replicas, shards = hsdp_meshes(world_size)[0]
    shape = {"replicate": replicas, "shard": shards}
    outs = run_ranks(world_size, hsdp_rank, shape, "sgd", mesh_batches(2, 2 * world_size), record_step=1)
    dense = dict(DeepMLP(LAYERS, D_MODEL, D_FF).named_parameters())
    weights = [n for n in dense if n.endswith("weight") and dense[n].dim() == 2]
    for rank, out in enumerate(outs):
        shard_slice = tuple(slice_of(rank, shape, "shard"))
        replica_slice = tuple(slice_of(rank, shape, "replicate"))
        for name in weights:
            want = -(-dense[name].numel() // shards)
            assert out["shard_numel"][name] == want, (
                f"rank {rank}: {name} holds {out['shard_numel'][name]} elements, expected ceil(numel / S) = {want}"
            )
        log = format_events(out["events"])
        for e in calls(out["events"]):
            if op_kind(e) in ("all_gather", "reduce_scatter"):
                assert e.group_ranks == shard_slice, (
                    f"rank {rank}: {e.op} in group {list(e.group_ranks)}, expected the shard slice "
                    f"{list(shard_slice)}:\n{log}"
                )
        across = [e for e in calls(out["events"]) if e.op == "all_reduce" and e.group_ranks == replica_slice]
        assert len(across) == len(dense), (
            f"rank {rank}: {len(across)} all-reduces across the replicate slice {list(replica_slice)}, expected "
            f"one per parameter ({len(dense)}): without them replicas drift apart:\n{log}"
        )
        others = [e for e in calls(out["events"]) if e.group_ranks not in (shard_slice, replica_slice)]
        assert not others, f"rank {rank}: calls outside the shard and replicate slices:\n{format_events(others)}"


@pytest.mark.task7_2
def test_hsdp_under_microbatches_reduces_once_per_step(world_size):
    """HSDP with ``units`` (one per residual block) and ``set_requires_gradient_sync``, 3 microbatches a step, sync
    on for the last only: the earlier backwards reduce nothing (no reduce-scatter, no all-reduce on any group); the
    last reduce-scatters once per unit and head weight within the shard slice and all-reduces each parameter once
    across the replicate slice; the full parameters equal one process's on the whole batch after every step."""
    m = 3
    batches = mesh_batches(steps=2, batch=2 * m * world_size)
    for replicas, shards in hsdp_meshes(world_size):
        shape = {"replicate": replicas, "shard": shards}
        outs = run_ranks(world_size, hsdp_microbatch_rank, shape, batches, m, "sgd")
        check_hsdp_microbatches(outs, shape, batches, m, "sgd")


@pytest.mark.task7_2
@pytest.mark.world_sizes(2, 4)
def test_hsdp_broadcasts_buffers_across_replicas_and_computes_in_compute_dtype(world_size):
    """After construction every rank holds rank 0's buffers (across the replicate slice as well as
    within the shard slice), and with compute_dtype=bfloat16 the forward runs in bfloat16."""
    replicas, shards = hsdp_meshes(world_size)[0]
    shape = {"replicate": replicas, "shard": shards}
    x = torch.randn(4, D_MODEL, generator=torch.Generator().manual_seed(5))
    outs = run_ranks(world_size, hsdp_setup_rank, shape, torch.bfloat16, x)
    check_hsdp_setup(outs, shape, torch.bfloat16, x)


# ---------------------------------------------------------------------------------------------
# ## Task 7.3: DP x PP x TP training
# ---------------------------------------------------------------------------------------------

# (dp, pp, tp) per world size; the ids name the scheme. pp2xtp2 (tp outermost) and dp1xpp2xtp2 (tp
# fastest) are the same grid in two layouts: a stage index that is right only when pp varies fastest
# fails the second.
SCHEMES = {
    "single": {"dp": 1, "pp": 1, "tp": 1}, "dp2": {"dp": 2, "pp": 1, "tp": 1}, "tp2": {"dp": 1, "pp": 1, "tp": 2},
    "pp2": {"dp": 1, "pp": 2, "tp": 1}, "dp2xtp2": {"dp": 2, "pp": 1, "tp": 2}, "dp2xpp2": {"dp": 2, "pp": 2, "tp": 1},
    "pp2xtp2": {"tp": 2, "pp": 2, "dp": 1}, "dp1xpp2xtp2": {"dp": 1, "pp": 2, "tp": 2},
    "3d": {"dp": 2, "pp": 2, "tp": 2},
}  # fmt: skip


def _schemes(world_size: int, names=None) -> list[str]:
    found = [n for n, s in SCHEMES.items() if math.prod(s.values()) == world_size and (names is None or n in names)]
    if not found:
        pytest.skip(f"no scheme of {world_size} ranks here")
    return found


@pytest.mark.task7_3
@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_mesh_training_matches_one_process_on_the_whole_batch(world_size, opt_name):
    """DP, TP, PP and their products train exactly like one process on the whole batch, every step, every rank."""
    batches = mesh_batches(steps=2, batch=4 * MICROBATCHES)
    # Every scheme with SGD; AdamW on the issue's three compositions (single axes are parts 2, 4 and 5's).
    for name in _schemes(world_size, None if opt_name == "sgd" else ["dp2xtp2", "dp2xpp2", "3d"]):
        outs = run_ranks(world_size, trainer_rank, SCHEMES[name], opt_name, 0, batches)
        check_mesh_training(outs, SCHEMES[name], opt_name, batches, name)


@pytest.mark.task7_3
@pytest.mark.world_sizes(4, 8)
@pytest.mark.parametrize("zero_stage", [1, 2])
def test_mesh_training_with_zero_over_dp_matches_one_process(world_size, zero_stage):
    """With ZeRO-1/2 over the dp axis (AdamW), training still equals one process on the whole batch."""
    batches = mesh_batches(steps=2, batch=4 * MICROBATCHES)
    name = "3d" if world_size == 8 else "dp2xtp2"
    outs = run_ranks(world_size, trainer_rank, SCHEMES[name], "adamw", zero_stage, batches)
    check_mesh_training(outs, SCHEMES[name], "adamw", batches, f"{name}, zero {zero_stage}")


@pytest.mark.task7_3
@pytest.mark.world_sizes(4)
@pytest.mark.parametrize("zero_stage", [1, 2])
def test_zero_stage_decides_how_each_stage_averages_over_dp(world_size, zero_stage):
    """DP 2 x PP 2 with ZeRO: in each stage's dp slice, ZeRO-1 makes one all-reduce of the stage's
    gradients and never a reduce-scatter (its optimizer all-gathers the parameters); ZeRO-2 makes
    reduce-scatters instead of any all-reduce."""
    shape = SCHEMES["dp2xpp2"]
    outs = run_ranks(world_size, trainer_rank, shape, "sgd", zero_stage, mesh_batches(2, 4 * MICROBATCHES),
                     record_step=1)  # fmt: skip
    check_zero_traffic(outs, shape, zero_stage)


@pytest.mark.task7_3
@pytest.mark.world_sizes(4, 8)
def test_each_axis_traffic_stays_in_its_groups_with_the_formula_counts(world_size):
    """TP all-reduces stay in tp slices (2 per MLP block per microbatch), p2p only between pipeline
    neighbours of one (dp, tp) slice (m activations forward, m gradients back), one gradient
    all-reduce per step in the dp slice; nothing else."""
    batch = 4 * MICROBATCHES
    for name in _schemes(world_size, ["dp2xtp2", "dp2xpp2", "pp2xtp2", "3d"]):
        shape = SCHEMES[name]
        outs = run_ranks(world_size, trainer_rank, shape, "sgd", 0, mesh_batches(2, batch), record_step=1)
        microbatch_numel = batch // shape["dp"] // MICROBATCHES * D_MODEL
        for rank, steps in enumerate(outs):
            c = coords_of(rank, shape)
            events = calls(steps[1]["events"])
            log = f"{name}, rank {rank} {c}, step 1:\n{format_events(steps[1]['events'], limit=80)}"
            tp_slice, dp_slice = tuple(slice_of(rank, shape, "tp")), tuple(slice_of(rank, shape, "dp"))
            pp_slice = slice_of(rank, shape, "pp")
            blocks = [i for i in stage_layers(LAYERS + 1, shape["pp"], c["pp"]) if i < LAYERS]
            tp_calls = [e for e in events if e.op == "all_reduce" and shape["tp"] > 1 and e.group_ranks == tp_slice]
            dp_calls = [e for e in events if e.op == "all_reduce" and shape["dp"] > 1 and e.group_ranks == dp_slice]
            p2p = [e for e in events if e.is_p2p]
            rest = [e for e in events if e not in tp_calls and e not in dp_calls and e not in p2p]
            assert not rest, f"calls outside the tp/dp slices or not expected at all ({format_events(rest)}) in {log}"
            want_tp = 2 * len(blocks) * MICROBATCHES if shape["tp"] > 1 else 0
            assert len(tp_calls) == want_tp, (
                f"{len(tp_calls)} all-reduces in the tp slice {list(tp_slice)}, expected 2 x {len(blocks)} blocks x "
                f"{MICROBATCHES} microbatches = {want_tp} in {log}"
            )
            assert all(e.numel == microbatch_numel for e in tp_calls), (
                f"tp all-reduces of a microbatch's activations in {log}"
            )
            stage_numel = sum(p.numel() for p in steps[1]["params"].values())
            want_dp = [stage_numel] if shape["dp"] > 1 else []
            assert [e.numel for e in dp_calls] == want_dp, (
                f"dp all-reduces of {[e.numel for e in dp_calls]} elements in the dp slice {list(dp_slice)}, expected "
                f"{want_dp} (one flat all-reduce of this stage's {stage_numel} gradient elements) in {log}"
            )
            neighbours = {pp_slice[s] for s in (c["pp"] - 1, c["pp"] + 1) if 0 <= s < shape["pp"]}
            strangers = [e for e in p2p if e.peer not in neighbours]
            assert not strangers, f"p2p with ranks that are not pipeline neighbours {sorted(neighbours)} in {log}"
            # Part 5 promises m activations forward and m gradients back, each of a microbatch's
            # (microbatch, d_model) elements, sent blocking or not, plus shape headers in a format of
            # its own (any dtype, a few elements): count the sends of a microbatch's size.
            for s, what in [(c["pp"] + 1, "activations to the next stage"), (c["pp"] - 1, "gradients to the previous")]:
                to_peer = [
                    e for e in p2p if e.op in ("send", "isend") and 0 <= s < shape["pp"] and e.peer == pp_slice[s]
                ]
                sent = [e for e in to_peer if e.numel == microbatch_numel]
                headers = [e for e in to_peer if e.numel < microbatch_numel]
                want = MICROBATCHES if 0 <= s < shape["pp"] else 0
                assert len(sent) == want and len(sent) + len(headers) == len(to_peer), (
                    f"{len(sent)} {what} of {microbatch_numel} elements (a microbatch's), expected {want}, "
                    f"besides shape headers (smaller than a microbatch), in {log}"
                )


def _mesh_3d(M, ctx):
    """A mesh with the trainer's three axes: all dp."""
    return M.ProcessMesh({"dp": ctx.world_size, "pp": 1, "tp": 1})


def _trainer(M, mesh, model=None, optimizer_cls=torch.optim.SGD, **kwargs):
    model = DeepMLP(2, D_MODEL, D_FF) if model is None else model
    return M.MeshTrainer(model, mesh, nn.MSELoss(), optimizer_cls, lr=0.1, **kwargs)


BAD_INPUT = [
    BadInput("mesh-shape-not-a-dict", lambda M, ctx: M.ProcessMesh([("dp", ctx.world_size)]), "TypeError",
             names="shape", task="task7_1"),
    BadInput("mesh-size-not-an-int", lambda M, ctx: M.ProcessMesh({"dp": float(ctx.world_size)}), "TypeError",
             names="shape", task="task7_1"),
    BadInput("mesh-product-not-the-world-size", lambda M, ctx: M.ProcessMesh({"dp": ctx.world_size, "tp": 2}),
             "ValueError", names="shape", task="task7_1"),
    BadInput("mesh-size-zero", lambda M, ctx: M.ProcessMesh({"dp": ctx.world_size, "tp": 0}), "ValueError",
             names="shape", task="task7_1"),
    BadInput("mesh-empty", lambda M, ctx: M.ProcessMesh({}), "ValueError", names="shape", task="task7_1"),
    BadInput("mesh-unknown-axis", lambda M, mesh: mesh.group("ep"), "ValueError", names="axis", task="task7_1",
             arrange=_mesh_3d),
    BadInput("hsdp-module-not-a-module", lambda M, mesh: M.HSDP("model", mesh, "dp", "tp"), "TypeError",
             names="module", task="task7_2", arrange=_mesh_3d),
    BadInput("hsdp-unknown-shard-axis", lambda M, mesh: M.HSDP(nn.Linear(2, 2), mesh, "ep", "dp"), "ValueError",
             names="shard_axis", task="task7_2", arrange=_mesh_3d),
    BadInput("hsdp-same-axes", lambda M, mesh: M.HSDP(nn.Linear(2, 2), mesh, "dp", "dp"), "ValueError",
             names="replicate_axis", task="task7_2", arrange=_mesh_3d),
    BadInput("hsdp-unit-not-a-submodule",
             lambda M, at: M.HSDP(nn.Linear(2, 2).to(at[1]), at[0], "tp", "dp", units=[nn.Linear(2, 2)]),
             "ValueError", names="units", task="task7_2",
             arrange=lambda M, ctx: (_mesh_3d(M, ctx), ctx.device)),  # FSDP's check, before the broadcast over dp
    BadInput("hsdp-sync-not-a-bool", lambda M, hsdp: hsdp.set_requires_gradient_sync("no"), "TypeError",
             names="requires_gradient_sync", task="task7_2",
             arrange=lambda M, ctx: M.HSDP(nn.Linear(2, 2).to(ctx.device), _mesh_3d(M, ctx), "tp", "dp")),
    BadInput("trainer-model-not-sequential", lambda M, mesh: _trainer(M, mesh, model=nn.Linear(2, 2)), "TypeError",
             names="model", task="task7_3", arrange=_mesh_3d),
    BadInput("trainer-zero-stage-3", lambda M, mesh: _trainer(M, mesh, zero_stage=3), "ValueError",
             names="zero_stage", task="task7_3", arrange=_mesh_3d),
    BadInput("trainer-optimizer-not-a-class", lambda M, mesh: _trainer(M, mesh, optimizer_cls=nn.Linear), "TypeError",
             names="optimizer_cls", task="task7_3", arrange=_mesh_3d),
    BadInput("trainer-unknown-schedule", lambda M, mesh: _trainer(M, mesh, schedule="pipedream"), "ValueError",
             names="schedule", task="task7_3", arrange=_mesh_3d),
    BadInput("trainer-zero-microbatches", lambda M, mesh: _trainer(M, mesh, num_microbatches=0), "ValueError",
             names="num_microbatches", task="task7_3", arrange=_mesh_3d),
    BadInput("trainer-mesh-without-pp-and-tp-axes", lambda M, mesh: _trainer(M, mesh), "ValueError", names="mesh",
             task="task7_3", arrange=lambda M, ctx: M.ProcessMesh({"dp": ctx.world_size})),
]  # fmt: skip


@pytest.mark.world_sizes(2)
@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """A bad shape, axis or argument raises a clear error naming it, on every rank, before any message."""
    assert_rejected_before_communicating(run_ranks(world_size, bad_input_rank, "mesh", case), case)
