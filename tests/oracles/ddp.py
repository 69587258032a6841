"""The Part 2 training oracle: DDP variants trained on N ranks against one process on the whole batch.

    from tests.oracles.ddp import check_training_matches_one_process, variant_params
    @pytest.mark.parametrize("variant", variant_params(["naive", "flat", "bucketed-0.002MiB"]))
    def test_...(variant):
        check_training_matches_one_process(3, variant, "deep", "adamw", steps=5)

The test models (``MODELS``: toy, tied weights, lopsided, branchy, mixed dtypes, deep), the DDP
variants (``VARIANTS``: class and bucket size, with ``variant_params`` giving them their task
markers), the seeded per-rank batches, ``train_rank`` (wrap, train, return grads and parameters
per step) and ``check_training_matches_one_process``, which runs it on N ranks and compares every
rank's grads and parameters with one process training on the concatenated batch.

Used by tests/test_ddp.py and its hidden counterpart.
"""

from __future__ import annotations

import traceback

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cs336_systems.models import DeepMLP, ToyModel, ToyModelWithTiedWeights
from cs336_systems.utils import random_batch, seed_everything
from tests.harness import CONFIG, RankFailure, assert_close, run_ranks, tolerance

PER_RANK_BATCH = 4


STATE_SEED = 0  # the oracle's (and rank 0's) initial weights; other ranks start elsewhere


class LopsidedModel(nn.Module):
    """A 128 KiB weight (float64) beside tiny parameters, down to a single element."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = nn.Linear(16, 1024)  # weight (1024, 16): larger than the small bucket caps
        self.gain = nn.Parameter(torch.ones(1))
        self.head = nn.Linear(1024, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.wide(x))) * self.gain  # (B, 16) -> (B, 3)


class BranchyModel(nn.Module):
    """``extra`` is used only when ``use_extra=True``: on other steps its parameters get no grad."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Linear(6, 6)
        self.extra = nn.Linear(6, 6)
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor, use_extra: bool = True) -> torch.Tensor:
        h = torch.relu(self.trunk(x))
        return self.head(h + self.extra(h) if use_extra else h)


