"""Part 1, Task 1.7: all-reduce algorithms, ring vs recursive doubling, chosen by size (handouts/01-collectives.md).

    pytest tests/test_all_reduce_algorithms.py                         # world sizes 1, 2, 4
    pytest tests/test_all_reduce_algorithms.py --world-sizes 3,5,6,7   # N not a power of two: the fold

Every algorithm must give the exact sum (inputs are small integers, exact in every dtype), leave
the same bits on every rank, and send the messages its docstring promises: the ring only to the
next rank, recursive doubling to ``me XOR 2**k`` after the extra ranks fold in, whole tensors at
every step. ``"auto"`` must run the algorithm the alpha-beta model picks, which the parent
computes here from the implementation's own ``ALPHA_BETA``.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.harness import assert_close, run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.harness.recorder import CommRecorder, bytes_sent, calls, collective_ops, format_events

pytestmark = pytest.mark.task1_7

ALGORITHMS = ["ring", "recursive_doubling", "auto"]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64]
SHAPES = [(), (0,), (1,), (3,), (7, 5), (2, 3, 4), (1000,)]  # empty, 0-d, fewer elements than ranks
LARGEST_PROBE = 32 << 20  # bytes: where the test of "auto" stops looking for the ring's side


# -- oracles, computed here in the parent ------------------------------------------------------------


def _ints(shape, dtype, seed) -> torch.Tensor:
    """Small integers: sums of 8 are exact in bfloat16."""
    return torch.randint(-8, 9, shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def doubling_steps(n: int) -> int:
    """Steps on recursive doubling's critical path: log2 p exchanges, plus the fold in and out."""
    p = 1 << (n.bit_length() - 1)
    return (p.bit_length() - 1) + (2 if n != p else 0)


def modelled_times(num_bytes: int, n: int, alpha: float, beta: float) -> dict[str, float]:
    """The alpha-beta model of ``choose_all_reduce_algorithm``'s docstring."""
    return {
        "ring": 2 * (n - 1) * alpha + 2 * (n - 1) / n * num_bytes * beta,
        "recursive_doubling": doubling_steps(n) * (alpha + num_bytes * beta),
    }


def model_choice(num_bytes: int, n: int, alpha: float, beta: float) -> str:
    t = modelled_times(num_bytes, n, alpha, beta)
    return "recursive_doubling" if t["recursive_doubling"] < t["ring"] else "ring"


def crossover_bytes(n: int, alpha: float, beta: float) -> float | None:
    """Size above which the ring is modelled faster; None when recursive doubling always wins (N <= 2)."""
    s, ring_bw = doubling_steps(n), 2 * (n - 1) / n
    if n < 3 or beta <= 0:
        return None
    return (2 * (n - 1) - s) * alpha / ((s - ring_bw) * beta)


def doubling_peers(n: int, me: int) -> tuple[list[int], list[int]]:
    """Group positions recursive doubling sends to and receives from, in order, at group position ``me``."""
    p = 1 << (n.bit_length() - 1)
    if me >= p:  # an extra rank: fold in, then wait for the result
        return [me - p], [me - p]
    exchanges = [me ^ (1 << k) for k in range(p.bit_length() - 1)]
    fold = [me + p] if me + p < n else []
    return exchanges + fold, fold + exchanges


SEGMENTS_FROM = 64 << 10  # bytes: a smaller step is one message (at two ranks the ring's halves would look alike)


def _steps(events, kinds, num_bytes: int) -> list[tuple[int, int]]:
    """(peer, bytes) per step: for large tensors consecutive messages to one peer are one step cut into segments."""
    steps: list[list[int]] = []
    for e in calls(events):
        if e.op in kinds:
            if steps and steps[-1][0] == e.peer and num_bytes > SEGMENTS_FROM:
                steps[-1][1] += e.nbytes
            else:
                steps.append([e.peer, e.nbytes])
    return [tuple(s) for s in steps]


# -- judges -------------------------------------------------------------------------------------------


