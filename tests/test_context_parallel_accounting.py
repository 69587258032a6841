"""Part 9, task 9.4: context-parallel accounting (handouts/09-context-parallel.md §9.4).

    pytest tests/test_context_parallel_accounting.py     # accounting.py's section 9.4

Pure functions, run in one rank like Part 6's (its ``evaluate`` helper). The parent judges against the
handout's worked examples and its own recomputation of the formulas on random inputs (hypothesis);
the ring bytes formula is the one tests/test_context_parallel.py measures on real rings.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.harness import run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.oracles.accounting import EXAMPLES, assert_value, call, evaluate

H100_BF16, INFINIBAND, NVLINK = 989e12, 50e9, 450e9  # FLOP/s dense bf16; bytes/s per GPU and direction


@pytest.mark.task9_4
def test_context_parallel_accounting_gives_the_handouts_examples():
    """The three functions give the handout's numbers (Llama-scale layer, a 32k ring, H100 overlap bounds)."""
    act, act_cp1, ring, ring1, ib, nvl, gqa, causal = evaluate(
        call("context_parallel_activation_memory_per_layer", 131072, 1, 8192, 64, 8, tp=8),
        call("context_parallel_activation_memory_per_layer", 4096, 2, 1024, 16, 1),
        call("ring_attention_bytes_per_rank", 32768, 1, 8, 128, 8),
        call("ring_attention_bytes_per_rank", 32768, 1, 8, 128, 1),
        call("ring_attention_min_block_tokens", 64, 64, H100_BF16, INFINIBAND),
        call("ring_attention_min_block_tokens", 64, 64, H100_BF16, NVLINK),
        call("ring_attention_min_block_tokens", 64, 8, H100_BF16, INFINIBAND),
        call("ring_attention_min_block_tokens", 64, 64, H100_BF16, INFINIBAND, causal=True),
    )
    assert_value(act, 34 * 131072 * 8192 / 64, "activations, s=128k, h=8192, cp=8, tp=8: 34sbh/(tc)")
    assert_value(act_cp1, 34 * 4096 * 2 * 1024, "activations with cp=1, tp=1: 34sbh (no 5as/h: no s x s scores)")
    assert_value(ring, 503_316_480, "ring bytes, s=32k, 8 kv heads of 128, cp=8: 2B((2c-2)e + cg)")
    assert_value(ring1, 0.0, "ring bytes with cp=1 (no ring)")
    assert_value(ib, 19_780, "min block tokens, H100 over InfiniBand: e F / 2W")
    assert_value(nvl, 2 * H100_BF16 / (2 * NVLINK), "min block tokens, H100 over NVLink")
    assert_value(gqa, 19_780 / 8, "min block tokens with 8 kv heads for 64 query heads: g/a of it")
    assert_value(causal, 2 * 19_780, "min block tokens for a causal zigzag block (half the compute): twice")


@pytest.mark.task9_4
@EXAMPLES
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 64), st.integers(1, 8), st.integers(1, 8),
                          st.sampled_from([1, 2, 4]), st.sampled_from([2, 4])), min_size=1, max_size=8))  # fmt: skip
def test_context_parallel_accounting_matches_its_definition_on_random_layers(cases):
    """On random layers each function equals the handout's formula, recomputed here."""
    calls = []
    for cp, blocks, batch, heads, g, e in cases:
        seq, d = cp * blocks * 8, 16 * heads
        calls += [call("context_parallel_activation_memory_per_layer", seq, batch, d, heads, cp),
                  call("ring_attention_bytes_per_rank", seq, batch, heads, 16, cp, bytes_per_element=e),
                  call("ring_attention_min_block_tokens", heads * g, heads, 1e12 * cp, 1e9 * blocks,
                       bytes_per_element=e)]  # fmt: skip
    values = evaluate(*calls)
    for i, (cp, blocks, batch, heads, g, e) in enumerate(cases):
        seq, d = cp * blocks * 8, 16 * heads
        block = batch * heads * (seq // cp) * 16
        what = f"(cp={cp}, seq={seq}, batch={batch}, heads={heads}, e={e})"
        assert_value(values[3 * i], 34 * seq * batch * d / cp, f"activation memory {what}")
        assert_value(values[3 * i + 1], 2 * block * ((2 * cp - 2) * e + cp * 4) if cp > 1 else 0, f"ring bytes {what}")
        assert_value(values[3 * i + 2], e * 1e12 * cp / (2 * 1e9 * blocks) / g, f"min block tokens {what}, a/g={g}")


def bad(exception: str, bad_call: tuple, names: str) -> BadInput:
    """``accounting.<name>(*args, **kwargs)`` must raise ``exception`` naming ``names``."""
    _, name, args, kwargs = bad_call  # call() gives (module, name, args, kwargs); module is accounting
    return BadInput(f"{name}-{names}-" + "-".join(map(str, [*args, *kwargs.values()])),
                    lambda A, ctx: getattr(A, name)(*args, **kwargs), exception, names, "task9_4")  # fmt: skip


BAD_INPUT = [
    bad("ValueError", call("context_parallel_activation_memory_per_layer", 100, 1, 64, 8, 3), "seq"),
    bad("ValueError", call("context_parallel_activation_memory_per_layer", 96, 1, 64, 8, 0), "cp"),
    bad("ValueError", call("context_parallel_activation_memory_per_layer", 96, 1, 64, 6, 2, tp=4), "heads"),
    bad("TypeError", call("context_parallel_activation_memory_per_layer", 96.0, 1, 64, 8, 2), "seq"),
    bad("ValueError", call("ring_attention_bytes_per_rank", 100, 1, 8, 128, 8), "seq"),
    bad("ValueError", call("ring_attention_bytes_per_rank", 64, 1, 0, 128, 8), "kv_heads"),
    bad("ValueError", call("ring_attention_bytes_per_rank", 64, 1, 8, 128, 8, bytes_per_element=-2),
        "bytes_per_element"),
    bad("ValueError", call("ring_attention_min_block_tokens", 64, 6, 1e15, 1e11), "kv_heads"),
    bad("ValueError", call("ring_attention_min_block_tokens", 64, 8, 1e15, 0), "bytes_per_second"),
    bad("ValueError", call("ring_attention_min_block_tokens", 64, 8, -1.0, 1e11), "flops_per_second"),
    bad("TypeError", call("ring_attention_min_block_tokens", 64, 8, 1e15, 1e11, causal="yes"), "causal"),
]  # fmt: skip


@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_naming_the_argument(case):
    """Counts that do not divide, zero or negative rates, non-integer counts: ValueError/TypeError naming them."""
    assert_rejected_before_communicating(run_ranks(1, bad_input_rank, "accounting", case), case)
