"""Part 5, finished: two chunks per rank in a V, ZB-V (Task 5.7) and DualPipeV (Task 5.8) (handouts/05-pipeline.md).

    pytest tests/test_pipeline_v.py                # pipelines of 1, 2 and 4 ranks
    pytest tests/test_pipeline_v.py -m task5_8     # only DualPipeV

In a V rank r holds global chunks r and 2p - 1 - r: activations go down the ranks through chunk 0,
turn inside rank p - 1 and come back up through chunk 1 to the loss on rank 0. The schedules are
checked against torch's own orders (``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV``), run together
in the simulator (no deadlock; idle time and activations held equal the formulas), and executed:
training equals one process on the full batch, with and without checkpointing, every message goes
to the rank beside (never from rank p - 1 to rank 0), and the activations alive are the formula's.
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from tests.harness import run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.harness.recorder import CommRecorder, format_events
from tests.oracles.pipeline import (
    ActivationProbe,
    build_model,
    make_batches,
    stage_bounds,
)
from tests.oracles.pipeline_sim import run, simulate
from tests.oracles.pipeline_v import (
    assert_v_matches_oracle,
    check_pairs_post_early,
    overlap_rank,
    torch_v_schedule,
    v_oracle_steps,
    v_pipeline_stage,
    v_train_rank,
    v_widths_batches,
)

ZBV_GRID = [(p, m) for p in range(1, 7) for m in range(1, 3 * p + 2)]
DUALPIPEV_GRID = [(p, m) for p in range(1, 7) for m in range(2 * p, 4 * p + 1)]


def _fmt(actions) -> str:
    return " ".join(f"{k}{i}.{c}" + ("&" if o else "") for k, i, c, o in actions)


def _peak(actions) -> int:
    """Most (microbatch, chunk) pairs between their F and the end of their backward (a whole B, or the W)."""
    weighted = {(i, c) for k, i, c, _ in actions if k == "W"}
    live, peak = set(), 0
    for kind, i, c, _ in actions:
        if kind == "F":
            live.add((i, c))
            peak = max(peak, len(live))
        elif kind == "W" or (kind == "B" and (i, c) not in weighted):
            live.discard((i, c))
    return peak


def _busy(row) -> float:
    """Time a rank computes: an F&B pair is one unit, counted once."""
    return sum(end - start for k, (_, start, end) in enumerate(row) if k == 0 or row[k - 1][1:] != (start, end))


def schedules_rank(ctx):
    """Every V schedule of the grids, and the V chunks of a 9-layer model, as plain values."""
    P = ctx.load("pipeline")
    out = {}
    for name, fn, grid in [("zb-v", P.zero_bubble_v_schedule, ZBV_GRID),
                           ("dualpipev", P.dualpipe_v_schedule, DUALPIPEV_GRID)]:  # fmt: skip
        for p, m in grid:
            for r in range(p):
                actions = fn(p, m, r)
                if not all(isinstance(a, P.Action) for a in actions):
                    raise TypeError(
                        f"{name} schedule ({p}, {m}, {r}) must return a list of Action, got {actions!r:.200}"
                    )
                out[(name, p, m, r)] = [(a.kind, a.microbatch, a.chunk, bool(a.overlap)) for a in actions]
    model = build_model("deep", 8)  # DeepMLP(9) and a head: 10 layers
    for p in range(1, 5):
        for r in range(p):
            out[("chunks", p, r)] = [[name for name, _ in chunk.named_children()] for chunk in
                                     P.split_into_v_chunks(model, p, r)]  # fmt: skip
    return out


@functools.cache
def computed() -> dict:
    """The grids' schedules, computed once in a rank (pure functions need no peers)."""
    return run_ranks(1, schedules_rank)[0]


# ## Task 5.7: the V and ZB-V -------------------------------------------------------------------------


@pytest.mark.task5_7
def test_v_chunks_are_stage_s_and_2p_minus_1_minus_s():
    """``split_into_v_chunks``: rank r gets chunks r and 2p - 1 - r of the model cut into 2p (the model's names)."""
    got = computed()
    for p in range(1, 5):
        bounds = stage_bounds(10, 2 * p)
        for r in range(p):
            expected = [[str(j) for j in range(*bounds[g])] for g in (r, 2 * p - 1 - r)]
            assert got[("chunks", p, r)] == expected, (
                f"split_into_v_chunks(10-layer model, {p}, {r}): got layers {got[('chunks', p, r)]}, expected "
                f"{expected} (global chunks {r} and {2 * p - 1 - r} of {2 * p})"
            )


