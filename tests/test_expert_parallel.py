"""Part 8: expert parallelism (handouts/08-expert-parallel.md).

    pytest tests/test_expert_parallel.py                   # your implementation, EP sizes 1, 2, 4
    pytest tests/test_expert_parallel.py -m task8_2        # only the expert-parallel MoE layer

The oracle is the dense ``models.MoE`` run alone in the pytest process, in float64, on the
concatenation of every rank's tokens (rank 0's first). Each rank takes its part with ``from_dense``,
runs forward and backward on its own tokens (or a few AdamW steps) and returns its outputs,
gradients and the communication it made; the parent checks every rank against the matching rows of
the dense output and input gradient, the router gradient of the dense loss restricted to that rank's
tokens, and each local expert's gradient against the same expert of the dense MoE. Routing is made
skewed on purpose in some tests (one expert takes most tokens, a rank receives none) and capacity
makes the dense layer drop tokens: the parallel layer must drop exactly the same ones.
"""

from __future__ import annotations

import pytest
import torch

from cs336_systems.models import MLP, MoE
from tests.harness import assert_close, run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.harness.recorder import CommRecorder, calls, format_events
from tests.oracles.moe import (
    DFF,
    D,
    E,
    copy_moe,
    dense_moe,
    expert_params,
    grad_or_zeros,
    load_moe,
    moe_rank,
    moe_state,
    ragged_oracle,
    rand,
)

# The layers hold E = 8 experts, E / N per rank: these tests run where N divides 8 (the graders' 2, 4, 8 included).
EXPERTS_SPLIT_EVENLY = pytest.mark.world_sizes(
    1, 2, 4, 8, reason=f"{E} experts split evenly: the world size divides {E}"
)

TOKENS = (2, 3)  # each rank's x is (2, 3, D): 6 tokens
AUX_COEF = 0.01


def _tokens(world_size: int, seed: int, skew: bool = False) -> list[torch.Tensor]:
    return [rand(*TOKENS, D, seed=seed + r) + (1.0 if skew else 0.0) for r in range(world_size)]


def _kind(event) -> str:
    op = event.op.lower().replace("_", "").removeprefix("pg.")
    for name, kind in (("alltoall", "all_to_all"), ("allgather", "all_gather"), ("allreduce", "all_reduce")):
        if name in op:
            return kind
    return event.op


# -- Task 8.1: the uneven all-to-all as an autograd function ------------------------------------------

SPLIT_PATTERNS = {
    "uneven": lambda i, j: (i + 2 * j) % 3 + (i == j),  # some pairs exchange nothing
    "rank-0-sends-nothing": lambda i, j: 0 if i == 0 else (i * j) % 2 + 1,
}


def all_to_all_rank(ctx, splits, xs, gs, contiguous=True):
    """Send rows splits[rank][j] to rank j; backpropagate this rank's upstream gradient. Not
    ``contiguous``: x and the upstream gradient are column-major views (same values)."""
    EP = ctx.load("expert_parallel")
    x = xs[ctx.rank].to(ctx.device)
    if not contiguous:
        x = x.t().contiguous().t()
    x.requires_grad_(True)
    before = x.detach().clone()
    output_splits = [splits[i][ctx.rank] for i in range(ctx.world_size)]
    with CommRecorder() as fwd:
        y = EP.all_to_all_tokens(x, output_splits, list(splits[ctx.rank]))
    g = gs[ctx.rank].to(ctx.device)
    if not contiguous:
        g = g.t().contiguous().t()
    with CommRecorder() as bwd:
        if y.shape == g.shape:  # else the parent reports the wrong forward shape
            y.backward(g)
    return {"y": y, "grad": x.grad, "x_after": x.detach(), "x_before": before, "fwd": fwd.events, "bwd": bwd.events}


