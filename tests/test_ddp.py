"""Part 2: data parallelism (handouts/02-ddp.md).

    pytest tests/test_ddp.py                          # your implementation, world sizes 1, 2, 4
    pytest tests/test_ddp.py -m task2_4 --world-sizes 2   # only bucketed DDP, two ranks

Oracle: one process training on the concatenation of every rank's batch must end up with the same
gradients and parameters, after every step, as each rank of a data-parallel run ("the end result
should be the same as a forward pass on all the examples"). Ranks start from different random
weights, so the wrappers must broadcast rank 0's. Models are float64 so that the only difference
from the oracle is the order of additions; at world size 1 results must be bitwise identical.
Behaviour (when and how much is communicated) is judged from the recorder's log of each rank.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from tests.harness import assert_close, run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.harness.recorder import CommRecorder, calls, format_events
from tests.oracles.ddp import (
    PER_RANK_BATCH,
    VARIANTS,
    build_model,
    check_training_matches_one_process,
    make_batches,
    variant_params,
    wrap,
)


class SizedParameters(nn.Module):
    """Float32 vectors of the given sizes (bytes = 4 * size), some frozen: a bucket-layout fixture."""

    def __init__(self, sizes: list[int], frozen: set[int]) -> None:
        super().__init__()
        self.bag = nn.ParameterList([nn.Parameter(torch.zeros(n), requires_grad=i not in frozen)
                                     for i, n in enumerate(sizes)])  # fmt: skip


WRAPPERS = [v for v in VARIANTS if v not in ("naive", "flat")]


# -- training equivalence ---------------------------------------------------------------------------


@pytest.mark.parametrize("model_name", ["toy", "tied", "deep", "lopsided"])
@pytest.mark.parametrize("variant", variant_params(VARIANTS))
def test_sgd_steps_match_one_process_on_the_whole_batch(world_size, variant, model_name):
    """Three SGD steps give every rank the grads and parameters of one process on the whole batch.

    The frozen parameter keeps grad None; the tied weight is averaged once."""
    check_training_matches_one_process(world_size, variant, model_name, "sgd")


@pytest.mark.parametrize("variant", variant_params(VARIANTS))
def test_gradients_of_several_dtypes_are_averaged(world_size, variant):
    """Grads of a float32 layer and of a float64 layer are both averaged exactly once.

    A float32 layer feeding a float64 one: buffers that pack grads must not mix dtypes."""
    check_training_matches_one_process(world_size, variant, "mixed", "sgd")


@pytest.mark.parametrize("variant", variant_params(VARIANTS))
def test_adamw_steps_match_one_process_on_the_whole_batch(world_size, variant):
    """Three AdamW steps on the tied model: grads and parameters equal one process's, every step, every rank."""
    check_training_matches_one_process(world_size, variant, "tied", "adamw")


@pytest.mark.parametrize("set_to_none", [True, False], ids=["zero_grad-none", "zero_grad-zeros"])
@pytest.mark.parametrize("variant", variant_params(WRAPPERS))
def test_repeated_steps_work_with_either_kind_of_zero_grad(world_size, variant, set_to_none):
    """Five steps with ``zero_grad(set_to_none=...)`` True or False: the wrapper's per-step state resets either way."""
    check_training_matches_one_process(world_size, variant, "deep", "adamw", steps=5, set_to_none=set_to_none)


@pytest.mark.parametrize("variant", variant_params(WRAPPERS))
def test_a_parameter_without_grad_in_a_step_keeps_none_and_nothing_hangs(world_size, variant):
    """A parameter unused in a step keeps grad None on every rank, and the step neither hangs nor drops a bucket.

    BranchyModel skips ``extra`` on odd steps: its grads stay None there, its bucket goes at finish."""
    check_training_matches_one_process(world_size, variant, "branchy", "sgd", steps=4)


# -- construction: rank 0's weights win -------------------------------------------------------------


def broadcast_rank(ctx, variant):
    model = build_model("toy", seed=1000 + ctx.rank).to(ctx.device)  # a different start on every rank
    model.register_buffer("running_scale", torch.full((3,), float(ctx.rank + 1), device=ctx.device))
    with torch.no_grad():
        model.no_grad_fixed_param.fill_(10.0 + ctx.rank)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    wrap(ctx.load("ddp"), variant, model)
    return before, model.state_dict()