@pytest.mark.task5_7
def test_zero_bubble_v_runs_torch_order_on_every_rank():
    """ZB-V is the order torch's ScheduleZBVZeroBubble runs, for every rank, p <= 6 and m <= 3p + 1."""
    got = computed()
    for p, m in ZBV_GRID:
        for r in range(p):
            expected = torch_v_schedule("zb-v", p, m, r)
            assert got[("zb-v", p, m, r)] == expected, (
                f"zero_bubble_v_schedule({p}, {m}, {r}) (F3.1: microbatch 3 on chunk 1):\n"
                f"expected {_fmt(expected)}\ngot      {_fmt(got[('zb-v', p, m, r)])}"
            )


@pytest.mark.task5_7
def test_zero_bubble_v_never_deadlocks_and_idles_its_formula_at_1f1b_memory():
    """ZB-V: no deadlock; with m >= 2p - 1 every rank idles (p - 1)·max(B, 2(B - W)) and holds 2p chunk activations.

    F, B, W are one chunk's times (F <= B, W <= B); with F = B = W only the (p - 1) forwards the
    last rank waits for its first input remain. 2p chunk activations are p microbatches of a rank's
    layers, 1F1B's peak on stage 0."""
    got = computed()
    for p, m in ZBV_GRID:
        ranks = [got[("zb-v", p, m, r)] for r in range(p)]
        for f, b, w in [(1, 1, 1), (1, 2, 1), (2, 2, 1), (1, 3, 0.5)]:
            makespan, stuck = simulate(ranks, 2, {"F": f, "B": b, "W": w}, placement="v")
            where = f"zb-v, p={p}, m={m}, F={f}, B={b}, W={w}"
            assert not stuck, f"{where}: ranks {stuck} wait on each other forever; " + "; ".join(map(_fmt, ranks))
            if m >= 2 * p - 1:
                idle, expected = makespan - 2 * m * (f + b + w), (p - 1) * max(b, 2 * (b - w))
                assert idle == expected, f"{where}: every rank idles {idle} units per step, expected {expected}"
        for r, actions in enumerate(ranks):
            assert _peak(actions) == 2 * p or m < 2 * p - 1, f"zb-v, p={p}, m={m}, rank {r}: holds " \
                f"{_peak(actions)} chunk activations at once, expected 2p = {2 * p}"  # fmt: skip


# ## Task 5.8: DualPipeV --------------------------------------------------------------------------------


@pytest.mark.task5_8
def test_dualpipe_v_runs_torch_order_with_its_overlapped_pairs():
    """DualPipeV is the order torch's ScheduleDualPipeV runs, F&B pairs (overlap=True on the F) and whole Bs too."""
    got = computed()
    for p, m in DUALPIPEV_GRID:
        for r in range(p):
            expected = torch_v_schedule("dualpipev", p, m, r)
            assert got[("dualpipev", p, m, r)] == expected, (
                f"dualpipe_v_schedule({p}, {m}, {r}) (F3.1&: microbatch 3 on chunk 1, overlapped with the next B):\n"
                f"expected {_fmt(expected)}\ngot      {_fmt(got[('dualpipev', p, m, r)])}"
            )


@pytest.mark.task5_8
def test_dualpipe_v_never_deadlocks_and_idles_the_reports_bubble():
    """DualPipeV: no deadlock; the most idle rank idles (p - 1)(F&B + B - 3W) and every rank holds 2p + 1 activations.

    B is a whole backward, W its weight half, F = B - W, F&B an overlapped pair (from F + B, no
    gain, down to B); DeepSeek-V3's (PP/2 - 1)(F&B + B - 3W) and PP + 1 with PP = 2p chunks."""
    got = computed()
    for p, m in DUALPIPEV_GRID:
        ranks = [got[("dualpipev", p, m, r)] for r in range(p)]
        for f, b, w, fb in [(1, 2, 1, 3), (1, 2, 1, 2.5), (2, 3, 1, 3), (1, 1.5, 0.5, 2.5)]:
            result = run(ranks, 2, {"F": f, "B": b - w, "W": w, "F&B": fb}, placement="v")
            where = f"dualpipev, p={p}, m={m}, F={f}, B={b}, W={w}, F&B={fb}"
            assert not result.stuck, f"{where}: ranks {result.stuck} wait on each other forever"
            idle, expected = max(result.makespan - _busy(row) for row in result.timeline), (p - 1) * (fb + b - 3 * w)
            assert idle == pytest.approx(expected), f"{where}: the most idle rank idles {idle}, expected {expected}"
        for r, actions in enumerate(ranks):
            assert _peak(actions) == 2 * p + 1, f"dualpipev, p={p}, m={m}, rank {r}: holds {_peak(actions)} " \
                f"chunk activations at once, expected 2p + 1 = {2 * p + 1}"  # fmt: skip


