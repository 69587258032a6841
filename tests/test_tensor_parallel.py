"""Part 4: tensor and sequence parallelism (handouts/04-tensor-parallel.md).

    pytest tests/test_tensor_parallel.py                   # your implementation, TP sizes 1, 2, 4
    pytest tests/test_tensor_parallel.py -m task4_4        # only the tensor-parallel MLP

The oracle is always the dense module run alone in the pytest process: a ``models.MLP`` or an
``nn.Linear`` in float64, whose state is sent to the ranks. Each rank takes its shard with
``from_dense``, runs forward and backward (or a few optimizer steps) and returns its outputs,
gradients and the communication it made; the parent checks every rank against the matching slice
of the dense results: outputs, input gradients, and each shard's gradient against the same slice
of the dense gradient. The recorder then checks the *number and kind* of collectives per pass.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cs336_systems.models import MLP
from tests.harness import assert_close, run_ranks
from tests.harness.recorder import CommRecorder, calls, format_events

# (sequence, batch, d_model, d_ff): the sequence and d_ff divide by 1, 2 and 4.
S, B, D, DFF = 8, 2, 12, 32
DT = torch.float64  # exact enough that a misplaced 1/T or a doubled bias cannot hide in the tolerance


def _rand(*shape, seed: int, dtype=DT) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def _dense_mlp(seed: int = 0, bias: bool = True, dtype=DT) -> MLP:
    torch.manual_seed(seed)
    return MLP(D, DFF, bias=bias).to(dtype)


def _dense_linear(in_features: int, out_features: int, bias: bool, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    layer = nn.Linear(in_features, out_features, bias=bias).to(DT)
    if bias:  # nn.Linear's bias is small; make it large enough that adding it twice is obvious
        nn.init.uniform_(layer.bias, -1.0, 1.0)
    return layer


def _chunk(t: torch.Tensor, rank: int, world_size: int, dim: int) -> torch.Tensor:
    return t.chunk(world_size, dim=dim)[rank]


def kind(event) -> str:
    """all_reduce / all_gather / reduce_scatter / ... whatever API spelled the call."""
    op = event.op.lower().replace("_", "").removeprefix("pg.")
    for name in ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall"):
        if name in op:
            return {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
                    "broadcast": "broadcast", "alltoall": "all_to_all"}[name]  # fmt: skip
    return event.op


def kinds(events) -> list[str]:
    return [kind(e) for e in calls(events)]


def _grads(module: nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: (p.grad.detach().clone() if p.grad is not None else None) for n, p in module.named_parameters()}


# -- Task 4.1: the six conjugate functions, each alone ---------------------------------------------

X_SHAPE = (4, 3, 8)  # dim 0 (sequence) and the last dim divide by 1, 2, 4
CONJUGATES = [
    "copy_to_tp_region", "reduce_from_tp_region", "scatter_to_tp_region", "gather_from_tp_region",
    "reduce_scatter_to_sp_region", "all_gather_from_sp_region",
]  # fmt: skip
# What each direction must communicate when T > 1 (the pair's forward is the other's backward).
COMM = {
    "copy_to_tp_region": ([], ["all_reduce"]),
    "reduce_from_tp_region": (["all_reduce"], []),
    "scatter_to_tp_region": ([], ["all_gather"]),
    "gather_from_tp_region": (["all_gather"], []),
    "reduce_scatter_to_sp_region": (["reduce_scatter"], ["all_gather"]),
    "all_gather_from_sp_region": (["all_gather"], ["reduce_scatter"]),
}


def conjugate_rank(ctx, name: str, xs, gs, groups=None):
    """Apply one function to this rank's x, backpropagate this rank's upstream gradient g."""
    TP = ctx.load("tensor_parallel")
    group = None
    if groups is not None:  # sub-groups: every rank creates every group, in the same order
        made = [torch.distributed.new_group(g) for g in groups]
        group = next(pg for pg, g in zip(made, groups) if ctx.rank in g)
    x = xs[ctx.rank].to(ctx.device).requires_grad_(True)
    before = x.detach().clone()
    with CommRecorder() as fwd:
        y = getattr(TP, name)(x, group=group)
    with CommRecorder() as bwd:
        y.backward(gs[ctx.rank].to(ctx.device))
    return {"y": y, "grad": x.grad, "x_after": x.detach(), "x_before": before, "fwd": fwd.events,
            "bwd": bwd.events}  # fmt: skip


def _conjugate_oracle(name: str, xs, gs, members: list[int], rank: int):
    """(expected output, expected input gradient) for ``rank`` whose group is ``members``."""
    T, r = len(members), members.index(rank)
    x, g = xs[rank], gs[rank]
    xsum, gsum = sum(xs[m] for m in members), sum(gs[m] for m in members)
    cat = lambda ts, dim: torch.cat([ts[m] for m in members], dim)  # noqa: E731
    oracles = {  # lazily: each entry only makes sense for its own function's shapes
        "copy_to_tp_region": lambda: (x, gsum),
        "reduce_from_tp_region": lambda: (xsum, g),
        "scatter_to_tp_region": lambda: (_chunk(x, r, T, -1), cat(gs, -1)),
        "gather_from_tp_region": lambda: (cat(xs, -1), _chunk(g, r, T, -1)),
        "reduce_scatter_to_sp_region": lambda: (_chunk(xsum, r, T, 0), cat(gs, 0)),
        "all_gather_from_sp_region": lambda: (cat(xs, 0), _chunk(gsum, r, T, 0)),
    }
    return oracles[name]()


def _upstream_shape(name: str, world: int) -> tuple[int, ...]:
    s, b, n = X_SHAPE
    return {"scatter_to_tp_region": (s, b, n // world), "gather_from_tp_region": (s, b, n * world),
            "reduce_scatter_to_sp_region": (s // world, b, n), "all_gather_from_sp_region": (s * world, b, n),
            }.get(name, X_SHAPE)  # fmt: skip


def _check_conjugate(outs, name, xs, gs, groups) -> None:
    __tracebackhide__ = True
    for rank, out in enumerate(outs):
        members = next(g for g in groups if rank in g)
        want_y, want_grad = _conjugate_oracle(name, xs, gs, members, rank)
        where = f"rank {rank}, {name}" + (f" in group {members}" if len(groups) > 1 else "")
        assert_close(out["y"], want_y, what=f"{where}, forward output")
        assert_close(out["grad"], want_grad, what=f"{where}, backward: gradient of x")
        assert_close(out["x_after"], out["x_before"], what=f"{where}: x was modified in place", rtol=0, atol=0)
        if len(members) == 1:
            continue  # T = 1 may skip communication altogether
        for direction, events, expected in (("forward", out["fwd"], COMM[name][0]),
                                            ("backward", out["bwd"], COMM[name][1])):  # fmt: skip
            assert kinds(events) == expected, (
                f"{where}: {direction} should make exactly {expected or 'no communication'}, made "
                f"{kinds(events)}:\n{format_events(events)}"
            )
            for e in calls(events):
                assert e.group_ranks == tuple(members), f"{where}: {e.op} went to {e.group_ranks}, not {members}"


@pytest.mark.task4_1
@pytest.mark.parametrize("name", CONJUGATES)
def test_conjugate_function_forward_backward_and_communication(world_size, name):
    """Forward output and input gradient equal the oracle; communication happens in one direction."""
    xs = [_rand(*X_SHAPE, seed=10 + r) for r in range(world_size)]
    gs = [_rand(*_upstream_shape(name, world_size), seed=100 + r) for r in range(world_size)]
    outs = run_ranks(world_size, conjugate_rank, name, xs, gs)
    _check_conjugate(outs, name, xs, gs, [list(range(world_size))])


@pytest.mark.task4_1
@pytest.mark.world_sizes(4)
@pytest.mark.parametrize("name", CONJUGATES)
def test_conjugate_function_stays_inside_its_group(world_size, name):
    """With group= two TP groups {0, 1} and {2, 3}: sums and concatenations only within the group."""
    groups = [[0, 1], [2, 3]]
    xs = [_rand(*X_SHAPE, seed=20 + r) for r in range(world_size)]
    gs = [_rand(*_upstream_shape(name, 2), seed=200 + r) for r in range(world_size)]
    outs = run_ranks(world_size, conjugate_rank, name, xs, gs, groups)
    _check_conjugate(outs, name, xs, gs, groups)
