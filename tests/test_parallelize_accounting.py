"""Part 11, task 11.4: the capstone in numbers (handouts/11-capstone.md §11.4).

    pytest tests/test_parallelize_accounting.py     # accounting.py's section 11.4

Pure functions, run in one rank like Part 6's (tests/oracles/accounting.py's ``evaluate``). The parameter
count is judged against the given model itself (its ``parameters()``, counted here), the traffic formula
against the handout's example and its recomputation here on random meshes (hypothesis).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cs336_systems.transformer import Transformer, TransformerConfig
from tests.harness import run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.oracles.accounting import EXAMPLES, assert_value, call, evaluate

CONFIGS = [
    TransformerConfig(),
    TransformerConfig(moe_every=2),
    TransformerConfig(vocab_size=16, d_model=32, n_layers=4, n_heads=8, n_kv_heads=4, d_ff=32),
    TransformerConfig(
        vocab_size=11, d_model=24, n_layers=3, n_heads=6, n_kv_heads=1, d_ff=40, moe_every=1, num_experts=3, top_k=1
    ),  # fmt: skip
    TransformerConfig(
        vocab_size=7, d_model=16, n_layers=5, n_heads=2, n_kv_heads=2, d_ff=8, moe_every=3, num_experts=5
    ),  # fmt: skip
]


@pytest.mark.task11_4
def test_transformer_num_params_counts_the_given_model():
    """Dense, GQA and MoE configurations: the count equals the given model's parameters, element by element."""
    values = evaluate(*[
        call("transformer_num_params", c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.d_ff,
             moe_every=c.moe_every, num_experts=c.num_experts if c.moe_every else 0)
        for c in CONFIGS
    ])  # fmt: skip
    for cfg, got in zip(CONFIGS, values):
        want = sum(p.numel() for p in Transformer(cfg).parameters())
        assert got == want, f"transformer_num_params for {cfg}: the model has {want} parameters, got {got}"


def _ring(seq, batch, heads, head_dim, cp, e):
    block = batch * heads * (seq // cp) * head_dim
    return 2 * block * ((2 * cp - 2) * e + cp * 2 * e) if cp > 1 else 0.0


def _all_reduce(nbytes, n):
    return 2 * (n - 1) / n * nbytes


@pytest.mark.task11_4
def test_capstone_bytes_give_the_handouts_example():
    """1e6 parameters, 4 layers, h=64, 4 heads of 16, seq 64, microbatch 2, every axis 2, m=2: the docstring's."""
    (got,) = evaluate(call("capstone_bytes_per_rank", 1e6, 4, 64, 4, 16, 64, 2, dp=2, pp=2, cp=2, tp=2,
                           num_microbatches=2))  # fmt: skip
    want = {"tp": 131_072, "cp": 696_608, "pp": 16_384, "dp": 500_000}
    assert set(got) == set(want), f"capstone_bytes_per_rank keys: expected {sorted(want)}, got {sorted(got)}"
    for axis, value in want.items():
        assert_value(got[axis], value, f"capstone_bytes_per_rank[{axis!r}] of the example")


@pytest.mark.task11_4
@EXAMPLES
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 3]), st.sampled_from([1, 2, 4]),
                          st.sampled_from([1, 2, 4]), st.integers(1, 4), st.integers(1, 6), st.sampled_from([2, 4])),
                min_size=1, max_size=6))  # fmt: skip