# ## Both: PipelineStage runs the V ----------------------------------------------------------------------

RUNS = [("zb-v", False), ("zb-v", True), ("dualpipev", False), ("dualpipev", True)]


def _run_id(run) -> str:
    return f"{run[0]}{'-checkpoint' if run[1] else ''}"


def _mark(schedule: str):
    return pytest.mark.task5_7 if schedule == "zb-v" else pytest.mark.task5_8


@pytest.mark.parametrize("run", [pytest.param(r, marks=_mark(r[0]), id=_run_id(r)) for r in RUNS])
def test_v_trains_like_one_process_on_the_full_batch(world_size, run):
    """A V pipeline gives one process's full-batch loss (on rank 0) and grads every step, checkpointing or not.

    Two SGD steps with m = 2p microbatches over a model of 2p one-layer chunks (float64) whose
    boundaries all differ in width (3 + g features into chunk g), so a message received in place of
    another (ZB-V's and DualPipeV's messages cross) is a size mismatch, not silently wrong numbers;
    rank 0 holds the first and the last chunk, takes inputs and targets and returns the loss. At 1
    rank the V turns inside rank 0 (no message at all)."""
    schedule, checkpoint = run
    p = world_size
    m = 2 * p
    batches = v_widths_batches(p, 2 * m, steps=2, seed=20 + p)
    results = run_ranks(p, v_train_rank, schedule, checkpoint, m, batches, model_kind="v-widths")
    assert_v_matches_oracle(results, v_oracle_steps(p, batches), p, f"{_run_id(run)}, {p} ranks, m={m}")


def memory_rank(ctx, schedule, checkpoint, m):
    P = ctx.load("pipeline")
    probe = ActivationProbe()
    pipe, _ = v_pipeline_stage(ctx, P, build_model("deep", 2 * ctx.world_size), probe)
    x, y = make_batches("deep", 2 * m, steps=1, seed=0)[0]  # microbatches of 2 x 8 float64: 128 bytes
    first = ctx.rank == 0
    pipe.train_step(x.to(ctx.device) if first else None, y.to(ctx.device) if first else None, m,
                    schedule=schedule, checkpoint=checkpoint)  # fmt: skip
    order = [(a.kind, a.microbatch, a.chunk, bool(a.overlap)) for a, _, _ in pipe.timeline]
    return pipe.peak_activations, probe.peak_count, order


@pytest.mark.parametrize("run", [pytest.param(r, marks=_mark(r[0]), id=_run_id(r)) for r in RUNS])
def test_v_holds_the_formulas_activations(world_size, run):
    """``.timeline`` runs the schedule; ``.peak_activations`` and the activations alive are 2p / 2p + 1 (DualPipeV).

    m = 2p. Without checkpointing the probe's outputs alive peak at that count; with checkpointing
    at one recomputed microbatch plus those a split B recomputed whose W has not run yet."""
    schedule, checkpoint = run
    p, m = world_size, 2 * world_size
    expected = 2 * p if schedule == "zb-v" else 2 * p + 1
    for r, (reported, alive, order) in enumerate(run_ranks(p, memory_rank, schedule, checkpoint, m)):
        where = f"rank {r}, {_run_id(run)}, {p} ranks, {m} microbatches"
        plan = torch_v_schedule(schedule, p, m, r)
        assert order == plan, f"{where}: .timeline runs {_fmt(order)}, expected {_fmt(plan)}"
        assert reported == expected, f"{where}: .peak_activations is {reported}, expected {expected}"
        if not checkpoint:
            assert alive == expected, f"{where}: {alive} chunk activations were alive at once, expected {expected}"
        else:
            weighted = {(i, c) for k, i, c, _ in plan if k == "W"}
            recomputed, most = set(), 0
            for k, i, c, _ in plan:
                most = max(most, len(recomputed) + 1) if k in "FB" else most
                recomputed |= {(i, c)} if k == "B" and (i, c) in weighted else set()
                recomputed -= {(i, c)} if k == "W" else set()
            assert alive == most, (
                f"{where}: {alive} chunk activations alive at once with checkpointing, expected {most}"
            )


