"""Part 5, continued: interleaved 1F1B, zero bubble (ZB-H1) and activation checkpointing (handouts/05-pipeline.md).

    pytest tests/test_pipeline_schedules.py                # pipelines of 1, 2 and 4 stages
    pytest tests/test_pipeline_schedules.py -m task5_5     # only ZB-H1

The schedules are checked as in tests/test_pipeline.py: computed for a grid in one rank, compared
with an oracle written here, and executed by a simulator in which a rank waits only for its input
(sends never block): F(i) of global chunk g waits for F(i) of chunk g - 1, B(i) for B(i) of chunk
g + 1 (the last chunk's B for its own F), W(i) for B(i). Simulated idle time must equal each
schedule's bubble formula. Training is judged against one process on the full batch; memory by
counting the activations actually alive (weak references to a probe layer's outputs).
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from tests.harness import assert_close, run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.harness.recorder import CommRecorder, format_events
from tests.oracles.pipeline import (
    ActivationProbe,
    assert_matches_oracle,
    build_model,
    chunked_train_rank,
    make_batches,
    one_f_one_b_order,
    oracle_steps,
    pipeline_stage,
)
from tests.oracles.pipeline_sim import simulate

# ## Oracles -------------------------------------------------------------------------------------


def _oracle_interleaved(p: int, m: int, r: int, v: int) -> list[tuple[str, int, int]]:
    """Megatron's interleaved 1F1B as (kind, microbatch, chunk), built from the order of the work
    rather than from index formulas: microbatches in groups of p; each group runs through chunk 0,
    then chunk 1, ... forward, and through the chunks in reverse backward."""
    if v == 1:
        return [(k, i, 0) for k, i in one_f_one_b_order(p, m, r)]
    forwards = [(i, c) for g in range(0, m, p) for c in range(v) for i in range(g, g + p)]
    backwards = [(i, c) for g in range(0, m, p) for c in reversed(range(v)) for i in range(g, g + p)]
    warmup = min(2 * (p - r - 1) + (v - 1) * p, m * v)
    order = [("F", *fwd) for fwd in forwards[:warmup]]
    for j, bwd in enumerate(backwards):  # each backward frees the slot of the next forward
        if warmup + j < m * v:
            order.append(("F", *forwards[warmup + j]))
        order.append(("B", *bwd))
    return order


def _oracle_zb_h1(p: int, m: int, s: int) -> list[tuple[str, int, int]]:
    """ZB-H1: 1F1B in which each B is followed by a W, except that stage s holds back its first s
    Ws (the ones it would run while later stages still start); the held-back Ws run at the end."""
    order, pending, done = [], [], 0
    for kind, i in one_f_one_b_order(p, m, s):
        order.append((kind, i, 0))
        if kind == "B":
            pending.append(i)
            done += 1
            if done > s:
                order.append(("W", pending.pop(0), 0))
    return order + [("W", i, 0) for i in pending]


def _oracle(schedule: str, p: int, m: int, r: int, v: int = 1) -> list[tuple[str, int, int]]:
    if schedule == "interleaved":
        return _oracle_interleaved(p, m, r, v)
    if schedule == "zb-h1":
        return _oracle_zb_h1(p, m, r)
    return [(k, i, 0) for k, i in one_f_one_b_order(p, m, r)]


def _peak(actions, release: str = "B") -> int:
    """Most (microbatch, chunk) pairs between their F and their ``release`` action at once."""
    live, peak = set(), 0
    for kind, i, c in actions:
        if kind == "F":
            live.add((i, c))
            peak = max(peak, len(live))
        elif kind == release:
            live.discard((i, c))
    return peak


def _recomputed_alive(actions) -> int:
    """Most microbatches whose intermediate activations a checkpointing rank holds at once: the one
    being run (forward or recomputed), plus, under ZB-H1, those whose B recomputed the graph that
    their W still needs."""
    between_b_and_w, peak = set(), 0
    for kind, i, c in actions:
        if kind in "FB":
            peak = max(peak, len(between_b_and_w) + 1)
        if kind == "B" and any(k == "W" for k, _, _ in actions):
            between_b_and_w.add((i, c))
        elif kind == "W":
            between_b_and_w.discard((i, c))
    return peak


def _fmt3(actions) -> str:
    return " ".join(f"{k}{i}" + (f".{c}" if c else "") for k, i, c in actions)


# ## Schedules, computed once in a rank ----------------------------------------------------------

INTERLEAVED_GRID = [(p, v, m) for p in range(1, 7) for v in range(1, 5) for m in range(p, 4 * p + 1, p)]
ZB_GRID = [(p, m) for p in range(1, 9) for m in range(1, 13)]


def schedules_rank(ctx, which: str):
    """Every schedule of the grid of ``which`` ("interleaved" or "zb-h1") as (kind, microbatch, chunk)."""
    P = ctx.load("pipeline")
    out = {}
    if which == "interleaved":
        for p, v, m in INTERLEAVED_GRID:
            for r in range(p):
                out[(p, v, m, r)] = P.interleaved_1f1b_schedule(p, m, r, v)
    else:
        for p, m in ZB_GRID:
            for s in range(p):
                out[(p, m, s)] = P.zero_bubble_h1_schedule(p, m, s)
    for key, actions in out.items():
        if not all(isinstance(a, P.Action) for a in actions):
            raise TypeError(f"{which} schedule {key} must return a list of Action, got {actions!r:.200}")
        out[key] = [(a.kind, a.microbatch, a.chunk) for a in actions]
    return out


@functools.cache
def computed(which: str) -> dict:
    """The grid of ``which``'s schedules, computed once in a rank (a pure function needs no peers)."""
    return run_ranks(1, schedules_rank, which)[0]


