"""Hidden tests for Part 10, checkpoints (never shipped to students).

    pytest tests/staff/hidden/test_checkpoint_hidden.py --impl reference --world-sizes 1,2,4

Public counterparts in tests/test_checkpoint.py: there, layouts are cut from seeded tensors, a rank is
killed at its first, middle or last file operation, and resharding goes between the chosen world sizes.
Here: the kit's own FSDP (trained a step with AdamW) saved on 4 ranks and loaded into FSDP on 3 and 2
ranks (world 3 is never a public size), the kit's TensorParallelMLP on a 2 x 2 DP x TP grid loaded into
the dense MLP, ZeRO state on 4 ranks into DDP on 3, and a rank killed at EVERY file operation of a save.
"""

from __future__ import annotations

import pytest
import torch

from cs336_systems.models import MLP
from tests.harness import assert_close, run_ranks
from tests.harness.bad_input import names_argument
from tests.oracles.checkpoint import (
    CrashInjector,
    SimulatedCrash,
    allowance,
    check_load,
    expected_boxes,
    load_rank,
    partial_load_rank,
    rank_state,
    sabotaged_commit_rank,
    save_rank,
)
from tests.oracles.power_loss import check_power_loss


def _fsdp_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.LayerNorm(13), torch.nn.Linear(13, 5))


def fsdp_save_rank(ctx, root: str):
    """One AdamW step of the kit's FSDP, then save parameters and optimizer state; the full state."""
    C, F = ctx.load("checkpoint"), ctx.load("fsdp")
    model = F.FSDP(_fsdp_model().to(dtype=torch.float64, device=ctx.device))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(ctx.rank)
    x = torch.randn(4, 7, generator=g, dtype=torch.float64).to(ctx.device)
    model(x).pow(2).mean().backward()
    opt.step()
    params = C.fsdp_state(model)
    C.save_checkpoint(params | C.optimizer_state(opt, params) | {"step": 1}, root, 1)
    optim = C.optimizer_state(opt, params)
    return model.gather_full_params(), {
        k: (v.offsets, v.local.clone()) for k, v in optim.items() if hasattr(v, "local")
    }


def fsdp_load_rank(ctx, root: str):
    C, F = ctx.load("checkpoint"), ctx.load("fsdp")
    torch.manual_seed(123)
    model = F.FSDP(torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.LayerNorm(13), torch.nn.Linear(13, 5))
                   .to(dtype=torch.float64, device=ctx.device))  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    C.init_optimizer_state(opt)
    params = C.fsdp_state(model)
    optim = C.optimizer_state(opt, params)
    values = C.load_checkpoint(params | optim | {"step": 0}, root)
    boxes = {k: (v.offsets, v.local.clone()) for k, v in optim.items() if hasattr(v, "local")}
    return model.gather_full_params(), values, boxes


@pytest.mark.task10_2
@pytest.mark.world_sizes(4)
def test_the_kits_fsdp_saved_on_four_ranks_loads_on_three_and_two(world_size, tmp_path):
    """The kit's FSDP after an AdamW step, saved on 4 ranks, loads into FSDP on 3 and 2 ranks: same full parameters,
    same optimizer state in every new shard."""
    saved = run_ranks(world_size, fsdp_save_rank, str(tmp_path))
    full = saved[0][0]
    state = {}  # key -> {element: value} of the whole (1-D) state tensor, from the 4 ranks' boxes
    for _, boxes in saved:
        for key, ((start,), local) in boxes.items():
            state.setdefault(key, {}).update({start + i: v for i, v in enumerate(local.tolist())})
    for new in (3, 2):
        for r, (got, values, boxes) in enumerate(run_ranks(new, fsdp_load_rank, str(tmp_path))):
            assert values == {"step": 1}, f"4 -> {new} ranks, rank {r}: non-tensor values {values}"
            for key, want in full.items():
                assert_close(got[key], want, rtol=0, atol=0, what=f"FSDP 4 -> {new}, rank {r}, {key}")
            for key, ((start,), local) in boxes.items():
                want = torch.tensor([state[key][start + i] for i in range(local.numel())], dtype=local.dtype)
                assert_close(local.reshape(-1), want, rtol=0, atol=0, what=f"FSDP 4 -> {new}, rank {r}, {key}")


