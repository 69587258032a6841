"""Parts 2-5 on a sub-group: what composing them on a mesh asks of each (handouts/07-mesh.md §7.3).

    pytest tests/test_mesh_subgroups.py --world-sizes 4

On a mesh every part runs on a slice of the world, never on the world itself. Here four ranks form
two groups, {1, 3} (which excludes global rank 0) and {0, 2}, and every public function and wrapper
of parts 2-5 runs in both at once, with different data. Each group must get exactly its own
answer: broadcasts come from the group's first rank (rank 1, not rank 0), averages divide by the
group's size (2, not 4), and the recorder shows that no call reaches a rank outside the group.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from cs336_systems.models import MLP, DeepMLP, ToyModel
from tests.harness import assert_close, run_ranks
from tests.harness.recorder import CommRecorder, calls, format_events

GROUPS = [[1, 3], [0, 2]]  # the first one excludes global rank 0
# Task 7.1: the groups a ProcessMesh makes must work with every earlier part (their own task markers
# select them with -m; their points are part 7's).
pytestmark = [pytest.mark.world_sizes(4), pytest.mark.task7_1]


def _my_group(ctx) -> tuple[list[int], dist.ProcessGroup]:
    """Both groups are created on every rank, in the same order (new_group is collective)."""
    groups = [dist.new_group(ranks) for ranks in GROUPS]
    return next((ranks, g) for ranks, g in zip(GROUPS, groups) if ctx.rank in ranks)


def _members(rank: int) -> list[int]:
    return next(ranks for ranks in GROUPS if rank in ranks)


# Data and models are drawn on the CPU, so the parent's oracle draws the same values; a rank moves them to its
# device (under NCCL, cuda:rank: a CPU model or input there fails).
def _x(rank: int, *shape: int, device: torch.device | None = None) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(100 + rank)).to(device)


def _toy(seed: int, device: torch.device | None = None) -> ToyModel:
    torch.manual_seed(seed)
    return ToyModel().to(device)


def _loss(model, x: torch.Tensor) -> torch.Tensor:
    return model(x).square().mean()


def _check_traffic(rank: int, events, what: str) -> None:
    ranks = tuple(_members(rank))
    outside = [e for e in calls(events) if e.group_ranks != ranks or (e.peer is not None and e.peer not in ranks)]
    assert not outside, f"rank {rank}, {what}: calls outside the group {list(ranks)}:\n{format_events(outside)}"


def _mean_grads(seed: int, members: list[int]) -> dict[str, torch.Tensor]:
    """Oracle: the average over the group's members of the grads of model ``seed`` on their data."""
    total: dict[str, torch.Tensor] = {}
    for r in members:
        model = _toy(seed)
        _loss(model, _x(r, 4, 10)).backward()
        for name, p in model.named_parameters():
            if p.grad is not None:
                total[name] = total.get(name, 0) + p.grad / len(members)
    return total


# ---------------------------------------------------------------------------------------------
# Part 2: both gradient all-reduce functions and both DDP wrappers
# ---------------------------------------------------------------------------------------------


def ddp_rank(ctx, kind):
    D = ctx.load("ddp")
    ranks, group = _my_group(ctx)
    wrapper = kind in ("individual", "bucketed")
    model = _toy(ctx.rank if wrapper else 0, ctx.device)  # wrappers must replace these by the group's first rank's
    with CommRecorder() as rec:
        if kind == "individual":
            ddp = D.DDPIndividualParameters(model, group=group)
        elif kind == "bucketed":
            ddp = D.DDPBucketed(model, 0.0005, group=group)
        params = {n: p.detach().clone() for n, p in model.named_parameters()}
        _loss(ddp if wrapper else model, _x(ctx.rank, 4, 10, device=ctx.device)).backward()
        if wrapper:
            ddp.finish_gradient_synchronization()
        else:
            {"naive": D.all_reduce_gradients, "flat": D.all_reduce_gradients_flat}[kind](model, group=group)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return {"params": params, "grads": grads, "events": rec.events}


@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=getattr(pytest.mark, t)) for k, t in
             [("naive", "task2_1"), ("flat", "task2_2"), ("individual", "task2_3"), ("bucketed", "task2_4")]]
)  # fmt: skip
def test_ddp_on_a_subgroup_broadcasts_from_its_first_rank_and_averages_over_its_size(world_size, kind):
    """DDP on {1, 3}: parameters come from rank 1, grads are the mean over the 2 members, nothing leaves the group."""
    outs = run_ranks(world_size, ddp_rank, kind)
    for rank, out in enumerate(outs):
        members = _members(rank)
        seed = members[0] if kind in ("individual", "bucketed") else 0
        for name, want in _toy(seed).named_parameters():
            assert_close(out["params"][name], want.detach(), what=f"rank {rank}, {kind}, {name} after wrapping "
                         f"(must be the group's first rank's, rank {members[0]})")  # fmt: skip
        want_grads = _mean_grads(seed, members)
        assert set(out["grads"]) == set(want_grads), f"rank {rank}, {kind}: grads of {sorted(out['grads'])}"
        for name, want in want_grads.items():
            assert_close(out["grads"][name], want, what=f"rank {rank}, {kind}, {name}.grad (mean over {members})")
        _check_traffic(rank, out["events"], kind)


