"""The Part 3 FSDP oracle: the test model, its batches and one process's AdamW/SGD steps.

    from tests.oracles.fsdp import FSDP_OPTIMIZERS, FSDP_STEPS, fsdp_batch, fsdp_oracle, make_fsdp_model

``make_fsdp_model`` builds the seeded DeepMLP the FSDP tests shard, ``fsdp_batch`` the seeded batch
of a step (and rank), ``fsdp_oracle`` the losses and parameters of the whole model trained in one
process on the whole batch with one of ``FSDP_OPTIMIZERS`` for ``FSDP_STEPS`` steps.

Used by tests/test_fsdp.py and its hidden counterpart.
"""

from __future__ import annotations

import torch

from cs336_systems.models import DeepMLP

D_MODEL, D_FF, BATCH = 16, 32, 4  # as in tests/test_sharded_optimizer.py


FSDP_STEPS, FSDP_LR = 3, 1e-3


# Adam is blind to the scale of the gradient (a sum instead of a mean steps the same), so SGD, which
# is not, also runs: together they check both the averaging and the optimizer on shards.
FSDP_OPTIMIZERS = {"adamw": (torch.optim.AdamW, {"lr": FSDP_LR}), "sgd": (torch.optim.SGD, {"lr": 0.05})}


def make_fsdp_model(name: str) -> torch.nn.Module:
    """deep_mlp: residual blocks and LayerNorms; tied: a weight used by two Linears plus a frozen
    parameter; embedding: an Embedding feeding a Linear (indices in, no grad for the input)."""
    from cs336_systems.models import ToyModelWithTiedWeights

    torch.manual_seed(0)
    if name == "deep_mlp":
        return DeepMLP(2, D_MODEL, D_FF)
    if name == "tied":
        return ToyModelWithTiedWeights(10, 5)
    return torch.nn.Sequential(torch.nn.Embedding(13, D_MODEL), torch.nn.Linear(D_MODEL, D_MODEL))


def fsdp_batch(name: str, step: int, rank: int):
    gen = torch.Generator().manual_seed(7000 + 100 * step + rank)
    if name == "embedding":
        return torch.randint(0, 13, (BATCH, 3), generator=gen), torch.randn(BATCH, 3, D_MODEL, generator=gen)
    d_in, d_out = (10, 5) if name == "tied" else (D_MODEL, D_MODEL)
    return torch.randn(BATCH, d_in, generator=gen), torch.randn(BATCH, d_out, generator=gen)


def fsdp_oracle(name: str, world_size: int, opt_name: str, ranks: list[int] | None = None):
    """Per step: each rank's loss before the step, and the state dict after it (plain model, the optimizer
    on the mean of the ranks' grads). ``ranks``: whose batches make the step (default all of them)."""
    model = make_fsdp_model(name)
    cls, kwargs = FSDP_OPTIMIZERS[opt_name]
    opt = cls([p for p in model.parameters() if p.requires_grad], **kwargs)
    history = []
    for step in range(FSDP_STEPS):
        grads = {id(p): torch.zeros_like(p) for p in model.parameters()}
        losses = []
        for rank in ranks if ranks is not None else range(world_size):
            model.zero_grad()
            x, y = fsdp_batch(name, step, rank)
            losses.append(torch.nn.functional.mse_loss(model(x), y))
            losses[-1].backward()
            for p in model.parameters():
                if p.grad is not None:
                    grads[id(p)] += p.grad / world_size
        for p in model.parameters():
            p.grad = grads[id(p)] if p.requires_grad else None
        opt.step()
        history.append(
            {
                "losses": [loss.detach() for loss in losses],
                "state": {k: v.clone() for k, v in model.state_dict().items()},
            }
        )
    return history


