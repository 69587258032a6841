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

import copy

import pytest
import torch
from torch import nn

from cs336_systems.models import MLP
from tests.harness import assert_close, run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.harness.recorder import CommRecorder, calls, format_events
from tests.oracles.tensor_parallel import (
    DT,
    MLP_SHARDS,
    B,
    D,
    check_shards,
    dense_mlp,
    dense_run,
    mlp_rank,
    my_group,
    run_mlp,
    tp_chunk,
    tp_grads,
    tp_rand,
    tp_sizes,
)


def _dense_linear(in_features: int, out_features: int, bias: bool, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    layer = nn.Linear(in_features, out_features, bias=bias).to(DT)
    if bias:  # nn.Linear's bias is small; make it large enough that adding it twice is obvious
        nn.init.uniform_(layer.bias, -1.0, 1.0)
    return layer


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


# -- Task 4.1: the six conjugate functions, each alone ---------------------------------------------


def x_shape(tp: int) -> tuple[int, int, int]:
    """(sequence, batch, hidden) of the conjugate functions' inputs: the sequence and hidden dims divide by the TP
    size, whatever the world size (2 rows and 2 columns per rank)."""
    return (2 * tp, 3, 2 * tp)


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
    group = my_group(ctx, groups)
    x = xs[ctx.rank].to(ctx.device).requires_grad_(True)
    before = x.detach().clone()
    with CommRecorder() as fwd:
        y = getattr(TP, name)(x, group=group)
    g = gs[ctx.rank].to(ctx.device)
    with CommRecorder() as bwd:
        if y.shape == g.shape:  # else the parent reports the wrong forward shape, not autograd's error
            y.backward(g)
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
        "scatter_to_tp_region": lambda: (tp_chunk(x, r, T, -1), cat(gs, -1)),
        "gather_from_tp_region": lambda: (cat(xs, -1), tp_chunk(g, r, T, -1)),
        "reduce_scatter_to_sp_region": lambda: (tp_chunk(xsum, r, T, 0), cat(gs, 0)),
        "all_gather_from_sp_region": lambda: (cat(xs, 0), tp_chunk(gsum, r, T, 0)),
    }
    return oracles[name]()


