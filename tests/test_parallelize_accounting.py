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
from tests.oracles.planner import (
    LLAMA3_405B,
    all_reduce_bytes,
    check_plan,
    clusters,
    plan_call,
    plan_calls,
    ring_bytes,
)

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
            "cp": ring_bytes(seq, 2, 8 // tp, 4, cp, e) * blocks * m + all_reduce_bytes(grads, cp),
            "pp": 2 * act / tp * m if pp > 1 else 0.0,
            "dp": all_reduce_bytes(grads, dp),
        }
        for axis, value in want.items():
            what = f"capstone_bytes_per_rank[{axis!r}] (dp={dp}, pp={pp}, cp={cp}, tp={tp}, m={m}, L={layers}, e={e})"
            assert_value(got[axis], value, what)


# ---------------------------------------------------------------------------------------------
# plan_capstone: the planner of the 4-D (and EP) mesh
# ---------------------------------------------------------------------------------------------

# Llama 3 405B (Grattafiori et al. 2024, Table 3 and Table 4): 126 layers, h = 16384, 128 heads, 8 KV heads,
# 16384 H100s of 80 GB; 16M tokens per step.


@pytest.mark.task11_4
def test_plan_capstone_reproduces_llama3_405b():
    """Llama 3 405B as published (its Table 4): TP 8, PP 16, DP 128 at 8k; TP 8, CP 16, PP 16, DP 8 at 128k."""
    short, long = evaluate(plan_call(LLAMA3_405B, seq=8192, global_batch=2048),
                           plan_call(LLAMA3_405B, seq=131072, global_batch=128))  # fmt: skip
    for what, plan, want in [("8k", short, (8, 1, 16, 128)), ("128k", long, (8, 16, 16, 8))]:
        got = tuple(plan[k] for k in ("tp", "cp", "pp", "dp"))
        assert got == want, f"Llama 3 405B at {what}: planned (tp, cp, pp, dp) = {got}, published {want}"
        assert plan["ep"] == 1, f"Llama 3 405B at {what} is dense: ep must be 1, got {plan['ep']}"


SMALL = dict(num_params=4e6, num_layers=8, d_model=64, heads=8, kv_heads=2, gpus_per_node=4, num_nodes=2)
RULE_CASES = {
    "llama3-405b-8k": {**LLAMA3_405B, "seq": 8192, "global_batch": 2048},
    "llama3-405b-128k": {**LLAMA3_405B, "seq": 131072, "global_batch": 128},
    # DeepSeek-V3-like: 58 of 61 layers MoE, 256 experts of SwiGLU 2048 (as models.MLP: d_ff 3072), top-8.
    "deepseek-v3-like": dict(num_params=671e9, num_layers=61, d_model=7168, heads=128, seq=4096, global_batch=15360,
                             gpus_per_node=8, num_nodes=256, gpu_memory_bytes=80e9, num_experts=256, expert_d_ff=3072,
                             moe_layers=58, top_k=8),  # fmt: skip
    "small-fits-on-dp": {**SMALL, "seq": 64, "global_batch": 64, "gpu_memory_bytes": 1e9},
    # One GPU per node (tp = 1): 8 layers of 4096 tokens keep 71 MB of activations whatever pp (m >= pp), so
    # only CP fits them in 60 MB: cp = 2, dp = 2, ZeRO-2 over the 4 ranks of the same weights.
    "small-long-sequence": {**SMALL, "gpus_per_node": 1, "num_nodes": 4, "seq": 4096, "global_batch": 4,
                            "gpu_memory_bytes": 60e6},
    # An odd sequence splits over no tp > 1 ("split"), and tp 2 × pp 8 outgrows the 8 GPUs ("batch"): ZeRO 0-2 at
    # tp 1 does not fit in 10 MB, so the rules reject every tp 2 layout before ZeRO-3 at tp 1 fits.
    "small-odd-sequence": {**SMALL, "seq": 9, "global_batch": 64, "gpu_memory_bytes": 10e6},
    # Experts (8 of d_ff 1024 in 4 layers) dominate: ep = 4 spans dp = 2 and cp ranks.
    "small-moe-with-cp": {**SMALL, "seq": 2048, "global_batch": 2, "gpu_memory_bytes": 20e6, "num_experts": 8,
                          "expert_d_ff": 1024, "moe_layers": 4, "top_k": 2, "num_params": 2e5 + 4 * 8 * 132160},
}  # fmt: skip


