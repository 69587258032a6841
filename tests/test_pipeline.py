"""Part 5: pipeline parallelism (handouts/05-pipeline.md).

    pytest tests/test_pipeline.py                  # your implementation, pipelines of 1, 2 and 4 stages
    pytest tests/test_pipeline.py -m task5_2       # only the schedules

Schedules are pure functions: one rank computes them for a whole grid of (stages, microbatches,
stage) and the parent checks them, and also executes them in a simulation (F takes 1 unit, B 2)
that must neither deadlock nor idle longer than the bubble (p - 1) / (m + p - 1). Training is
judged against one process running the whole model on the whole batch: after every step, the
loss on the last stage and every stage's gradients equal the full-batch mean loss's.
Microbatch counts are chosen below, equal to and above the number of stages.
"""

from __future__ import annotations

import functools
import weakref
from collections import OrderedDict

import pytest
import torch
import torch.distributed as dist
from torch import nn

from cs336_systems.models import DeepMLP
from tests.harness import run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.harness.recorder import CommRecorder, format_events
from tests.oracles.pipeline import (
    assert_matches_oracle,
    build_model,
    make_batches,
    one_f_one_b_order,
    oracle_steps,
    stage_bounds,
)
from tests.oracles.pipeline_sim import simulate

SCHEDULES = ["gpipe", "1f1b"]
# Microbatch counts below, equal to and above the number of stages p (ids usable with -k).
MICROBATCHES = {"m-below-p": lambda p: p - 1, "m-equal-p": lambda p: p, "m-above-p": lambda p: 2 * p + 1}


def _microbatches(case: str, p: int) -> int:
    m = MICROBATCHES[case](p)
    if m < 1:
        pytest.skip(f"no microbatch count below {p} stage(s)")
    return m


# ## Task 5.1: split_into_stages ---------------------------------------------------------------------


def split_rank(ctx, cases):
    P = ctx.load("pipeline")
    out = {}
    for layers, p in cases:
        # A subclass of nn.Sequential whose constructor takes other arguments (model[a:b] would fail).
        model = DeepMLP(layers - 1, 2, 4) if layers > 1 else nn.Sequential(nn.Linear(2, 2))
        stages = P.split_into_stages(model, p)
        index = {id(layer): i for i, layer in enumerate(model)}
        out[(layers, p)] = [
            (type(st).__name__, [index.get(id(layer), -1) for layer in st], [name for name, _ in st.named_children()])
            for st in stages
        ]
    return out


@pytest.mark.task5_1
def test_split_into_stages_is_contiguous_balanced_and_shares_the_layers():
    """``split_into_stages`` is contiguous, balanced (first stages take the extra) and shares the model's layers.

    Stage s gets layers [a_s, b_s), in order, the same objects under the same names as the model's;
    sizes differ by at most one and the first stages take the extra layers (6 over 4 stages: 2, 2, 1, 1)."""
    cases = [(layers, p) for layers in range(1, 10) for p in range(1, layers + 1)]
    got = run_ranks(1, split_rank, cases)[0]
    for layers, p in cases:
        expected = [
            ("Sequential", list(range(a, b)), [str(i) for i in range(a, b)]) for a, b in stage_bounds(layers, p)
        ]
        assert got[(layers, p)] == expected, (
            f"split_into_stages({layers} layers, {p} stages): expected (type, layer indices, layer names) "
            f"{expected}, got {got[(layers, p)]} (index -1: a layer that is not one of the model's own objects)"
        )


# ## Task 5.2: schedules -----------------------------------------------------------------------------

GRID = [(p, m) for p in range(1, 9) for m in range(1, 13)]


def schedules_rank(ctx, grid):
    P = ctx.load("pipeline")
    out = {}
    for name, fn in [("gpipe", P.gpipe_schedule), ("1f1b", P.one_f_one_b_schedule)]:
        for p, m in grid:
            for s in range(p):
                actions = fn(p, m, s)
                if not all(isinstance(a, P.Action) for a in actions):
                    raise TypeError(f"{name}({p}, {m}, {s}) must return a list of Action, got {actions!r:.200}")
                out[(name, p, m, s)] = [(a.kind, a.microbatch) for a in actions]
    return out