# ---------------------------------------------------------------------------------------------
# Part 3: ZeRO stages 1 and 2, and FSDP
# ---------------------------------------------------------------------------------------------


def zero_rank(ctx, kind):
    ranks, group = _my_group(ctx)
    model = _toy(ctx.rank if kind == "fsdp" else 0, ctx.device)
    with CommRecorder() as rec:
        if kind == "fsdp":
            wrapped = ctx.load("fsdp").FSDP(model, group=group)
            opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
        else:
            wrapped = model
            opt = ctx.load("sharded_optimizer").ShardedOptimizer(
                model.parameters(), torch.optim.SGD, shard_gradients=kind == "stage2", group=group, lr=0.1
            )
        _loss(wrapped, _x(ctx.rank, 4, 10, device=ctx.device)).backward()
        if kind == "stage1":  # stage 1 expects averaged grads: average them here, on the group
            for p in model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad, group=group)
                    p.grad.div_(len(ranks))
        opt.step()
        state = wrapped.gather_full_params() if kind == "fsdp" else model.state_dict()
    return {"state": {k: v.detach().clone() for k, v in state.items()}, "events": rec.events}


@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=getattr(pytest.mark, t)) for k, t in
             [("stage1", "task3_1"), ("stage2", "task3_2"), ("fsdp", "task3_3")]]
)  # fmt: skip
def test_zero_on_a_subgroup_steps_like_one_process_on_the_groups_batch(world_size, kind):
    """ZeRO-1/2 and FSDP on {1, 3}: after one SGD step the parameters equal one process's on the group's data."""
    outs = run_ranks(world_size, zero_rank, kind)
    for rank, out in enumerate(outs):
        members = _members(rank)
        seed = members[0] if kind == "fsdp" else 0
        model = _toy(seed)
        grads = _mean_grads(seed, members)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name in grads:
                    p -= 0.1 * grads[name]
        for name, want in model.state_dict().items():
            assert_close(out["state"][name], want, what=f"rank {rank}, {kind}, {name} after one step on {members}")
        _check_traffic(rank, out["events"], kind)


# ---------------------------------------------------------------------------------------------
# Part 4: the conjugate functions and the three tensor-parallel modules
# ---------------------------------------------------------------------------------------------

TP_FUNCTIONS = {  # name -> (task marker, input shape)
    "copy_to_tp_region": ("task4_1", (4, 6)), "reduce_from_tp_region": ("task4_1", (4, 6)),
    "scatter_to_tp_region": ("task4_1", (4, 6)), "gather_from_tp_region": ("task4_1", (4, 3)),
    "reduce_scatter_to_sp_region": ("task4_5", (4, 6)), "all_gather_from_sp_region": ("task4_5", (2, 6)),
}  # fmt: skip


def tp_function_rank(ctx, name):
    ranks, group = _my_group(ctx)
    x = _x(ctx.rank, *TP_FUNCTIONS[name][1], device=ctx.device).requires_grad_()
    with CommRecorder() as rec:
        y = getattr(ctx.load("tensor_parallel"), name)(x, group=group)
        upstream = _x(50 + ctx.rank, *y.shape, device=ctx.device)
        (y * upstream).sum().backward()
    return {"y": y.detach(), "grad": x.grad, "events": rec.events}


def _tp_function_oracle(name: str, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, input grad) of ``name`` on ``rank`` with upstream grads g_r, from every member's data."""
    members = _members(rank)
    me = members.index(rank)
    shape = TP_FUNCTIONS[name][1]
    xs = [_x(r, *shape) for r in members]
    out_shape = {"copy_to_tp_region": shape, "reduce_from_tp_region": shape, "scatter_to_tp_region": (4, 3),
                 "gather_from_tp_region": (4, 6), "reduce_scatter_to_sp_region": (2, 6),
                 "all_gather_from_sp_region": (4, 6)}[name]  # fmt: skip
    gs = [_x(50 + r, *out_shape) for r in members]
    if name == "copy_to_tp_region":
        return xs[me], sum(gs)
    if name == "reduce_from_tp_region":
        return sum(xs), gs[me]
    if name == "scatter_to_tp_region":
        return xs[me].chunk(2, -1)[me], torch.cat(gs, -1)  # backward all-gathers the chunks' grads
    if name == "gather_from_tp_region":
        return torch.cat(xs, -1), gs[me].chunk(2, -1)[me]
    if name == "reduce_scatter_to_sp_region":
        return sum(xs).chunk(2, 0)[me], torch.cat(gs, 0)
    return torch.cat(xs, 0), sum(gs).chunk(2, 0)[me]


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=getattr(pytest.mark, TP_FUNCTIONS[n][0])) for n in TP_FUNCTIONS]
)  # fmt: skip
def test_tp_functions_on_a_subgroup_combine_only_the_groups_members(world_size, name):
    """Each conjugate function on {1, 3} sums, splits and gathers over the 2 members only, forward and backward."""
    outs = run_ranks(world_size, tp_function_rank, name)
    for rank, out in enumerate(outs):
        want_y, want_grad = _tp_function_oracle(name, rank)
        assert_close(out["y"], want_y, what=f"rank {rank}, {name} output on {_members(rank)}")
        assert_close(out["grad"], want_grad, what=f"rank {rank}, {name} input grad on {_members(rank)}")
        _check_traffic(rank, out["events"], name)