# ## Task 5.4: interleaved 1F1B --------------------------------------------------------------------


@pytest.mark.task5_4
def test_interleaved_example_of_the_handout():
    """The handout's example: p=2, v=2, m=2, stage 0 runs F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1 (.c: chunk c)."""
    got = _fmt3(computed("interleaved")[(2, 2, 2, 0)])
    assert got == "F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1", f"interleaved_1f1b_schedule(2, 2, 0, num_chunks=2): got {got}"


@pytest.mark.task5_4
def test_interleaved_follows_megatron_order_on_every_rank():
    """Interleaved 1F1B: groups of p microbatches, chunks in order forward and reversed backward,
    2(p - r - 1) + (v - 1)p warm-up forwards, then alternate; with v = 1, exactly 1F1B."""
    schedules = computed("interleaved")
    for p, v, m in INTERLEAVED_GRID:
        for r in range(p):
            got, expected = schedules[(p, v, m, r)], _oracle_interleaved(p, m, r, v)
            leading = next((k for k, a in enumerate(got) if a[0] == "B"), len(got))
            assert got == expected, (
                f"interleaved_1f1b_schedule(p={p}, m={m}, stage {r}, num_chunks={v}) (.c: chunk c):\n"
                f"expected {_fmt3(expected)}\ngot      {_fmt3(got)}\n(forwards before the first backward: "
                f"expected {min(2 * (p - r - 1) + (v - 1) * p + (v > 1 or p - r - 1 < m), m * v)}, got {leading})"
            )