def fsdp_group_train_rank(ctx, groups: list[list[int]], name: str, opt_name: str):
    """FSDP over this rank's group of ``groups`` (every rank makes every group, in order); per step the
    loss and the gathered full state dict."""
    fsdp_mod = ctx.load("fsdp")
    made = [torch.distributed.new_group(g) for g in groups]
    group = next(pg for pg, g in zip(made, groups) if ctx.rank in g)
    fsdp = fsdp_mod.FSDP(make_fsdp_model(name).to(ctx.device), group=group)
    cls, kwargs = FSDP_OPTIMIZERS[opt_name]
    opt = cls(fsdp.parameters(), **kwargs)
    history = []
    for step in range(FSDP_STEPS):
        x, y = (t.to(ctx.device) for t in fsdp_batch(name, step, ctx.rank))
        loss = torch.nn.functional.mse_loss(fsdp(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        history.append({"loss": loss.detach(), "state": fsdp.gather_full_params()})
    return history


def check_fsdp_groups(outs, groups: list[list[int]], name: str, opt_name: str) -> None:
    """Each group trained like a plain model on the mean of its own ranks' grads (``fsdp_oracle``)."""
    from tests.harness import assert_close

    for members in groups:
        for step, expected in enumerate(fsdp_oracle(name, len(members), opt_name, ranks=members)):
            for i, r in enumerate(members):
                where = f"rank {r} (FSDP group {members}), {name}, step {step}"
                assert_close(outs[r][step]["loss"], expected["losses"][i], what=f"{where}: loss")
                for key, value in expected["state"].items():
                    assert_close(outs[r][step]["state"][key], value, what=f"{where}: {key} after the step")


# -- Task 3.4: units and deferred gradient sync -------------------------------------------------------

# name -> the units FSDP is given (submodules of make_fsdp_model(name)); the tied model's one unit holds
# 1350 weight elements, so its flat buffer is padded at world sizes 4, 7 and 8.
UNITS = {
    "deep_mlp": lambda model: [model[0], model[1]],  # the two residual blocks; the head stays per layer
    "tied": lambda model: [model],  # the tied weight inside one unit; the frozen parameter stays out
    "embedding": lambda model: [model],  # Embedding and Linear weights in one flat buffer
}


def microbatch_oracle(name: str, ranks: list[int], num_microbatches: int):
    """Per step: each of ``ranks``' loss (mean over its microbatches) and the state dict after one SGD step on
    the mean grad over their microbatches; rank r's microbatch m is ``fsdp_batch(name, step, r·M + m)``."""
    world_size = len(ranks)
    model = make_fsdp_model(name)
    cls, kwargs = FSDP_OPTIMIZERS["sgd"]  # SGD: a grad summed over microbatches instead of averaged shows
    opt = cls([p for p in model.parameters() if p.requires_grad], **kwargs)
    history = []
    for step in range(FSDP_STEPS):
        opt.zero_grad()
        losses = []
        for rank in ranks:
            loss = 0
            for m in range(num_microbatches):
                x, y = fsdp_batch(name, step, rank * num_microbatches + m)
                part = torch.nn.functional.mse_loss(model(x), y) / num_microbatches
                (part / world_size).backward()
                loss += part.detach()
            losses.append(loss)
        opt.step()
        history.append({"losses": losses, "state": {k: v.clone() for k, v in model.state_dict().items()}})
    return history


def units_train_rank(ctx, name: str, num_microbatches: int, compute_dtype=None, groups=None):
    """FSDP with ``UNITS[name]``, SGD, gradient sync off for all but the last microbatch of each step; per step
    the loss (mean over microbatches) and the gathered full state dict. ``groups``: as fsdp_group_train_rank."""
    fsdp_mod = ctx.load("fsdp")
    group = None
    if groups is not None:
        made = [torch.distributed.new_group(g) for g in groups]
        group = next(pg for pg, g in zip(made, groups) if ctx.rank in g)
    model = make_fsdp_model(name).to(ctx.device)
    fsdp = fsdp_mod.FSDP(model, units=UNITS[name](model), compute_dtype=compute_dtype, group=group)
    cls, kwargs = FSDP_OPTIMIZERS["sgd"]
    opt = cls(fsdp.parameters(), **kwargs)
    history = []
    for step in range(FSDP_STEPS):
        loss = 0
        for m in range(num_microbatches):
            fsdp.set_requires_gradient_sync(m == num_microbatches - 1)
            x, y = (t.to(ctx.device) for t in fsdp_batch(name, step, ctx.rank * num_microbatches + m))
            part = torch.nn.functional.mse_loss(fsdp(x), y) / num_microbatches
            part.backward()
            loss += part.detach()
        opt.step()
        opt.zero_grad()
        history.append({"loss": loss, "state": fsdp.gather_full_params()})
    return history


def check_units_training(outs, name: str, num_microbatches: int, groups=None, **tol) -> None:
    """Every rank (of each group) matches ``microbatch_oracle`` over its group, every step, loss and state."""
    from tests.harness import assert_close

    for members in groups or [list(range(len(outs)))]:
        oracle = microbatch_oracle(name, members, num_microbatches)
        for step, expected in enumerate(oracle):
            for i, r in enumerate(members):
                where = f"rank {r} of {members}, {name}, {num_microbatches} microbatches, step {step}"
                assert list(outs[r][step]["state"]) == list(expected["state"]), (
                    f"{where}: gather_full_params() keys {list(outs[r][step]['state'])} != the module's state_dict "
                    f"keys before wrapping {list(expected['state'])}"
                )
                assert_close(outs[r][step]["loss"], expected["losses"][i], what=f"{where}: loss", **tol)
                for key, value in expected["state"].items():
                    assert_close(outs[r][step]["state"][key], value, what=f"{where}: {key} after the step", **tol)
