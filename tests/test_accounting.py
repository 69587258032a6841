"""Part 6: back-of-the-envelope accounting (handouts/06-accounting.md).

    pytest tests/test_accounting.py                 # your implementation
    pytest tests/test_accounting.py -m task6_1      # only memory

The functions are pure, but like everything under test they run in a rank: the parent sends a batch of
calls to ``run_ranks(1, ...)``, gets values (or the exception each call raised) back, and judges them
against the papers' own numbers and against its own recomputation of the formulas on random inputs
(hypothesis). Bad input must raise ValueError/TypeError naming the argument.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.harness import run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.oracles.accounting import EXAMPLES, assert_value, call, evaluate

# -- the papers' numbers -------------------------------------------------------------------------


@pytest.mark.task6_1
def test_zero_memory_reproduces_the_zero_papers_figure_1():
    """``zero_memory_per_rank`` reproduces the ZeRO paper's Figure 1 (120, 31.4, 16.6, 1.9 GB per GPU).

    Rajbhandari et al. 2020, Figure 1: a 7.5B-parameter model, 64 GPUs, mixed-precision Adam
    (K = 12) needs 120, 31.4, 16.6 and 1.9 GB per GPU for stages 0 (DDP), 1, 2, 3."""
    stages = evaluate(*[call("zero_memory_per_rank", 7.5e9, 64, s) for s in range(4)])
    for stage, got, paper, exact in zip(range(4), stages, [120, 31.4, 16.6, 1.9], [120, 31.40625, 16.640625, 1.875]):
        assert_value(got / 1e9, exact, f"zero_memory_per_rank(7.5e9, 64, zero_stage={stage}) in GB (paper: {paper})")
    (total,) = evaluate(call("training_memory_bytes", 7.5e9))
    assert total == 120_000_000_000 and isinstance(total, int), f"training_memory_bytes(7.5e9) = {total!r}"


@pytest.mark.task6_2
def test_bubble_and_ring_all_reduce_examples():
    """``pipeline_bubble_fraction`` and ``ring_all_reduce_bytes_per_rank`` give the handout's examples.

    GPipe/1F1B: p=4 stages, m=8 microbatches idle (p-1)/(m+p-1) = 3/11 = 0.2727 of the step;
    interleaving v=2 chunks: 3/19; one stage: no bubble. Ring all-reduce of 1 GB on 8 ranks sends
    2 * 7/8 GB per rank; alone, nothing."""
    got = evaluate(
        call("pipeline_bubble_fraction", 4, 8),
        call("pipeline_bubble_fraction", 4, 8, num_chunks=2),
        call("pipeline_bubble_fraction", 1, 5),
        call("ring_all_reduce_bytes_per_rank", 1e9, 8),
        call("ring_all_reduce_bytes_per_rank", 1e9, 1),
    )
    for value, expected, what in zip(got, [3 / 11, 3 / 19, 0.0, 1.75e9, 0.0], ["p4 m8", "p4 m8 v2", "p1", "N8", "N1"]):
        assert_value(value, expected, what)
    assert round(got[0], 4) == 0.2727


@pytest.mark.task6_3
def test_training_flops_and_mfu_examples():
    """``training_flops`` and ``mfu`` give the papers' numbers (GPT-3's 3.15e23 FLOPs, an H100's MFU).

    Kaplan et al.: C = 6ND. GPT-3 (175e9 parameters, 300e9 tokens) -> 3.15e23 FLOPs (Brown et al.
    report 3.14e23). 1e9 parameters at 10,000 tokens/s on a 989 TFLOP/s GPU: MFU 6e13 / 989e12."""
    flops, util = evaluate(call("training_flops", 175e9, 300e9), call("mfu", 1e4, 1e9, 989e12))
    assert_value(flops, 3.15e23, "training_flops(175e9, 300e9)")
    assert abs(flops / 3.14e23 - 1) < 0.01
    assert_value(util, 6e13 / 989e12, "mfu(1e4, 1e9, 989e12)")


@pytest.mark.task6_4
def test_activation_memory_follows_korthikanti_et_al():
    """``activation_memory_per_layer`` gives Korthikanti et al.'s numbers for GPT-3 175B.

    GPT-3 175B (s=2048, b=1, h=12288, a=96): the attention term 5as/h = 80 outweighs the 34, so one
    layer keeps sbh * 114 bytes; tensor parallelism t=8 leaves the 10 of norms and dropouts unsplit;
    adding sequence parallelism divides everything by t."""
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    plain, tp, tp_sp, sp1 = evaluate(
        call("activation_memory_per_layer", s, b, h, a),
        call("activation_memory_per_layer", s, b, h, a, tp=t),
        call("activation_memory_per_layer", s, b, h, a, tp=t, sequence_parallel=True),
        call("activation_memory_per_layer", s, b, h, a, tp=1, sequence_parallel=True),
    )
    assert_value(plain, s * b * h * 114, "no parallelism")
    assert_value(tp, s * b * h * (10 + 24 / 8 + 80 / 8), "tensor parallel, t=8")
    assert_value(tp_sp, s * b * h * 114 / 8, "tensor + sequence parallel, t=8")
    assert_value(sp1, plain, "sequence parallel with t=1 is no parallelism")


# -- random inputs against an independent recomputation -----------------------------------------------

counts = st.integers(0, 10**12)
world = st.integers(1, 4096)
per_param = st.tuples(st.integers(0, 8), st.integers(0, 8), st.integers(0, 16))


def batches(*elements):
    """Up to 10 cases per example, evaluated in one rank call."""
    return st.lists(st.tuples(*elements), min_size=1, max_size=10)


@pytest.mark.task6_1
@EXAMPLES
@given(batches(counts, world, per_param))
def test_zero_memory_matches_its_definition_on_random_models(cases):
    """``zero_memory_per_rank`` matches its definition on random models.

    Stage k shards the first k of (optimizer state, grads, params) across N GPUs; stage 0 is
    training_memory_bytes; memory never grows with the stage."""
    calls = []
    for n, w, (p, g, o) in cases:
        kw = dict(param_bytes=p, grad_bytes=g, optimizer_bytes=o)
        calls += [call("zero_memory_per_rank", n, w, s, **kw) for s in range(4)]
        calls.append(call("training_memory_bytes", n, **kw))
    values = evaluate(*calls)
    for i, (n, w, (p, g, o)) in enumerate(cases):
        got = values[5 * i : 5 * i + 5]
        expected = [n * (p + g + o), n * (p + g) + n * o / w, n * p + n * (g + o) / w, n * (p + g + o) / w]
        for stage in range(4):
            assert_value(got[stage], expected[stage], f"zero_memory_per_rank({n}, {w}, {stage}, p={p}, g={g}, o={o})")
        assert got[4] == n * (p + g + o), f"training_memory_bytes({n}, p={p}, g={g}, o={o}) = {got[4]}"
        assert all(a >= b for a, b in zip(got[:4], got[1:4])), f"memory grows with the stage: {got[:4]}"


@pytest.mark.task6_1
def test_training_memory_rounds_fractional_bytes_per_parameter_to_the_nearest_int():
    """Fractional bytes per parameter (quantised formats): ``training_memory_bytes`` is the nearest int."""
    cases = [(9, 1.1, 2, 12), (13, 0.75, 0.25, 0.6)]  # 135.9 and 20.8 bytes: rounding and truncating differ
    values = evaluate(*[call("training_memory_bytes", n, param_bytes=p, grad_bytes=g, optimizer_bytes=o)
                        for n, p, g, o in cases])  # fmt: skip
    for (n, p, g, o), got in zip(cases, values):
        exact = n * (p + g + o)
        assert got == round(exact) and isinstance(got, int), (
            f"training_memory_bytes({n}, param_bytes={p}, grad_bytes={g}, optimizer_bytes={o}) = {got!r}; "
            f"exactly {exact:.4f} bytes: expected the nearest int, {round(exact)}"
        )


@pytest.mark.task6_2
@EXAMPLES
@given(batches(counts, world, st.integers(1, 64), st.integers(1, 512), st.integers(1, 8)))
def test_ring_bytes_and_bubbles_match_their_definitions_on_random_inputs(cases):
    """Ring bytes and the bubble match their definitions on random inputs.

    2(N-1)/N * M bytes per rank; bubble (p-1)/(v*m + p-1), which falls as m or v grow."""
    calls = []
    for m_bytes, n, p, m, v in cases:
        calls += [
            call("ring_all_reduce_bytes_per_rank", m_bytes, n),
            call("pipeline_bubble_fraction", p, m, num_chunks=v),
            call("pipeline_bubble_fraction", p, m + 1, num_chunks=v),
        ]
    values = evaluate(*calls)
    for i, (m_bytes, n, p, m, v) in enumerate(cases):
        ring, bubble, more = values[3 * i : 3 * i + 3]
        assert_value(ring, 2 * (n - 1) / n * m_bytes, f"ring_all_reduce_bytes_per_rank({m_bytes}, {n})")
        assert_value(bubble, (p - 1) / (v * m + p - 1), f"pipeline_bubble_fraction({p}, {m}, {v})")
        assert more <= bubble, f"the bubble grew with more microbatches: {bubble} -> {more} (p={p}, m={m})"


@pytest.mark.task6_3
@EXAMPLES
@given(batches(st.floats(0, 1e13), st.floats(0, 1e13), st.floats(1e9, 1e16)))
def test_flops_and_mfu_match_their_definitions_on_random_inputs(cases):
    """``training_flops`` and ``mfu`` match their definitions on random inputs.

    training_flops = 6ND; mfu = 6 N tokens_per_second / peak."""
    calls = [c for n, d, peak in cases for c in (call("training_flops", n, d), call("mfu", d, n, peak))]
    values = evaluate(*calls)
    for i, (n, d, peak) in enumerate(cases):
        assert_value(values[2 * i], 6 * n * d, f"training_flops({n}, {d})")
        assert_value(values[2 * i + 1], 6 * n * d / peak, f"mfu({d}, {n}, {peak})")


@pytest.mark.task6_4
@EXAMPLES
@given(batches(st.integers(1, 8192), st.integers(1, 64), st.integers(1, 64), st.sampled_from([1, 2, 4, 8])))
def test_activation_memory_matches_its_definition_on_random_layers(cases):
    """``activation_memory_per_layer`` matches Korthikanti et al.'s formulas on random inputs.

    The three formulas of Korthikanti et al.; sequence parallelism never costs more than plain TP,
    and TP never more than none."""
    calls = []
    for s, b, head_dim, t in cases:
        a = 2 * t
        calls += [call("activation_memory_per_layer", s, b, a * head_dim, a, tp=tt, sequence_parallel=sp)
                  for tt, sp in ((1, False), (t, False), (t, True))]  # fmt: skip
    values = evaluate(*calls)
    for i, (s, b, head_dim, t) in enumerate(cases):
        a, h = 2 * t, 2 * t * head_dim
        plain, tp, tp_sp = values[3 * i : 3 * i + 3]
        what = f"activation_memory_per_layer({s}, {b}, {h}, {a}, tp={t}"
        assert_value(plain, s * b * h * (34 + 5 * a * s / h), what + ")")
        assert_value(tp, s * b * h * (10 + 24 / t + 5 * a * s / (h * t)), what + ")")
        assert_value(tp_sp, s * b * h / t * (34 + 5 * a * s / h), what + ", sequence_parallel=True)")
        assert tp_sp <= tp <= plain, f"{what}): expected SP <= TP <= none, got {tp_sp}, {tp}, {plain}"


# -- bad input -------------------------------------------------------------------------------------


def bad(task: str, exception: str, bad_call: tuple, names: str) -> BadInput:
    """``accounting.<name>(*args, **kwargs)`` must raise ``exception`` naming ``names``; the id lists the
    function, the argument and the values."""
    _, name, args, kwargs = bad_call  # call() gives (module, name, args, kwargs); module is accounting
    return BadInput(f"{name}-{names}-" + "-".join(map(str, [*args, *kwargs.values()])),
                    lambda A, ctx: getattr(A, name)(*args, **kwargs), exception, names, task)  # fmt: skip


BAD_INPUT = [
    bad("task6_1", "ValueError", call("training_memory_bytes", -1), "num_params"),
    bad("task6_1", "TypeError", call("training_memory_bytes", "7.5e9"), "num_params"),
    bad("task6_1", "ValueError", call("training_memory_bytes", 10, optimizer_bytes=-4), "optimizer_bytes"),
    bad("task6_1", "ValueError", call("zero_memory_per_rank", 7.5e9, 64, 4), "zero_stage"),
    bad("task6_1", "ValueError", call("zero_memory_per_rank", 7.5e9, 64, -1), "zero_stage"),
    bad("task6_1", "ValueError", call("zero_memory_per_rank", 7.5e9, 0, 1), "world_size"),
    bad("task6_1", "TypeError", call("zero_memory_per_rank", 7.5e9, 2.5, 1), "world_size"),
    bad("task6_1", "TypeError", call("zero_memory_per_rank", 7.5e9, 64.0, 1), "world_size"),  # whole, still a float
    bad("task6_1", "ValueError", call("zero_memory_per_rank", float("nan"), 8, 1), "num_params"),
    bad("task6_1", "ValueError", call("zero_memory_per_rank", 7.5e9, 8, 1, grad_bytes=-2), "grad_bytes"),
    bad("task6_2", "ValueError", call("ring_all_reduce_bytes_per_rank", -5, 4), "num_bytes"),
    bad("task6_2", "ValueError", call("ring_all_reduce_bytes_per_rank", 100, 0), "world_size"),
    bad("task6_2", "ValueError", call("pipeline_bubble_fraction", 0, 8), "num_stages"),
    bad("task6_2", "ValueError", call("pipeline_bubble_fraction", 4, 0), "num_microbatches"),
    bad("task6_2", "ValueError", call("pipeline_bubble_fraction", 4, 8, num_chunks=0), "num_chunks"),
    bad("task6_2", "TypeError", call("pipeline_bubble_fraction", 4.0, 8), "num_stages"),
    bad("task6_3", "ValueError", call("training_flops", -1e9, 1e12), "num_params"),
    bad("task6_3", "ValueError", call("training_flops", 1e9, -1), "num_tokens"),
    bad("task6_3", "ValueError", call("mfu", 1e4, 1e9, 0), "peak_flops_per_second"),
    bad("task6_3", "ValueError", call("mfu", -1, 1e9, 1e15), "tokens_per_second"),
    bad("task6_4", "ValueError", call("activation_memory_per_layer", 0, 1, 64, 8), "seq"),
    bad("task6_4", "ValueError", call("activation_memory_per_layer", 128, 1, 64, 6, tp=4), "heads"),
    bad("task6_4", "ValueError", call("activation_memory_per_layer", 128, 1, 64, 8, tp=0), "tp"),
    bad("task6_4", "TypeError", call("activation_memory_per_layer", 128.0, 1, 64, 8), "seq"),
    bad("task6_4", "TypeError", call("activation_memory_per_layer", 128, 1, 64.0, 8), "d_model"),
    bad(
        "task6_4",
        "TypeError",
        call("activation_memory_per_layer", 128, 1, 64, 8, sequence_parallel="yes"),
        "sequence_parallel",
    ),
]


@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_naming_the_argument(case):
    """Bad input raises the promised ValueError or TypeError, whose message names the argument.

    Negative counts, a stage outside 0-3, a world of 0, a float where an int is needed (even a whole
    one: 64.0 ranks), heads that tensor parallelism cannot split: the promised ValueError or
    TypeError, whose message names the argument."""
    assert_rejected_before_communicating(run_ranks(1, bad_input_rank, "accounting", case), case)
