"""The answer key cannot silently be wrong (staff only).

    pytest tests/staff/test_answer_key.py
    python -m scripts.grading.answer_key --check     # the checks CI runs (this file runs them too)

Two kinds of guard:

- **Scope**: a key file's numbers are module globals read by f-strings when ``SECTIONS`` is built, after the
  whole file ran; a name bound twice (problem 5.5's ``M16 = 136``, rebound to 16 by problem 12) changes every
  earlier answer that reads it. ``answer_key --check`` rejects a name bound twice at module level.
- **Another route**: where the key's number also follows from the kit's code by a different computation (the
  reference's schedule generators, run through a small event simulator here; the context-parallel block
  positions; the alpha-beta model minimised numerically), the two must agree. The key computes from closed forms
  in ``reference_solutions.accounting``; these tests recompute from what the schedules actually do.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from reference_solutions import accounting as acc
from reference_solutions import pipeline as pl
from scripts.grading.answer_key import __main__ as key
from scripts.grading.rubric import load_rubric

pytestmark = pytest.mark.staff

SOURCES = Path(key.__file__).resolve().parent


def test_the_committed_key_passes_its_check():
    """The committed key passes `answer_key --check`: every answer recomputes, every rubric applies."""
    assert key.problems(load_rubric(), key.load_sections()) == []


def test_a_name_bound_twice_is_caught():
    """The 5.5 bug as it was: problem 12's inputs reused problem 5's name; --check names the file and lines."""
    source = (SOURCES / "part05.py").read_text()
    planted = source.replace("M12, F12, B12, W12 = 16,", "M_FOR_P16, F12, B12, W12 = 16,")
    assert planted != source, "part05.py no longer has problem 12's inputs line; update this test"
    reused = key.reused_names(planted)
    assert [name for name, _, _ in reused] == ["M_FOR_P16"], reused
    twice = ("x = 1\nx = [x]\n", "def f():\n    pass\n\n\nf = 2\n", "a, (b, c) = 1, (2, 3)\nfor c in []:\n    pass\n")
    for text in twice:
        assert key.reused_names(text), text
    assert key.reused_names("x = 1\ndef f():\n    x = 2\n    return x\n") == []  # a function's own scope is fine


def test_every_key_file_binds_each_name_once():
    """No key file binds a name twice (the 5.5 bug: a later problem's inputs overwrote an earlier one's)."""
    for path in sorted(SOURCES.glob("part[0-9][0-9].py")):
        assert key.reused_names(path.read_text()) == [], path.name


# -- a tiny pipeline simulator over the reference's schedules ------------------------------------------------


def _simulate(p: int, m: int, actions_of, v: int = 1, fwd: float = 1.0, bwd: float = 2.0) -> tuple[float, list]:
    """Run every stage's action list (F: fwd/v, B: bwd/v) with the data dependencies of chunks that loop round
    the ranks (global chunk k·p + s); return (bubble fraction, each stage's peak held chunk activations)."""
    lists = [actions_of(s) for s in range(p)]
    done: dict[tuple, float] = {}
    pos, clock = [0] * p, [0.0] * p
    last = v * p - 1
    while any(pos[s] < len(lists[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            if pos[s] == len(lists[s]):
                continue
            a = lists[s][pos[s]]
            g = a.chunk * p + s
            dep = (
                (("F", a.microbatch, g - 1) if g > 0 else None)
                if a.kind == "F"
                else (("B", a.microbatch, g + 1) if g < last else ("F", a.microbatch, g))
            )
            if dep is not None and dep not in done:
                continue
            start = max(clock[s], done[dep] if dep else 0.0)
            clock[s] = start + (fwd if a.kind == "F" else bwd) / v
            done[(a.kind, a.microbatch, g)] = clock[s]
            pos[s] += 1
            progressed = True
        assert progressed, "the schedules deadlock"
    busy = m * (fwd + bwd)
    step = max(clock)
    peaks = []
    for acts in lists:
        held = peak = 0
        for a in acts:
            held += 1 if a.kind == "F" else -1
            peak = max(peak, held)
        peaks.append(peak)
    return 1 - busy / step, peaks


def test_problem_5_5_m_and_memory_follow_from_the_schedules():
    """5.5's m is the fewest microbatches whose GPipe bubble is under the bound; its memory ratio, the peaks'."""
    from scripts.grading.answer_key import part05 as k

    p, m = k.P16, k.M_FOR_P16
    gpipe_bubble, gpipe_peaks = _simulate(p, m, lambda s: pl.gpipe_schedule(p, m, s))
    one_bubble, one_peaks = _simulate(p, m, lambda s: pl.one_f_one_b_schedule(p, m, s))
    fewer, _ = _simulate(p, m - 1, lambda s: pl.gpipe_schedule(p, m - 1, s))
    assert gpipe_bubble < k.BUBBLE_MAX <= fewer + 1e-12, (m, gpipe_bubble, fewer)
    assert abs(one_bubble - gpipe_bubble) < 1e-9
    assert gpipe_peaks[0] / one_peaks[0] == pytest.approx(k.GPIPE_OVER_1F1B_P16)


def test_problems_5_1_and_5_2_follow_from_the_schedules():
    """5.1's GPipe bubble and 5.2's 1F1B peaks are what the reference's schedules do in the simulator."""
    from scripts.grading.answer_key import part05 as k

    bubble, _ = _simulate(k.P, k.M, lambda s: pl.gpipe_schedule(k.P, k.M, s))
    _, peaks = _simulate(k.P, k.M, lambda s: pl.one_f_one_b_schedule(k.P, k.M, s))
    assert bubble == pytest.approx(k.GPIPE) and peaks == k.PEAK_1F1B


def test_problem_5_8_bubbles_and_peaks_follow_from_the_schedules():
    """The rubric line once said "peak grows with v"; the schedules say 8, 11.5, 9.75, 8.875."""
    from scripts.grading.answer_key import part05 as k

    for v, bubble, _, peak in k.V_ROWS:
        if v == 1:
            actions = lambda s: pl.one_f_one_b_schedule(k.P8, k.M8, s)  # noqa: E731
        else:
            actions = lambda s, v=v: pl.interleaved_1f1b_schedule(k.P8, k.M8, s, v)  # noqa: E731
        simulated, peaks = _simulate(k.P8, k.M8, actions, v=v)
        assert simulated == pytest.approx(bubble, abs=1e-9), v
        assert peaks[0] / v == pytest.approx(peak), v
    peaks = [r[3] for r in k.V_ROWS]
    grows = all(a <= b for a, b in zip(peaks, peaks[1:]))
    text = " ".join(what for p in k.SECTIONS[0].problems if p.number == "8" for _, what in p.rubric)
    assert grows or "grows with v" not in text


def test_problem_2_5_4_best_bucket_follows_from_the_alpha_beta_model():
    """Minimise (P/b)·(ring latency) + (ring transfer of one bucket) numerically with accounting.all_reduce_time."""
    from scripts.grading.answer_key import part02 as k

    alpha, beta, grads = 50e-6, 1e-9, k.GRADS

    def best(n: int) -> float:
        def cost(b: float) -> float:
            return grads / b * acc.all_reduce_time(0, n, "ring", alpha, 0) + acc.all_reduce_time(b, n, "ring", 0, beta)

        sizes = [2 ** (x / 200) for x in range(200 * 10, 200 * 30)]
        return min(sizes, key=cost)

    assert best(8) / best(2) == pytest.approx(k.BEST_8, rel=0.01)


def test_problem_9_2_half_tiles_follow_from_the_block_positions():
    """Count causal (query, key) pairs of each rank's tokens as the reference lays them out."""
    from reference_solutions.context_parallel import _positions
    from scripts.grading.answer_key import part09 as k

    n, half = k.ZZ_N, 512
    for zigzag, expected in ((False, k.CONTIG_TILES), (True, k.ZIGZAG_TILES)):
        for r in range(n):
            pairs = int((_positions(r, n, 2 * half, zigzag) + 1).sum())  # token at position t sees t + 1 keys
            assert math.isclose(pairs / half**2, expected[r], rel_tol=2 / half), (zigzag, r, pairs / half**2)


# -- every question states its numbers; every rubric line is one criterion a non-expert can apply ------------

OLD_7_1 = (
    "1. Why not TP across nodes? Use `communication_bytes_per_rank` for Llama 3 405B with TP 16 over two nodes: "
    "how long does TP traffic take per step at 50 GB/s, and what fraction of a step is that if the step is 10 s "
    "of compute?"
)


def test_a_question_without_a_number_its_answer_uses_is_caught():
    """7.1 as it was: the key computed with PP 16, DP 64 and m = 32, which the question never stated."""
    from scripts.grading.answer_key import part07 as k

    problem = next(p for p in k.SECTIONS[0].problems if p.number == "1")
    missing = key.missing_numbers(problem, OLD_7_1)
    assert any("'PP 16'" in m for m in missing) and any("'m = 32'" in m for m in missing), missing
    current = key.handout_item_texts(7, k.SECTIONS[0].heading)["1"]
    assert key.missing_numbers(problem, current) == []


def test_an_answer_with_a_result_must_declare_its_inputs():
    """An answer with a number must name the inputs it came from, in the question's text; one without needs none."""
    bare = key.Problem("1", "t", 1, "It takes **8.9 days**.", rubric=((1, "x"),))
    assert key.missing_numbers(bare, "1. How long?")
    assert key.missing_numbers(key.Problem("1", "t", 1, "Explain it.", rubric=((1, "x"),)), "1. Why?") == []


@pytest.mark.parametrize(
    "rubric, wrong, answer, expected",
    [
        (((0.5, "a"), (0.5, "b")), ("forgets 1/N: −0.125.",), "a", "finer than 0.25"),
        (((1, "the table"),), (), "a", "split it"),
        (((0.5, "the fraction; why it cannot hide"),), (), "a", "bundles criteria"),
        (((0.5, "the fraction, and why it cannot hide"),), (), "a", "bundles criteria"),
        (((0.5, "the answer: no, with CPU contention named"),), (), "a", "bundles criteria"),
        (((0.3, "a"), (0.2, "b")), (), "a", "multiples of 0.25"),
        (((0.5, "a"),), (), "Grade the reasoning: bytes and overlap.", "which reasoning"),
    ],
)
def test_a_rubric_a_grader_cannot_apply_is_caught(rubric, wrong, answer, expected):
    """Rubric lines a grader cannot apply (finer than a quarter point, two criteria in one, vague) are caught."""
    p = key.Problem("1", "t", sum(pts for pts, _ in rubric), answer, rubric=rubric, wrong=wrong)
    found = key.rubric_problems(p)
    assert any(expected in f for f in found), found
    assert key.rubric_problems(key.Problem("1", "t", 0.5, "a", rubric=((0.25, "x"), (0.25, "y")))) == []