@pytest.mark.parametrize("variant", variant_params(WRAPPERS))
def test_construction_broadcasts_rank_0_parameters_and_buffers(world_size, variant):
    """Wrapping makes every rank's parameters and buffers equal to rank 0's, bit for bit (ranks start different)."""
    outs = run_ranks(world_size, broadcast_rank, variant)
    rank0_before = outs[0][0]
    for rank, (_, after) in enumerate(outs):
        assert sorted(after) == sorted(rank0_before), f"rank {rank}: the wrapper changed the model's state keys"
        for name, want in rank0_before.items():
            assert_close(
                after[name], want, what=f"rank {rank}, {name} after wrapping (must be rank 0's)", rtol=0, atol=0
            )


# -- behaviour: what is communicated, and when --------------------------------------------------------


def expected_layout(model: nn.Module, bucket_size_mb: float) -> list[list[str]]:
    """The contract's rule, restated: reverse order of trainable parameters, close a bucket when the next
    parameter would push it past the cap."""
    names = {id(p): n for n, p in model.named_parameters()}
    buckets, size, cap = [], 0, bucket_size_mb * 2**20
    for p in reversed([p for p in model.parameters() if p.requires_grad]):
        nbytes = p.numel() * p.element_size()
        if not buckets or size + nbytes > cap:
            buckets.append([])
            size = 0
        buckets[-1].append(names[id(p)])
        size += nbytes
    return buckets


def layout_rank(ctx, cases):
    ddp = ctx.load("ddp")
    models = [(build_model(name, seed=0, dtype=torch.float32).to(ctx.device), mb) for name, mb in cases]
    return [ddp.DDPBucketed(model, mb).bucket_parameter_names() for model, mb in models]


def _boundary_mb(model_name: str, count: int) -> float:
    """A cap exactly the size of the last ``count`` trainable parameters: they must share one bucket."""
    params = [p for p in build_model(model_name, 0, torch.float32).parameters() if p.requires_grad]
    return sum(p.numel() * p.element_size() for p in params[-count:]) / 2**20


@pytest.mark.task2_4
@pytest.mark.parametrize("model_name", ["deep", "tied", "toy", "lopsided"])
def test_bucket_layout_follows_the_reverse_order_cap_rule(model_name):
    """``bucket_parameter_names()`` follows the reverse-order cap rule at the edge caps.

    Caps: 0 and tiny (one parameter per bucket), exactly full, just short of full, 1 MiB, huge (one bucket)."""
    exact = _boundary_mb(model_name, 3)
    caps = [0.0, 1e-9, exact, exact * (1 - 1e-6), 0.002, 1.0, 1e6, float("inf")]
    got = run_ranks(1, layout_rank, [(model_name, mb) for mb in caps])[0]
    model = build_model(model_name, 0, torch.float32)
    for mb, layout in zip(caps, got):
        want = expected_layout(model, mb)
        assert layout == want, f"{model_name}, bucket_size_mb={mb!r}: expected buckets\n  {want}\ngot\n  {layout}"


def sized_layout_rank(ctx, sizes, frozen, bucket_size_mb):
    return (
        ctx.load("ddp")
        .DDPBucketed(SizedParameters(sizes, frozen).to(ctx.device), bucket_size_mb)
        .bucket_parameter_names()
    )


@st.composite
def layout_cases(draw):
    """Random parameter sizes and frozen set; a cap that is 0, random, or exactly some parameters' total."""
    sizes = draw(st.lists(st.integers(1, 3000), min_size=1, max_size=12))
    frozen = draw(st.sets(st.integers(0, len(sizes) - 1), max_size=len(sizes) - 1))
    start, stop = sorted(draw(st.lists(st.integers(0, len(sizes)), min_size=2, max_size=2)))
    exact_mb = 4 * sum(sizes[start:stop]) / 2**20
    mb = draw(st.one_of(st.just(0.0), st.just(exact_mb), st.floats(0, 0.02, allow_nan=False)))
    return sizes, frozen, mb


@pytest.mark.task2_4
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=layout_cases())
def test_bucket_layout_of_random_parameter_sizes_follows_the_rule(case):
    """Random sizes, frozen parameters and caps: ``bucket_parameter_names()`` follows the reverse-order cap rule."""
    sizes, frozen, mb = case
    got = run_ranks(1, sized_layout_rank, sizes, frozen, mb)[0]
    want = expected_layout(SizedParameters(sizes, frozen), mb)
    assert got == want, (
        f"sizes {sizes} (float32), frozen {sorted(frozen)}, bucket_size_mb={mb!r}: expected\n  {want}\ngot\n  {got}"
    )