@pytest.mark.task11_4
def test_plan_capstone_follows_its_rules():
    """Llama 3 405B, a DeepSeek-V3-like MoE and small clusters: the layout, memory, bytes and rows the rules give
    (those rule 2 rejects included, each labelled by its ``rejected`` field)."""
    for (name, case), (status, plan) in zip(RULE_CASES.items(), plan_calls(list(RULE_CASES.values()))):
        check_plan(name, case, status, plan)


@pytest.mark.task11_4
@EXAMPLES
@given(st.lists(clusters(), min_size=1, max_size=6))
def test_plan_capstone_follows_its_rules_on_random_clusters(cases):
    """Random models and clusters, dense and MoE: the first layout in the rules' order that fits, rows before it."""
    for i, (case, (status, plan)) in enumerate(zip(cases, plan_calls(cases))):
        check_plan(f"case {i} {case}", case, status, plan)


def bad(exception: str, bad_call: tuple, names: str) -> BadInput:
    """``accounting.<name>(*args, **kwargs)`` must raise ``exception`` naming ``names``."""
    _, name, args, kwargs = bad_call
    return BadInput(f"{name}-{names}-" + "-".join(map(str, [*args, *kwargs.values()])),
                    lambda A, ctx: getattr(A, name)(*args, **kwargs), exception, names, "task11_4")  # fmt: skip


_MESH = {"dp": 1, "pp": 1, "cp": 1, "tp": 1, "num_microbatches": 1}
_MOE = {"num_experts": 4, "expert_d_ff": 32, "moe_layers": 2, "top_k": 2}


def _small_plan(**changed) -> tuple:
    """plan_capstone of a 4-layer model on 2 nodes of 2 GPUs, with ``changed`` arguments."""
    return plan_call({**SMALL, "num_layers": 4, "num_params": 1e6, "seq": 64, "global_batch": 8, "gpus_per_node": 2,
                  "gpu_memory_bytes": 1e9, **changed})  # fmt: skip


BAD_INPUT = [
    bad("ValueError", call("transformer_num_params", 40, 30, 2, 4, 2, 64), "d_model"),
    bad("ValueError", call("transformer_num_params", 40, 32, 2, 4, 3, 64), "n_heads"),
    bad("TypeError", call("transformer_num_params", 40.0, 32, 2, 4, 2, 64), "vocab"),
    bad("ValueError", call("transformer_num_params", 40, 32, 2, 4, 2, 64, moe_every=1), "num_experts"),
    bad("ValueError", call("capstone_bytes_per_rank", 1e6, 4, 64, 4, 16, 63, 1, **{**_MESH, "cp": 2}), "seq"),
    # seq divisible by cp but not by cp·tp (8 heads of 8 over tp 4: the heads split), and not by 2·cp (zigzag)
    bad("ValueError", call("capstone_bytes_per_rank", 1e6, 4, 64, 8, 8, 4, 1, **{**_MESH, "cp": 2, "tp": 4}), "seq"),
    bad("ValueError", call("capstone_bytes_per_rank", 1e6, 4, 64, 4, 16, 6, 1, **{**_MESH, "cp": 2}), "seq"),
    bad("ValueError", call("capstone_bytes_per_rank", 1e6, 4, 64, 4, 16, 96, 1, **{**_MESH, "tp": 3}), "n_heads"),
    bad("ValueError", call("capstone_bytes_per_rank", 1e6, 4, 64, 4, 16, 64, 1, **{**_MESH, "dp": 0}), "dp"),
    bad("ValueError", _small_plan(kv_heads=3), "kv_heads"),
    bad("ValueError", _small_plan(d_model=60), "d_model"),
    bad("ValueError", _small_plan(**{**_MOE, "moe_layers": 5}), "moe_layers"),
    bad("ValueError", _small_plan(**{**_MOE, "top_k": 5}), "top_k"),
    bad("ValueError", _small_plan(**{**_MOE, "expert_d_ff": 0}), "expert_d_ff"),
    bad("ValueError", _small_plan(num_params=1e12), "gpu_memory_bytes"),
    bad("TypeError", _small_plan(num_nodes=2.0), "num_nodes"),
]


@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_names_the_argument(case):
    """A size the formulas cannot take raises naming it."""
    assert_rejected_before_communicating(run_ranks(1, bad_input_rank, "accounting", case), case)