@pytest.mark.task5_8
def test_dualpipe_v_pair_posts_its_backwards_gradient_receive_before_its_forward_runs(world_size):
    """An F&B pair's B gradient receive is posted before the F starts, so it travels while the F computes.

    DualPipeV with m = 2p over a model whose chunk boundaries all differ in width: the k-th receive
    from a neighbour of chunk c's gradient size is the gradient of the k-th B of chunk c. For every
    F&B pair whose B needs a message, that receive must be posted (``.time``) before the F's
    ``t_start`` in ``.timeline``."""
    if world_size < 2:
        pytest.skip("at 1 rank a V has no message to overlap: world size 2 or more")
    check_pairs_post_early(run_ranks(world_size, overlap_rank, 2 * world_size), 2 * world_size)


def comm_rank(ctx, schedule, m):
    P = ctx.load("pipeline")
    pipe, _ = v_pipeline_stage(ctx, P, build_model("deep", 2 * ctx.world_size))
    x, y = make_batches("deep", 3 * m, steps=1, seed=0)[0]
    first = ctx.rank == 0
    with CommRecorder() as rec:
        pipe.train_step(x.to(ctx.device) if first else None, y.to(ctx.device) if first else None, m,
                        schedule=schedule)  # fmt: skip
    return rec.events


@pytest.mark.parametrize("schedule", [pytest.param(s, marks=_mark(s)) for s in ("zb-v", "dualpipev")])
def test_v_talks_only_to_the_ranks_beside_and_turns_in_memory(world_size, schedule):
    """In a V a rank sends each activation and grad once, to r ± 1 only: rank p - 1 turns in memory, not via rank 0.

    With microbatches of 3 x 8, rank r sends m activations per chunk whose next chunk is on another
    rank and m grads per chunk whose previous chunk is: 2m on ranks 0 and p - 1, 4m between."""
    if world_size < 2:
        pytest.skip("a V of 1 rank sends no message (it turns inside rank 0): world size 2 or more")
    p, m = world_size, 2 * world_size
    for r, events in enumerate(run_ranks(p, comm_rank, schedule, m)):
        log = f"rank {r}, {schedule}, m={m}:\n{format_events(events)}"
        assert all(e.op in ("send", "isend", "recv", "irecv", "wait") for e in events), f"{log}\nonly send/recv"
        sends = [e for e in events if e.op in ("send", "isend") and e.shapes == ((3, 8),)]
        expected = 2 * m if r in (0, p - 1) else 4 * m
        assert len(sends) == expected, f"{log}\n{len(sends)} sends of shape (3, 8), expected {expected}"
        peers = sorted({e.peer for e in events if e.peer is not None} - {r - 1, r + 1})
        assert not peers, f"{log}\ntalked to ranks {peers}: in a V rank {r} talks only to ranks {r - 1} and {r + 1}"


# ## The accounting (accounting.py, §5.7 and §5.8) ---------------------------------------------------------


def accounting_rank(ctx):
    A = ctx.load("accounting")
    out = {}
    for p in range(1, 6):
        for m in (2 * p - 1, 2 * p, 3 * p + 1):
            for f, b, w in [(1, 1, 1), (1, 2, 1), (0.5, 1, 0.25)]:
                out[("zb-v", p, m, f, b, w)] = A.zbv_bubble_fraction(p, m, f, b, w)
            out[("zb-v-peak", p, m)] = A.zbv_peak_activations(p, m)
            if m >= 2 * p:
                for f, b, w, fb in [(1, 2, 1, None), (1, 2, 1, 2.5), (2, 3, 1, 4)]:
                    out[("dualpipev", p, m, f, b, w, fb)] = A.dualpipev_bubble_fraction(p, m, f, b, w, fb)
                out[("dualpipev-peak", p, m)] = A.dualpipev_peak_activations(p, m)
    return out