@pytest.mark.task5_4
def test_interleaved_never_deadlocks_and_idles_exactly_its_bubble():
    """All ranks' interleaved schedules run together without deadlock and idle (p - 1) / (v·m + p - 1).

    Simulated with F = 1 and B = 2 units per chunk: each rank is busy 3vm units of a step lasting
    3(vm + p - 1). Each rank also holds at most min(2(p - r - 1) + (v - 1)p + 1, vm) chunk activations."""
    schedules = computed("interleaved")
    for p, v, m in INTERLEAVED_GRID:
        ranks = [schedules[(p, v, m, r)] for r in range(p)]
        where = f"interleaved, p={p}, v={v}, m={m}"
        makespan, stuck = simulate(ranks, v)
        assert not stuck, f"{where}: ranks {stuck} wait on each other forever; " + "; ".join(
            f"rank {r}: {_fmt3(a)}" for r, a in enumerate(ranks)
        )
        bubble, formula = 1 - 3 * v * m / makespan, (p - 1) / (v * m + p - 1)
        assert abs(bubble - formula) < 1e-9, f"{where}: simulated bubble {bubble:.4f}, formula {formula:.4f}"
        for r, actions in enumerate(ranks):
            expected = min(2 * (p - r - 1) + (v - 1) * p + 1, m * v) if v > 1 else min(p - r, m)
            assert _peak(actions) == expected, f"{where}, rank {r}: holds {_peak(actions)} chunk activations at " \
                f"once, expected {expected}"  # fmt: skip


# ## Task 5.5: ZB-H1 --------------------------------------------------------------------------------


@pytest.mark.task5_5
def test_zero_bubble_examples_of_the_handout():
    """The handout's examples: ZB-H1 on stages 0 and 3 of p=4, m=6."""
    schedules = computed("zb-h1")
    for s, expected in [(0, "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 B3 W3 B4 W4 B5 W5"),
                        (3, "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 W3 W4 W5")]:  # fmt: skip
        got = _fmt3(schedules[(4, 6, s)])
        assert got == expected, f"zero_bubble_h1_schedule(4, 6, stage {s}): expected {expected}, got {got}"


@pytest.mark.task5_5
def test_zero_bubble_runs_f_then_b_then_w_and_delays_stage_s_first_ws():
    """ZB-H1: every microbatch one F, then one B, then one W; 1F1B's F/B order; stage s delays its first s Ws."""
    schedules = computed("zb-h1")
    for p, m in ZB_GRID:
        for s in range(p):
            got = schedules[(p, m, s)]
            where = f"zero_bubble_h1_schedule({p} stages, {m} microbatches, stage {s}): {_fmt3(got)}"
            for i in range(m):
                assert [k for k, j, _ in got if j == i] == ["F", "B", "W"], f"{where}: microbatch {i} must run " \
                    "F, then B, then W, once each"  # fmt: skip
            expected = _oracle_zb_h1(p, m, s)
            assert got == expected, f"{where}\nexpected {_fmt3(expected)}"


@pytest.mark.task5_5
def test_zero_bubble_idles_a_third_of_1f1b_at_the_same_peak_activations():
    """With F = B = W and m >= p, ZB-H1 idles (p - 1) units per step against 1F1B's 3(p - 1), at the same peak.

    No deadlock for any (p, m); the step lasts 3m + p - 1 units (m >= p); every stage holds at most
    min(p, m) microbatches from F to W, 1F1B's own peak (stage 0's)."""
    schedules = computed("zb-h1")
    for p, m in ZB_GRID:
        stages = [schedules[(p, m, s)] for s in range(p)]
        makespan, stuck = simulate(stages, cost={"F": 1, "B": 1, "W": 1})
        where = f"zb-h1, p={p}, m={m}"
        assert not stuck, f"{where}: stages {stuck} wait on each other forever; " + "; ".join(
            f"stage {s}: {_fmt3(a)}" for s, a in enumerate(stages)
        )
        if m >= p:
            assert makespan == 3 * m + p - 1, (
                f"{where}: the step lasts {makespan} units with F = B = W = 1, expected 3m + p - 1 = "
                f"{3 * m + p - 1} (bubble (p - 1)(F + B - W)); 1F1B's lasts {3 * (m + p - 1)}"
            )
        for s, actions in enumerate(stages):
            assert _peak(actions, release="W") == min(p, m), (
                f"{where}, stage {s}: {_peak(actions, release='W')} microbatches held between F and W at once, "
                f"expected min(p, m) = {min(p, m)}"
            )