def _chunks(t: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    return list(t.split(sizes))


@pytest.mark.task8_1
@pytest.mark.parametrize("pattern", SPLIT_PATTERNS)
def test_all_to_all_tokens_delivers_rows_and_sends_gradients_back(world_size, pattern):
    """Rank j receives, in rank order, the rows every rank i addressed to it; the gradient of each
    row returns to the rank it came from; one all-to-all per direction (W > 1); x is untouched."""
    W = world_size
    splits = [[SPLIT_PATTERNS[pattern](i, j) for j in range(W)] for i in range(W)]
    xs = [rand(sum(splits[i]), 3, seed=10 + i) for i in range(W)]
    gs = [rand(sum(splits[i][j] for i in range(W)), 3, seed=20 + j) for j in range(W)]
    outs = run_ranks(W, all_to_all_rank, splits, xs, gs)
    sent = [_chunks(xs[i], splits[i]) for i in range(W)]  # sent[i][j]: rows from i to j
    received_grad = [_chunks(gs[j], [splits[i][j] for i in range(W)]) for j in range(W)]  # [j][i]
    for r, out in enumerate(outs):
        where = f"rank {r}, splits {splits}"
        assert_close(out["y"], torch.cat([sent[i][r] for i in range(W)]), what=f"{where}: received rows")
        want_grad = torch.cat([received_grad[j][r] for j in range(W)])
        assert_close(out["grad"], want_grad, what=f"{where}: gradient of x (each row's must come back to it)")
        assert_close(out["x_after"], out["x_before"], what=f"{where}: x was modified", rtol=0, atol=0)
        if W == 1:
            continue
        for direction, events in (("forward", out["fwd"]), ("backward", out["bwd"])):
            got = [_kind(e) for e in calls(events)]
            assert got == ["all_to_all"], (
                f"{where}: the {direction} pass should make exactly one all-to-all, made {got}:\n"
                f"{format_events(events)}"
            )


@pytest.mark.task8_1
@pytest.mark.world_sizes(2)
def test_all_to_all_tokens_takes_a_non_contiguous_x(world_size):
    """x and the upstream gradient are column-major views (a slice or a transpose in a caller):
    the rows still arrive, and their gradients come back, as for a contiguous x."""
    W = world_size
    splits = [[SPLIT_PATTERNS["uneven"](i, j) for j in range(W)] for i in range(W)]
    xs = [rand(sum(splits[i]), 3, seed=30 + i) for i in range(W)]
    gs = [rand(sum(splits[i][j] for i in range(W)), 3, seed=40 + j) for j in range(W)]
    outs = run_ranks(W, all_to_all_rank, splits, xs, gs, False)
    sent = [_chunks(xs[i], splits[i]) for i in range(W)]
    received_grad = [_chunks(gs[j], [splits[i][j] for i in range(W)]) for j in range(W)]
    for r, out in enumerate(outs):
        where = f"rank {r}, splits {splits}, non-contiguous x"
        assert_close(out["y"], torch.cat([sent[i][r] for i in range(W)]), what=f"{where}: received rows")
        want_grad = torch.cat([received_grad[j][r] for j in range(W)])
        assert_close(out["grad"], want_grad, what=f"{where}: gradient of x")


# -- Task 8.2: the expert-parallel layer against the dense MoE ---------------------------------------


def _dense_runs(dense: MoE, xs, gs):
    """The oracle, per rank r: the dense MoE on all tokens, loss sum(y * g restricted to rank r's
    rows) + aux_loss of rank r's tokens alone. Returns (y, x grads, per-rank router grads, per-rank
    aux, expert grads summed over the ranks' losses: the gradient of the whole loss)."""
    W = len(xs)
    x_all = torch.cat([x.reshape(-1, D) for x in xs])  # (W*n, D)
    n = x_all.shape[0] // W
    router_grads, aux, x_grad = [], [], torch.zeros_like(x_all)
    experts = copy_moe(dense)
    experts.zero_grad()
    for r in range(W):
        model = copy_moe(dense)
        xa = x_all.clone().requires_grad_(True)
        y = model(xa)
        mask = torch.zeros_like(x_all)
        mask[r * n : (r + 1) * n] = gs[r].reshape(-1, D)
        model(xa[r * n : (r + 1) * n])  # only for aux_loss, which belongs to rank r's tokens
        aux.append(model.aux_loss.detach())
        ((y * mask).sum() + model.aux_loss).backward()
        router_grads.append(model.router.weight.grad)
        x_grad[r * n : (r + 1) * n] = xa.grad[r * n : (r + 1) * n]
        for mine, theirs in zip(experts.parameters(), model.parameters()):
            mine.grad = theirs.grad.clone() if mine.grad is None else mine.grad + theirs.grad
    return dense(x_all).detach(), x_grad, router_grads, aux, experts


def _check_moe(outs, dense: MoE, xs, gs, what: str) -> None:
    __tracebackhide__ = True
    W = len(outs)
    L = E // W
    y, x_grad, router_grads, aux, graded = _dense_runs(dense, xs, gs)
    n = y.shape[0] // W
    wheres = [f"rank {r} of {W}, {what}" for r in range(W)]
    for r, out in enumerate(outs):  # first where things live: a misplaced expert explains everything else
        where = wheres[r]
        assert_close(out["router"], dense.router.weight, what=f"{where}: router weight (replicated)")
        assert out["first_expert"] == r * L, f"{where}: first_expert is {out['first_expert']}, expected {r * L}"
        assert len(out["experts"]) == L, f"{where}: holds {len(out['experts'])} experts, expected E/W = {L}"
        for i, e in enumerate(range(r * L, (r + 1) * L)):
            for name, p in dense.experts[e].named_parameters():
                assert_close(out["experts"][i][name], p, what=f"{where}: experts[{i}].{name} (must be expert {e})")
    for r, out in enumerate(outs):  # then forward, on every rank, before any gradient
        rows = slice(r * n, (r + 1) * n)
        assert_close(out["y"], y[rows].view(*TOKENS, D), what=f"{wheres[r]}: output (rows of rank {r})")
        assert_close(out["aux"], aux[r], what=f"{wheres[r]}: aux_loss (of this rank's tokens)")
    for r, out in enumerate(outs):
        where, rows = wheres[r], slice(r * n, (r + 1) * n)
        assert_close(out["x_grad"], x_grad[rows].view(*TOKENS, D), what=f"{where}: gradient of x")
        assert_close(out["router_grad"], router_grads[r], what=f"{where}: router grad (this rank's tokens' loss)")
        for i in range(L):
            e = r * L + i
            for name, p in graded.experts[e].named_parameters():
                what_ = f"{where}: experts[{i}].{name}.grad (expert {e}, every rank's tokens)"
                got, what_ = grad_or_zeros(out["expert_grads"][i][name], p.grad, what_)
                assert_close(got, p.grad, what=what_)


CONFIGS = {  # id: (top_k, capacity_factor)
    "top1": (1, None),
    "top2": (2, None),
    "top1-capacity1.0": (1, 1.0),
    "top2-capacity0.75": (2, 0.75),
}


@EXPERTS_SPLIT_EVENLY
@pytest.mark.task8_2
@pytest.mark.parametrize("config", CONFIGS)
def test_moe_matches_the_dense_moe_on_the_concatenated_tokens(world_size, config):
    """Outputs, x.grad, aux_loss, router and expert gradients equal the dense MoE's on every rank's
    tokens concatenated; with capacity the same assignments are dropped (and contribute zero)."""
    top_k, capacity_factor = CONFIGS[config]
    dense = dense_moe(top_k, capacity_factor, seed=1)
    xs, gs = _tokens(world_size, seed=100), _tokens(world_size, seed=200)
    if capacity_factor is not None:  # the test means something only if the dense layer drops tokens
        x_all = torch.cat(xs).view(-1, D)
        unlimited = copy_moe(dense, capacity_factor=None)
        assert not torch.allclose(dense(x_all), unlimited(x_all)), "test setup: capacity should drop tokens"
    outs = run_ranks(world_size, moe_rank, moe_state(dense), top_k, capacity_factor, xs, gs)
    _check_moe(outs, dense, xs, gs, config)


def _assignments_per_expert(dense: MoE, x: torch.Tensor) -> torch.Tensor:
    """(E,) how many of x's tokens chose each expert (no capacity)."""
    chosen = dense.router(x.reshape(-1, D)).softmax(-1).topk(dense.top_k, dim=-1).indices
    return torch.bincount(chosen.reshape(-1), minlength=E)


@pytest.mark.task8_2
@pytest.mark.world_sizes(2, 4)
@pytest.mark.parametrize("config", ["top2", "top2-capacity0.75"])
def test_skewed_routing_where_a_rank_receives_no_token(world_size, config):
    """Expert 0 takes most tokens and the last two experts none (at EP 4 the last rank receives
    nothing in forward and sends back nothing): everything still equals the dense MoE."""
    top_k, capacity_factor = CONFIGS[config]
    dense = dense_moe(top_k, capacity_factor, seed=2, skew=True)
    xs, gs = _tokens(world_size, seed=300, skew=True), _tokens(world_size, seed=400)
    load = _assignments_per_expert(dense, torch.cat(xs))
    assert load[-2:].sum() == 0 and load[0] >= load.sum() / top_k / 2, f"test setup: routing not skewed: {load}"
    outs = run_ranks(world_size, moe_rank, moe_state(dense), top_k, capacity_factor, xs, gs)
    _check_moe(outs, dense, xs, gs, f"skewed {config}")


@pytest.mark.task8_2
@pytest.mark.world_sizes(2, 4)
def test_one_counts_exchange_one_dispatch_and_one_combine_per_pass(world_size):
    """Forward: one all-gather of the (E, k) int64 counts, then the dispatch all-to-all (this rank's
    n*k assignment rows) and the combine all-to-all (the rows its experts received); backward: the
    combine's reverse (the n*k output gradients go back to the experts) then the dispatch's reverse,
    and nothing else. No token ever goes through an all-gather."""
    top_k = 2
    dense = dense_moe(top_k, None, seed=2, skew=True)
    xs, gs = _tokens(world_size, seed=500, skew=True), _tokens(world_size, seed=600)
    outs = run_ranks(world_size, moe_rank, moe_state(dense), top_k, None, xs, gs)
    L, n = E // world_size, TOKENS[0] * TOKENS[1]
    load = _assignments_per_expert(dense, torch.cat(xs))
    for r, out in enumerate(outs):
        received = int(load[r * L : (r + 1) * L].sum())
        want = [("forward", out["fwd"], [("all_gather", E * top_k), ("all_to_all", n * top_k * D),
                                         ("all_to_all", received * D)]),
                ("backward", out["bwd"], [("all_to_all", n * top_k * D), ("all_to_all", received * D)])]  # fmt: skip
        for direction, events, expected in want:
            got = [(_kind(e), e.numel) for e in calls(events)]
            assert got == expected, (
                f"rank {r} of {world_size}: the {direction} pass should make exactly {expected} "
                f"((collective, elements this rank puts in); rank {r}'s experts receive {received} rows), "
                f"made {got}:\n{format_events(events)}"
            )
            gathers = [e for e in calls(events) if _kind(e) == "all_gather"]
            assert all(e.dtype == "int64" for e in gathers), f"rank {r}: only counts (int64) may be all-gathered"


@pytest.mark.task8_2
@pytest.mark.world_sizes(2, 4)
def test_ranks_with_different_token_counts_share_one_capacity(world_size):
    """Rank r holds 2 + 4(W - 1 - r) tokens (6 and 2 at W = 2; top-1, capacity 1.0): outputs and x.grad
    equal the dense MoE's on the concatenated tokens, so every rank computes the capacity from the
    group's N tokens (through the counts all-gather), not from its own count times W."""
    dense = dense_moe(1, 1.0, seed=6)
    rows = [1 + 2 * (world_size - 1 - r) for r in range(world_size)]
    xs = [rand(rows[r], 2, D, seed=900 + r) for r in range(world_size)]
    gs = [rand(rows[r], 2, D, seed=950 + r) for r in range(world_size)]
    x_all = torch.cat([x.reshape(-1, D) for x in xs])
    assert not torch.allclose(dense(x_all), copy_moe(dense, capacity_factor=None)(x_all)), "setup: nothing dropped"
    outs = run_ranks(world_size, moe_rank, moe_state(dense), 1, 1.0, xs, gs)
    for r, (out, (y, x_grad)) in enumerate(zip(outs, ragged_oracle(dense, xs, gs))):
        where = f"rank {r} of {world_size} ({y.shape[0] * 2} of {x_all.shape[0]} tokens), top1-capacity1.0"
        assert_close(out["y"], y, what=f"{where}: output (rows of rank {r}; capacity from the group's tokens)")
        assert_close(out["x_grad"], x_grad, what=f"{where}: gradient of x")


def fresh_rank(ctx, seed):
    EP = ctx.load("expert_parallel")
    layer = EP.ExpertParallelMoE(D, DFF, E, top_k=2, capacity_factor=1.5, seed=seed).to(ctx.device)
    y = layer(torch.randn(*TOKENS, D, device=ctx.device))
    return {"router": layer.router.weight.detach(), "shapes": {n: tuple(p.shape) for n, p in layer.named_parameters()},
            "first_expert": layer.first_expert, "y_shape": tuple(y.shape)}  # fmt: skip


@EXPERTS_SPLIT_EVENLY
@pytest.mark.task8_2
def test_a_fresh_layer_has_the_same_router_everywhere_and_its_share_of_experts(world_size):
    """Router drawn from the seed (identical on every rank, nn.Linear's bound 1/sqrt(d_model));
    E/W experts per rank; a forward runs."""
    outs = run_ranks(world_size, fresh_rank, 3)
    L = E // world_size
    want = {"router.weight": (E, D)}
    for i in range(L):
        want |= {f"experts.{i}.fc1.weight": (DFF, D), f"experts.{i}.fc1.bias": (DFF,),
                 f"experts.{i}.fc2.weight": (D, DFF), f"experts.{i}.fc2.bias": (D,)}  # fmt: skip
    for r, out in enumerate(outs):
        assert_close(out["router"], outs[0]["router"], what=f"rank {r}: router weight (must equal rank 0's)")
        assert out["router"].abs().max() <= D**-0.5, f"rank {r}: router weight outside U(-1/sqrt(d), 1/sqrt(d))"
        assert out["shapes"] == want, f"rank {r}: parameters {out['shapes']}, expected {want}"
        assert out["first_expert"] == r * L and out["y_shape"] == (*TOKENS, D), f"rank {r}: {out}"


# -- Task 8.3: training, alone and on an EP x DP grid ---------------------------------------------------


def _my_groups(ctx, layout):
    """(EP group, DP group) of this rank; every rank creates every group, in the same order."""
    if layout is None:
        return None, None
    made = {kind: [torch.distributed.new_group(g) for g in layout[kind]] for kind in ("ep", "dp")}
    pick = lambda kind: next(pg for pg, g in zip(made[kind], layout[kind]) if ctx.rank in g)  # noqa: E731
    return pick("ep"), pick("dp")


def train_rank(ctx, state, top_k, capacity_factor, steps, layout=None):
    """AdamW steps on mean((y - target)^2) + AUX_COEF * aux_loss of this rank's tokens, gradients
    averaged by all_reduce_moe_gradients; every step's parameters and the sync's communication."""
    EP = ctx.load("expert_parallel")
    ep_group, dp_group = _my_groups(ctx, layout)
    layer = EP.ExpertParallelMoE.from_dense(load_moe(state, top_k, capacity_factor, ctx.device), ep_group)
    opt = torch.optim.AdamW(layer.parameters(), lr=0.02, weight_decay=0.1)
    history = []
    for xs, targets in steps:
        x, target = xs[ctx.rank].to(ctx.device), targets[ctx.rank].to(ctx.device)
        loss = ((layer(x) - target) ** 2).mean() + AUX_COEF * layer.aux_loss
        opt.zero_grad()
        loss.backward()
        with CommRecorder() as rec:
            EP.all_reduce_moe_gradients(layer, dp_group)
        history.append({"router_grad": layer.router.weight.grad.clone(),
                        "expert_grads": [expert_params(e, grads=True) for e in layer.experts]})  # fmt: skip
        opt.step()
        history[-1] |= {"router": layer.router.weight.detach().clone(), "events": rec.events,
                        "experts": [expert_params(e, grads=False) for e in layer.experts]}  # fmt: skip
    return history


def _dense_train(dense: MoE, steps, ep_groups: list[list[int]]):
    """The oracle: one dense MoE; each EP group is one forward on its ranks' tokens concatenated (its
    own capacity queue); the loss is the mean over all ranks of their losses. Per step (grads, params)."""
    opt = torch.optim.AdamW(dense.parameters(), lr=0.02, weight_decay=0.1)
    world = sum(len(g) for g in ep_groups)
    history = []
    for xs, targets in steps:
        opt.zero_grad()
        total = 0
        for group in ep_groups:
            y = dense(torch.cat([xs[r] for r in group]))
            total = total + ((y - torch.cat([targets[r] for r in group])) ** 2).sum() / (xs[0].numel() * world)
            for r in group:
                dense(xs[r])
                total = total + AUX_COEF * dense.aux_loss / world
        total.backward()
        grads = {n: p.grad.clone() for n, p in dense.named_parameters()}
        opt.step()
        history.append((grads, {n: p.detach().clone() for n, p in dense.named_parameters()}))
    return history


def _check_training(history, dense_history, ep_groups) -> None:
    __tracebackhide__ = True
    for step, (grads, params) in enumerate(dense_history):
        for group in ep_groups:
            L = E // len(group)
            for q, r in enumerate(group):
                got, where = history[r][step], f"rank {r} (EP rank {q} of {len(group)}), step {step}"
                assert_close(got["router_grad"], grads["router.weight"], what=f"{where}: router grad after the sync")
                assert_close(got["router"], params["router.weight"], what=f"{where}: router after AdamW")
                for i in range(L):
                    e = q * L + i
                    for name in got["experts"][i]:
                        want = grads[f"experts.{e}.{name}"]
                        what = f"{where}: experts[{i}].{name}.grad (expert {e}) after the sync"
                        grad, what = grad_or_zeros(got["expert_grads"][i][name], want, what)
                        assert_close(grad, want, what=what)
                        assert_close(got["experts"][i][name], params[f"experts.{e}.{name}"],
                                     what=f"{where}: experts[{i}].{name} (expert {e}) after AdamW")  # fmt: skip


def _steps(world_size: int, count: int, seed: int):
    return [(_tokens(world_size, seed + 10 * s), _tokens(world_size, seed + 10 * s + 5)) for s in range(count)]


@EXPERTS_SPLIT_EVENLY
@pytest.mark.task8_3
def test_adamw_steps_match_the_dense_moe(world_size):
    """Three AdamW steps (top-2, capacity 1.0, aux loss): after all_reduce_moe_gradients every
    gradient is the dense gradient of the mean loss, and every parameter stays equal to the dense one."""
    dense = dense_moe(2, 1.0, seed=4)
    steps = _steps(world_size, 3, seed=700)
    history = run_ranks(world_size, train_rank, moe_state(dense), 2, 1.0, steps)
    _check_training(history, _dense_train(dense, steps, [list(range(world_size))]), [list(range(world_size))])


@pytest.mark.task8_3
@pytest.mark.world_sizes(4)
def test_ep_x_dp_averages_experts_over_replicas_and_the_router_over_all_ranks(world_size):
    """EP groups {0, 1} and {2, 3}, DP groups {0, 2} and {1, 3}: the gradients are those of the mean
    loss over the 4 ranks (each EP group a dense forward of its own tokens), after one all-reduce of
    the router grad in the EP group and one of all local grads in the DP group."""
    layout = {"ep": [[0, 1], [2, 3]], "dp": [[0, 2], [1, 3]]}
    dense = dense_moe(2, 1.0, seed=5)
    steps = _steps(world_size, 2, seed=800)
    history = run_ranks(world_size, train_rank, moe_state(dense), 2, 1.0, steps, layout)
    _check_training(history, _dense_train(dense, steps, layout["ep"]), layout["ep"])
    local = E * D + (E // 2) * (2 * D * DFF + DFF + D)  # router + 4 experts
    for r in range(world_size):
        ep, dp = (tuple(g) for g in (layout["ep"][r // 2], layout["dp"][r % 2]))
        got = [(_kind(e), e.group_ranks, e.numel) for e in calls(history[r][0]["events"])]
        want = [("all_reduce", ep, E * D), ("all_reduce", dp, local)]
        assert got == want, (
            f"rank {r}: all_reduce_moe_gradients should make exactly {want} ((collective, group, elements)), "
            f"made {got}:\n{format_events(history[r][0]['events'])}"
        )


# -- bad input: a clear error on every rank, before any communication ----------------------------------

BAD_INPUT = [
    BadInput("num_experts-not-divisible", lambda EP, ctx: EP.ExpertParallelMoE(D, DFF, 4 * ctx.world_size + 1),
             "ValueError", names="num_experts", task="task8_2"),
    BadInput("top_k-above-num_experts", lambda EP, ctx: EP.ExpertParallelMoE(D, DFF, E, top_k=E + 1),
             "ValueError", names="top_k", task="task8_2"),
    BadInput("capacity_factor-zero", lambda EP, ctx: EP.ExpertParallelMoE(D, DFF, E, capacity_factor=0.0),
             "ValueError", names="capacity_factor", task="task8_2"),
    BadInput("from_dense-of-an-MLP", lambda EP, ctx: EP.ExpertParallelMoE.from_dense(MLP(D, DFF)),
             "TypeError", names="moe", task="task8_2"),
    BadInput("input_splits-do-not-sum-to-the-rows",
             lambda EP, ctx: EP.all_to_all_tokens(torch.ones(3, 2, device=ctx.device), [1] * ctx.world_size,
                                                  [1] * ctx.world_size),
             "ValueError", names="input_splits", task="task8_1"),
    BadInput("output_splits-too-long",
             lambda EP, ctx: EP.all_to_all_tokens(torch.ones(ctx.world_size, 2, device=ctx.device),
                                                  [1] * (ctx.world_size + 1),
                                                  [1] * ctx.world_size), "ValueError", names="output_splits",
             task="task8_1"),
    BadInput("sync-of-a-dense-MoE", lambda EP, ctx: EP.all_reduce_moe_gradients(MoE(D, DFF, E)),
             "TypeError", names="moe", task="task8_3"),
]  # fmt: skip


@pytest.mark.world_sizes(2, 4)
@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """A wrong argument raises ValueError/TypeError naming it, on every rank, before any message."""
    outs = run_ranks(world_size, bad_input_rank, "expert_parallel", case, deadline=15)
    assert_rejected_before_communicating(outs, case)
