"""The Part 5 training oracle: the test models, their batches, one process's steps, and the chunked
pipeline's rank function, and ``ActivationProbe``, which counts the activations a rank holds.

    from tests.oracles.pipeline import assert_matches_oracle, chunked_train_rank, make_batches, oracle_steps
    batches = make_batches("deep", 2 * m, steps=3, seed=0)
    results = run_ranks(p, chunked_train_rank, ("interleaved", v, False), m, batches)
    assert_matches_oracle(results, oracle_steps("deep", p * v, batches), list(range(p)), "interleaved")

``build_model`` and ``make_batches`` make the float64 test models (``deep``, ``deep-3d``: a DeepMLP
and head whose stages get uneven layer counts; ``widths``: 6 layers whose activations differ in
width) and their (x, y) batches; ``oracle_steps`` trains the whole model in one process on the
whole batch (loss and grads per SGD step); ``assert_matches_oracle`` compares what every stage of a
pipeline returned with it. ``stage_bounds`` is the tests' own split of layers into stages (the
first stages take the extra layer) and ``one_f_one_b_order`` the 1F1B order of one stage, written
from the handout. ``chunks_of``, ``pipeline_stage`` and ``chunked_train_rank`` build a rank's
chunks of a model and train them with ``PipelineStage.train_step`` (any schedule, checkpointing).

Used by tests/test_pipeline.py, tests/test_pipeline_schedules.py and Part 5's hidden tests.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

import torch
from torch import nn

from cs336_systems.models import DeepMLP
from tests.harness import assert_close
from tests.harness.memory import storage_bytes


def stage_bounds(num_layers: int, p: int) -> list[tuple[int, int]]:
    """Oracle split: contiguous, sizes differ by at most one, earlier stages take the extra layer."""
    sizes = [num_layers // p + (s < num_layers % p) for s in range(p)]
    starts = [sum(sizes[:s]) for s in range(p)]
    return [(a, a + n) for a, n in zip(starts, sizes)]


def one_f_one_b_order(p: int, m: int, s: int) -> list[tuple[str, int]]:
    """1F1B, written as a window rather than as warm-up/steady/cool-down: the first min(p - s, m)
    forwards, then each further forward right after the backward that frees its slot."""
    window = min(p - s, m)
    order = [("F", i) for i in range(window)]
    for i in range(m):
        order.append(("B", i))
        if window + i < m:
            order.append(("F", window + i))
    return order


def build_model(kind: str, num_stages: int, seed: int = 0, dtype=torch.float64) -> nn.Sequential:
    """``deep``: DeepMLP + head, max(6, p + 2) layers of width 8, so stages get uneven layer counts
    (``deep-3d``: the same on (batch, 5, 8) inputs). ``widths``: 6 layers whose widths
    (6 -> 10 -> 3 -> 7 -> 4) and hence the activations between stages differ from stage to stage."""
    torch.manual_seed(seed)
    if kind.startswith("deep"):
        model = DeepMLP(max(5, num_stages + 1), 8, 16)
    elif num_stages > 6:
        raise ValueError(f"the {kind} model has 6 layers, fewer than {num_stages} stages")
    else:
        model = nn.Sequential(
            nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 3), nn.Tanh(), nn.Linear(3, 7), nn.Linear(7, 4)
        )
    return model.to(dtype)


def make_batches(kind: str, batch: int, steps: int, seed: int, dtype=torch.float64):
    """``steps`` seeded (x, y) batches of ``batch`` rows shaped for ``build_model(kind, ...)``."""
    d_in, d_out = (6, 4) if kind == "widths" else (8, 8)
    seq = (5,) if kind == "deep-3d" else ()  # a sequence dimension: activations (batch, 5, 8)
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(steps):
        x = torch.randn(batch, *seq, d_in, generator=gen, dtype=dtype)  # (batch, [seq,] d_in)
        batches.append((x, torch.randn(batch, *seq, d_out, generator=gen, dtype=dtype)))  # (batch, [seq,] d_out)
    return batches


def oracle_steps(kind, num_stages, batches, lr=0.1, accumulate=1):
    """One process, the whole model (built for ``num_stages``), the whole batch: (loss, {name: grad}) per step."""
    model = build_model(kind, num_stages)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    steps = []
    for x, y in batches:
        opt.zero_grad()
        for _ in range(accumulate):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
        steps.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
        opt.step()
    return steps


def assert_matches_oracle(results, expected, ranks, what: str) -> None:
    """``results[r]`` for r in ``ranks`` (one pipeline, in stage order) against the oracle's steps."""
    __tracebackhide__ = True
    p = len(ranks)
    for step, (loss, grads) in enumerate(expected):
        seen = {}
        for stage, r in enumerate(ranks):
            got_loss, got_grads = results[r][step]
            if stage == p - 1:
                assert isinstance(got_loss, float), (
                    f"rank {r} (last stage), step {step}, {what}: returned {got_loss!r:.60}, not the loss as a float"
                )
                assert_close(
                    torch.tensor(got_loss, dtype=loss.dtype), loss, what=f"rank {r}, step {step}, {what}, loss"
                )
            else:
                assert got_loss is None, f"rank {r} (stage {stage}), step {step}, {what}: returned {got_loss}, not None"
            for name, grad in got_grads.items():
                assert_close(grad, grads[name], what=f"rank {r} (stage {stage}), step {step}, {what}, {name}.grad")
                seen[name] = r
        assert sorted(seen) == sorted(grads), f"{what}: parameters not on any stage: {sorted(set(grads) - set(seen))}"