# ## Task 5.6: PipelineStage runs them --------------------------------------------------------------

# (schedule, chunks per rank, checkpoint): the new schedules, and checkpointing under each kind;
# "interleaved" over a single module is v = 1, the 1F1B order.
RUNS = [("interleaved", 2, False), ("zb-h1", 1, False), ("1f1b", 1, True), ("interleaved", 2, True),
        ("zb-h1", 1, True), ("interleaved", 1, False)]  # fmt: skip


def _run_id(run) -> str:
    schedule, v, checkpoint = run
    chunks = f"-v{v}" if v > 1 else "-one-module" if schedule == "interleaved" else ""
    return f"{schedule}{chunks}{'-checkpoint' if checkpoint else ''}"


def _skip_unless_fits(run, p: int) -> None:
    if run[1] > 1 and p == 1:
        pytest.skip("interleaving needs 2 stages or more")


@pytest.mark.task5_6
@pytest.mark.parametrize("run", RUNS, ids=_run_id)
def test_every_schedule_trains_like_one_process_on_the_full_batch(world_size, run):
    """Interleaved, ZB-H1 and checkpointed steps give one process's full-batch loss and grads, every step.

    Three SGD steps with m = 2p microbatches (interleaving needs a multiple of p): the last stage
    returns the full-batch mean loss and every chunk's grads equal the whole model's (float64)."""
    _skip_unless_fits(run, world_size)
    p, v = world_size, run[1]
    m = 2 * p
    batches = make_batches("deep", 2 * m, steps=3, seed=world_size)
    results = run_ranks(world_size, chunked_train_rank, run, m, batches)
    assert_matches_oracle(results, oracle_steps("deep", p * v, batches), list(range(p)), f"{_run_id(run)}, m={m}")


@pytest.mark.task5_6
@pytest.mark.world_sizes(2)
@pytest.mark.parametrize("checkpoint", [False, True], ids=["keep", "checkpoint"])
def test_interleaved_chunks_whose_activations_differ_in_width_train_like_one_process(world_size, checkpoint):
    """Interleaved over 4 chunks whose boundaries carry activations of widths 10, 3 and 7 equals one process.

    Each chunk's incoming activation has its own shape: a rank learns it per chunk, from that chunk's
    shape header, never from the first one it saw."""
    p, v = world_size, 2
    m = 2 * p
    batches = make_batches("widths", 2 * m, steps=2, seed=11)
    results = run_ranks(p, chunked_train_rank, ("interleaved", v, checkpoint), m, batches, model_kind="widths")
    assert_matches_oracle(results, oracle_steps("widths", p * v, batches), list(range(p)),
                          f"interleaved v={v}, widths model, checkpoint={checkpoint}")  # fmt: skip


def input_grad_rank(ctx, schedule, checkpoint, m, x, y):
    """Stage 0's batch requires grad: after one step, its ``.grad`` on rank 0 (None elsewhere)."""
    P = ctx.load("pipeline")
    pipe, _chunks = pipeline_stage(ctx, P, build_model("deep", ctx.world_size), 1)
    first, last = ctx.rank == 0, ctx.rank == ctx.world_size - 1
    inputs = x.to(ctx.device).requires_grad_() if first else None
    pipe.train_step(inputs, y.to(ctx.device) if last else None, m, schedule=schedule, checkpoint=checkpoint)
    return inputs.grad if first else None


@pytest.mark.task5_5
@pytest.mark.parametrize("schedule,checkpoint", [("zb-h1", False), ("zb-h1", True), ("1f1b", True)],
                         ids=["zb", "zb-checkpoint", "1f1b-checkpoint"])  # fmt: skip