class MixedDtypeModel(nn.Module):
    """A float32 layer feeding a float64 layer: the flat all-reduce needs one buffer per dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 6)
        self.second = nn.Linear(6, 3).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x.float())).double())


# name -> (factory, in_features, out_features)
MODELS = {
    "toy": (lambda: ToyModel(10, 5), 10, 5),  # frozen parameter, LayerNorm, mixed shapes
    "tied": (lambda: ToyModelWithTiedWeights(10, 5), 10, 5),  # fc4.weight is fc2.weight
    "deep": (lambda: DeepMLP(2, 8, 16), 8, 8),
    "lopsided": (lambda: LopsidedModel(), 16, 3),
    "branchy": (lambda: BranchyModel(), 6, 2),
    "mixed": (lambda: MixedDtypeModel(), 4, 3),  # keeps its own dtypes
}


# variant -> (task marker, bucket_size_mb for DDPBucketed)
VARIANTS = {
    "naive": (pytest.mark.task2_1, None),
    "flat": (pytest.mark.task2_2, None),
    "individual": (pytest.mark.task2_3, None),
    "bucketed-0MiB": (pytest.mark.task2_4, 0.0),  # one parameter per bucket
    "bucketed-0.002MiB": (pytest.mark.task2_4, 0.002),  # a few parameters per bucket
    "bucketed-inf": (pytest.mark.task2_4, float("inf")),  # one bucket
}


def variant_params(names):
    return [pytest.param(v, marks=VARIANTS[v][0], id=v) for v in names]


def build_model(name: str, seed: int, dtype=torch.float64) -> nn.Module:
    seed_everything(seed)
    model = MODELS[name][0]()
    return model if name == "mixed" else model.to(dtype)


def wrap(ddp, variant: str, model: nn.Module):
    """(module to call, function that synchronizes gradients after backward)."""
    if variant == "naive":
        return model, lambda: ddp.all_reduce_gradients(model)
    if variant == "flat":
        return model, lambda: ddp.all_reduce_gradients_flat(model)
    net = (
        ddp.DDPIndividualParameters(model) if variant == "individual" else ddp.DDPBucketed(model, VARIANTS[variant][1])
    )
    assert net.module is model, "the wrapper must expose the model it wraps as .module"
    return net, net.finish_gradient_synchronization


def make_batches(name: str, world_size: int, steps: int):
    """One global batch per step: (inputs, targets, forward kwargs). BranchyModel skips extra on odd steps."""
    _, d_in, d_out = MODELS[name]
    out = []
    for step in range(steps):
        x, y = random_batch(world_size * PER_RANK_BATCH, d_in, d_out, seed=100 + step, dtype=torch.float64)
        out.append((x, y, {"use_extra": step % 2 == 0} if name == "branchy" else {}))
    return out


def train(net, model, sync, batches, opt_name: str, set_to_none=True, shard=None, history=None) -> list[dict]:
    """The training loop of both the ranks and the oracle; appends every step's grads and parameters to
    ``history`` (so a rank that fails mid-run still reports the steps it completed)."""
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.1) if opt_name == "sgd" else torch.optim.AdamW(params, lr=0.01)
    history = [] if history is None else history
    for x, y, kwargs in batches:
        if shard is not None:
            x, y = x[shard], y[shard]
        opt.zero_grad(set_to_none=set_to_none)
        F.mse_loss(net(x, **kwargs), y).backward()
        sync()
        grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
        history.append({"grads": grads, "params": {n: p.detach().clone() for n, p in model.named_parameters()}})
    return history


def train_rank(ctx, variant, model_name, state, batches, opt_name, set_to_none=True):
    model = build_model(model_name, seed=1000 + ctx.rank).to(ctx.device)
    if ctx.rank == 0 or variant in ("naive", "flat"):  # the functions cannot broadcast: start equal
        model.load_state_dict(state)
    net, sync = wrap(ctx.load("ddp"), variant, model)
    mine = slice(ctx.rank * PER_RANK_BATCH, (ctx.rank + 1) * PER_RANK_BATCH)
    batches = [(x.to(ctx.device), y.to(ctx.device), k) for x, y, k in batches]
    history: list[dict] = []
    try:
        train(net, model, sync, batches, opt_name, set_to_none, shard=mine, history=history)
    except Exception:  # judged after the completed steps, which usually say more about the bug
        return history, traceback.format_exc()
    return history, None


def diagnose_mismatch(got: torch.Tensor, want: torch.Tensor, world_size: int) -> str:
    """Name the classic averaging bugs when the grad is off by exactly a factor of the world size."""
    if world_size > 1 and torch.allclose(got, want * world_size, rtol=1e-6, atol=1e-12):
        return f" -- this is the SUM over ranks: divide by the world size ({world_size})"
    if world_size > 1 and torch.allclose(got, want / world_size, rtol=1e-6, atol=1e-12):
        return f" -- this is the average divided by {world_size} again: average only once"
    return ""


def assert_matches_oracle(
    outs: list[tuple[list[dict], str | None]], oracle: list[dict], world_size: int, what: str, loose=False
) -> None:
    """Every rank, every step: grads and parameters equal the one-process run (bitwise at world size 1 on
    CPU, where the oracle does the same arithmetic) and bitwise equal to rank 0's."""
    __tracebackhide__ = True
    tol = {"rtol": 0.0, "atol": 0.0} if world_size == 1 and CONFIG.backend == "gloo" else {}
    if loose and not tol:  # float32 rounding upstream reaches the float64 layer's grads
        tol = dict(zip(("rtol", "atol"), tolerance(torch.float32)))
    for step, want in enumerate(oracle):
        for rank, (history, error) in enumerate(outs):
            if step == len(history):  # the rank's own failure (its traceback): a RankFailure, like any other
                raise RankFailure(f"rank {rank}, step {step} ({what}) raised:\n{error}")
            got = history[step]
            for kind in ("grads", "params"):
                for name, w in want[kind].items():
                    g = got[kind][name]
                    where = f"rank {rank}, step {step}, {name}{'.grad' if kind == 'grads' else ''} ({what})"
                    if w is None or g is None:
                        describe = lambda t: "None" if t is None else "a tensor"
                        assert g is None and w is None, f"{where}: expected grad {describe(w)}, got {describe(g)}"
                        continue
                    try:
                        assert_close(g, w, what=where, **tol)
                        assert_close(g, outs[0][0][step][kind][name], what=f"{where} vs rank 0", rtol=0, atol=0)
                    except AssertionError as exc:
                        hint = diagnose_mismatch(g, w, world_size) if kind == "grads" else ""
                        raise AssertionError(str(exc) + hint) from None


def check_training_matches_one_process(world_size, variant, model_name, opt_name, steps=3, set_to_none=True):
    state = build_model(model_name, seed=STATE_SEED).state_dict()
    batches = make_batches(model_name, world_size, steps)
    outs = run_ranks(world_size, train_rank, variant, model_name, state, batches, opt_name, set_to_none)
    oracle_model = build_model(model_name, seed=STATE_SEED)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the ranks, so that CPU sums happen in the same order
    try:
        oracle = train(oracle_model, oracle_model, lambda: None, batches, opt_name, set_to_none)
    finally:
        torch.set_num_threads(threads)
    assert_matches_oracle(outs, oracle, world_size, f"{variant}, {model_name}, {opt_name}", loose=model_name == "mixed")