def assert_point_to_point_only(events, what: str) -> None:
    __tracebackhide__ = True
    bad = collective_ops(events)
    assert not bad, (
        f"{what}: only send/recv/isend/irecv/batch_isend_irecv are allowed, but the code called "
        f"{sorted({e.op for e in bad})}:\n{format_events(events)}"
    )


def assert_recursive_doubling(events, members: list[int], rank: int, num_bytes: int, what: str) -> None:
    """Whole tensors, to and from exactly the partners of ``doubling_peers``, in that order."""
    __tracebackhide__ = True
    n, me = len(members), members.index(rank)
    send_to, recv_from = doubling_peers(n, me)
    want_sends = [(members[q], num_bytes) for q in send_to]
    want_recvs = [(members[q], num_bytes) for q in recv_from]
    log = format_events(events)
    got_sends, got_recvs = _steps(events, ("send", "isend"), num_bytes), _steps(events, ("recv", "irecv"), num_bytes)
    assert got_sends == want_sends, (
        f"{what}: recursive doubling at group position {me} of {n} sends, step by step, (peer, bytes) = "
        f"{want_sends} (fold out last; partner = position XOR 2**k), but sent {got_sends}:\n{log}"
    )
    assert got_recvs == want_recvs, (
        f"{what}: recursive doubling at group position {me} of {n} receives, step by step, (peer, bytes) = "
        f"{want_recvs} (fold in first), but received {got_recvs}:\n{log}"
    )


def assert_ring(events, members: list[int], rank: int, num_bytes: int, what: str, count_steps: bool = True) -> None:
    """Only to the next rank and from the previous one, 2(N-1)/N of the data (and 2(N-1) steps if small)."""
    __tracebackhide__ = True
    n, me = len(members), members.index(rank)
    nxt, prv = members[(me + 1) % n], members[(me - 1) % n]
    sends = [e for e in calls(events) if e.op in ("send", "isend")]
    recvs = [e for e in calls(events) if e.op in ("recv", "irecv")]
    log = format_events(events)
    assert {e.peer for e in sends} == {nxt}, f"{what}: a ring sends only to the next rank {nxt}:\n{log}"
    assert {e.peer for e in recvs} == {prv}, f"{what}: a ring receives only from the previous rank {prv}:\n{log}"
    if count_steps:
        assert len(sends) == 2 * (n - 1), f"{what}: expected 2(N-1) = {2 * (n - 1)} sends, got {len(sends)}:\n{log}"
    ideal, slack = 2 * (n - 1) / n * num_bytes, 2 * (n - 1) * 8  # unequal chunks: one element per step
    sent = bytes_sent(events)
    assert abs(sent - ideal) <= slack, f"{what}: sent {sent} bytes; the ring sends 2(N-1)/N * M = {ideal:.0f}"


# -- results: exact sums, the mean, the same bits everywhere --------------------------------------------


def sum_rank(ctx, inputs, algorithm: str, op: str = "sum"):
    """All-reduce every case of this rank's inputs; the recorder shows any built-in collective."""
    C = ctx.load("collectives")
    results = []
    with CommRecorder() as rec:
        for x in inputs[ctx.rank]:
            x = x.to(ctx.device)
            C.all_reduce(x, op, algorithm=algorithm)
            results.append(x)
    return results, rec.events


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_sums_exactly_in_place(world_size, algorithm):
    """Each algorithm leaves the exact sum on every rank, for every dtype and shape (empty and 0-d included)."""
    cases = [(dtype, shape) for dtype in DTYPES for shape in SHAPES]
    inputs = [[_ints(s, d, 1000 * r + i) for i, (d, s) in enumerate(cases)] for r in range(world_size)]
    outs = run_ranks(world_size, sum_rank, inputs, algorithm)
    for rank, (results, events) in enumerate(outs):
        assert_point_to_point_only(events, f"rank {rank}, all_reduce(algorithm={algorithm!r})")
        for i, (dtype, shape) in enumerate(cases):
            want = torch.stack([inputs[r][i].double() for r in range(world_size)]).sum(0).to(dtype)
            what = f"rank {rank}, all_reduce(algorithm={algorithm!r}) of {str(dtype)[6:]} {shape}"
            assert_close(results[i], want, what=what, rtol=0, atol=0)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_avg_divides_by_world_size_once(world_size, algorithm):
    """``op="avg"`` leaves the mean over ranks: the sum divided by N once, not at every step."""
    cases = [(dtype, shape) for dtype in DTYPES[:3] for shape in [(1,), (7, 5)]]
    inputs = [[_ints(s, d, 50 + 1000 * r + i) for i, (d, s) in enumerate(cases)] for r in range(world_size)]
    outs = run_ranks(world_size, sum_rank, inputs, algorithm, "avg")
    for rank, (results, _) in enumerate(outs):
        for i, (dtype, shape) in enumerate(cases):
            want = (torch.stack([inputs[r][i].double() for r in range(world_size)]).sum(0) / world_size).to(dtype)
            what = f"rank {rank}, all_reduce(avg, {algorithm!r}) of {str(dtype)[6:]} {shape}"
            assert_close(results[i], want, what=what)