def _upstream_shape(name: str, world: int) -> tuple[int, ...]:
    s, b, n = x_shape(world)
    return {"scatter_to_tp_region": (s, b, n // world), "gather_from_tp_region": (s, b, n * world),
            "reduce_scatter_to_sp_region": (s // world, b, n), "all_gather_from_sp_region": (s * world, b, n),
            }.get(name, (s, b, n))  # fmt: skip


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
    xs = [tp_rand(*x_shape(world_size), seed=10 + r) for r in range(world_size)]
    gs = [tp_rand(*_upstream_shape(name, world_size), seed=100 + r) for r in range(world_size)]
    outs = run_ranks(world_size, conjugate_rank, name, xs, gs)
    _check_conjugate(outs, name, xs, gs, [list(range(world_size))])


@pytest.mark.task4_1
@pytest.mark.world_sizes(4)
@pytest.mark.parametrize("name", CONJUGATES)
def test_conjugate_function_stays_inside_its_group(world_size, name):
    """With ``group=``, each conjugate function sums and concatenates only within its TP group.

    With group= two TP groups {0, 1} and {2, 3}: sums and concatenations only within the group."""
    groups = [[0, 1], [2, 3]]
    xs = [tp_rand(*x_shape(2), seed=20 + r) for r in range(world_size)]
    gs = [tp_rand(*_upstream_shape(name, 2), seed=200 + r) for r in range(world_size)]
    outs = run_ranks(world_size, conjugate_rank, name, xs, gs, groups)
    _check_conjugate(outs, name, xs, gs, groups)


def all_conjugates_rank(ctx, xs):
    """Every function once, on this rank's x in its own dtype (forward only)."""
    TP = ctx.load("tensor_parallel")
    x = xs[ctx.rank].to(ctx.device)
    return {name: getattr(TP, name)(x) for name in CONJUGATES}


@pytest.mark.task4_1
@pytest.mark.world_sizes(2, 4)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_conjugate_functions_keep_the_dtype(world_size, dtype):
    """float32 and bfloat16 inputs give outputs of the same dtype and the oracle's values."""
    xs = [tp_rand(*x_shape(world_size), seed=50 + r, dtype=dtype) for r in range(world_size)]
    outs = run_ranks(world_size, all_conjugates_rank, xs)
    members = list(range(world_size))
    for rank, out in enumerate(outs):
        for name in CONJUGATES:
            want, _ = _conjugate_oracle(name, [x.double() for x in xs], xs, members, rank)
            assert_close(out[name], want.to(dtype), what=f"rank {rank}, {name} of {dtype}")


# -- Tasks 4.2 and 4.3: the two parallel linears, against a dense nn.Linear -------------------------


def linear_rank(ctx, cls: str, state, x, g, option: bool):
    """Shard a dense Linear with ``cls.from_dense``, run forward on this rank's input, backward with
    this rank's upstream gradient. ``option`` is gather_output (column) or input_is_parallel (row)."""
    TP = ctx.load("tensor_parallel")
    out_features, in_features = state["weight"].shape
    dense = nn.Linear(in_features, out_features, bias="bias" in state).to(DT)
    dense.load_state_dict(state)
    kwarg = "gather_output" if cls == "ColumnParallelLinear" else "input_is_parallel"
    layer = getattr(TP, cls).from_dense(dense.to(ctx.device), **{kwarg: option})
    x = x[ctx.rank].to(ctx.device).requires_grad_(True)
    with CommRecorder() as rec:
        y = layer(x)
        y.backward(g[ctx.rank].to(ctx.device))
    params = {n: p.detach() for n, p in layer.named_parameters()}
    return {"y": y, "x_grad": x.grad, "params": params, "grads": tp_grads(layer), "events": rec.events}


@pytest.mark.task4_2
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("gather_output", [False, True], ids=["sharded-output", "gather_output"])
def test_column_parallel_linear_matches_the_dense_slice(world_size, gather_output, bias):
    """ColumnParallelLinear's output, x.grad and shard grads equal the matching slices of the dense layer's.

    Rank r's output is columns r of the dense output (or all of it, gathered); x.grad is the dense
    x.grad on every rank (f all-reduced it); weight/bias grads are rows r of the dense grads."""
    s, d_ff = tp_sizes(world_size)
    dense = _dense_linear(D, d_ff, bias)
    x, G = tp_rand(s, B, D, seed=1), tp_rand(s, B, d_ff, seed=2)
    y, x_grad, grads = dense_run(dense, x, G)
    gs = [G if gather_output else tp_chunk(G, r, world_size, -1) for r in range(world_size)]
    outs = run_ranks(world_size, linear_rank, "ColumnParallelLinear", dense.state_dict(), [x] * world_size, gs,
                     gather_output)  # fmt: skip
    shard_dims = {"weight": 0, "bias": 0} if bias else {"weight": 0}
    for r, out in enumerate(outs):
        assert_close(out["y"], y if gather_output else tp_chunk(y, r, world_size, -1), what=f"rank {r}, output")
        assert_close(out["x_grad"], x_grad, what=f"rank {r}, gradient of the input x")
        check_shards(out["params"], dict(dense.named_parameters()), shard_dims, r, world_size, "parameter")
        check_shards(out["grads"], grads, shard_dims, r, world_size, "gradient of")


@pytest.mark.task4_3
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("input_is_parallel", [True, False], ids=["parallel-input", "replicated-input"])
def test_row_parallel_linear_matches_dense_and_adds_the_bias_once(world_size, input_is_parallel, bias):
    """RowParallelLinear's output equals the dense layer's on every rank, with the bias added once.

    The output is the full dense output on every rank (partial sums all-reduced, bias added once);
    weight grads are columns r of the dense grad; the replicated bias gets the whole dense grad."""
    s, d_ff = tp_sizes(world_size)
    dense = _dense_linear(d_ff, D, bias)
    x, G = tp_rand(s, B, d_ff, seed=3), tp_rand(s, B, D, seed=4)
    y, x_grad, grads = dense_run(dense, x, G)
    xs = [x if not input_is_parallel else tp_chunk(x, r, world_size, -1) for r in range(world_size)]
    outs = run_ranks(world_size, linear_rank, "RowParallelLinear", dense.state_dict(), xs, [G] * world_size,
                     input_is_parallel)  # fmt: skip
    shard_dims = {"weight": 1, "bias": None} if bias else {"weight": 1}
    for r, out in enumerate(outs):
        assert_close(out["y"], y, what=f"rank {r}, output (the bias must be added once, after the sum)")
        want_x_grad = x_grad if not input_is_parallel else tp_chunk(x_grad, r, world_size, -1)
        assert_close(out["x_grad"], want_x_grad, what=f"rank {r}, gradient of the input x")
        check_shards(out["params"], dict(dense.named_parameters()), shard_dims, r, world_size, "parameter")
        check_shards(out["grads"], grads, shard_dims, r, world_size, "gradient of")


def fresh_layer_rank(ctx, layer: str):
    """A layer built by its constructor (no dense module): its parameters, for shapes, init and bias."""
    TP = ctx.load("tensor_parallel")
    T = ctx.world_size
    built = TP.ColumnParallelLinear(64, 32 * T) if layer == "column" else TP.RowParallelLinear(64 * T, 32)
    return {n: p.detach() for n, p in built.named_parameters()}


@pytest.mark.parametrize("layer", [pytest.param("column", marks=pytest.mark.task4_2),
                                   pytest.param("row", marks=pytest.mark.task4_3)])  # fmt: skip
def test_fresh_layers_have_shard_shapes_linear_init_and_a_replicated_row_bias(world_size, layer):
    """Fresh layers have shard shapes, nn.Linear's init over the full fan-in, and (row) one replicated bias.

    Column: weight (out/T, in); Row: weight (out, in/T) and bias (out,), identical on every rank.
    Weights follow nn.Linear's U(-1/sqrt(in), 1/sqrt(in)) with the *full* in_features as fan-in."""
    outs = run_ranks(world_size, fresh_layer_rank, layer)
    fan_in = 64 if layer == "column" else 64 * world_size
    for r, params in enumerate(outs):
        w, b = params["weight"], params["bias"]
        assert tuple(w.shape) == (32, 64), f"rank {r}: {layer} weight shard {tuple(w.shape)}, expected (32, 64)"
        if layer == "column":
            assert tuple(b.shape) == (32,), f"rank {r}: column bias shard {tuple(b.shape)}, expected (32,)"
        else:
            assert tuple(b.shape) == (32,), f"rank {r}: the row bias is whole, got {tuple(b.shape)}"
            assert_close(b, outs[0]["bias"], what=f"rank {r}, row bias (replicated: same on all ranks)")
        bound = fan_in**-0.5
        assert w.abs().max() <= bound, (
            f"rank {r}: {layer} weight has |w| up to {w.abs().max():.4f} > 1/sqrt({fan_in}) = {bound:.4f}: "
            "initialize with the full layer's fan-in, as nn.Linear would"
        )
        assert w.abs().max() > 0.8 * bound and w.std() > 0.4 * bound, (
            f"rank {r}: {layer} weight is too small for U(-1/sqrt({fan_in}), 1/sqrt({fan_in}))"
        )


# -- Task 4.4: the tensor-parallel MLP; Task 4.5: with sequence parallelism ------------------------


# The MLP without (task 4.4) and with (task 4.5) sequence parallelism.
TP_OR_SP = [pytest.param(False, id="tp", marks=pytest.mark.task4_4),
            pytest.param(True, id="tp+sp", marks=pytest.mark.task4_5)]  # fmt: skip


@pytest.mark.task4_4
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_tp_mlp_matches_the_dense_mlp_outputs_and_gradients(world_size, bias):
    """Output and x.grad equal the dense MLP's on every rank; each shard's grad is its dense slice."""
    outs, _, y, x_grad, grads = run_mlp(world_size, False, bias)
    shards = {n: d for n, d in MLP_SHARDS.items() if bias or "bias" not in n}
    for r, out in enumerate(outs):
        assert_close(out["y"], y, what=f"rank {r}, TP MLP output")
        assert_close(out["x_grad"], x_grad, what=f"rank {r}, gradient of the input x")
        check_shards(out["grads"], grads, shards, r, world_size, "gradient of")


@pytest.mark.task4_5
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_sequence_parallel_mlp_matches_the_dense_rows(world_size, bias):
    """With sequence parallelism rank r's output and x.grad are rows r of the dense MLP's.

    With SP rank r holds rows r of x (dim 0, the sequence): its output and x.grad are rows r of the
    dense ones, and every parameter's grad (the replicated fc2.bias too, when there is one) equals its
    dense slice. An MLP built with ``bias=False`` has no fc2.bias to add."""
    outs, local, y, x_grad, grads = run_mlp(world_size, True, bias=bias)
    shards = {name: dim for name, dim in MLP_SHARDS.items() if bias or "bias" not in name}
    for r, out in enumerate(outs):
        where = f"rank {r}{'' if bias else ', no biases'}"
        assert_close(out["y"], local(y, r), what=f"{where}, sequence-parallel output (rows {r} of {world_size})")
        assert_close(out["x_grad"], local(x_grad, r), what=f"{where}, gradient of this rank's rows of x")
        check_shards(out["grads"], grads, shards, r, world_size, "gradient of")


def _check_comm(outs, expected_fwd, expected_bwd, activation_numel: int, what: str) -> None:
    """Exactly the expected collectives in each pass, each moving one activation-sized tensor."""
    __tracebackhide__ = True
    for r, out in enumerate(outs):
        for direction, events, expected in (("forward", out["fwd"], expected_fwd),
                                            ("backward", out["bwd"], expected_bwd)):  # fmt: skip
            got = kinds(events)
            assert got == expected, (
                f"rank {r}, {what}: the {direction} pass should make exactly {expected}, made {got}:\n"
                f"{format_events(events)}"
            )
            for e in calls(events):
                assert e.numel == activation_numel[kind(e)], (
                    f"rank {r}, {what}, {direction}: {e.op} moved {e.numel} elements, expected "
                    f"{activation_numel[kind(e)]} (one activation of shape (s, b, d_model))"
                )


@pytest.mark.task4_4
@pytest.mark.world_sizes(2, 4)
def test_tp_mlp_makes_one_all_reduce_per_pass_and_stores_1_over_t_of_the_weights(world_size):
    """The TP MLP makes one all-reduce per pass (forward, backward) and stores 1/T of the weights.

    Forward: one all-reduce of (s, b, d_model) (g after fc2); backward: one (f before fc1).
    Each rank stores 1/T of fc1.weight and fc2.weight; fc2.bias is replicated."""
    outs, *_ = run_mlp(world_size, False)
    s, d_ff = tp_sizes(world_size)
    _check_comm(outs, ["all_reduce"], ["all_reduce"], {"all_reduce": s * B * D}, "TP MLP")
    want = {"fc1.weight": (d_ff // world_size, D), "fc1.bias": (d_ff // world_size,),
            "fc2.weight": (D, d_ff // world_size), "fc2.bias": (D,)}  # fmt: skip
    for r, out in enumerate(outs):
        assert out["shapes"] == want, f"rank {r}: parameter shapes {out['shapes']}, expected {want}"


@pytest.mark.task4_5
@pytest.mark.world_sizes(2, 4)
def test_sequence_parallel_mlp_swaps_each_all_reduce_for_all_gather_and_reduce_scatter(world_size):
    """With sequence parallelism each all-reduce becomes an all-gather and a reduce-scatter, in both passes.

    Forward: all-gather of x's rows (s/T, b, d) then reduce-scatter of (s, b, d); backward: the
    same two (the reduce-scatter's backward all-gathers, the all-gather's reduce-scatters). No all-reduce."""
    outs, *_ = run_mlp(world_size, True)
    s = tp_sizes(world_size)[0]
    sizes = {"all_gather": s * B * D // world_size, "reduce_scatter": s * B * D}
    _check_comm(outs, ["all_gather", "reduce_scatter"], ["all_gather", "reduce_scatter"], sizes, "SP MLP")


@pytest.mark.world_sizes(4)
@pytest.mark.parametrize("sequence_parallel", TP_OR_SP)
def test_tp_mlp_in_two_tp_groups_of_two(world_size, sequence_parallel):
    """Two TP groups of two each match the dense MLP on their own batch; no message leaves a group.

    2-way data x 2-way tensor parallelism: groups {0, 1} and {2, 3} each run the MLP on their own
    batch; every rank matches the dense MLP on its group's batch, and no message leaves the group."""
    groups = [[0, 1], [2, 3]]
    dense = dense_mlp(2, seed=3)
    s = tp_sizes(2)[0]
    batches = [(tp_rand(s, B, D, seed=60 + i), tp_rand(s, B, D, seed=70 + i)) for i in range(2)]
    dense_runs = [dense_run(copy.deepcopy(dense), x, G) for x, G in batches]  # fresh grads each
    local = (lambda t, r: tp_chunk(t, r % 2, 2, 0)) if sequence_parallel else (lambda t, r: t)
    xs = [local(batches[r // 2][0], r) for r in range(world_size)]
    gs = [local(batches[r // 2][1], r) for r in range(world_size)]
    outs = run_ranks(world_size, mlp_rank, dense.state_dict(), xs, gs, sequence_parallel, True, groups)
    for r, out in enumerate(outs):
        y, x_grad, grads = dense_runs[r // 2]
        what = f"rank {r} in TP group {groups[r // 2]}"
        assert_close(out["y"], local(y, r), what=f"{what}, output")
        assert_close(out["x_grad"], local(x_grad, r), what=f"{what}, gradient of the input x")
        check_shards(out["grads"], grads, MLP_SHARDS, r % 2, 2, f"(global rank {r}) gradient of")
        for e in calls(out["fwd"] + out["bwd"]):
            assert e.group_ranks == tuple(groups[r // 2]), f"{what}: {e.op} went to {e.group_ranks}"


def training_rank(ctx, state, batches, sequence_parallel: bool, lr: float):
    """A few SGD-with-momentum steps on the MSE loss; returns every step's loss and parameters."""
    TP = ctx.load("tensor_parallel")
    dense = MLP(D, state["fc1.weight"].shape[0]).to(DT)
    dense.load_state_dict(state)
    mlp = TP.TensorParallelMLP.from_dense(dense.to(ctx.device), sequence_parallel=sequence_parallel)
    opt = torch.optim.SGD(mlp.parameters(), lr=lr, momentum=0.9)
    history = []
    for x, target in batches:
        x, target = x.to(ctx.device), target.to(ctx.device)
        elements = target.numel()  # of the whole batch: the loss is the dense mean
        if sequence_parallel:  # this rank's rows; the local sums add up to the dense mean over all rows
            x, target = tp_chunk(x, ctx.rank, ctx.world_size, 0), tp_chunk(target, ctx.rank, ctx.world_size, 0)
        loss = ((mlp(x) - target) ** 2).sum() / elements
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append({"loss": loss.detach(), "params": {n: p.detach().clone() for n, p in mlp.named_parameters()}})
    return history


@pytest.mark.parametrize("sequence_parallel", TP_OR_SP)
def test_training_steps_stay_equal_to_the_dense_mlp_trained_alone(world_size, sequence_parallel):
    """After every SGD(momentum) step each shard equals its slice of the dense MLP trained alone.

    After every SGD(momentum) step each shard equals the matching slice of the dense MLP trained
    on the same batches in one process (so any wrong gradient scale shows up at step 1)."""
    dense = dense_mlp(world_size, seed=7)
    state = {k: v.clone() for k, v in dense.state_dict().items()}
    s = tp_sizes(world_size)[0]
    batches = [(tp_rand(s, B, D, seed=30 + i), tp_rand(s, B, D, seed=40 + i)) for i in range(3)]
    history = run_ranks(world_size, training_rank, state, batches, sequence_parallel, 0.5)
    opt = torch.optim.SGD(dense.parameters(), lr=0.5, momentum=0.9)
    for step, (x, target) in enumerate(batches):
        loss = ((dense(x) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        params = dict(dense.named_parameters())
        if sequence_parallel:  # each rank's loss covers its own rows: the ranks' losses add up
            total = torch.stack([history[r][step]["loss"] for r in range(world_size)]).sum()
            assert_close(total, loss.detach(), what=f"step {step}, sum of the ranks' losses")
        for r in range(world_size):
            got = history[r][step]
            if not sequence_parallel:
                assert_close(got["loss"], loss.detach(), what=f"rank {r}, step {step}, loss")
            check_shards(got["params"], params, MLP_SHARDS, r, world_size, f"step {step}, parameter")


# -- bad input: a clear error on every rank, before any communication ------------------------------

# The stub's docstrings promise errors naming the argument: ``x`` for the conjugate functions.
BAD_INPUT = [
    BadInput("scatter-last-dim-not-divisible",
             lambda TP, ctx: TP.scatter_to_tp_region(torch.ones(2, 4 * ctx.world_size + 1, device=ctx.device)),
             "ValueError", names="x", task="task4_1"),
    BadInput("reduce_scatter-dim-0-not-divisible",
             lambda TP, ctx: TP.reduce_scatter_to_sp_region(torch.ones(4 * ctx.world_size + 1, 2, device=ctx.device)),
             "ValueError", names="x", task="task4_1"),
    BadInput("copy-of-a-list", lambda TP, ctx: TP.copy_to_tp_region([1.0, 2.0]),
             "TypeError", names="x", task="task4_1"),
    BadInput("column-out_features-not-divisible", lambda TP, ctx: TP.ColumnParallelLinear(8, 4 * ctx.world_size + 1),
             "ValueError", names="out_features", task="task4_2"),
    BadInput("column-from_dense-of-an-MLP",
             lambda TP, ctx: TP.ColumnParallelLinear.from_dense(MLP(4, 4 * ctx.world_size)),
             "TypeError", names="dense", task="task4_2"),
    BadInput("row-in_features-not-divisible", lambda TP, ctx: TP.RowParallelLinear(4 * ctx.world_size + 1, 8),
             "ValueError", names="in_features", task="task4_3"),
    BadInput("mlp-d_ff-not-divisible", lambda TP, ctx: TP.TensorParallelMLP(8, 4 * ctx.world_size + 1),
             "ValueError", names="d_ff", task="task4_4"),
    BadInput("mlp-from_dense-of-a-Linear",
             lambda TP, ctx: TP.TensorParallelMLP.from_dense(nn.Linear(4, 4 * ctx.world_size)),
             "TypeError", names="dense", task="task4_4"),
]  # fmt: skip


@pytest.mark.world_sizes(2, 4)
@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """Bad input raises the promised ValueError/TypeError naming the argument, on every rank, before any message."""
    assert_rejected_before_communicating(
        run_ranks(world_size, bad_input_rank, "tensor_parallel", case, deadline=15), case
    )