TP_MODULES = {"column": "task4_2", "row": "task4_3", "mlp": "task4_4", "mlp-sp": "task4_5"}


def _dense(kind: str, device: torch.device | None = None) -> nn.Module:
    torch.manual_seed(0)
    return (MLP(6, 8) if kind.startswith("mlp") else nn.Linear(6, 8)).to(device)


def tp_module_rank(ctx, kind):
    T = ctx.load("tensor_parallel")
    ranks, group = _my_group(ctx)
    me = ranks.index(ctx.rank)
    x = _x(ranks[0], 4, 6, device=ctx.device).requires_grad_()  # the group's input, replicated on its members
    with CommRecorder() as rec:
        if kind == "column":
            layer = T.ColumnParallelLinear.from_dense(_dense(kind, ctx.device), group=group, gather_output=True)
        elif kind == "row":
            layer = T.RowParallelLinear.from_dense(_dense(kind, ctx.device), group=group, input_is_parallel=False)
        else:
            layer = T.TensorParallelMLP.from_dense(_dense(kind, ctx.device), group=group,
                                                   sequence_parallel=kind == "mlp-sp")  # fmt: skip
        inp = x.chunk(2, 0)[me] if kind == "mlp-sp" else x
        y = layer(inp)
        y.square().sum().backward()
    grad = x.grad.chunk(2, 0)[me] if kind == "mlp-sp" else x.grad  # sequence parallel: this rank's rows
    return {"y": y.detach(), "grad": grad, "events": rec.events}


@pytest.mark.parametrize("kind", [pytest.param(k, marks=getattr(pytest.mark, t)) for k, t in TP_MODULES.items()])
def test_tp_modules_on_a_subgroup_match_the_dense_layer(world_size, kind):
    """Column, row, MLP and sequence-parallel MLP on {1, 3} give the dense layer's output and input grad."""
    outs = run_ranks(world_size, tp_module_rank, kind)
    for rank, out in enumerate(outs):
        members = _members(rank)
        x = _x(members[0], 4, 6).requires_grad_()
        y = _dense(kind)(x)
        y.square().sum().backward()
        me = members.index(rank)
        want_y = y.detach().chunk(2, 0)[me] if kind == "mlp-sp" else y.detach()
        assert_close(out["y"], want_y, what=f"rank {rank}, {kind} output on {members}")
        assert_close(out["grad"], x.grad.chunk(2, 0)[me] if kind == "mlp-sp" else x.grad,
                     what=f"rank {rank}, {kind} input grad on {members}")  # fmt: skip
        _check_traffic(rank, out["events"], kind)


# ---------------------------------------------------------------------------------------------
# Part 5: a pipeline on a sub-group
# ---------------------------------------------------------------------------------------------


def _deep(device: torch.device | None = None) -> DeepMLP:
    torch.manual_seed(0)
    return DeepMLP(3, 6, 8).to(device)


def pipeline_rank(ctx):
    P = ctx.load("pipeline")
    ranks, group = _my_group(ctx)
    stage = ranks.index(ctx.rank)
    module = P.split_into_stages(_deep(ctx.device), 2)[stage]
    x, y = _x(ranks[0], 4, 6, device=ctx.device), _x(10 + ranks[0], 4, 6, device=ctx.device)
    with CommRecorder() as rec:
        loss = P.PipelineStage(module, stage, 2, nn.MSELoss(), group=group).train_step(x, y, 2)
    return {"loss": loss, "grads": {n: p.grad for n, p in module.named_parameters()}, "events": rec.events}


@pytest.mark.task5_3
def test_pipeline_on_a_subgroup_trains_like_one_process(world_size):
    """A 2-stage pipeline on {1, 3} leaves the full-batch grads and loss, and talks only within its group."""
    outs = run_ranks(world_size, pipeline_rank)
    for rank, out in enumerate(outs):
        members = _members(rank)
        model = _deep()
        loss = nn.MSELoss()(model(_x(members[0], 4, 6)), _x(10 + members[0], 4, 6))
        loss.backward()
        grads = dict(model.named_parameters())
        for name, got in out["grads"].items():
            assert_close(got, grads[name].grad, what=f"rank {rank}, pipeline on {members}, {name}.grad")
        if members.index(rank) == 1:
            assert out["loss"] is not None and abs(out["loss"] - loss.item()) < 1e-5, (
                f"rank {rank}: loss {out['loss']}, expected {loss.item():.6f}"
            )
        _check_traffic(rank, out["events"], "pipeline")