def test_capstone_bytes_match_their_definition_on_random_meshes(cases):
    """Random meshes and layers: every axis equals the handout's formula, recomputed here."""
    calls = []
    for dp, pp, cp, tp, m, layers, e in cases:
        calls.append(call("capstone_bytes_per_rank", 3e6, layers, 32, 8, 4, 16 * cp * tp, 2, dp=dp, pp=pp, cp=cp,
                          tp=tp, num_microbatches=m, bytes_per_element=e))  # fmt: skip
    for (dp, pp, cp, tp, m, layers, e), got in zip(cases, evaluate(*calls)):
        seq, blocks = 16 * cp * tp, math.ceil(layers / pp)
        act, grads = e * (seq // cp) * 2 * 32, e * 3e6 / (tp * pp)
        want = {
            "tp": 8 * (tp - 1) / tp * act * blocks * m,
            "cp": _ring(seq, 2, 8 // tp, 4, cp, e) * blocks * m + _all_reduce(grads, cp),
            "pp": 2 * act / tp * m if pp > 1 else 0.0,
            "dp": _all_reduce(grads, dp),
        }
        for axis, value in want.items():
            what = f"capstone_bytes_per_rank[{axis!r}] (dp={dp}, pp={pp}, cp={cp}, tp={tp}, m={m}, L={layers}, e={e})"
            assert_value(got[axis], value, what)


def bad(exception: str, bad_call: tuple, names: str) -> BadInput:
    """``accounting.<name>(*args, **kwargs)`` must raise ``exception`` naming ``names``."""
    _, name, args, kwargs = bad_call
    return BadInput(f"{name}-{names}-" + "-".join(map(str, [*args, *kwargs.values()])),
                    lambda A, ctx: getattr(A, name)(*args, **kwargs), exception, names, "task11_4")  # fmt: skip


_MESH = {"dp": 1, "pp": 1, "cp": 1, "tp": 1, "num_microbatches": 1}
BAD_INPUT = [
    bad("ValueError", call("transformer_num_params", 40, 30, 2, 4, 2, 64), "d_model"),
    bad("ValueError", call("transformer_num_params", 40, 32, 2, 4, 3, 64), "n_heads"),
    bad("TypeError", call("transformer_num_params", 40.0, 32, 2, 4, 2, 64), "vocab"),
    bad("ValueError", call("transformer_num_params", 40, 32, 2, 4, 2, 64, moe_every=1), "num_experts"),
    bad("ValueError", call("capstone_bytes_per_rank", 1e6, 4, 64, 4, 16, 63, 1, **{**_MESH, "cp": 2}), "seq"),
    bad("ValueError", call("capstone_bytes_per_rank", 1e6, 4, 64, 4, 16, 96, 1, **{**_MESH, "tp": 3}), "n_heads"),
    bad("ValueError", call("capstone_bytes_per_rank", 1e6, 4, 64, 4, 16, 64, 1, **{**_MESH, "dp": 0}), "dp"),
]


@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_names_the_argument(case):
    """A size the formulas cannot take raises naming it."""
    assert_rejected_before_communicating(run_ranks(1, bad_input_rank, "accounting", case), case)


# ---------------------------------------------------------------------------------------------
# plan_capstone: the planner of the 4-D (and EP) mesh
# ---------------------------------------------------------------------------------------------

# Llama 3 405B (Grattafiori et al. 2024, Table 3 and Table 4): 126 layers, h = 16384, 128 heads, 8 KV heads,
# 16384 H100s of 80 GB; 16M tokens per step.
LLAMA3_405B = dict(num_params=405e9, num_layers=126, d_model=16384, heads=128, gpus_per_node=8, num_nodes=2048,
                   gpu_memory_bytes=80e9, kv_heads=8)  # fmt: skip


def _plan(spec: dict, **more) -> tuple:
    spec = {**spec, **more}
    args = [spec.pop(k) for k in ("num_params", "num_layers", "d_model", "heads", "seq", "global_batch")]
    return call("plan_capstone", *args, **spec)


@pytest.mark.task11_4
def test_plan_capstone_reproduces_llama3_405b():
    """Llama 3 405B as published (its Table 4): TP 8, PP 16, DP 128 at 8k; TP 8, CP 16, PP 16, DP 8 at 128k."""
    short, long = evaluate(_plan(LLAMA3_405B, seq=8192, global_batch=2048),
                           _plan(LLAMA3_405B, seq=131072, global_batch=128))  # fmt: skip
    for what, plan, want in [("8k", short, (8, 1, 16, 128)), ("128k", long, (8, 16, 16, 8))]:
        got = tuple(plan[k] for k in ("tp", "cp", "pp", "dp"))
        assert got == want, f"Llama 3 405B at {what}: planned (tp, cp, pp, dp) = {got}, published {want}"
        assert plan["ep"] == 1, f"Llama 3 405B at {what} is dense: ep must be 1, got {plan['ep']}"