def overlap_rank(ctx, variant, model_name, state, batch):
    model = build_model(model_name, seed=1000 + ctx.rank, dtype=torch.float32).to(ctx.device)
    net, sync = wrap(ctx.load("ddp"), variant, model)  # construction's broadcast is not recorded
    names = {id(p): n for n, p in model.named_parameters()}
    x, y, kwargs = batch
    mine = slice(ctx.rank * PER_RANK_BATCH, (ctx.rank + 1) * PER_RANK_BATCH)
    ready = []  # (parameter name, all-reduces launched when our hook ran right after its grad was ready)
    with CommRecorder() as rec:
        for p in model.parameters():
            if p.requires_grad:  # registered after the wrapper's hooks, so it runs after them
                p.register_post_accumulate_grad_hook(lambda p: ready.append((names[id(p)], len(calls(rec.events)))))
        F.mse_loss(net(x[mine].float().to(ctx.device), **kwargs), y[mine].float().to(ctx.device)).backward()
        end_of_backward = len(rec.events)
        sync()
    return {"events": rec.events, "ready": ready, "end_of_backward": end_of_backward}


def assert_overlapped(out: dict, buckets: list[list[str]], numels: dict[str, int], what: str) -> None:
    """One async all-reduce per bucket, each launched during backward as soon as its last grad was ready
    (not earlier, not later), and no wait before backward ends."""
    __tracebackhide__ = True
    events, log = out["events"], format_events(out["events"])
    launched = calls(events)
    assert all(e.op == "all_reduce" for e in launched), f"{what}: only all_reduce is expected here:\n{log}"
    assert len(launched) == len(buckets), (
        f"{what}: expected one all_reduce per {'bucket' if len(buckets[0]) > 1 else 'gradient'} "
        f"({len(buckets)}), got {len(launched)}:\n{log}"
    )
    for e in launched:
        assert e.async_op and e.in_backward, (
            f"{what}: all_reduce #{e.index} must be launched with async_op=True from a hook during backward, "
            f"got async_op={e.async_op}, in_backward={e.in_backward}:\n{log}"
        )
    early = [e for e in events if e.op == "wait" and (e.in_backward or e.index < out["end_of_backward"])]
    assert not early, f"{what}: waiting during backward serializes communication and compute (no overlap):\n{log}"
    done, order = set(), []
    for name, count in out["ready"]:
        full_before = [b for b in buckets if set(b) <= done]
        done.add(name)
        full_now = [b for b in buckets if set(b) <= done]
        order += [b for b in full_now if b not in order]
        assert len(full_before) <= count <= len(full_now), (
            f"{what}: when the grad of {name} was ready, {len(full_before)} to {len(full_now)} all-reduces should have "
            f"been launched (one per full bucket), but {count} were:\n{log}"
        )
    sizes = [e.numel for e in launched]
    assert sizes == [sum(numels[n] for n in b) for b in order], (
        f"{what}: all_reduce sizes {sizes} do not match the buckets in the order they filled: {order}"
    )


@pytest.mark.world_sizes(2, 4)
@pytest.mark.parametrize("variant", variant_params(WRAPPERS))
@pytest.mark.parametrize("model_name", ["deep", "tied", "lopsided"])
def test_each_bucket_is_all_reduced_once_asynchronously_as_soon_as_it_is_full(world_size, variant, model_name):
    """Each bucket is all-reduced once, asynchronously, from a hook as soon as its last grad is ready.

    One async all-reduce per bucket, launched from a hook during backward as soon as its last grad is ready; no wait
    before backward ends; sizes match the buckets."""
    batch = make_batches(model_name, world_size, 1)[0]
    outs = run_ranks(world_size, overlap_rank, variant, model_name, None, batch)
    model = build_model(model_name, 0, torch.float32)
    mb = VARIANTS[variant][1]
    buckets = expected_layout(model, 0.0 if mb is None else mb)
    numels = {n: p.numel() for n, p in model.named_parameters()}
    for rank, out in enumerate(outs):
        assert_overlapped(out, buckets, numels, f"rank {rank}, {variant}, {model_name}")


def after_backward_rank(ctx, variant, model_name, batch):
    model = build_model(model_name, seed=0).to(ctx.device)
    x, y, _ = batch
    mine = slice(ctx.rank * PER_RANK_BATCH, (ctx.rank + 1) * PER_RANK_BATCH)
    F.mse_loss(model(x[mine].to(ctx.device)), y[mine].to(ctx.device)).backward()
    ddp = ctx.load("ddp")
    with CommRecorder() as rec:
        (ddp.all_reduce_gradients if variant == "naive" else ddp.all_reduce_gradients_flat)(model)
    return rec.events