@functools.cache
def computed_schedules() -> dict:
    """(name, p, m, stage) -> [(kind, microbatch), ...] for the whole grid, computed once in a rank."""
    return run_ranks(1, schedules_rank, GRID)[0]


def _fmt(actions) -> str:
    return " ".join(f"{k}{i}" for k, i in actions)


@pytest.mark.task5_2
@pytest.mark.parametrize("name", SCHEDULES)
def test_every_microbatch_runs_one_forward_then_one_backward(name):
    """On every stage of every (stages, microbatches) pair, each microbatch has exactly one F, then later one B."""
    schedules = computed_schedules()
    for p, m in GRID:
        for s in range(p):
            actions = schedules[(name, p, m, s)]
            where = f"{name} schedule, {p} stages, {m} microbatches, stage {s}: {_fmt(actions)}"
            assert sorted(actions) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)]), (
                f"{where}: every microbatch needs exactly one F and one B"
            )
            for i in range(m):
                assert actions.index(("F", i)) < actions.index(("B", i)), f"{where}: B{i} runs before F{i}"


@pytest.mark.task5_2
def test_gpipe_runs_all_forwards_then_all_backwards():
    """GPipe on every stage: F0 ... F(m-1), then B0 ... B(m-1)."""
    schedules = computed_schedules()
    for p, m in GRID:
        for s in range(p):
            expected = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
            got = schedules[("gpipe", p, m, s)]
            assert got == expected, f"gpipe({p}, {m}, stage {s}): expected {_fmt(expected)}, got {_fmt(got)}"


@pytest.mark.task5_2
def test_one_f_one_b_on_stage_0_of_4_stages_and_8_microbatches():
    """The handout's example: 1F1B on stage 0 of 4 with 8 microbatches is F0 F1 F2 F3 B0 F4 B1 F5 ... B7."""
    schedules = computed_schedules()
    expected = "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"
    got = _fmt(schedules[("1f1b", 4, 8, 0)])
    assert got == expected, f"1f1b(4 stages, 8 microbatches, stage 0): expected {expected}, got {got}"


@pytest.mark.task5_2
def test_one_f_one_b_warms_up_then_alternates_then_cools_down():
    """1F1B warms up, alternates one forward and one backward, then cools down, on every stage.

    min(p - s - 1, m) warm-up forwards, then F/B pairs, then the remaining backwards; so stage s
    never has more than min(p - s, m) microbatches between their F and their B."""
    schedules = computed_schedules()
    for p, m in GRID:
        for s in range(p):
            got, expected = schedules[("1f1b", p, m, s)], one_f_one_b_order(p, m, s)
            leading = next((k for k, a in enumerate(got) if a[0] == "B"), len(got))
            assert got == expected, (
                f"1f1b({p} stages, {m} microbatches, stage {s}): expected {_fmt(expected)}\n"
                f"got {_fmt(got)}\n(forwards before the first backward: expected min(p - s, m) = "
                f"{min(p - s, m)}, i.e. {min(p - s - 1, m)} warm-up forwards; got {leading})"
            )


@pytest.mark.task5_2
@pytest.mark.parametrize("name", SCHEDULES)
def test_schedules_never_deadlock_and_idle_exactly_the_bubble(name):
    """Both schedules run without deadlock and idle exactly the bubble (p - 1) / (m + p - 1).

    Simulated with F = 1 and B = 2 time units, all stages finish after 3(m + p - 1) units: each is
    busy 3m of them, so the idle fraction is the bubble (p - 1) / (m + p - 1)."""
    schedules = computed_schedules()
    for p, m in GRID:
        per_stage = [schedules[(name, p, m, s)] for s in range(p)]
        makespan, stuck = simulate(per_stage)
        assert not stuck, f"{name}, {p} stages, {m} microbatches: stages {stuck} wait on each other forever " + (
            "; ".join(f"stage {s}: {_fmt(a)}" for s, a in enumerate(per_stage))
        )
        bubble, formula = 1 - 3 * m / makespan, (p - 1) / (m + p - 1)
        assert abs(bubble - formula) < 1e-9, f"{name}, p={p}, m={m}: bubble {bubble:.4f}, formula {formula:.4f}"


# ## Task 5.3: PipelineStage.train_step ------------------------------------------------------------