def random_rank(ctx, seed: int, algorithm: str):
    """Random normals through a non-contiguous (transposed) view, which must be reduced in place."""
    x = torch.randn(33, 17, generator=torch.Generator().manual_seed(seed + ctx.rank)).to(ctx.device).t()
    ctx.load("collectives").all_reduce(x, algorithm=algorithm)
    return x


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_random_floats_are_reduced_in_place_to_the_same_bits_on_every_rank(world_size, algorithm):
    """Random float32 through a transposed view: close to the float64 sum, and bit-identical on every rank."""
    outs = run_ranks(world_size, random_rank, 7, algorithm)
    inputs = [torch.randn(33, 17, generator=torch.Generator().manual_seed(7 + r)) for r in range(world_size)]
    want = torch.stack([x.double() for x in inputs]).sum(0).float().t()
    for rank, got in enumerate(outs):
        assert_close(got, want, what=f"rank {rank}, all_reduce({algorithm!r}) of random (17, 33) float32 (a view)")
        assert torch.equal(got, outs[0]), (
            f"rank {rank}, all_reduce({algorithm!r}): every rank must end with the same bits as rank 0; "
            f"{int((got != outs[0]).sum())} of {got.numel()} elements differ"
        )


# -- the messages each algorithm sends ---------------------------------------------------------------------


def traffic_rank(ctx, numel: int, algorithm: str):
    x = torch.ones(numel, device=ctx.device)
    with CommRecorder() as rec:
        ctx.load("collectives").all_reduce(x, algorithm=algorithm)
    return rec.events


@pytest.mark.world_sizes(2, 3, 4, 5, 6, 7, 8)
@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling"])
def test_each_algorithm_sends_the_steps_and_bytes_it_promises(world_size, algorithm):
    """Ring: 2(N-1) steps to the next rank, 2(N-1)/N * M bytes. Recursive doubling: the fold in, log2 p
    exchanges of all M bytes with partner XOR 2**k, the fold out."""
    numel = 4099  # 16 KiB of float32, not divisible by N: unequal ring chunks
    outs = run_ranks(world_size, traffic_rank, numel, algorithm)
    members = list(range(world_size))
    for rank, events in enumerate(outs):
        what = f"rank {rank}, all_reduce(algorithm={algorithm!r}) of {numel} float32"
        assert_point_to_point_only(events, what)
        if algorithm == "ring":
            assert_ring(events, members, rank, numel * 4, what)
        else:
            assert_recursive_doubling(events, members, rank, numel * 4, what)


# -- "auto": the model's choice, on each side of the crossover ----------------------------------------------