def test_stage_0_input_that_requires_grad_gets_its_gradient(world_size, schedule, checkpoint):
    """B computes the input's gradient whenever the stage's input requires grad, stage 0 included.

    Stage 0's input is the caller's batch: when it requires grad (an embedding before the pipeline,
    a saliency map), ``inputs.grad`` after the step must be d(full-batch mean loss)/d(inputs), as
    ``loss.backward()`` on one process gives, under the split backward and under checkpointing too."""
    m = 2 * world_size
    x, y = make_batches("deep", 2 * m, steps=1, seed=11)[0]
    leaf = x.clone().requires_grad_()
    nn.functional.mse_loss(build_model("deep", world_size)(leaf), y).backward()
    got = run_ranks(world_size, input_grad_rank, schedule, checkpoint, m, x, y)[0]
    where = f"rank 0 (stage 0), {schedule}{', checkpoint=True' if checkpoint else ''}, m={m}"
    assert got is not None, (
        f"{where}: the batch passed as inputs requires grad but its .grad is None after train_step: stage 0's "
        "B must compute the input's gradient too and backpropagate it into the batch (handout 5.6)"
    )
    assert_close(got, leaf.grad, what=f"{where}, inputs.grad")


def dropout_rank(ctx, schedule, v, m, x, y):
    """The same pipeline, same seed, with and without checkpointing: (loss, grads) of each."""
    P = ctx.load("pipeline")
    x, y = x.to(ctx.device), y.to(ctx.device)  # made by the parent on the CPU; the model is on ctx.device
    out = []
    for checkpoint in (False, True):
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Tanh()) for _ in range(2 * 4)])
        pipe, chunks = pipeline_stage(ctx, P, model.double(), v)
        torch.manual_seed(100 + ctx.rank)  # each rank's dropout stream, the same for both runs
        loss = pipe.train_step(x, y, m, schedule=schedule, checkpoint=checkpoint)
        out.append((loss, {n: q.grad for c in chunks for n, q in c.named_parameters()}))
    return out


