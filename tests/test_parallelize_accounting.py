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
from tests.oracles.accounting import EXAMPLES, accounting_rank, assert_value, call, evaluate

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


# The planner's oracle: every layout its rules allow, enumerated here, judged by the memory formula of its
# docstring (recomputed here), and the first that fits in the rules' order of preference. The order: the
# smallest cp (rule 4); in it ZeRO 0-2 before ZeRO-3 (rule 3); then plan_parallelism's (tp, 1) before
# (widest tp, pp), i.e. the smaller pp, then the smaller tp (rule 1); the smaller ep (rule 5); the lower ZeRO.
GB = 1e9


def _powers(limit: int) -> list[int]:
    return [2**i for i in range(limit.bit_length()) if 2**i <= limit]


def _expert_params(c: dict) -> float:
    h, f, e = c["d_model"], c.get("expert_d_ff", 0), c.get("num_experts", 0)
    return c.get("moe_layers", 0) * e * (2 * h * f + f + h) if e else 0


def _memory(c: dict, tp: int, cp: int, pp: int, dp: int, ep: int, zero: int, m: int) -> float:
    """Model states sharded over the dp * cp ranks of the same weights, plus the first stage's activations."""

    def states(p, n):  # mixed-precision Adam: 2 + 2 + 12 bytes per parameter, ZeRO over n ranks
        return p * {0: 16, 1: 4 + 12 / n, 2: 2 + 14 / n, 3: 16 / n}[zero]

    x = _expert_params(c)
    total = states((c["num_params"] - x) / (tp * pp), dp * cp) + (states(x / (ep * pp), dp * cp // ep) if x else 0)
    s, h = c["seq"] // cp, c["d_model"]
    sbh_t = s * c.get("microbatch", 1) * h / tp
    per_layer = {"selective": 34, "full": 2, "none": 34 + 5 * c["heads"] * s / h}[c.get("recompute", "selective")]
    return total + per_layer * sbh_t * math.ceil(c["num_layers"] / pp) * min(pp, m)


def _layouts(c: dict) -> list[tuple]:
    """(preference key, layout) of every layout rules 1, 2, 4 and 5 allow, whatever its memory."""
    per_node, gpus, mb = c["gpus_per_node"], c["gpus_per_node"] * c["num_nodes"], c.get("microbatch", 1)
    tps = [t for t in _powers(per_node) if c.get("kv_heads", c["heads"]) % t == 0]
    out = []
    for tp, pp, cp in [(t, p, q) for t in tps for p in _powers(c["num_layers"]) for q in _powers(gpus)]:
        if (pp > 1 and tp != tps[-1]) or (cp > 1 and c["seq"] % (2 * cp)) or gpus % (tp * pp * cp):
            continue
        dp = gpus // (tp * pp * cp)
        if c["global_batch"] % (dp * mb) or (c["seq"] // cp) % tp:
            continue
        m = c["global_batch"] // (dp * mb)
        if pp > 1 and m < pp:  # the pipeline must fill
            continue
        for ep in [d for d in range(1, dp * cp + 1) if dp * cp % d == 0 and max(c.get("num_experts", 0), 1) % d == 0]:
            for zero in range(4):
                layout = dict(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, zero_stage=zero, num_microbatches=m)
                out.append(((cp, zero == 3, pp, tp, ep, zero), layout))
    return sorted(out, key=lambda kv: kv[0])


def _bytes(c: dict, plan: dict) -> dict:
    """capstone_bytes_per_rank's terms for the chosen layout (this rank's own gradients), and the all-to-all."""
    tp, cp, pp, dp, ep, m = (plan[k] for k in ("tp", "cp", "pp", "dp", "ep", "num_microbatches"))
    x, h, mb, s = _expert_params(c), c["d_model"], c.get("microbatch", 1), c["seq"]
    grads = 2 * ((c["num_params"] - x) / (tp * pp) + x / (ep * pp))
    act, blocks = 2 * (s // cp) * mb * h, math.ceil(c["num_layers"] / pp)
    tokens = m * mb * s // (cp * tp)
    return {
        "tp": 8 * (tp - 1) / tp * act * blocks * m,
        "cp": _ring(s, mb, c["heads"] // tp, h // c["heads"], cp, 2) * blocks * m + _all_reduce(grads, cp),
        "pp": 2 * act / tp * m if pp > 1 else 0.0,
        "dp": _all_reduce(grads, dp),
        "ep": 4 * tokens * c.get("top_k", 1) * h * (ep - 1) / ep * 2 * math.ceil(c.get("moe_layers", 0) / pp),
    }


def _judged(c: dict) -> list[tuple]:
    """(preference key, layout, memory) of every layout the rules allow, in the rules' order."""
    sizes = ("tp", "cp", "pp", "dp", "ep")
    return [(key, lay, _memory(c, **{k: lay[k] for k in sizes}, zero=lay["zero_stage"], m=lay["num_microbatches"]))
            for key, lay in _layouts(c)]  # fmt: skip


def _check_plan(name: str, c: dict, status: str, plan) -> None:
    """The planner's answer for case ``c`` against the oracle: the layout, its memory, bytes and rows."""
    __tracebackhide__ = True
    judged = _judged(c)
    fitting = [(key, lay, mem) for key, lay, mem in judged if mem <= c["gpu_memory_bytes"]]
    if not fitting:
        assert status == "ValueError" and "gpu_memory_bytes" in plan, (
            f"{name}: no layout fits in {c['gpu_memory_bytes'] / GB:.3g} GB, expected a ValueError naming "
            f"gpu_memory_bytes, got {status}: {plan if status != 'ok' else 'a plan'}"
        )
        return
    assert status == "ok", f"{name}: plan_capstone raised {status}: {plan}"
    key, want, mem = fitting[0]
    got = {k: plan.get(k) for k in want}
    assert got == want, f"{name}: planned {got}, the rules choose {want} ({mem / GB:.4g} GB)"
    assert_value(plan["memory_per_rank"], mem, f"{name}: memory_per_rank of {want}")
    for axis, value in _bytes(c, plan).items():
        assert_value(plan["bytes_per_axis"].get(axis), value, f"{name}: bytes_per_axis[{axis!r}] of {want}")
    rows = plan["rows"]
    assert rows and rows[-1]["fits"] and not any(r["fits"] for r in rows[:-1]), (
        f"{name}: rows must end with the chosen layout, the only one that fits"
    )
    fields = ("tp", "cp", "pp", "dp", "ep", "zero_stage")
    tried = {tuple(r[k] for k in fields): r for r in rows}
    for earlier, lay, memory in judged:
        if earlier >= key:
            break
        row = tried.get(tuple(lay[k] for k in fields))
        assert row is not None, f"{name}: the rules try {lay} ({memory / GB:.4g} GB) before {want}: no row"
        assert_value(row["memory_per_rank"], memory, f"{name}: the row of {lay}: memory_per_rank")


def _plan_calls(cases: list[dict]) -> list:
    """Each case's plan_capstone, as (status, plan or message), computed in one rank."""
    return run_ranks(1, accounting_rank, [_plan(c) for c in cases])[0]


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
    # Experts (8 of d_ff 1024 in 4 layers) dominate: ep = 4 spans dp = 2 and cp ranks.
    "small-moe-with-cp": {**SMALL, "seq": 2048, "global_batch": 2, "gpu_memory_bytes": 20e6, "num_experts": 8,
                          "expert_d_ff": 1024, "moe_layers": 4, "top_k": 2, "num_params": 2e5 + 4 * 8 * 132160},
}  # fmt: skip


@pytest.mark.task11_4
def test_plan_capstone_follows_its_rules():
    """Llama 3 405B, a DeepSeek-V3-like MoE and small clusters: the layout, memory, bytes and rows the rules give."""
    for (name, case), (status, plan) in zip(RULE_CASES.items(), _plan_calls(list(RULE_CASES.values()))):
        _check_plan(name, case, status, plan)


@st.composite
def _clusters(draw) -> dict:
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    c = dict(num_layers=draw(st.integers(1, 9)), d_model=heads * draw(st.sampled_from([4, 8])), heads=heads,
             kv_heads=heads // draw(st.sampled_from([d for d in (1, 2, 4) if heads % d == 0])),
             seq=draw(st.sampled_from([8, 16, 24, 64, 256, 1024])),
             global_batch=draw(st.sampled_from([2, 4, 8, 12, 16])), microbatch=draw(st.sampled_from([1, 2])),
             gpus_per_node=draw(st.sampled_from([1, 2, 4, 8])), num_nodes=draw(st.sampled_from([1, 2, 3, 4])),
             recompute=draw(st.sampled_from(["selective", "full", "none"])))  # fmt: skip
    c["num_params"] = float(draw(st.integers(10_000, 1_000_000)))
    if draw(st.booleans()):
        c.update(num_experts=draw(st.sampled_from([2, 4, 6, 8])), expert_d_ff=draw(st.sampled_from([16, 256])),
                 moe_layers=draw(st.integers(1, c["num_layers"])), top_k=draw(st.sampled_from([1, 2])))  # fmt: skip
        c["num_params"] += _expert_params(c)
    # A budget between the layouts' memories (some fit, some do not), or below all of them; just above a layout's
    # own memory, so that a sum rounded in another order cannot decide whether it fits.
    memories = sorted(memory for _, _, memory in _judged(c)) or [1e6]
    quantile = draw(st.sampled_from([0.5, 0.1, 0.3, 0.7, 0.9, 0.0]))
    c["gpu_memory_bytes"] = memories[round(quantile * (len(memories) - 1))] * draw(st.sampled_from([1 + 1e-9, 0.9]))
    return c


@pytest.mark.task11_4
@EXAMPLES
@given(st.lists(_clusters(), min_size=1, max_size=6))
def test_plan_capstone_follows_its_rules_on_random_clusters(cases):
    """Random models and clusters, dense and MoE: the first layout in the rules' order that fits, rows before it."""
    for i, (case, (status, plan)) in enumerate(zip(cases, _plan_calls(cases))):
        _check_plan(f"case {i} {case}", case, status, plan)


def bad(exception: str, bad_call: tuple, names: str) -> BadInput:
    """``accounting.<name>(*args, **kwargs)`` must raise ``exception`` naming ``names``."""
    _, name, args, kwargs = bad_call
    return BadInput(f"{name}-{names}-" + "-".join(map(str, [*args, *kwargs.values()])),
                    lambda A, ctx: getattr(A, name)(*args, **kwargs), exception, names, "task11_4")  # fmt: skip


_MESH = {"dp": 1, "pp": 1, "cp": 1, "tp": 1, "num_microbatches": 1}
_MOE = {"num_experts": 4, "expert_d_ff": 32, "moe_layers": 2, "top_k": 2}


def _small_plan(**changed) -> tuple:
    """plan_capstone of a 4-layer model on 2 nodes of 2 GPUs, with ``changed`` arguments."""
    return _plan({**SMALL, "num_layers": 4, "num_params": 1e6, "seq": 64, "global_batch": 8, "gpus_per_node": 2,
                  "gpu_memory_bytes": 1e9, **changed})  # fmt: skip


BAD_INPUT = [
    bad("ValueError", call("transformer_num_params", 40, 30, 2, 4, 2, 64), "d_model"),
    bad("ValueError", call("transformer_num_params", 40, 32, 2, 4, 3, 64), "n_heads"),
    bad("TypeError", call("transformer_num_params", 40.0, 32, 2, 4, 2, 64), "vocab"),
    bad("ValueError", call("transformer_num_params", 40, 32, 2, 4, 2, 64, moe_every=1), "num_experts"),
    bad("ValueError", call("capstone_bytes_per_rank", 1e6, 4, 64, 4, 16, 63, 1, **{**_MESH, "cp": 2}), "seq"),
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