@pytest.mark.parametrize("name", [pytest.param("zb-v", marks=pytest.mark.task5_7),
                                  pytest.param("dualpipev", marks=pytest.mark.task5_8)])  # fmt: skip
def test_accounting_bubble_and_peak_equal_the_simulated_schedules(name):
    """``zbv_*`` / ``dualpipev_*``: the bubble is what torch's order idles in the simulator, the peak what it holds.

    Bubble: 1 - busy / makespan of the most idle rank; F&B defaults to F + B (no overlap gain)."""
    got = run_ranks(1, accounting_rank)[0]
    for key, value in got.items():
        if not key[0].startswith(name):
            continue
        p, m = key[1], key[2]
        ranks = [torch_v_schedule(name, p, m, r) for r in range(p)]
        if key[0].endswith("peak"):
            expected = max(_peak(actions) for actions in ranks)
        elif name == "zb-v":
            f, b, w = key[3:]
            expected = 1 - 2 * m * (f + b + w) / simulate(ranks, 2, {"F": f, "B": b, "W": w}, placement="v")[0]
        else:
            f, b, w, fb = key[3:]
            result = run(ranks, 2, {"F": f, "B": b - w, "W": w, "F&B": fb or f + b}, placement="v")
            expected = max(1 - _busy(row) / result.makespan for row in result.timeline)
        assert value == pytest.approx(expected, abs=1e-12), f"accounting {key}: got {value}, simulated {expected}"


# ## Bad input ---------------------------------------------------------------------------------------------


def _v_train(ctx, P, m: int, schedule: str, placement: str = "v"):
    x = torch.randn(4 * ctx.world_size, 8, dtype=torch.float64, device=ctx.device)
    if placement == "v":
        pipe, _ = v_pipeline_stage(ctx, P, build_model("deep", 2 * ctx.world_size))
    else:
        pipe = P.PipelineStage(P.split_into_stages(build_model("deep", ctx.world_size).to(ctx.device),
                                                   ctx.world_size)[ctx.rank], ctx.rank, ctx.world_size,
                               nn.MSELoss())  # fmt: skip
    return pipe.train_step(x, x, m, schedule=schedule)


BAD_INPUT = [
    BadInput("v-chunks-stage-past-the-end", lambda P, ctx: P.split_into_v_chunks(build_model("deep", 4), 2, 2),
             "ValueError", names="stage", task="task5_7"),
    BadInput("zbv-stage-past-the-end", lambda P, ctx: P.zero_bubble_v_schedule(4, 8, 4),
             "ValueError", names="stage", task="task5_7"),
    BadInput("dualpipev-too-few-microbatches", lambda P, ctx: P.dualpipe_v_schedule(4, 7, 0),
             "ValueError", names="num_microbatches", task="task5_8"),
    BadInput("v-placement-unknown", lambda P, ctx: P.PipelineStage(build_model("deep", 2), ctx.rank,
             ctx.world_size, nn.MSELoss(), placement="w"), "ValueError", names="placement",
             task="task5_7"),
    BadInput("zbv-on-a-loop", lambda P, ctx: _v_train(ctx, P, 2 * ctx.world_size, "zb-v", placement="loop"),
             "ValueError", names="schedule", task="task5_7"),
    BadInput("1f1b-on-a-v", lambda P, ctx: _v_train(ctx, P, 2 * ctx.world_size, "1f1b"),
             "ValueError", names="schedule", task="task5_7"),
    BadInput("train-dualpipev-too-few-microbatches", lambda P, ctx: _v_train(ctx, P, ctx.world_size, "dualpipev"),
             "ValueError", names="num_microbatches", task="task5_8"),
    BadInput("accounting-zbv-fewer-microbatches", lambda P, ctx: ctx.load("accounting").zbv_bubble_fraction(4, 6),
             "ValueError", names="num_microbatches", task="task5_7"),
    BadInput("accounting-dualpipev-weight-longer-than-backward",
             lambda P, ctx: ctx.load("accounting").dualpipev_bubble_fraction(4, 8, 1.0, 1.0, 1.0),
             "ValueError", names="backward_weight_time", task="task5_8"),
]  # fmt: skip


@pytest.mark.world_sizes(2)
@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """Bad input raises the promised ValueError/TypeError naming the argument, on every rank, before any message."""
    assert_rejected_before_communicating(run_ranks(world_size, bad_input_rank, "pipeline", case, deadline=15), case)