def _stage_module(model: nn.Sequential, p: int, stage: int) -> nn.Sequential:
    """The test's own split (so Task 5.3 does not depend on 5.1), keeping the model's layer names."""
    start, end = stage_bounds(len(model), p)[stage]
    return nn.Sequential(OrderedDict(list(model.named_children())[start:end]))


def _pipeline_group(ctx, pipelines: int):
    """Split WORLD into ``pipelines`` consecutive groups (every rank creates every group)."""
    size = ctx.world_size // pipelines
    groups = (
        [dist.new_group(list(range(k * size, (k + 1) * size))) for k in range(pipelines)] if pipelines > 1 else [None]
    )
    return ctx.rank // size, groups[ctx.rank // size], ctx.rank % size, size


def train_rank(ctx, kind, m, schedule, batches, pipelines=1, lr=0.1, accumulate=1):
    """Each pipeline trains its own batches, ``accumulate`` train steps per optimizer step; returns
    per optimizer step the (last) loss and this stage's grads by global name."""
    P = ctx.load("pipeline")
    pipe_id, group, stage, p = _pipeline_group(ctx, pipelines)
    module = _stage_module(build_model(kind, p).to(ctx.device), p, stage)
    pipe = P.PipelineStage(module, stage, p, nn.MSELoss(), group)
    params = list(module.parameters())  # none for a stage holding only a Tanh (the widths model on 5-6 stages)
    opt = torch.optim.SGD(params, lr=lr) if params else None
    steps = []
    for x, y in batches[pipe_id]:
        if opt:
            opt.zero_grad()
        # Only stage 0 needs the inputs and only the last stage the targets.
        for _ in range(accumulate):
            loss = pipe.train_step(x.to(ctx.device) if stage == 0 else None,
                                   y.to(ctx.device) if stage == p - 1 else None, m, schedule=schedule)  # fmt: skip
        grads = {name: param.grad for name, param in module.named_parameters()}
        if opt:
            opt.step()
        steps.append((loss, grads))
    return steps


@pytest.mark.task5_3
@pytest.mark.parametrize("kind", ["deep", "deep-3d", "widths"])
@pytest.mark.parametrize("m_case", MICROBATCHES)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_pipeline_training_matches_one_process_on_the_full_batch(world_size, schedule, m_case, kind):
    """Every step, the last stage's loss and every stage's grads equal one process's on the full batch.

    Three SGD steps: the last stage returns the full-batch mean loss, and every stage's grads
    equal the full model's on the full batch (float64), at every step."""
    m = _microbatches(m_case, world_size)
    if kind == "widths" and world_size > 6:
        pytest.skip(f"the widths model has 6 layers, fewer than {world_size} stages")
    batches = make_batches(kind, 3 * m, steps=3, seed=world_size)
    results = run_ranks(world_size, train_rank, kind, m, schedule, [batches])
    assert_matches_oracle(
        results, oracle_steps(kind, world_size, batches), list(range(world_size)), f"{schedule}, m={m}"
    )


@pytest.mark.task5_3
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_train_step_adds_to_grad_like_backward(world_size, schedule):
    """``train_step`` adds to ``.grad`` as ``backward`` does.

    Two train steps before one optimizer step leave twice the full-batch gradients in ``.grad``
    (gradient accumulation), as two ``loss.backward()`` calls would."""
    batches = make_batches("deep", 2 * world_size, steps=2, seed=5)
    results = run_ranks(world_size, train_rank, "deep", world_size, schedule, [batches], accumulate=2)
    expected = oracle_steps("deep", world_size, batches, accumulate=2)
    assert_matches_oracle(results, expected, list(range(world_size)), f"{schedule}, two train steps per step")


@pytest.mark.task5_3
@pytest.mark.world_sizes(4)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_two_pipelines_in_subgroups_train_independently(world_size, schedule):
    """Two 2-stage pipelines in subgroups {0, 1} and {2, 3} train independently, each matching its oracle.

    Ranks {0, 1} and {2, 3} are two 2-stage pipelines (as beside data parallelism): stage numbers
    are ranks within the group, while send/recv take global ranks."""
    data = [make_batches("deep", 8, steps=2, seed=10 + k) for k in range(2)]
    results = run_ranks(world_size, train_rank, "deep", 4, schedule, data, pipelines=2)
    for k in range(2):
        assert_matches_oracle(
            results, oracle_steps("deep", 2, data[k]), [2 * k, 2 * k + 1], f"pipeline {k}, {schedule}"
        )