def chunks_of(model: nn.Sequential, p: int, v: int, rank: int) -> list[nn.Sequential]:
    """Rank ``rank``'s chunks of ``model`` cut into p·v: global chunks rank, rank + p, ... (the model's names)."""
    layers = list(model.named_children())
    return [nn.Sequential(OrderedDict(layers[a:b])) for a, b in stage_bounds(len(model), p * v)[rank::p]]


def pipeline_stage(ctx, P, model, v: int, probe: nn.Module | None = None):
    """In a rank: ``P.PipelineStage`` over this rank's ``v`` chunks of ``model`` (each behind ``probe``
    if given) with an MSE loss; returns (stage, chunks)."""
    p = ctx.world_size
    chunks = chunks_of(model.to(ctx.device), p, v, ctx.rank)
    if probe is not None:
        chunks = [nn.Sequential(probe, *chunk) for chunk in chunks]
    return P.PipelineStage(chunks if v > 1 else chunks[0], ctx.rank, p, nn.MSELoss()), chunks


def chunked_train_rank(ctx, run, m, batches, model_kind="deep"):
    """In a rank: SGD steps with ``run`` = (schedule, chunks per rank v, checkpoint) and ``m`` microbatches,
    one per batch of ``batches``; per step the (last stage's) loss and this rank's grads by the model's names."""
    P = ctx.load("pipeline")
    schedule, v, checkpoint = run
    pipe, chunks = pipeline_stage(ctx, P, build_model(model_kind, ctx.world_size * v), v)
    params = [q for c in chunks for q in c.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    steps = []
    first, last = ctx.rank == 0, ctx.rank == ctx.world_size - 1
    for x, y in batches:
        opt.zero_grad()
        loss = pipe.train_step(x.to(ctx.device) if first else None, y.to(ctx.device) if last else None, m,
                               schedule=schedule, checkpoint=checkpoint)  # fmt: skip
        steps.append((loss, {n: q.grad for c in chunks for n, q in c.named_parameters()}))
        opt.step()
    return steps


class ActivationProbe(nn.Module):
    """Identity layer whose output is a fresh tensor, saved by the next layer for its backward. It
    keeps weak references to its outputs and records the most bytes of them alive at once (the
    distinct storages, tests/harness/memory.py): the activations this rank's autograd graphs hold."""

    def __init__(self) -> None:
        super().__init__()
        self.refs, self.peak_count, self.peak_bytes = [], 0, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0
        self.refs = [r for r in self.refs if r() is not None] + [weakref.ref(y)]
        alive = [r().detach() for r in self.refs]  # detached: the same storages, no .grad to look at
        self.peak_count = max(self.peak_count, len(alive))
        self.peak_bytes = max(self.peak_bytes, storage_bytes(alive, skip=set()))
        return y
