"""Part 3: ZeRO stages 1 and 2, ``ShardedOptimizer`` (handouts/03-zero.md §3.1-3.2).

    pytest tests/test_sharded_optimizer.py                  # your implementation
    pytest tests/test_sharded_optimizer.py -m task3_2       # only stage 2

Ranks train a small model with the sharded optimizer and send back parameters, grads, the bytes the
optimizer object holds and the communication of ``step``; the parent replays the same steps in one
process with the plain optimizer on the averaged grads (the oracle: "data parallel with a sharded
optimizer is data parallel") and judges every step on every rank. FSDP (stage 3, §3.3) is tested in
tests/test_fsdp.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.harness import run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.harness.memory import storage_bytes
from tests.harness.recorder import CommRecorder, calls, format_events
from tests.oracles.sharded_optimizer import (
    OPTIMIZERS,
    STAGES,
    assert_params_match_the_oracle,
    loss_of,
    make_model,
    rank_batch,
    train_rank,
)

# -- tests: equivalence ------------------------------------------------------------------------------


@pytest.mark.task3_1
@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_stage1_matches_the_unsharded_optimizer_on_averaged_grads_on_every_rank(world_size, opt_name):
    """Stage 1 keeps every rank's parameters equal to the plain optimizer's on averaged grads, every step.

    Every step, every rank's parameters equal the plain optimizer's (two param groups, a third
    added with add_param_group at step 2): owners update, then every rank receives the update."""
    assert_params_match_the_oracle(world_size, opt_name, stage=1)


@pytest.mark.task3_2
@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_stage2_averages_local_grads_itself_and_matches_the_unsharded_optimizer(world_size, opt_name):
    """Stage 2 averages each rank's own grads itself and still matches the plain optimizer, every step.

    With shard_gradients=True the grads given to step are each rank's own: step must average
    them (reduce-scatter, then divide by the world size) and still match the plain optimizer."""
    assert_params_match_the_oracle(world_size, opt_name, stage=2)


@pytest.mark.task3_2
def test_stage2_keeps_only_the_owned_grads_after_step(world_size):
    """After a stage-2 step a rank holds the grads of the parameters it owns and None for the others.

    After step a rank holds the grads of its own parameters and None for every other one of the
    optimizer's parameters."""
    outs = run_ranks(world_size, train_rank, "sgd_momentum", 2)
    for rank, history in enumerate(outs):
        for step, record in enumerate(history):
            assert record["has_grad"] == record["owned"], (
                f"rank {rank}, after step {step}: parameters with a grad {record['has_grad']} should be "
                f"exactly the owned ones {record['owned']} (stage 2 frees the grads a rank does not own)"
            )


# -- tests: ownership, memory, communication --------------------------------------------------------

SHAPE_SETS = {
    "mixed": [(64, 32), (7,), (32,), (1,), (0,), (16, 16), (5, 3), (128,), (3, 3, 3), (2,)],
    "equal": [(10, 10)] * 9,
}


def assignment_rank(ctx, shapes):
    """Which parameter indices this rank owns, for two constructions (groups added in two steps)."""
    zero = ctx.load("sharded_optimizer")
    owned = []
    for _ in range(2):
        params = [torch.nn.Parameter(torch.zeros(s, device=ctx.device)) for s in shapes]
        half = len(params) // 2
        opt = zero.ShardedOptimizer(params[:half], torch.optim.SGD, lr=0.1)
        opt.add_param_group({"params": params[half:], "lr": 0.2})
        mine = {id(p) for p in opt.owned_parameters()}
        owned.append([i for i, p in enumerate(params) if id(p) in mine])
    return owned


@pytest.mark.task3_1
@pytest.mark.parametrize("shapes", list(SHAPE_SETS), ids=[f"{name}-shapes" for name in SHAPE_SETS])
def test_every_parameter_has_exactly_one_owner_and_ownership_is_balanced(world_size, shapes):
    """Every parameter has exactly one owner, agreed by all ranks without talking, and ownership is balanced.

    The ranks agree (without talking) on one owner per parameter, the same every time; no rank
    owns more than P/N + the largest parameter's numel."""
    shapes = SHAPE_SETS[shapes]
    outs = run_ranks(world_size, assignment_rank, shapes)
    for rank, (first, second) in enumerate(outs):
        assert first == second, (
            f"rank {rank}: ownership changed between two identical constructions ({first} vs {second}); it "
            "must be computed the same way every time and on every rank (from sizes and order, not ids, "
            "hashes or random)"
        )
    owners = {i: [r for r, o in enumerate(outs) if i in o[0]] for i in range(len(shapes))}
    bad = {i: rs for i, rs in owners.items() if len(rs) != 1}
    assert not bad, (
        f"parameter index -> ranks owning it: {bad}; each must have exactly one owner. The assignment "
        "must be computed identically on every rank (from sizes and order, not ids, hashes or random)"
    )
    numels = [torch.Size(s).numel() for s in shapes]
    loads = [sum(numels[i] for i in o[0]) for o in outs]
    limit = sum(numels) / world_size + max(numels)
    assert max(loads) <= limit, f"numel owned per rank {loads}: the largest exceeds P/N + max numel = {limit}"