def comm_rank(ctx, m, schedule):
    P = ctx.load("pipeline")
    p, stage = ctx.world_size, ctx.rank
    module = _stage_module(build_model("deep", p).to(ctx.device), p, stage)
    pipe = P.PipelineStage(module, stage, p, nn.MSELoss())
    x, y = make_batches("deep", 3 * m, steps=1, seed=0)[0]
    with CommRecorder() as rec:
        pipe.train_step(x.to(ctx.device), y.to(ctx.device), m, schedule=schedule)
    return rec.events


@pytest.mark.task5_3
@pytest.mark.parametrize("m_case", ["m-below-p", "m-above-p"])
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_stages_only_send_and_receive_with_their_neighbours(world_size, schedule, m_case):
    """Stages only talk to their neighbours: m activations forward, m grads back, and small shape headers.

    Stage s sends m activations (3x8) to s + 1 and m input grads to s - 1, receives the same from
    them, and may add small shape headers: each with fewer numbers than an activation, and all of them
    together fewer than the activations they describe (the handout promises "a small header")."""
    m = _microbatches(m_case, world_size)
    for s, events in enumerate(run_ranks(world_size, comm_rank, m, schedule)):
        log = f"rank {s}, {schedule}, m={m}:\n{format_events(events)}"
        assert all(e.op in ("send", "isend", "recv", "irecv", "wait") for e in events), f"{log}\nonly send/recv allowed"
        for sending in (True, False):
            ops = [e for e in events if e.op in (("send", "isend") if sending else ("recv", "irecv"))]
            for peer, expected in [(s + 1, m if s < world_size - 1 else 0), (s - 1, m if s > 0 else 0)]:
                msgs = [e for e in ops if e.peer == peer]
                big = [e for e in msgs if e.shapes == ((3, 8),)]
                headers = [e.numel for e in msgs if e.shapes != ((3, 8),)]
                assert len(big) == expected, f"{log}\n{'sent to' if sending else 'received from'} rank {peer}: " \
                    f"{len(big)} messages of shape (3, 8), expected {expected}"  # fmt: skip
                assert all(n < 3 * 8 for n in headers) and sum(headers) < max(expected * 3 * 8, 1), (
                    f"{log}\nbesides the {expected} activations/gradients of 3x8 numbers, only small shape headers "
                    f"may pass; got other messages of {headers} numbers"
                )
            others = sorted({e.peer for e in ops} - {s - 1, s + 1})
            assert not others, f"{log}\ntalked to ranks {others}, which are not neighbours"