def tp_save_rank(ctx, root: str):
    """dp 2 x tp 2: the kit's TensorParallelMLP from one dense MLP, saved (replicas written once)."""
    C, TP = ctx.load("checkpoint"), ctx.load("tensor_parallel")
    groups = [torch.distributed.new_group([0, 1]), torch.distributed.new_group([2, 3])]
    group = groups[ctx.rank // 2]
    torch.manual_seed(0)
    dense = MLP(8, 16).to(dtype=torch.float64, device=ctx.device)
    with torch.no_grad():
        dense.fc2.bias.normal_()
    tp = TP.TensorParallelMLP.from_dense(dense, group=group)
    C.save_checkpoint(C.tensor_parallel_state(tp, group=group), root, 1)
    return {k: v.detach().clone() for k, v in dense.state_dict().items()}


def dense_load_rank(ctx, root: str):
    C = ctx.load("checkpoint")
    torch.manual_seed(5)
    dense = MLP(8, 16).to(dtype=torch.float64, device=ctx.device)
    C.load_checkpoint(C.module_state(dense), root)
    return {k: v.detach().clone() for k, v in dense.state_dict().items()}


@pytest.mark.task10_2
@pytest.mark.world_sizes(4)
def test_the_kits_tensor_parallel_mlp_on_dp_x_tp_loads_into_the_dense_mlp(world_size, tmp_path):
    """TensorParallelMLP on a 2 x 2 DP x TP grid, saved; the dense MLP (one rank, and two) loads exactly its weights."""
    dense = run_ranks(world_size, tp_save_rank, str(tmp_path))[0]
    for new in (1, 2):
        for r, got in enumerate(run_ranks(new, dense_load_rank, str(tmp_path))):
            for key, want in dense.items():
                assert_close(got[key], want, rtol=0, atol=0, what=f"dp2 x tp2 -> dense on {new}, rank {r}, {key}")


@pytest.mark.task10_2
@pytest.mark.world_sizes(4)
def test_fsdp_and_zero_layouts_saved_on_four_ranks_load_on_three(world_size, tmp_path):
    """FSDP boxes 4 -> 3 ranks (overlaps start mid-box) and ZeRO state 4 -> DDP on 3, reading only what is needed."""
    for saved, loaded in (("fsdp", "fsdp"), ("zero", "ddp")):
        root = tmp_path / saved
        run_ranks(world_size, save_rank, str(root), saved, 1)
        outs = run_ranks(3, load_rank, str(root), loaded, None)
        check_load(outs, saved, world_size, loaded, 3, root, f"{saved} on 4 -> {loaded} on 3")


def every_op_rank(ctx, root: str, flags: str, crash_rank: int, crash_at: int | None):
    C = ctx.load("checkpoint")
    if crash_at is None:  # count: a clean save of step 1
        with CrashInjector(root, flags, ctx.rank, ctx.world_size, crash_rank, None) as counter:
            C.save_checkpoint(rank_state(C, "zero", ctx.rank, ctx.world_size, seed=1, device=ctx.device), root, 1)
        return counter.ops
    try:
        with CrashInjector(root, flags, ctx.rank, ctx.world_size, crash_rank, crash_at):
            C.save_checkpoint(rank_state(C, "zero", ctx.rank, ctx.world_size, seed=2, device=ctx.device), root, 2)
    except SimulatedCrash:
        pass
    latest = torn = None
    if ctx.rank == 0:
        latest = C.latest_checkpoint(root)
        try:
            C.verify_checkpoint(root, 2)
        except C.TornCheckpoint:
            torn = True
    state = rank_state(C, "zero", ctx.rank, ctx.world_size, empty=True, device=ctx.device)
    C.load_checkpoint(state, root)
    return latest, torn, {k: (v.local if hasattr(v, "local") else v) for k, v in state.items() if hasattr(v, "local")}


@pytest.mark.task10_1
@pytest.mark.world_sizes(2)
def test_a_rank_killed_at_any_file_operation_of_a_save_leaves_the_previous_checkpoint(world_size, tmp_path):
    """Each rank killed before each of its file operations of a save in turn: step 1 stays latest, step 2 is torn."""
    root = tmp_path / "ckpt"
    for rank in range(world_size):
        (tmp_path / f"count{rank}").mkdir()
        ops = run_ranks(world_size, every_op_rank, str(root), str(tmp_path / f"count{rank}"), rank, None)[rank]
        for j in range(ops):
            flags = tmp_path / f"crash{rank}_{j}"
            flags.mkdir()
            outs = run_ranks(world_size, every_op_rank, str(root), str(flags), rank, j)
            latest, torn, _ = outs[0]
            where = f"rank {rank} killed before its file operation {j} of {ops}"
            assert latest == 1, f"{where}: latest_checkpoint is {latest}, expected 1"
            assert torn, f"{where}: verify_checkpoint(2) did not raise TornCheckpoint"
            for r, (_, _, boxes) in enumerate(outs):
                for key, want in expected_boxes("zero", r, world_size, seed=1).items():
                    assert_close(boxes[key], want, rtol=0, atol=0, what=f"{where}: rank {r}, {key!r}")


@pytest.mark.task10_1
@pytest.mark.parametrize("scheme", ["zero", "tp"])
def test_a_power_loss_after_any_operation_of_a_save_leaves_a_committed_checkpoint(world_size, tmp_path, scheme):
    """A power loss after EVERY operation of a save (unsynced data lost), ZeRO and DP x TP layouts: no name points at
    a half-written file, the marker is the last change, latest_checkpoint returns 1 or 2 and it loads and verifies."""
    scheme = f"tp{max(world_size // 2, 1)}" if scheme == "tp" else scheme
    assert check_power_loss(world_size, tmp_path, scheme, every=True) >= 2


@pytest.mark.task10_1
def test_a_power_loss_while_an_older_save_of_the_step_is_replaced(world_size, tmp_path):
    """An older committed save of step 2 is on disk when step 2 is saved again: after a power loss at any operation,
    what latest_checkpoint returns verifies and loads exactly one save's values (the old folder is removed first)."""
    check_power_loss(world_size, tmp_path, "fsdp", every=True, leftover=True)


@pytest.mark.task10_1
def test_a_file_of_rank_0_cut_short_before_the_commit_fails_the_save_on_every_rank(world_size, tmp_path):
    """Rank 0's own file cut short after its rename, before the commit: the save raises on every rank."""
    outs = run_ranks(world_size, sabotaged_commit_rank, str(tmp_path), 0)
    for r, (raised, _, _) in enumerate(outs):
        assert raised is not None, (
            f"rank {r}: save_checkpoint(step 2) returned although rank 0's own file was cut short before the commit: "
            "rank 0 checks every rank's files and sizes, its own included, and every rank raises"
        )
    assert outs[0][2] == 1, f"after the failed save of step 2, latest_checkpoint returned {outs[0][2]}, expected 1"


HUGE = 1 << 20  # float32 elements: 4 MiB, 1024 checksum blocks


def huge_save_rank(ctx, root: str):
    C = ctx.load("checkpoint")
    chunk = -(-HUGE // ctx.world_size)
    start, stop = min(ctx.rank * chunk, HUGE), min((ctx.rank + 1) * chunk, HUGE)
    local = torch.arange(start, stop, dtype=torch.float32, device=ctx.device)
    C.save_checkpoint({"huge": C.Shard(local, (HUGE,), (start,)), "step": 1}, root, 1)
    return (stop - start) * 4


@pytest.mark.task10_1
def test_a_large_state_fits_the_on_disk_allowance_of_its_checksum_blocks(world_size, tmp_path):
    """4 MiB in 1024 checksum blocks: the folder holds the data plus metadata that grows with the blocks (16 bytes
    each), not more."""
    sizes = run_ranks(world_size, huge_save_rank, str(tmp_path))
    on_disk = sum(p.stat().st_size for p in (tmp_path / "step_00000001").rglob("*") if p.is_file())
    allowed = sum(sizes) + allowance(sizes, world_size)
    assert on_disk <= allowed, (
        f"4 MiB saved on {world_size} ranks: the step folder holds {on_disk} bytes, more than the data "
        f"({sum(sizes)}) + 8 KiB + 512 per box + 16 per checksum block ({allowed})"
    )


def holes_save_rank(ctx, root: str):
    """Rank r saves rows [3r, 3r + 2) of a (3N, 3) tensor: row 3r + 2 is nobody's."""
    C = ctx.load("checkpoint")
    g = torch.arange(9 * ctx.world_size, dtype=torch.float64, device=ctx.device).view(-1, 3)
    box = g[3 * ctx.rank : 3 * ctx.rank + 2].clone()
    C.save_checkpoint({"proj.weight": C.Shard(box, tuple(g.shape), (3 * ctx.rank, 0))}, root, 1)


@pytest.mark.task10_2
def test_a_box_with_a_hole_the_checkpoint_does_not_cover_is_a_key_error(world_size, tmp_path):
    """Saved boxes with a row missing between them: a box across the hole is a KeyError naming the key; one inside a
    saved box loads."""
    run_ranks(world_size, holes_save_rank, str(tmp_path))
    total = 3 * world_size
    error, _ = run_ranks(1, partial_load_rank, str(tmp_path), 3, total)[0]
    assert error is not None and error.startswith("KeyError") and names_argument(error, "proj.weight"), (
        f"rows [0, 3) of 'proj.weight' (row 2 never saved): expected a KeyError naming 'proj.weight', got {error!r}"
    )
    error, box = run_ranks(1, partial_load_rank, str(tmp_path), 2, total)[0]
    assert error is None, f"rows [0, 2) of 'proj.weight' (saved by rank 0): {error}"
    assert_close(
        box, torch.arange(6, dtype=torch.float64).view(2, 3), rtol=0, atol=0, what="rows [0, 2) of 'proj.weight'"
    )


@pytest.mark.task10_4
def test_a_power_loss_during_an_async_save_leaves_a_committed_checkpoint(world_size, tmp_path):
    """An AsyncCheckpointer's background save, a power loss after every operation: the same promises as a
    synchronous save (the thread writes through save_checkpoint's protocol)."""
    check_power_loss(world_size, tmp_path, "fsdp", every=True, background=True)