def test_choose_all_reduce_algorithm_follows_the_alpha_beta_model():
    """``choose_all_reduce_algorithm`` returns the algorithm with the smaller modelled time, for any alpha, beta."""
    grid = [(1 << k, n, a, b) for k in range(0, 31, 2) for n in range(1, 9) for a, b in [(5e-6, 1e-11), (2e-4, 1e-9)]]
    got = run_ranks(1, choose_rank, grid)[0]
    for (num_bytes, n, a, b), choice in zip(grid, got):
        t = modelled_times(num_bytes, n, a, b)
        assert choice == model_choice(num_bytes, n, a, b), (
            f"choose_all_reduce_algorithm({num_bytes}, {n}, alpha={a}, beta={b}) returned {choice!r}, but the "
            f"model gives ring {t['ring']:.3g} s and recursive doubling {t['recursive_doubling']:.3g} s"
        )


def choose_rank(ctx, grid):
    C = ctx.load("collectives")
    return [C.choose_all_reduce_algorithm(m, n, alpha=a, beta=b) for m, n, a, b in grid]


def probe_sizes(n: int, alpha: float, beta: float) -> list[int]:
    """A tiny message, and one twice the crossover (capped): one on each side where the crossover exists."""
    cross = crossover_bytes(n, alpha, beta)
    large = LARGEST_PROBE if cross is None else min(LARGEST_PROBE, int(2 * cross))
    return [64, max(4, large // 4 * 4)]


def auto_rank(ctx):
    C = ctx.load("collectives")
    alpha, beta = C.ALPHA_BETA.get(ctx.backend, C.ALPHA_BETA["gloo"])
    runs = []
    for num_bytes in probe_sizes(ctx.world_size, alpha, beta):
        x = torch.ones(num_bytes // 4, device=ctx.device)
        with CommRecorder() as rec:
            C.all_reduce(x, algorithm="auto")
        runs.append((num_bytes, x[:3].cpu(), rec.events))
    return alpha, beta, runs


@pytest.mark.world_sizes(2, 3, 4, 5, 6, 7, 8)
def test_auto_runs_the_algorithm_the_model_picks_on_each_side_of_the_crossover(world_size):
    """``algorithm="auto"`` sends exactly what the model's pick sends: recursive doubling for a tiny message, and
    (for N >= 3) the ring for twice the crossover size, with the implementation's own ``ALPHA_BETA``."""
    outs = run_ranks(world_size, auto_rank)
    members = list(range(world_size))
    for rank, (alpha, beta, runs) in enumerate(outs):
        for num_bytes, head, events in runs:
            pick = model_choice(num_bytes, world_size, alpha, beta)
            t = modelled_times(num_bytes, world_size, alpha, beta)
            what = (f"rank {rank}, all_reduce(algorithm='auto') of {num_bytes} bytes: with alpha={alpha:.3g} s, "
                    f"beta={beta:.3g} s/B the model gives ring {t['ring']:.3g} s, recursive doubling "
                    f"{t['recursive_doubling']:.3g} s, so auto must run {pick!r}")  # fmt: skip
            assert_close(head, torch.full((min(3, num_bytes // 4),), float(world_size)), what=what)
            if pick == "ring":
                assert_ring(events, members, rank, num_bytes, what, count_steps=False)
            else:
                assert_recursive_doubling(events, members, rank, num_bytes, what)


# -- sub-groups ---------------------------------------------------------------------------------------------


def subgroup_rank(ctx, algorithm: str):
    """Two groups, even and odd global ranks; each all-reduces inside its own group."""
    C = ctx.load("collectives")
    evens, odds = list(range(0, ctx.world_size, 2)), list(range(1, ctx.world_size, 2))
    groups = {tuple(evens): dist.new_group(evens), tuple(odds): dist.new_group(odds)}
    members = evens if ctx.rank % 2 == 0 else odds
    x = torch.full((5,), float(ctx.rank + 1), device=ctx.device)
    with CommRecorder() as rec:
        C.all_reduce(x, group=groups[tuple(members)], algorithm=algorithm)
    return members, x, rec.events


@pytest.mark.world_sizes(2, 3, 4, 5, 6, 7, 8)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_works_inside_a_subgroup(world_size, algorithm):
    """Inside a group of the even or odd global ranks, the sum covers the group only, messages stay inside it,
    and peers are the group's ranks in group order (at 6 and 7 ranks a group of 3 folds)."""
    for rank, (members, got, events) in enumerate(run_ranks(world_size, subgroup_rank, algorithm)):
        what = f"rank {rank} in group {members}, all_reduce(algorithm={algorithm!r})"
        assert_point_to_point_only(events, what)
        for e in calls(events):
            assert e.peer is None or e.peer in members, f"{what}: peer {e.peer} is outside the group: {e}"
        assert_close(got, torch.full((5,), float(sum(m + 1 for m in members))), what=what, rtol=0, atol=0)
        if algorithm == "recursive_doubling":
            assert_recursive_doubling(events, members, rank, 20, what)
        elif algorithm == "ring" and len(members) > 1:
            assert_ring(events, members, rank, 20, what)


def size_where_group_and_world_disagree(group_size: int, world_size: int, alpha: float, beta: float) -> int | None:
    """The smallest 4 * 2**k bytes where the model picks differently for the group's size and the world's."""
    for k in range(24):
        num_bytes = 4 << k
        if model_choice(num_bytes, group_size, alpha, beta) != model_choice(num_bytes, world_size, alpha, beta):
            return num_bytes
    return None


def auto_subgroup_rank(ctx, groups: list[list[int]]):
    """Every rank creates every group; each all-reduces, with "auto", a message sized for the first group."""
    C = ctx.load("collectives")
    alpha, beta = C.ALPHA_BETA.get(ctx.backend, C.ALPHA_BETA["gloo"])
    handles = [dist.new_group(g) for g in groups]
    mine = next(i for i, g in enumerate(groups) if ctx.rank in g)
    num_bytes = size_where_group_and_world_disagree(len(groups[0]), ctx.world_size, alpha, beta)
    x = torch.ones((num_bytes or 4) // 4, device=ctx.device)  # None: the parent says so
    with CommRecorder() as rec:
        C.all_reduce(x, group=handles[mine], algorithm="auto")
    return alpha, beta, num_bytes, groups[mine], x[:3].cpu(), rec.events


@pytest.mark.world_sizes(4)
def test_auto_inside_a_subgroup_chooses_by_the_groups_size(world_size):
    """A group of 3 in a world of 4, at a size where the model picks the ring for 3 ranks and recursive doubling
    for 4: ``auto`` must run what the model picks for the group's size (from the implementation's ALPHA_BETA)."""
    outs = run_ranks(world_size, auto_subgroup_rank, [[0, 1, 2], [3]])
    for rank, (alpha, beta, num_bytes, members, head, events) in enumerate(outs):
        n = len(members)
        assert num_bytes is not None, f"no message size where the model's pick for 3 and 4 ranks differ ({alpha=})"
        pick, world_pick = model_choice(num_bytes, n, alpha, beta), model_choice(num_bytes, world_size, alpha, beta)
        what = (f"rank {rank} in group {members}, all_reduce(algorithm='auto') of {num_bytes} bytes: the model picks "
                f"{pick!r} for the group's {n} ranks ({world_pick!r} for the world's {world_size}), "
                f"so auto must run {pick!r}")  # fmt: skip
        assert_close(head, torch.full((3,), float(n)), what=what)
        if n == 1:
            assert not calls(events), f"{what}: a group of one sends nothing:\n{format_events(events)}"
        elif pick == "ring":
            assert_ring(events, members, rank, num_bytes, what, count_steps=False)
        else:
            assert_recursive_doubling(events, members, rank, num_bytes, what)


# -- the alpha-beta model in accounting.py: time, crossover, fit ---------------------------------------


def accounting_rank(ctx, calls):
    """Evaluate ``[(function name, args), ...]`` on the implementation's accounting module."""
    accounting = ctx.load("accounting")
    return [getattr(accounting, name)(*args) for name, args in calls]


def _relative_loss(rows, alpha: float, beta: float) -> float:
    """Sum of squared relative errors of the model over (num_bytes, seconds, algorithm, world_size) rows."""
    return sum((modelled_times(m, n, alpha, beta)[a] - t) ** 2 / t**2 for m, t, a, n in rows)


def test_all_reduce_time_is_the_alpha_beta_model():
    """``all_reduce_time``: 2(N-1)a + 2(N-1)/N Mb for the ring, s(a + Mb) for recursive doubling (with the fold)."""
    grid = [(m, n, a, 5e-6, 1e-10) for m in (0, 4096, 1 << 26) for n in range(1, 9)
            for a in ("ring", "recursive_doubling")]  # fmt: skip
    got = run_ranks(1, accounting_rank, [("all_reduce_time", g) for g in grid])[0]
    for (m, n, a, alpha, beta), t in zip(grid, got):
        want = modelled_times(m, n, alpha, beta)[a]
        assert t == pytest.approx(want, rel=1e-9, abs=1e-15), (
            f"all_reduce_time({m}, {n}, {a!r}, alpha={alpha}, beta={beta}) = {t!r}; the model gives {want!r} "
            f"({doubling_steps(n)} steps for recursive doubling at N = {n})"
        )


def test_the_crossover_is_where_the_modelled_times_meet():
    """``all_reduce_crossover_bytes`` is the size where both modelled times are equal; None at N <= 2."""
    grid = [(n, alpha, beta) for n in range(1, 9) for alpha, beta in [(5e-6, 1e-11), (2e-4, 1e-9)]]
    got = run_ranks(1, accounting_rank, [("all_reduce_crossover_bytes", g) for g in grid])[0]
    for (n, alpha, beta), cross in zip(grid, got):
        what = f"all_reduce_crossover_bytes({n}, alpha={alpha}, beta={beta})"
        if n <= 2:
            assert cross is None, f"{what} = {cross!r}: at N <= 2 recursive doubling is never slower, expected None"
            continue
        assert cross == pytest.approx(crossover_bytes(n, alpha, beta), rel=1e-9), (
            f"{what} = {cross!r}; the times meet at {crossover_bytes(n, alpha, beta)!r} bytes"
        )


def _measurements(alpha: float, beta: float, n: int, noise: list[float]) -> list[tuple[int, float, str, int]]:
    """(num_bytes, seconds, algorithm, world_size) from the model, each time multiplied by a noise factor."""
    sizes = [4 << (2 * k) for k in range(5, 13)]  # 4 KiB .. 64 MiB
    rows = [(m, a) for m in sizes for a in ("ring", "recursive_doubling")]
    return [(m, modelled_times(m, n, alpha, beta)[a] * f, a, n) for (m, a), f in zip(rows, noise * len(rows))]


@pytest.mark.parametrize("noisy", [False, True], ids=["exact", "noisy"])
def test_fit_alpha_beta_minimises_the_relative_error(noisy):
    """``fit_alpha_beta`` recovers alpha and beta from exact times, and on noisy times no nearby (alpha, beta) >= 0
    has a smaller sum of squared relative errors."""
    alpha, beta, n = 3e-4, 2e-9, 4
    rows = _measurements(alpha, beta, n, [1.25, 0.8, 1.1, 0.95, 1.3, 0.85, 1.0] if noisy else [1.0])
    args = ([m for m, *_ in rows], [t for _, t, *_ in rows], [a for *_, a, _ in rows], n)
    fit = run_ranks(1, accounting_rank, [("fit_alpha_beta", args)])[0][0]
    assert isinstance(fit, tuple) and len(fit) == 2, f"fit_alpha_beta should return (alpha, beta), got {fit!r}"
    got_alpha, got_beta = fit
    assert got_alpha >= 0 and got_beta >= 0, f"fit_alpha_beta returned {fit!r}: alpha and beta must be >= 0"
    if not noisy:
        assert got_alpha == pytest.approx(alpha, rel=1e-6) and got_beta == pytest.approx(beta, rel=1e-6), (
            f"fit_alpha_beta on exact model times returned {fit!r}, expected ({alpha}, {beta})"
        )
    best = _relative_loss(rows, got_alpha, got_beta)
    for da, db in [(1.02, 1), (0.98, 1), (1, 1.02), (1, 0.98)]:
        other = _relative_loss(rows, got_alpha * da, got_beta * db)
        assert best <= other * (1 + 1e-9), (
            f"fit_alpha_beta returned alpha={got_alpha:.4g}, beta={got_beta:.4g} with relative squared error "
            f"{best:.4g}, but alpha*{da}, beta*{db} gives {other:.4g}: it does not minimise the relative error"
        )


def test_fit_alpha_beta_stays_non_negative_when_latency_is_hidden():
    """Times that grow slower than the model at small sizes would fit a negative alpha; the fit clamps it to 0
    and then minimises over beta alone."""
    n = 4
    rows = [(m, 2e-9 * m * (0.5 if m < 1 << 20 else 1.0), "ring", n) for m in [4 << (2 * k) for k in range(5, 13)]]
    args = ([m for m, *_ in rows], [t for _, t, *_ in rows], [a for *_, a, _ in rows], n)
    got_alpha, got_beta = run_ranks(1, accounting_rank, [("fit_alpha_beta", args)])[0][0]
    assert got_alpha == 0 and got_beta > 0, f"expected alpha = 0 and beta > 0, got ({got_alpha!r}, {got_beta!r})"
    best = _relative_loss(rows, 0.0, got_beta)
    for db in (1.02, 0.98):
        assert best <= _relative_loss(rows, 0.0, got_beta * db) * (1 + 1e-9), (
            f"with alpha = 0, beta = {got_beta:.4g} is not the best fit (beta*{db} is better)"
        )


# -- bad input: a clear error on every rank, before any message ------------------------------------------

BAD_INPUT = [
    BadInput("all_reduce-unknown-algorithm",
             lambda C, ctx: C.all_reduce(torch.ones(3, device=ctx.device), algorithm="tree"),
             "ValueError", names="algorithm", task="task1_7"),
    BadInput("choose-negative-num_bytes",
             lambda C, ctx: C.choose_all_reduce_algorithm(-1, ctx.world_size, alpha=1e-5, beta=1e-9),
             "ValueError", names="num_bytes", task="task1_7"),
    BadInput("choose-world_size-zero", lambda C, ctx: C.choose_all_reduce_algorithm(8, 0, alpha=1e-5, beta=1e-9),
             "ValueError", names="world_size", task="task1_7"),
    # accounting.py: pure functions, run on one rank
    BadInput("all_reduce_time-unknown-algorithm", lambda A, ctx: A.all_reduce_time(8, 4, "tree", 1e-5, 1e-9),
             "ValueError", names="algorithm", task="task1_7"),
    BadInput("all_reduce_time-negative-beta", lambda A, ctx: A.all_reduce_time(8, 4, "ring", 1e-5, -1e-9),
             "ValueError", names="beta", task="task1_7"),
    BadInput("fit_alpha_beta-lengths-differ", lambda A, ctx: A.fit_alpha_beta([8, 16], [1.0], ["ring", "ring"], 4),
             "ValueError", names="num_bytes", task="task1_7"),
    BadInput("fit_alpha_beta-one-measurement", lambda A, ctx: A.fit_alpha_beta([8], [1.0], ["ring"], 4),
             "ValueError", names="seconds", task="task1_7"),
]  # fmt: skip
IN_ACCOUNTING = ("all_reduce_time", "fit_alpha_beta")


@pytest.mark.world_sizes(2, 4)
@pytest.mark.parametrize("case", bad_input_params([c for c in BAD_INPUT if not c.id.startswith(IN_ACCOUNTING)]))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """A bad ``algorithm`` (or model input) raises ValueError naming it, on every rank, before any message."""
    assert_rejected_before_communicating(run_ranks(world_size, bad_input_rank, "collectives", case, deadline=15), case)


@pytest.mark.parametrize("case", bad_input_params([c for c in BAD_INPUT if c.id.startswith(IN_ACCOUNTING)]))
def test_bad_model_input_raises_value_error_naming_the_argument(case):
    """The model's functions reject an unknown algorithm, a negative beta and unusable measurements by name."""
    assert_rejected_before_communicating(run_ranks(1, bad_input_rank, "accounting", case), case)
