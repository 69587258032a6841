"""Part 7, tasks 7.4-7.5: placement and planning (handouts/07-mesh.md §7.4-7.5).

    pytest tests/test_mesh_accounting.py               # accounting.py's last section and mesh.pick_configs
    pytest tests/test_mesh_accounting.py -m task7_4    # only the accounting

Pure functions, run in one rank like Part 6's. The parent judges against its own recomputation
of the formulas of the handout, against hand-worked examples, and against the published
configurations of Llama 3 405B, DeepSeek-V3 and Mixtral 8x22B under the handout's assumptions.
"""

from __future__ import annotations

import math

import pytest

from tests.harness import run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.oracles.accounting import call, evaluate

GB = 1e9
LLAMA3_405B = dict(num_params=405e9, num_layers=126, d_model=16384, heads=128, seq=8192)


# ---------------------------------------------------------------------------------------------
# The oracle: the handout's formulas, written again here.
# ---------------------------------------------------------------------------------------------


def zero_states(params: float, dp: int, zero: int) -> float:
    replicated = {0: 16, 1: 4, 2: 2, 3: 0}[zero]
    return params * replicated + params * (16 - replicated) / dp


def memory(num_params, num_layers, d_model, heads, seq, microbatch, *, dp, tp, pp, zero_stage, num_microbatches,
           recompute="selective", expert_params=0, ep=1, **_) -> float:  # fmt: skip
    sbh_t = seq * microbatch * d_model / tp
    per_layer = {"none": sbh_t * (34 + 5 * heads * seq / d_model), "selective": 34 * sbh_t, "full": 2 * sbh_t}
    states = zero_states((num_params - expert_params) / (tp * pp), dp, zero_stage)
    if expert_params:
        states += zero_states(expert_params / (ep * pp), dp // ep, zero_stage)
    return states + per_layer[recompute] * math.ceil(num_layers / pp) * min(pp, num_microbatches)


def ring(nbytes: float, n: int) -> float:
    return 2 * (n - 1) / n * nbytes


# ---------------------------------------------------------------------------------------------
# ## Task 7.4: memory, traffic and the planner
# ---------------------------------------------------------------------------------------------

MEMORY_CASES = {  # id -> keyword arguments of parallel_memory_per_rank
    "405b-tp8-pp16-dp128-zero2": dict(**LLAMA3_405B, microbatch=1, dp=128, tp=8, pp=16, zero_stage=2,
                                      num_microbatches=16),
    "7b-dp8-zero1": dict(num_params=7e9, num_layers=32, d_model=4096, heads=32, seq=4096, microbatch=1, dp=8, tp=1,
                         pp=1, zero_stage=1, num_microbatches=64),
    "no-recompute-tp4-pp3-m2": dict(num_params=13e9, num_layers=40, d_model=5120, heads=40, seq=2048, microbatch=2,
                                    dp=4, tp=4, pp=3, zero_stage=0, num_microbatches=2, recompute="none"),
    "full-recompute-zero3": dict(num_params=70e9, num_layers=80, d_model=8192, heads=64, seq=4096, microbatch=1,
                                 dp=16, tp=2, pp=2, zero_stage=3, num_microbatches=8, recompute="full"),
    "moe-ep8": dict(num_params=141e9, expert_params=135e9, ep=8, num_layers=56, d_model=6144, heads=48, seq=4096,
                    microbatch=1, dp=32, tp=4, pp=4, zero_stage=1, num_microbatches=32),
}  # fmt: skip


def _positional(case: dict) -> tuple[tuple, dict]:
    names = ["num_params", "num_layers", "d_model", "heads", "seq", "microbatch"]
    return tuple(case[n] for n in names), {k: v for k, v in case.items() if k not in names}


@pytest.mark.task7_4
@pytest.mark.parametrize("case", MEMORY_CASES)
def test_parallel_memory_is_sharded_states_plus_the_first_stages_activations(case):
    """parallel_memory_per_rank = ZeRO-sharded states of P/(tp*pp) + per-layer activations x ceil(L/pp) x min(pp, m)."""
    args, kwargs = _positional(MEMORY_CASES[case])
    (got,) = evaluate(call("parallel_memory_per_rank", *args, **kwargs))
    want = memory(*args, **kwargs)
    assert math.isclose(got, want, rel_tol=1e-9), f"{case}: got {got / GB:.4f} GB, expected {want / GB:.4f} GB"


@pytest.mark.task7_4
def test_parallel_memory_of_llama3_405b_matches_the_hand_computation():
    """Llama 3 405B at TP 8, PP 16, DP 128, ZeRO-2: 6.67 GB of states + 73.0 GB of activations = 79.7 GB."""
    base = dict(**LLAMA3_405B, microbatch=1, dp=128, tp=8, pp=16, num_microbatches=16)
    args, kwargs = _positional(base)
    got, states_only = evaluate(
        call("parallel_memory_per_rank", *args, zero_stage=2, **kwargs),
        call("zero_memory_per_rank", 405e9 / 128, 128, 2),
    )
    activations = 34 * 8192 * 16384 / 8 * 8 * 16  # per layer x 8 layers x 16 microbatches in flight
    assert math.isclose(states_only, 6.67e9, rel_tol=1e-3), f"states {states_only / GB:.3f} GB, expected 6.67"
    assert math.isclose(got - states_only, activations, rel_tol=1e-9), (
        f"activations {(got - states_only) / GB:.2f} GB, expected {activations / GB:.2f} GB: 34*s*b*h/tp per layer, "
        "ceil(126/16) = 8 layers on the first stage, min(pp, m) = 16 microbatches in flight under 1F1B"
    )


@pytest.mark.task7_4
@pytest.mark.parametrize("zero_stage", [0, 2, 3])
def test_communication_per_axis_follows_the_ring_formulas(zero_stage):
    """tp: 4 ring all-reduces of 2sbh per layer and microbatch; pp: 2 x 2sbh x m; dp: ring all-reduce of the grads."""
    kw = dict(dp=16, tp=4, pp=4, zero_stage=zero_stage, num_microbatches=8)
    (got,) = evaluate(call("communication_bytes_per_rank", 13e9, 40, 5120, 2048, 2, **kw))
    act = 2 * 2048 * 2 * 5120
    want = {"tp": 4 * ring(act, 4) * 10 * 8, "pp": 2 * act * 8,
            "dp": ring(2 * 13e9 / 16, 16) * (1.5 if zero_stage == 3 else 1)}  # fmt: skip
    assert set(got) == set(want), f"keys {sorted(got)}, expected {sorted(want)}"
    for axis in want:
        assert math.isclose(got[axis], want[axis], rel_tol=1e-9), (
            f"{axis}: got {got[axis]:.4g}, expected {want[axis]:.4g}"
        )


PLANS = {  # id -> (planner keyword arguments, expected (tp, pp, dp, zero_stage))
    "llama3-405b": (dict(**LLAMA3_405B, global_batch=2048, gpus_per_node=8, num_nodes=2048, gpu_memory_bytes=80e9),
                    (8, 16, 128, 2)),
    "7b-one-node": (dict(num_params=7e9, num_layers=32, d_model=4096, heads=32, seq=4096, global_batch=512,
                         gpus_per_node=8, num_nodes=1, gpu_memory_bytes=80e9), (1, 1, 8, 1)),
    "70b-two-nodes-full-recompute": (dict(num_params=70e9, num_layers=80, d_model=8192, heads=64, seq=4096,
                                          global_batch=512, gpus_per_node=8, num_nodes=2, gpu_memory_bytes=80e9,
                                          recompute="full"), (8, 1, 2, 2)),
    "13b-on-a-40gb-node": (dict(num_params=13e9, num_layers=40, d_model=5120, heads=40, seq=2048, global_batch=256,
                                gpus_per_node=8, num_nodes=1, gpu_memory_bytes=40e9), (4, 1, 2, 1)),
}  # fmt: skip


def _plan_args(case: dict) -> tuple[tuple, dict]:
    names = ["num_params", "num_layers", "d_model", "heads", "seq", "global_batch"]
    return tuple(case[n] for n in names), {k: v for k, v in case.items() if k not in names}


@pytest.mark.task7_4
@pytest.mark.parametrize("case", PLANS)
def test_planner_picks_the_configuration_its_rules_choose(case):
    """The planner returns the handout's hand-worked (tp, pp, dp, ZeRO), and Llama 3 405B's TP 8, PP 16, DP 128."""
    kwargs, (tp, pp, dp, zero) = PLANS[case]
    args, kw = _plan_args(kwargs)
    (plan,) = evaluate(call("plan_parallelism", *args, **kw))
    got = tuple(plan[k] for k in ("tp", "pp", "dp", "zero_stage"))
    assert got == (tp, pp, dp, zero), f"{case}: planned (tp, pp, dp, zero) = {got}, expected {(tp, pp, dp, zero)}"
    m = kwargs["global_batch"] // dp
    want = memory(*args[:5], 1, dp=dp, tp=tp, pp=pp, zero_stage=zero, num_microbatches=m, **kw)
    assert plan["num_microbatches"] == m, f"{case}: num_microbatches {plan['num_microbatches']}, expected {m}"
    assert math.isclose(plan["memory_per_rank"], want, rel_tol=1e-9), (
        f"{case}: memory_per_rank {plan['memory_per_rank']}"
    )
    assert set(plan["bytes_per_axis"]) == {"tp", "pp", "dp"}, f"{case}: bytes_per_axis {plan['bytes_per_axis']}"
    assert plan["rows"] and plan["rows"][-1]["fits"], f"{case}: the last row of the table is the chosen, fitting one"
    assert not any(r["fits"] for r in plan["rows"][:-1]), f"{case}: the planner passed over a row that fits"


@pytest.mark.task7_4
def test_planner_keeps_tp_inside_a_node_and_grows_pp_across_nodes():
    """Every configuration the planner tries has tp <= GPUs per node; pp > 1 only once tp fills the node."""
    for case, (kwargs, _) in PLANS.items():
        args, kw = _plan_args(kwargs)
        (plan,) = evaluate(call("plan_parallelism", *args, **kw))
        for row in plan["rows"]:
            assert row["tp"] <= kwargs["gpus_per_node"], (
                f"{case}: tried tp = {row['tp']} > {kwargs['gpus_per_node']} GPUs per node: TP crosses nodes"
            )
            assert row["pp"] == 1 or row["tp"] == min(kwargs["gpus_per_node"], 2 ** int(math.log2(kwargs["heads"]))), (
                f"{case}: tried pp = {row['pp']} with tp = {row['tp']}: grow TP to the node before pipelining"
            )


@pytest.mark.task7_4
def test_deepseek_v3_and_mixtral_published_layouts_fit():
    """DeepSeek-V3 (EP 64, PP 16, DP 128, ZeRO-1) and Mixtral 8x22B (EP 8, PP 4, TP 4) fit in 80 GB.

    DeepSeek-V3: 61 layers, h = 7168, 128 heads, 654e9 of its 671e9 parameters in experts, 15360 sequences of
    4096 tokens per step (120 microbatches per dp rank); Mixtral 8x22B: 56 layers, h = 6144, 48 heads.
    """
    deepseek = dict(num_params=671e9, expert_params=654e9, ep=64, num_layers=61, d_model=7168, heads=128, seq=4096,
                    microbatch=1, dp=128, tp=1, pp=16, zero_stage=1, num_microbatches=120)  # fmt: skip
    mixtral = MEMORY_CASES["moe-ep8"]
    got = evaluate(
        *[call("parallel_memory_per_rank", *_positional(c)[0], **_positional(c)[1]) for c in (deepseek, mixtral)]
    )
    for name, case, value in zip(["DeepSeek-V3", "Mixtral 8x22B"], [deepseek, mixtral], got):
        want = memory(*_positional(case)[0], **_positional(case)[1])
        assert math.isclose(value, want, rel_tol=1e-9), f"{name}: {value / GB:.2f} GB, expected {want / GB:.2f} GB"
        assert value <= 80e9, f"{name}: {value / GB:.1f} GB does not fit 80 GB"


# ---------------------------------------------------------------------------------------------
# ## Task 7.5: your configurations
# ---------------------------------------------------------------------------------------------


def scenarios_rank(ctx):
    mesh = ctx.load("mesh")
    return dict(mesh.SCENARIOS), mesh.pick_configs()


@pytest.mark.task7_5
def test_picked_configurations_fit_and_respect_the_placement_rules():
    """Each pick_configs() entry uses every GPU, keeps TP in a node, fits, and uses the lowest ZeRO that fits."""
    scenarios, picks = run_ranks(1, scenarios_rank)[0]
    assert set(picks) == set(scenarios), f"pick_configs() covers {sorted(picks)}, expected {sorted(scenarios)}"
    for name, s in scenarios.items():
        c = picks[name]
        where = f"{name} {c}"
        assert set(c) == {"dp", "tp", "pp", "zero_stage", "microbatch", "ep"}, f"{where}: keys"
        assert all(isinstance(v, int) and v >= (0 if k == "zero_stage" else 1) for k, v in c.items()), f"{where}: ints"
        gpus = s["gpus_per_node"] * s["num_nodes"]
        assert c["dp"] * c["tp"] * c["pp"] == gpus, f"{where}: dp*tp*pp must use all {gpus} GPUs"
        assert c["tp"] <= s["gpus_per_node"], f"{where}: tp > {s['gpus_per_node']} GPUs per node: TP crosses nodes"
        assert s["heads"] % c["tp"] == 0, f"{where}: tp must divide the {s['heads']} heads"
        assert c["pp"] <= s["num_layers"], f"{where}: more stages than layers"
        assert s["global_batch"] % (c["dp"] * c["microbatch"]) == 0, f"{where}: dp*microbatch must divide the batch"
        experts = s.get("num_experts", 1)
        assert c["ep"] == 1 or (experts % c["ep"] == 0 and c["dp"] % c["ep"] == 0), (
            f"{where}: ep must divide dp and the {experts} experts (1 for a dense model)"
        )
        m = s["global_batch"] // (c["dp"] * c["microbatch"])
        sizes = dict(dp=c["dp"], tp=c["tp"], pp=c["pp"], num_microbatches=m, ep=c["ep"])
        args = (s["num_params"], s["num_layers"], s["d_model"], s["heads"], s["seq"], c["microbatch"])
        extra = dict(recompute=s["recompute"], expert_params=s.get("expert_params", 0))
        fits = [memory(*args, zero_stage=z, **sizes, **extra) <= s["gpu_memory_bytes"] for z in range(4)]
        used = memory(*args, zero_stage=c["zero_stage"], **sizes, **extra)
        assert fits[c["zero_stage"]], f"{where}: {used / GB:.1f} GB does not fit {s['gpu_memory_bytes'] / GB:.0f} GB"
        assert fits.index(True) == c["zero_stage"], (
            f"{where}: ZeRO-{fits.index(True)} already fits this (dp, tp, pp); use the lowest stage that fits"
        )


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------

_SIZES = dict(dp=2, tp=2, pp=2, zero_stage=1, num_microbatches=4)

BAD_INPUT = [
    BadInput("memory-zero-stage-4", lambda A, ctx: A.parallel_memory_per_rank(1e9, 4, 64, 4, 16, 1, **{**_SIZES,
             "zero_stage": 4}), "ValueError", names="zero_stage", task="task7_4"),
    BadInput("memory-tp-not-an-int", lambda A, ctx: A.parallel_memory_per_rank(1e9, 4, 64, 4, 16, 1, **{**_SIZES,
             "tp": 2.0}), "TypeError", names="tp", task="task7_4"),
    BadInput("memory-unknown-recompute", lambda A, ctx: A.parallel_memory_per_rank(1e9, 4, 64, 4, 16, 1, **_SIZES,
             recompute="some"), "ValueError", names="recompute", task="task7_4"),
    BadInput("memory-heads-not-divisible-by-tp", lambda A, ctx: A.parallel_memory_per_rank(1e9, 4, 64, 3, 16, 1,
             **_SIZES), "ValueError", names="heads", task="task7_4"),
    BadInput("memory-dp-not-divisible-by-ep", lambda A, ctx: A.parallel_memory_per_rank(1e9, 4, 64, 4, 16, 1,
             **_SIZES, expert_params=5e8, ep=4), "ValueError", names="ep", task="task7_4"),
    BadInput("traffic-dp-zero", lambda A, ctx: A.communication_bytes_per_rank(1e9, 4, 64, 16, 1, **{**_SIZES, "dp": 0}),
             "ValueError", names="dp", task="task7_4"),
    BadInput("plan-nothing-fits", lambda A, ctx: A.plan_parallelism(1e12, 4, 64, 4, 16, 8, gpus_per_node=2,
             num_nodes=1, gpu_memory_bytes=1e9), "ValueError", names="gpu_memory_bytes", task="task7_4"),
    BadInput("plan-nodes-not-an-int", lambda A, ctx: A.plan_parallelism(1e9, 4, 64, 4, 16, 8, gpus_per_node=2,
             num_nodes=1.5, gpu_memory_bytes=1e9), "TypeError", names="num_nodes", task="task7_4"),
]  # fmt: skip


@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_before_computing(case):
    """A bad count, stage or option raises a clear ValueError/TypeError naming the argument."""
    assert_rejected_before_communicating(run_ranks(1, bad_input_rank, "accounting", case), case)