class LiveCounter(nn.Module):
    """Identity layer that counts its outputs still alive: the microbatches whose activations this
    stage's autograd graph holds (freed by their backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.refs, self.peak = [], 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0  # a fresh tensor, saved by the next layer for its backward
        self.refs = [r for r in self.refs if r() is not None] + [weakref.ref(y)]
        self.peak = max(self.peak, len(self.refs))
        return y


def memory_rank(ctx, m, schedule):
    P = ctx.load("pipeline")
    p, stage = ctx.world_size, ctx.rank
    module = _stage_module(build_model("deep", p).to(ctx.device), p, stage)
    counter = LiveCounter()
    pipe = P.PipelineStage(nn.Sequential(counter, *module), stage, p, nn.MSELoss())
    x, y = make_batches("deep", 2 * m, steps=1, seed=0)[0]
    pipe.train_step(x.to(ctx.device), y.to(ctx.device), m, schedule=schedule)
    timeline = [(a.kind, a.microbatch, t0, t1) for a, t0, t1 in pipe.timeline]
    return pipe.peak_activations, counter.peak, timeline


@pytest.mark.task5_3
@pytest.mark.parametrize("m_case", MICROBATCHES)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_peak_activations_and_timeline_follow_the_schedule(world_size, schedule, m_case):
    """``.peak_activations`` and ``.timeline`` follow the schedule: GPipe holds m microbatches, 1F1B fewer.

    GPipe holds all m microbatches; 1F1B's stage s at most min(p - s, m). Both ``.peak_activations``
    and the activations actually alive are checked; ``.timeline`` lists the schedule's actions in order."""
    p, m = world_size, _microbatches(m_case, world_size)
    for s, (reported, alive, timeline) in enumerate(run_ranks(world_size, memory_rank, m, schedule)):
        expected = m if schedule == "gpipe" else min(p - s, m)
        where = f"rank {s}, {schedule}, {p} stages, {m} microbatches"
        assert alive == expected, f"{where}: {alive} microbatches' activations were alive at once, expected {expected}"
        assert reported == expected, f"{where}: .peak_activations is {reported}, expected {expected}"
        order = [(k, i) for k, i, _, _ in timeline]
        plan = (
            [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
            if schedule == "gpipe"
            else one_f_one_b_order(p, m, s)
        )
        assert order == plan, f"{where}: .timeline runs {_fmt(order)}, expected {_fmt(plan)}"
        times = [t for _, _, t0, t1 in timeline for t in (t0, t1)]
        assert times == sorted(times), f"{where}: .timeline times must satisfy t_start <= t_end <= next t_start"


def _pipe(ctx, P, **overrides):
    module = _stage_module(build_model("deep", ctx.world_size).to(ctx.device), ctx.world_size, ctx.rank)
    args = {"module": module, "stage": ctx.rank, "num_stages": ctx.world_size, "loss_fn": nn.MSELoss()}
    return P.PipelineStage(**{**args, **overrides})


def _schedule_cases(args: tuple, what: str, exception: str, names: str) -> list[BadInput]:
    """The same bad arguments for both schedules."""
    return [BadInput(f"{fn}-{what}", lambda P, ctx, fn=fn: getattr(P, fn)(*args), exception, names, "task5_2")
            for fn in ("gpipe_schedule", "one_f_one_b_schedule")]  # fmt: skip


def _train(ctx, P, batch: int, num_microbatches: int, schedule: str = "1f1b"):
    return _pipe(ctx, P).train_step(
        torch.randn(batch, 8, device=ctx.device), torch.randn(batch, 8, device=ctx.device), num_microbatches, schedule
    )


BAD_INPUT = [
    BadInput("fewer-layers-than-stages", lambda P, ctx: P.split_into_stages(DeepMLP(1, 8, 8), 3),
             "ValueError", names="num_stages", task="task5_1"),
    BadInput("split-of-a-plain-module", lambda P, ctx: P.split_into_stages(nn.Linear(2, 2), 1),
             "TypeError", names="model", task="task5_1"),
    *_schedule_cases((4, 8, 4), "stage-past-the-end", "ValueError", "stage"),
    *_schedule_cases((4, 8, -1), "negative-stage", "ValueError", "stage"),
    *_schedule_cases((0, 8, 0), "no-stages", "ValueError", "num_stages"),
    *_schedule_cases((4, 0, 0), "no-microbatches", "ValueError", "num_microbatches"),
    *_schedule_cases((4, 2.0, 0), "float-microbatches", "TypeError", "num_microbatches"),
    BadInput("num_stages-is-not-the-group-size", lambda P, ctx: _pipe(ctx, P, num_stages=ctx.world_size + 1),
             "ValueError", names="num_stages", task="task5_3"),
    BadInput("stage-is-not-this-rank", lambda P, ctx: _pipe(ctx, P, stage=(ctx.rank + 1) % ctx.world_size),
             "ValueError", names="stage", task="task5_3"),
    BadInput("batch-not-divisible-by-microbatches", lambda P, ctx: _train(ctx, P, 10, 4),
             "ValueError", names="num_microbatches", task="task5_3"),
    BadInput("fewer-examples-than-microbatches", lambda P, ctx: _train(ctx, P, 2, 4),
             "ValueError", names="num_microbatches", task="task5_3"),
    BadInput("no-microbatches", lambda P, ctx: _train(ctx, P, 4, 0),
             "ValueError", names="num_microbatches", task="task5_3"),
    BadInput("unknown-schedule", lambda P, ctx: _train(ctx, P, 4, 2, "zb"),
             "ValueError", names="schedule", task="task5_3"),
]  # fmt: skip


@pytest.mark.world_sizes(2, 4)
@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """Bad input raises the promised ValueError/TypeError naming the argument, on every rank, before any message."""
    assert_rejected_before_communicating(run_ranks(world_size, bad_input_rank, "pipeline", case, deadline=15), case)