@pytest.mark.world_sizes(2, 4)
@pytest.mark.parametrize("variant", variant_params(["naive", "flat"]))
@pytest.mark.parametrize("model_name", ["tied", "mixed"])
def test_naive_reduces_each_gradient_and_flat_each_dtype_once(world_size, variant, model_name):
    """Naive makes one all_reduce per gradient, flat one per dtype, and nothing else.

    Naive: one all_reduce per parameter that has a grad (tied once, frozen never). Flat: one per dtype."""
    outs = run_ranks(world_size, after_backward_rank, variant, model_name, make_batches(model_name, world_size, 1)[0])
    params = [p for p in build_model(model_name, 0).parameters() if p.requires_grad]
    if variant == "naive":
        want = sorted((str(p.dtype).replace("torch.", ""), p.numel()) for p in params)
    else:
        totals: dict[str, int] = {}
        for p in params:
            totals[str(p.dtype).replace("torch.", "")] = totals.get(str(p.dtype).replace("torch.", ""), 0) + p.numel()
        want = sorted(totals.items())
    for rank, events in enumerate(outs):
        got = sorted((e.dtype, e.numel) for e in calls(events) if e.op == "all_reduce")
        others = [e for e in calls(events) if e.op != "all_reduce"]
        assert got == want and not others, (
            f"rank {rank}, {variant}, {model_name}: expected all_reduce calls of (dtype, numel) {want}, got {got}"
            f"{' and other calls' if others else ''}:\n{format_events(events)}"
        )


# -- bad input: a clear error on every rank, before any communication ----------------------------------


def _given(first: str | None):
    """The arrange step: the toy model, and what the bad call wraps after a first wrapping of it (or not):
    ``individual``, ``bucketed``, or ``torch`` (nn.parallel.DistributedDataParallel)."""

    def arrange(ddp, ctx) -> SimpleNamespace:
        model = build_model("toy", seed=0).to(ctx.device)
        wrapped = {
            "individual": lambda: ddp.DDPIndividualParameters(model),
            "bucketed": lambda: ddp.DDPBucketed(model, 1.0),
            "torch": lambda: nn.parallel.DistributedDataParallel(model),
        }.get(first, lambda: model)()
        return SimpleNamespace(model=model, wrapped=wrapped)

    return arrange


BAD_INPUT = [
    BadInput("naive-of-a-non-module", lambda d, g: d.all_reduce_gradients("model"),
             "TypeError", names="module", task="task2_1", arrange=_given(None)),
    BadInput("flat-of-a-non-module", lambda d, g: d.all_reduce_gradients_flat(None),
             "TypeError", names="module", task="task2_2", arrange=_given(None)),
    BadInput("individual-of-a-list", lambda d, g: d.DDPIndividualParameters([g.model]),
             "TypeError", names="module", task="task2_3", arrange=_given(None)),
    BadInput("individual-of-a-bucketed-wrapper", lambda d, g: d.DDPIndividualParameters(g.wrapped),
             "ValueError", names="module", task="task2_3", arrange=_given("bucketed")),
    BadInput("individual-of-a-model-already-wrapped", lambda d, g: d.DDPIndividualParameters(g.model),
             "ValueError", names="module", task="task2_3", arrange=_given("individual")),
    BadInput("negative-bucket-size", lambda d, g: d.DDPBucketed(g.model, -1.0),
             "ValueError", names="bucket_size_mb", task="task2_4", arrange=_given(None)),
    BadInput("NaN-bucket-size", lambda d, g: d.DDPBucketed(g.model, float("nan")),
             "ValueError", names="bucket_size_mb", task="task2_4", arrange=_given(None)),
    BadInput("bucket-size-as-text", lambda d, g: d.DDPBucketed(g.model, "25"),
             "TypeError", names="bucket_size_mb", task="task2_4", arrange=_given(None)),
    BadInput("bucketed-of-an-individual-wrapper", lambda d, g: d.DDPBucketed(g.wrapped, 1.0),
             "ValueError", names="module", task="task2_4", arrange=_given("individual")),
    BadInput("bucketed-of-a-model-already-wrapped", lambda d, g: d.DDPBucketed(g.model, 1.0),
             "ValueError", names="module", task="task2_4", arrange=_given("bucketed")),
    BadInput("bucketed-of-torch-DDP", lambda d, g: d.DDPBucketed(g.wrapped, 1.0),
             "ValueError", names="module", task="task2_4", arrange=_given("torch")),
]  # fmt: skip


@pytest.mark.world_sizes(2, 4)
@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """Bad input raises the promised ValueError/TypeError naming the argument, on every rank, before any message."""
    assert_rejected_before_communicating(run_ranks(world_size, bad_input_rank, "ddp", case, deadline=15), case)