@pytest.mark.task5_6
@pytest.mark.world_sizes(1, 2, 4)  # 1: a one-GPU node checks the CUDA RNG state too
@pytest.mark.parametrize("schedule,v", [("1f1b", 1), ("interleaved", 2), ("zb-h1", 1)], ids=["1f1b", "inter", "zb"])
def test_checkpointing_recomputes_with_the_forward_rng_state(world_size, schedule, v):
    """Under dropout, checkpointing gives the same loss and grads as keeping the activations.

    The recomputed forward must draw the same dropout masks as the first one (restore the RNG state
    it started from) and must not move the random stream of the forwards that follow."""
    if world_size == 1 and v > 1:
        pytest.skip("interleaving needs 2 stages or more")
    m = 2 * world_size
    gen = torch.Generator().manual_seed(3)
    x, y = (torch.randn(2 * m, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    for r, (plain, ckpt) in enumerate(run_ranks(world_size, dropout_rank, schedule, v, m, x, y)):
        where = f"rank {r}, {schedule}, dropout 0.5"
        if plain[0] is not None:
            assert_close(torch.tensor(ckpt[0]), torch.tensor(plain[0]), what=f"{where}, loss with checkpoint=True")
        for name, grad in plain[1].items():
            assert_close(ckpt[1][name], grad, what=f"{where}, {name}.grad with checkpoint=True vs without "
                         "(a recomputation without the forward's RNG state draws other dropout masks)")  # fmt: skip


def memory_rank(ctx, run, m):
    P = ctx.load("pipeline")
    schedule, v, checkpoint = run
    probe = ActivationProbe()
    pipe, _ = pipeline_stage(ctx, P, build_model("deep", ctx.world_size * v), v, probe)
    x, y = make_batches("deep", 2 * m, steps=1, seed=0)[0]  # microbatches of 2 x 8 float64: 128 bytes
    pipe.train_step(x.to(ctx.device), y.to(ctx.device), m, schedule=schedule, checkpoint=checkpoint)
    order = [(a.kind, a.microbatch, a.chunk) for a, _, _ in pipe.timeline]
    return pipe.peak_activations, probe.peak_count, probe.peak_bytes, order


MEMORY_RUNS = [("1f1b", 1, False), *RUNS]


@pytest.mark.task5_6
@pytest.mark.parametrize("run", MEMORY_RUNS, ids=_run_id)
def test_activations_held_follow_the_schedule_and_checkpointing(world_size, run):
    """``.peak_activations`` is the schedule's; the activations alive are that many, or one with checkpointing.

    Without checkpointing a rank holds every (microbatch, chunk) between its F and its B (W for
    ZB-H1): the probe's outputs alive peak at ``.peak_activations`` x 128 bytes. With checkpointing
    only the stage inputs stay, and the probe's outputs alive peak at one microbatch's 128 bytes
    (the one being recomputed), plus under ZB-H1 those recomputed by a B whose W has not run yet.
    ``.timeline`` runs the schedule's actions in order."""
    _skip_unless_fits(run, world_size)
    schedule, v, checkpoint = run
    p, m = world_size, 2 * world_size
    for r, (reported, count, nbytes, order) in enumerate(run_ranks(world_size, memory_rank, run, m)):
        where = f"rank {r}, {_run_id(run)}, {p} stages, {m} microbatches"
        plan = _oracle(schedule, p, m, r, v)
        assert order == plan, f"{where}: .timeline runs {_fmt3(order)}, expected {_fmt3(plan)}"
        expected = _peak(plan, release="W" if schedule == "zb-h1" else "B")
        assert reported == expected, f"{where}: .peak_activations is {reported}, expected {expected}"
        alive = _recomputed_alive(plan) if checkpoint else expected
        assert count == alive and nbytes == alive * 128, (
            f"{where}: {count} microbatches' activations ({nbytes} bytes) were alive at once, expected {alive} "
            f"({alive * 128} bytes)"
            + (": checkpointing keeps only each microbatch's stage input" if checkpoint else "")
        )


def comm_rank(ctx, m, v):
    P = ctx.load("pipeline")
    pipe, _ = pipeline_stage(ctx, P, build_model("deep", ctx.world_size * v), v)
    x, y = make_batches("deep", 3 * m, steps=1, seed=0)[0]
    with CommRecorder() as rec:
        pipe.train_step(x.to(ctx.device), y.to(ctx.device), m, schedule="interleaved")
    return rec.events


@pytest.mark.task5_6
@pytest.mark.world_sizes(2, 4)
def test_interleaved_chunks_talk_only_to_the_ranks_beside_them(world_size):
    """Interleaved, a rank sends one activation and one grad per microbatch and chunk, to the ranks beside it.

    With v = 2, rank r sends an activation of shape (3, 8) for each microbatch and chunk except the
    last global chunk's, and an input grad for each except global chunk 0's, only to r ± 1 mod p."""
    p, v, m = world_size, 2, 2 * world_size
    for r, events in enumerate(run_ranks(world_size, comm_rank, m, v)):
        log = f"rank {r}, interleaved v={v}, m={m}:\n{format_events(events)}"
        assert all(e.op in ("send", "isend", "recv", "irecv", "wait") for e in events), f"{log}\nonly send/recv"
        sends = [e for e in events if e.op in ("send", "isend") and e.shapes == ((3, 8),)]
        expected = 2 * m * v - m * ((r == p - 1) + (r == 0))  # every chunk sends both ways but the two ends
        assert len(sends) == expected, f"{log}\n{len(sends)} sends of shape (3, 8), expected {expected}"
        peers = sorted({e.peer for e in events if e.peer is not None} - {(r - 1) % p, (r + 1) % p})
        assert not peers, f"{log}\ntalked to ranks {peers}, which are not beside rank {r} on the ring"


# ## Task 5.6: the accounting (accounting.py's last section) ------------------------------------------

ZB_COSTS = [(1, 1, 1), (2, 2, 1), (3, 2, 1), (1, 2, 1), (2, 1, 1)]  # (F, B, W) with W <= F


def accounting_rank(ctx):
    A = ctx.load("accounting")
    out = {}
    for p, v, m in INTERLEAVED_GRID:
        for name in ("gpipe", "1f1b", "interleaved") if v == 1 else ("interleaved",):
            out[("bubble", name, p, v, m)] = A.schedule_bubble_fraction(name, p, m, v)
            for s in range(p):
                out[("peak", name, p, v, m, s)] = A.schedule_peak_activations(name, p, m, s, v)
    for p, m in ZB_GRID:
        for s in range(p):
            out[("peak", "zb-h1", p, 1, m, s)] = A.schedule_peak_activations("zb-h1", p, m, s)
        for f, b, w in ZB_COSTS if m >= p else []:
            out[("bubble", "zb-h1", p, m, f, b, w)] = A.schedule_bubble_fraction("zb-h1", p, m, 1, f, b, w)
    out["act"] = [A.pipeline_activation_bytes(4, 272, 2, checkpoint=c) for c in (False, True)]
    out["flops"] = A.recompute_training_flops(1e9, 1e6), A.hfu(1e4, 1e9, 989e12), A.mfu(1e4, 1e9, 989e12)
    out["hfu-no-checkpoint"] = A.hfu(1e4, 1e9, 989e12, checkpoint=False)
    return out


@pytest.mark.task5_6
def test_accounting_bubble_and_peak_equal_the_simulated_schedules():
    """``schedule_bubble_fraction`` and ``schedule_peak_activations`` equal what the simulator measures.

    For every schedule on the grid, the bubble equals 1 - busy / (p x makespan) of the simulated
    schedules (ZB-H1 with several F, B, W times, W <= F, m >= p) and the peak equals the most
    (microbatch, chunk) pairs between F and the end of their backward."""
    got = run_ranks(1, accounting_rank)[0]
    for key, value in got.items():
        if key[0] == "peak":
            _, name, p, v, m, s = key
            expected = _peak(_oracle(name, p, m, s, v), release="W" if name == "zb-h1" else "B")
            if name == "gpipe":
                expected = m
        elif key[0] == "bubble" and key[1] == "zb-h1":
            _, name, p, m, f, b, w = key
            makespan, _ = simulate([_oracle_zb_h1(p, m, s) for s in range(p)], cost={"F": f, "B": b, "W": w})
            expected = 1 - m * (f + b + w) / makespan
        elif key[0] == "bubble":
            _, name, p, v, m = key
            if name == "gpipe":
                stages = [[("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)] for _ in range(p)]
            else:
                stages = [_oracle(name, p, m, s, v) for s in range(p)]
            expected = 1 - 3 * v * m / simulate(stages, v)[0]
        else:
            continue
        assert value == pytest.approx(expected, abs=1e-12), f"accounting {key}: got {value}, simulated {expected}"


@pytest.mark.task5_6
def test_accounting_checkpointing_memory_and_recompute_flops():
    """Checkpointing keeps held x input + one microbatch's activations, costs 8ND, and MFU = 3/4 HFU.

    The handout's numbers: 4 microbatches of 272 bytes of activations (8 layers x 34 sbh) with a
    2-byte input: 1088 bytes without, 4 x 2 + 272 = 280 with; 1e9 parameters on 1e6 tokens: 8e15
    FLOPs; at 10_000 tokens/s on 989e12 FLOP/s: HFU 0.0809 with recomputation, MFU 0.0607."""
    got = run_ranks(1, accounting_rank)[0]
    assert got["act"] == [1088, 280], f"pipeline_activation_bytes(4, 272, 2, checkpoint=False/True): {got['act']}"
    flops, hardware, model = got["flops"]
    assert flops == pytest.approx(8e15), f"recompute_training_flops(1e9, 1e6): expected 8e15 (8ND), got {flops}"
    assert hardware == pytest.approx(8e13 / 989e12), f"hfu(1e4, 1e9, 989e12): expected 0.0809, got {hardware}"
    assert model == pytest.approx(0.75 * hardware), f"mfu {model} should be 3/4 of hfu {hardware} (6ND vs 8ND)"
    assert got["hfu-no-checkpoint"] == pytest.approx(model), "hfu(..., checkpoint=False) counts no recompute: = mfu"


# ## Bad input ---------------------------------------------------------------------------------------


def _pipe(ctx, P, v: int = 1):
    pipe, _ = pipeline_stage(ctx, P, build_model("deep", ctx.world_size * v), v)
    return pipe


def _train(ctx, P, m: int, schedule: str, v: int = 1, checkpoint=False):
    x = torch.randn(4 * ctx.world_size, 8, device=ctx.device)
    return _pipe(ctx, P, v).train_step(x, x, m, schedule=schedule, checkpoint=checkpoint)


BAD_INPUT = [
    BadInput("interleaved-m-not-a-multiple-of-p", lambda P, ctx: P.interleaved_1f1b_schedule(4, 6, 0, 2),
             "ValueError", names="num_microbatches", task="task5_4"),
    BadInput("interleaved-no-chunks", lambda P, ctx: P.interleaved_1f1b_schedule(4, 8, 0, 0),
             "ValueError", names="num_chunks", task="task5_4"),
    BadInput("interleaved-float-chunks", lambda P, ctx: P.interleaved_1f1b_schedule(4, 8, 0, 2.0),
             "TypeError", names="num_chunks", task="task5_4"),
    BadInput("interleaved-stage-past-the-end", lambda P, ctx: P.interleaved_1f1b_schedule(4, 8, 4, 2),
             "ValueError", names="stage", task="task5_4"),
    BadInput("zb-stage-past-the-end", lambda P, ctx: P.zero_bubble_h1_schedule(4, 8, 4),
             "ValueError", names="stage", task="task5_5"),
    BadInput("zb-no-microbatches", lambda P, ctx: P.zero_bubble_h1_schedule(4, 0, 0),
             "ValueError", names="num_microbatches", task="task5_5"),
    BadInput("train-interleaved-m-not-a-multiple-of-p", lambda P, ctx: _train(ctx, P, 2 * ctx.world_size + 1,
             "interleaved", v=2), "ValueError", names="num_microbatches", task="task5_6"),
    BadInput("chunks-with-a-one-chunk-schedule", lambda P, ctx: _train(ctx, P, 2 * ctx.world_size, "1f1b", v=2),
             "ValueError", names="schedule", task="task5_6"),
    BadInput("accounting-unknown-schedule", lambda P, ctx: ctx.load("accounting").schedule_bubble_fraction("zb", 4, 8),
             "ValueError", names="schedule", task="task5_6"),
    BadInput("accounting-zb-fewer-microbatches-than-stages",
             lambda P, ctx: ctx.load("accounting").schedule_bubble_fraction("zb-h1", 4, 2),
             "ValueError", names="num_microbatches", task="task5_6"),
    BadInput("accounting-zb-weight-slower-than-forward",
             lambda P, ctx: ctx.load("accounting").schedule_bubble_fraction("zb-h1", 4, 8, 1, 1.0, 1.0, 2.0),
             "ValueError", names="backward_weight_time", task="task5_6"),
    BadInput("accounting-checkpoint-not-a-bool",
             lambda P, ctx: ctx.load("accounting").pipeline_activation_bytes(4, 272, 2, checkpoint=1),
             "TypeError", names="checkpoint", task="task5_6"),
    BadInput("checkpoint-not-a-bool", lambda P, ctx: _train(ctx, P, 2, "1f1b", checkpoint="yes"),
             "TypeError", names="checkpoint", task="task5_6"),
]  # fmt: skip


@pytest.mark.world_sizes(2, 4)
@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """Bad input raises the promised ValueError/TypeError naming the argument, on every rank, before any message."""
    assert_rejected_before_communicating(run_ranks(world_size, bad_input_rank, "pipeline", case, deadline=15), case)