def optimizer_memory_rank(ctx, opt_name: str, stage: int):
    """Bytes held by the sharded optimizer and by the plain one after 2 steps (params, grads excluded)."""
    zero = ctx.load("sharded_optimizer")
    cls, kwargs = OPTIMIZERS[opt_name]
    sharded_model, plain_model = make_model().to(ctx.device), make_model().to(ctx.device)
    sharded = zero.ShardedOptimizer(sharded_model.parameters(), cls, shard_gradients=stage == 2, **kwargs)
    plain = cls(plain_model.parameters(), **kwargs)
    for step in range(2):
        for model, opt in ((sharded_model, sharded), (plain_model, plain)):
            opt.zero_grad()
            loss_of(model, *(t.to(ctx.device) for t in rank_batch(step, ctx.rank))).backward()
            opt.step()  # unaveraged grads: only the bytes matter here
    params = [*sharded_model.parameters(), *plain_model.parameters()]
    skip = {t.untyped_storage().data_ptr() for p in params for t in (p, p.grad) if t is not None}
    per_param = max(storage_bytes(plain.state[p], skip) for p in plain_model.parameters())
    return storage_bytes(sharded, skip), storage_bytes(plain, skip), per_param


@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
@pytest.mark.parametrize("stage", STAGES)
def test_each_rank_holds_about_one_nth_of_the_optimizer_state(world_size, opt_name, stage):
    """Each rank's sharded optimizer holds at most 1/N of the plain optimizer's state, plus one parameter's.

    Measured, not assumed: the tensors reachable from the sharded optimizer (its state, any
    buffers it keeps) take at most 1/N of the plain optimizer's bytes plus one parameter's state."""
    outs = run_ranks(world_size, optimizer_memory_rank, opt_name, stage)
    for rank, (sharded, plain, per_param) in enumerate(outs):
        limit = plain / world_size + per_param + 64
        assert sharded <= limit, (
            f"rank {rank}, stage {stage}, {opt_name}: the optimizer holds {sharded} bytes of tensors; "
            f"the unsharded optimizer holds {plain}, so at most {plain}/{world_size} + {per_param} (one "
            "parameter's state) was expected. Build the inner optimizer over the owned parameters only"
        )


def step_comm_rank(ctx, stage: int):
    """The communication of the second ``step`` (grads averaged beforehand for stage 1)."""
    zero = ctx.load("sharded_optimizer")
    model = make_model().to(ctx.device)
    opt = zero.ShardedOptimizer(model.parameters(), torch.optim.AdamW, shard_gradients=stage == 2, lr=1e-2)
    for step in range(2):
        opt.zero_grad()
        loss_of(model, *(t.to(ctx.device) for t in rank_batch(step, ctx.rank))).backward()
        if stage == 1:
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad.div_(ctx.world_size)
        with CommRecorder() as rec:
            opt.step()
    return rec.events


@pytest.mark.world_sizes(2, 4)
@pytest.mark.parametrize("stage", STAGES)
def test_step_sends_each_updated_parameter_once_and_stage2_reduce_scatters(world_size, stage):
    """``step`` sends each updated parameter once and never all-reduces; stage 2 also reduce-scatters the grads.

    In step: no all-reduce; one all-gather (or broadcasts) moving each updated parameter once
    (P elements, plus padding of at most one parameter per rank); stage 2 also reduce-scatters the
    grads (P elements in), which with the all-gather costs exactly one all-reduce: no more than DDP."""
    numels = [p.numel() for p in make_model().parameters()]
    total, slack = sum(numels), world_size * max(numels)
    for rank, events in enumerate(run_ranks(world_size, step_comm_rank, stage)):
        ops = calls(events)
        log = f"\nrank {rank}'s calls in step:\n{format_events(events)}"
        assert not [e for e in ops if "all_reduce" in e.op or "allreduce" in e.op], f"step all-reduced{log}"
        moved = sum(
            e.numel * (world_size if "gather" in e.op else 1) for e in ops if "gather" in e.op or "broadcast" in e.op
        )
        assert total <= moved <= total + slack, (
            f"rank {rank}, stage {stage}: the parameter all-gather/broadcasts in step moved {moved} "
            f"elements; every updated parameter must reach every rank once ({total} elements, up to "
            f"{total + slack} with padding){log}"
        )
        scattered = sum(e.numel for e in ops if "reduce_scatter" in e.op)
        if stage == 1:
            assert scattered == 0, f"rank {rank}: stage 1 gets averaged grads; step must not reduce them{log}"
        else:
            assert total <= scattered <= total + slack, (
                f"rank {rank}, stage 2: step must average the grads with a reduce-scatter of all {total} "
                f"grad elements (up to {total + slack} with padding); it reduce-scattered {scattered}{log}"
            )


# -- tests: bad input -------------------------------------------------------------------------------

BAD_INPUT = [
    BadInput("optimizer_cls-as-a-name",
             lambda zero, ctx: zero.ShardedOptimizer(make_model().to(ctx.device).parameters(), "AdamW", lr=1e-3),
             "TypeError", names="optimizer_cls", task="task3_1"),
    BadInput("optimizer_cls-as-an-instance",
             lambda zero, ctx: zero.ShardedOptimizer(make_model().to(ctx.device).parameters(),
                                                     torch.optim.SGD(make_model().parameters(), lr=0.1), lr=1e-3),
             "TypeError", names="optimizer_cls", task="task3_1"),
]  # fmt: skip


@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """Bad input raises the promised TypeError naming the argument, on every rank, before any message."""
    assert_rejected_before_communicating(run_ranks(world_size, bad_input_rank, "sharded_optimizer", case), case)
