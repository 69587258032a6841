"""The Part 4 oracle: the tensor-parallel MLP against the dense MLP it was cut from.

    from tests.oracles.tensor_parallel import MLP_SHARDS, check_shards, run_mlp

``dense_mlp`` and ``dense_run`` build the float64 dense MLP and run its forward and backward in the
parent; ``mlp_rank`` builds the tensor-parallel MLP (with or without sequence parallelism) in each
rank and returns its output, input gradient, shards, their gradients and its communication;
``run_mlp`` runs both and ``check_shards`` compares each rank's shards (``MLP_SHARDS``: which dimension
of which parameter is split) and their gradients with the dense ones.

Used by tests/test_tensor_parallel.py and its hidden counterpart.
"""

from __future__ import annotations

import torch
from torch import nn

from cs336_systems.models import MLP
from tests.harness import assert_close, run_ranks
from tests.harness.recorder import CommRecorder

B, D = 2, 12  # batch and d_model: never split by TP


def tp_sizes(tp: int) -> tuple[int, int]:
    """(sequence, d_ff) for a TP size: 2 rows of the sequence and 8 columns of d_ff per rank, so both divide by
    the TP size at every world size the harness accepts (at T = 4: 8 and 32)."""
    return 2 * tp, 8 * tp


DT = torch.float64  # exact enough that a misplaced 1/T or a doubled bias cannot hide in the tolerance


def tp_rand(*shape, seed: int, dtype=DT) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def dense_mlp(tp: int, seed: int = 0, bias: bool = True, dtype=DT) -> MLP:
    """The dense MLP (d_model D, d_ff for a TP size ``tp``) that TP size splits."""
    torch.manual_seed(seed)
    return MLP(D, tp_sizes(tp)[1], bias=bias).to(dtype)


def tp_chunk(t: torch.Tensor, rank: int, world_size: int, dim: int) -> torch.Tensor:
    return t.chunk(world_size, dim=dim)[rank]


def tp_grads(module: nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: (p.grad.detach().clone() if p.grad is not None else None) for n, p in module.named_parameters()}


def my_group(ctx, groups):
    """None (WORLD) or this rank's TP group; every rank creates every group, in the same order."""
    if groups is None:
        return None
    made = [torch.distributed.new_group(g) for g in groups]
    return next(pg for pg, g in zip(made, groups) if ctx.rank in g)


def dense_run(dense: nn.Module, x: torch.Tensor, g: torch.Tensor):
    """Dense forward and backward of sum(y * g): (y, x.grad, {name: grad})."""
    x = x.clone().requires_grad_(True)
    y = dense(x)
    y.backward(g)
    return y.detach(), x.grad, {n: p.grad for n, p in dense.named_parameters()}


def check_shards(out, dense_tensors: dict, shard_dims: dict, rank: int, world: int, what: str) -> None:
    """Every shard equals the matching slice of the dense tensor (dim None = replicated, whole)."""
    __tracebackhide__ = True
    for name, dim in shard_dims.items():
        want = dense_tensors[name] if dim is None else tp_chunk(dense_tensors[name], rank, world, dim)
        assert_close(out[name], want, what=f"rank {rank}, {what} {name}")


def mlp_rank(ctx, state, xs, gs, sequence_parallel: bool, bias: bool = True, groups=None):
    """One forward and backward of the TP MLP; forward and backward communication recorded apart."""
    TP = ctx.load("tensor_parallel")
    group = my_group(ctx, groups)
    dense = MLP(D, state["fc1.weight"].shape[0], bias=bias).to(DT)
    dense.load_state_dict(state)
    mlp = TP.TensorParallelMLP.from_dense(dense.to(ctx.device), group, sequence_parallel=sequence_parallel)
    x = xs[ctx.rank].to(ctx.device).requires_grad_(True)
    with CommRecorder() as fwd:
        y = mlp(x)
    with CommRecorder() as bwd:
        y.backward(gs[ctx.rank].to(ctx.device))
    shapes = {n: tuple(p.shape) for n, p in mlp.named_parameters()}
    return {"y": y, "x_grad": x.grad, "grads": tp_grads(mlp), "shapes": shapes, "fwd": fwd.events, "bwd": bwd.events}


MLP_SHARDS = {"fc1.weight": 0, "fc1.bias": 0, "fc2.weight": 1, "fc2.bias": None}


def run_mlp(world_size: int, sequence_parallel: bool, bias: bool = True):
    """(rank outputs, dense y, dense x.grad, dense grads); with SP rank r gets rows r of x and G."""
    dense = dense_mlp(world_size, bias=bias)
    s = tp_sizes(world_size)[0]
    x, G = tp_rand(s, B, D, seed=5), tp_rand(s, B, D, seed=6)
    y, x_grad, grads = dense_run(dense, x, G)
    local = (lambda t, r: tp_chunk(t, r, world_size, 0)) if sequence_parallel else (lambda t, r: t)
    xs, gs = [local(x, r) for r in range(world_size)], [local(G, r) for r in range(world_size)]
    outs = run_ranks(world_size, mlp_rank, dense.state_dict(), xs, gs, sequence_parallel, bias)
    return outs, local, y, x_grad, grads
