"""Hidden tests for part 3, FSDP (never shipped to students): FSDP over sub-groups, units in bfloat16, a tied
Embedding unit's layout under deferred sync.

    pytest tests/staff/hidden/test_fsdp_hidden.py --impl reference --world-sizes 4

The public sub-group test runs {0, 1} and {2, 3} on the deep model. Here world 4 runs two FSDP groups, {0, 2} and {1, 3}
(2-way data parallelism inside each group, as under HSDP): each group must train exactly like a
plain model on the mean of ITS two ranks' grads, which catches averages taken over the world
instead of the group (sharded and replicated parameters alike) and messages that leave the group.
"""

from __future__ import annotations

import pytest
import torch

from tests.harness import assert_close, run_ranks
from tests.oracles.fsdp import check_fsdp_groups, check_units_training, fsdp_group_train_rank, units_train_rank

GROUPS = [[0, 2], [1, 3]]  # the public test's groups are [[0, 1], [2, 3]]


@pytest.mark.task3_3
@pytest.mark.world_sizes(4)
@pytest.mark.parametrize("name", ["deep_mlp", "tied"])
def test_two_fsdp_groups_each_train_like_a_plain_model_on_their_own_batches(world_size, name):
    """Two FSDP groups of two ranks each train like a plain model on the mean of their own ranks' grads.

    SGD (its step is proportional to the grad, so an average over 4 ranks instead of 2 shows); the
    deep model has replicated biases and LayerNorms, the tied one a shared and a frozen weight."""
    outs = run_ranks(world_size, fsdp_group_train_rank, GROUPS, name, "sgd")
    check_fsdp_groups(outs, GROUPS, name, "sgd")


@pytest.mark.task3_4
@pytest.mark.world_sizes(4)
@pytest.mark.parametrize("name", ["deep_mlp", "tied"])
def test_two_fsdp_groups_with_units_and_deferred_sync_each_train_on_their_own_batches(world_size, name):
    """Two FSDP groups with units and 3 microbatches (sync on the last) each train like one process on theirs.

    Units' flat grads and the replicated grads summed over microbatches, then averaged over the group's two
    ranks, not the world's four (SGD); the tied model's unit (1350 elements) is not padded at group size 2:
    its layout is checked by the public test at w4, its averaging over the group here."""
    outs = run_ranks(world_size, units_train_rank, name, 3, None, GROUPS)
    check_units_training(outs, name, 3, groups=GROUPS)


@pytest.mark.task3_4
@pytest.mark.parametrize("num_microbatches", [1, 4])
def test_bf16_units_with_deferred_sync_match_one_process(world_size, num_microbatches):
    """compute_dtype=bfloat16 with units: the unit gathers in bf16, its flat grad and shard stay fp32, and
    training over 1 or 4 microbatches matches one process within bfloat16's tolerance."""
    outs = run_ranks(world_size, units_train_rank, "deep_mlp", num_microbatches, torch.bfloat16)
    check_units_training(outs, "deep_mlp", num_microbatches, rtol=1.6e-2, atol=1e-2)


class TiedEmbeddingUnit(torch.nn.Module):
    """A language model's shape in one unit: an Embedding whose table the head reuses (tied within the unit).

    Weights in ``modules()`` order, the tied one once: emb (5, 11), up (3, 11), down (11, 3): T = 121 = 11^2,
    so the flat buffer is padded at every world size from 2 to 8."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(5, 11)
        self.up = torch.nn.Linear(11, 3)
        self.down = torch.nn.Linear(3, 11, bias=False)
        self.head = torch.nn.Linear(11, 5, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.emb(tokens)
        return self.head(h + self.down(torch.tanh(self.up(h))))


TIED_STEPS, TIED_MICROBATCHES, TIED_LR = 2, 3, 0.1


def tied_batch(step: int, index: int):
    gen = torch.Generator().manual_seed(4242 + 100 * step + index)
    return torch.randint(0, 5, (2, 3), generator=gen), torch.randn(2, 3, 5, generator=gen)


def tied_unit_rank(ctx):
    """TiedEmbeddingUnit as one unit, 3 microbatches (sync on the last), SGD: flat_shard as built and after
    each step, and its grad before each step."""
    fsdp_mod = ctx.load("fsdp")
    torch.manual_seed(0)
    model = TiedEmbeddingUnit().to(ctx.device)
    fsdp = fsdp_mod.FSDP(model, units=[model])
    opt = torch.optim.SGD(fsdp.parameters(), lr=TIED_LR)
    got = [model.flat_shard.detach().clone()]
    for step in range(TIED_STEPS):
        for m in range(TIED_MICROBATCHES):
            fsdp.set_requires_gradient_sync(m == TIED_MICROBATCHES - 1)
            x, y = (t.to(ctx.device) for t in tied_batch(step, ctx.rank * TIED_MICROBATCHES + m))
            (torch.nn.functional.mse_loss(fsdp(x), y) / TIED_MICROBATCHES).backward()
        got.append(model.flat_shard.grad.detach().clone())
        opt.step()
        opt.zero_grad()
        got.append(model.flat_shard.detach().clone())
    return got


@pytest.mark.task3_4
def test_a_tied_embedding_unit_keeps_its_layout_and_zero_padding_under_deferred_sync(world_size):
    """An Embedding tied to the head inside one unit: flat_shard over ranks is [emb, up, down] then zeros, as
    built, as its grad summed over 3 microbatches and after each SGD step.

    T = 121 (the tied table once) is padded at every world size from 2 to 8; what deferred sync sums locally
    must keep zeros in the padding too."""
    torch.manual_seed(0)
    model = TiedEmbeddingUnit()
    weights = [model.emb.weight, model.up.weight, model.down.weight]
    total = sum(w.numel() for w in weights)
    chunk = -(-total // world_size)
    opt = torch.optim.SGD(model.parameters(), lr=TIED_LR)

    def flat(tensors):
        return torch.cat([t.detach().reshape(-1) for t in tensors])

    expected = [("as built", flat(weights))]
    for step in range(TIED_STEPS):
        opt.zero_grad()
        for rank in range(world_size):
            for m in range(TIED_MICROBATCHES):
                x, y = tied_batch(step, rank * TIED_MICROBATCHES + m)
                (torch.nn.functional.mse_loss(model(x), y) / TIED_MICROBATCHES / world_size).backward()
        expected.append((f"grad of step {step}", flat(w.grad for w in weights)))
        opt.step()
        expected.append((f"after step {step}", flat(weights)))
    outs = run_ranks(world_size, tied_unit_rank)
    for rank, out in enumerate(outs):
        assert out[0].shape == (chunk,), (
            f"rank {rank}: flat_shard has shape {tuple(out[0].shape)}, expected ({chunk},): T = {total} (the tied "
            f"table once) at world size {world_size}"
        )
    for i, (when, want) in enumerate(expected):
        have = torch.cat([out[i] for out in outs])
        assert_close(have[:total], want, what=f"flat_shard over ranks, {when}, elements [0, {total})")
        assert torch.equal(have[total:], torch.zeros_like(have[total:])), (
            f"flat_shard over ranks, {when}: the padding [{total}, {world_size * chunk}) holds "
            f"{have[total:].tolist()}, expected zeros"
        )
