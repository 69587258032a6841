"""The oracle of Part 11's planner (accounting.plan_capstone), shared by its public and hidden tests.

The rules of the docstring, applied here by brute force: every layout they allow is listed with its memory
(recomputed from the docstring's formula, not taken from the implementation), and the first that fits in the
rules' order of preference is the one the planner must choose; ``check_plan`` judges an answer against it
(layout, memory, bytes per axis, a row for every layout tried before it, and a row for every layout rule 2
rejected before it, labelled by its ``rejected`` field). ``clusters`` draws random models
and clusters (hypothesis), ``plan_calls`` runs plan_capstone on cases in one rank.
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

from tests.harness import run_ranks
from tests.oracles.accounting import accounting_rank, assert_value, call


def ring_bytes(seq, batch, heads, head_dim, cp, e):
    """The CP ring's bytes per layer and microbatch in capstone_bytes_per_rank's cp term, recomputed here."""
    block = batch * heads * (seq // cp) * head_dim
    return 2 * block * ((2 * cp - 2) * e + cp * 2 * e) if cp > 1 else 0.0


def all_reduce_bytes(nbytes, n):
    """A ring all-reduce's bytes sent per rank."""
    return 2 * (n - 1) / n * nbytes


LLAMA3_405B = dict(num_params=405e9, num_layers=126, d_model=16384, heads=128, gpus_per_node=8, num_nodes=2048,
                   gpu_memory_bytes=80e9, kv_heads=8)  # fmt: skip


def plan_call(spec: dict, **more) -> tuple:
    """The call ``plan_capstone(**spec, **more)`` as the accounting oracle runs it in a rank."""
    spec = {**spec, **more}
    args = [spec.pop(k) for k in ("num_params", "num_layers", "d_model", "heads", "seq", "global_batch")]
    return call("plan_capstone", *args, **spec)


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


def _rejection(c: dict, tp: int, cp: int, pp: int) -> str | None:
    """Rule 2's first failed condition for (tp, cp, pp), in the docstring's order, or None (memory is computed)."""
    gpus, mb = c["gpus_per_node"] * c["num_nodes"], c.get("microbatch", 1)
    dp = gpus // (tp * cp * pp)
    if not dp or dp * tp * cp * pp != gpus or c["global_batch"] % (dp * mb):
        return "batch"
    if pp > 1 and c["global_batch"] // (dp * mb) < pp:
        return "fills"
    return "split" if (c["seq"] // cp) % tp else None


def rejected_before(c: dict, plan: dict) -> set[tuple]:
    """(tp, cp, pp, rejected) of every layout rule 2 rejects that the rules try before ``plan``'s: all those of a
    smaller cp, and at its cp those of rule 1's candidates before its own (all of them when it is ZeRO-3's pass)."""
    per_node, gpus = c["gpus_per_node"], c["gpus_per_node"] * c["num_nodes"]
    tps = [t for t in _powers(per_node) if c.get("kv_heads", c["heads"]) % t == 0]
    candidates = [(t, 1) for t in tps] + [(tps[-1], p) for p in _powers(c["num_layers"]) if p > 1]
    mine = candidates.index((plan["tp"], plan["pp"]))
    out = set()
    for cp in [q for q in _powers(gpus) if q == 1 or c["seq"] % (2 * q) == 0]:
        if cp > plan["cp"]:
            break
        for i, (tp, pp) in enumerate(candidates):
            if cp == plan["cp"] and plan["zero_stage"] != 3 and i >= mine:
                break
            if kind := _rejection(c, tp, cp, pp):
                out.add((tp, cp, pp, kind))
    return out


def _bytes(c: dict, plan: dict) -> dict:
    """capstone_bytes_per_rank's terms for the chosen layout (this rank's own gradients), and the all-to-all."""
    tp, cp, pp, dp, ep, m = (plan[k] for k in ("tp", "cp", "pp", "dp", "ep", "num_microbatches"))
    x, h, mb, s = _expert_params(c), c["d_model"], c.get("microbatch", 1), c["seq"]
    grads = 2 * ((c["num_params"] - x) / (tp * pp) + x / (ep * pp))
    act, blocks = 2 * (s // cp) * mb * h, math.ceil(c["num_layers"] / pp)
    tokens = m * mb * s // (cp * tp)
    return {
        "tp": 8 * (tp - 1) / tp * act * blocks * m,
        "cp": ring_bytes(s, mb, c["heads"] // tp, h // c["heads"], cp, 2) * blocks * m + all_reduce_bytes(grads, cp),
        "pp": 2 * act / tp * m if pp > 1 else 0.0,
        "dp": all_reduce_bytes(grads, dp),
        "ep": 4 * tokens * c.get("top_k", 1) * h * (ep - 1) / ep * 2 * math.ceil(c.get("moe_layers", 0) / pp),
    }


def judged_layouts(c: dict) -> list[tuple]:
    """(preference key, layout, memory) of every layout the rules allow, in the rules' order."""
    sizes = ("tp", "cp", "pp", "dp", "ep")
    return [(key, lay, _memory(c, **{k: lay[k] for k in sizes}, zero=lay["zero_stage"], m=lay["num_microbatches"]))
            for key, lay in _layouts(c)]  # fmt: skip


def check_plan(name: str, c: dict, status: str, plan) -> None:
    """The planner's answer for case ``c`` against the oracle: the layout, its memory, bytes and rows."""
    __tracebackhide__ = True
    judged = judged_layouts(c)
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
    unlabelled = [r for r in rows if (r.get("rejected") is None) != (r["memory_per_rank"] is not None)]
    assert not unlabelled, (
        f"{name}: a row has its memory_per_rank, or 'rejected' (which of rule 2's conditions it failed), never both "
        f"nor neither: {unlabelled[0]}"
    )
    want_rejected = rejected_before(c, want)
    got_rejected = {(r["tp"], r["cp"], r["pp"], r["rejected"]) for r in rows if r["memory_per_rank"] is None}
    assert got_rejected == want_rejected, (
        f"{name}: the layouts rule 2 rejects before {want}, as (tp, cp, pp, rejected): the rules give "
        f"{sorted(want_rejected)}; the rows say {sorted(got_rejected)} "
        f"(missing: {sorted(want_rejected - got_rejected)}, unexpected: {sorted(got_rejected - want_rejected)})"
    )
    fields = ("tp", "cp", "pp", "dp", "ep", "zero_stage")
    tried = {tuple(r[k] for k in fields): r for r in rows}
    for earlier, lay, memory in judged:
        if earlier >= key:
            break
        row = tried.get(tuple(lay[k] for k in fields))
        assert row is not None, f"{name}: the rules try {lay} ({memory / GB:.4g} GB) before {want}: no row"
        assert_value(row["memory_per_rank"], memory, f"{name}: the row of {lay}: memory_per_rank")


def plan_calls(cases: list[dict]) -> list:
    """Each case's plan_capstone, as (status, plan or message), computed in one rank."""
    return run_ranks(1, accounting_rank, [plan_call(c) for c in cases])[0]


@st.composite
def clusters(draw) -> dict:
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
    memories = sorted(memory for _, _, memory in judged_layouts(c)) or [1e6]
    quantile = draw(st.sampled_from([0.5, 0.1, 0.3, 0.7, 0.9, 0.0]))
    c["gpu_memory_bytes"] = memories[round(quantile * (len(memories) - 1))] * draw(st.sampled_from([1 + 1e-9, 0.9]))
    return c
