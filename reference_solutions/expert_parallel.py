"""Expert parallelism: a mixture-of-experts layer whose tokens travel to their experts by all-to-all.

Your task (handouts/08-expert-parallel.md): write the uneven all-to-all as an autograd function
(8.1), the expert-parallel MoE layer that reproduces ``models.MoE`` exactly, dropped tokens
included (8.2), and the gradient averaging of an EP x DP grid (8.3). Use the built-in collectives
of torch.distributed (``all_to_all_single``, ``all_reduce`` and, for the counts, ``all_gather`` into
a list of tensors or ``all_gather_single``) over the group you are given (None = WORLD); with one
rank you may skip communicating. ``all_gather_single`` is torch 2.13's name for
``all_gather_into_tensor``, which there raises a FutureWarning on every rank; older torches have only
the old name, so ``getattr(dist, "all_gather_single", dist.all_gather_into_tensor)`` works on all of
them, on gloo and NCCL alike. Its output must be the W inputs concatenated on dim 0, ``(W·E, k)``
for ``(E, k)`` counts: gloo rejects a stacked ``(W, E, k)`` or a flat output, which NCCL accepts.

The E experts of ``models.MoE`` are split evenly over the W ranks of ``group`` (the EP group):
rank q holds experts q*E/W ... (q+1)*E/W - 1; the router is replicated. Every rank routes its own
tokens, and a token reaches its expert's rank and comes back in two all-to-alls (GShard, Lepikhin et
al. 2020; the layout of Megatron-Core's ``MoEAlltoAllTokenDispatcher``):

    tokens (n, d) --route--> assignments sorted by (expert, choice, token), over-capacity ones dropped
                  --counts all-gather--> every rank's (E, k) counts, (W·E, k): splits and capacity queues
                  --dispatch all-to-all--> rows for my experts, (m, d) --local experts--> (m, d)
                  --combine all-to-all--> back in my sorted order --x weights, index_add--> (n, d)

Both all-to-alls are the same autograd function: its backward is the all-to-all with the splits
swapped (what went from i to j comes back from j to i). Per forward a rank moves about n*k*d values
out and n*k*d back (dispatch, combine), and the same again in backward.

EP x DP: with ``dp_group`` the EP groups are replicas of each other (each on its own tokens);
``all_reduce_moe_gradients`` averages the router over every rank and each expert over its replicas.

Bad input raises ValueError/TypeError naming the argument, on every rank, before any message.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from cs336_systems.models import MLP, MoE, expert_capacity  # noqa: F401 (expert_capacity: for your forward)

__all__ = ["all_to_all_tokens", "ExpertParallelMoE", "all_reduce_moe_gradients"]

# BEGIN SOLUTION
# The non-deprecated name where this torch has it (2.13 warns about the older one).
_all_gather_tensor = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)


def _world(group) -> int:
    """Ranks in ``group``; 1 without a process group, so the layer also runs in one process."""
    return dist.get_world_size(group) if dist.is_initialized() else 1


def _rank(group) -> int:
    return dist.get_rank(group) if dist.is_initialized() else 0


def _check_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _check_splits(splits, name: str, world: int) -> list[int]:
    if not isinstance(splits, (list, tuple)) or len(splits) != world:
        raise ValueError(f"{name} must be a list of {world} ints (one per rank of the group), got {splits!r}")
    for s in splits:
        _check_int(s, name, minimum=0)
    return list(splits)


# END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 8.1: all_to_all_tokens (uneven all-to-all as an autograd function)
# ---------------------------------------------------------------------------------------------


# BEGIN SOLUTION
def _exchange(x: torch.Tensor, output_splits: list[int], input_splits: list[int], group) -> torch.Tensor:
    out = x.new_empty((sum(output_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), output_splits, input_splits, group=group)
    return out


class _AllToAll(torch.autograd.Function):
    """Forward: rows input_splits[j] go to rank j. Backward: the same exchange with the splits swapped,
    since the gradient of a row must return to the rank the row came from (a permutation's adjoint
    is its inverse)."""

    @staticmethod
    def forward(ctx, x, output_splits, input_splits, group):
        ctx.splits, ctx.group = (output_splits, input_splits), group
        return _exchange(x, output_splits, input_splits, group)

    @staticmethod
    def backward(ctx, grad):
        output_splits, input_splits = ctx.splits
        return _exchange(grad, input_splits, output_splits, ctx.group), None, None, None


# END SOLUTION


def all_to_all_tokens(x: torch.Tensor, output_splits: list[int], input_splits: list[int],
                      group: dist.ProcessGroup | None = None) -> torch.Tensor:  # fmt: skip
    """Exchange rows of x between the W ranks of ``group``, differentiably.

    x (sum(input_splits), *rest) is cut on dim 0 into W consecutive chunks; chunk j
    (``input_splits[j]`` rows) goes to group rank j. The result (sum(output_splits), *rest) is the
    concatenation, in group-rank order, of the chunks every rank i sent here (``output_splits[i]``
    rows from rank i; the caller knows these sizes, e.g. from a counts exchange). Forward makes one
    ``dist.all_to_all_single``; backward makes one too, with the two split lists swapped, sending
    each row's gradient back to the rank the row came from. ``x`` is not modified.

    ``ValueError`` (before communicating) if a split list is not W non-negative ints or if
    sum(input_splits) != x.shape[0]; ``TypeError`` if x is not a tensor. At W = 1 returns x.
    """
    # BEGIN SOLUTION: Task 8.1 (all_to_all_tokens)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    world = _world(group)
    output_splits = _check_splits(output_splits, "output_splits", world)
    input_splits = _check_splits(input_splits, "input_splits", world)
    if x.dim() == 0 or sum(input_splits) != x.shape[0]:
        raise ValueError(f"input_splits must sum to x.shape[0] ({tuple(x.shape)}), got {input_splits}")
    if world == 1:
        return x
    return _AllToAll.apply(x, output_splits, input_splits, group)
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 8.2: ExpertParallelMoE
# ---------------------------------------------------------------------------------------------


class ExpertParallelMoE(nn.Module):
    """``models.MoE`` with its experts split over the W ranks of ``group`` (expert parallelism).

    Parameters on group rank q: ``router``, an ``nn.Linear(d_model, num_experts, bias=False)``,
    replicated; ``experts``, an ``nn.ModuleList`` of E/W ``MLP(d_model, d_ff)``: ``experts[i]`` is
    global expert ``first_expert + i`` with ``first_expert = q * E/W`` (expert e lives on group rank
    e // (E/W)). ``num_experts`` must divide by W (``ValueError`` naming num_experts); ``top_k`` must
    be in [1, num_experts] and ``capacity_factor`` None or > 0 (``ValueError`` naming them). A fresh
    layer draws its router weight as ``nn.Linear`` would, uniform in [-1/sqrt(d_model), 1/sqrt(d_model)],
    but from ``torch.Generator().manual_seed(seed)`` (so it is identical on every rank without
    communication), and its experts from the default RNG; ``from_dense`` copies a MoE.

    Forward, x (..., d_model) -> (..., d_model): this rank's tokens only (n of them, row-major). The
    result equals ``models.MoE`` run on the concatenation of every group rank's tokens, in group-rank
    order, restricted to this rank's rows: same routing (softmax, top-k, weights renormalised when
    k > 1), same capacity C = ``expert_capacity(N, E, k, capacity_factor)`` with N the tokens of the
    whole group, and the same drop rule (each expert's queue ordered choice-major, then by global
    token order: rank 0's tokens first), dropped assignments contributing zero. Communication, in
    this order: one all-gather of every rank's per-(expert, choice) assignment counts (int64, (E, k)
    per rank, gathered as W blocks concatenated on dim 0, (W·E, k), the one layout gloo's
    ``all_gather_single`` accepts besides a list of W tensors through ``all_gather``; the splits and the
    capacity queues follow from it), then one ``all_to_all_tokens`` that
    dispatches the kept assignments' rows to their experts' ranks, then, after the local experts ran,
    one that brings the results back (combine); the weights are applied on the token's own rank.
    Backward makes exactly the two reverse all-to-alls (combine's, then dispatch's). Never an
    all-gather of tokens. ``aux_loss`` is ``models.MoE``'s load-balancing loss of *this rank's*
    tokens (as Switch computes it per device; no communication).
    """

    def __init__(self, d_model: int, d_ff: int, num_experts: int, *, top_k: int = 1,
                 capacity_factor: float | None = None, group: dist.ProcessGroup | None = None,
                 seed: int = 0) -> None:  # fmt: skip
        super().__init__()
        # BEGIN SOLUTION: Task 8.2 (ExpertParallelMoE)
        world = _world(group)
        _check_int(d_model, "d_model")
        _check_int(d_ff, "d_ff")
        _check_int(num_experts, "num_experts")
        if num_experts % world != 0:
            raise ValueError(f"num_experts ({num_experts}) must be divisible by the expert-parallel size ({world})")
        _check_int(top_k, "top_k")
        if top_k > num_experts:
            raise ValueError(f"top_k ({top_k}) must be <= num_experts ({num_experts})")
        if capacity_factor is not None and (isinstance(capacity_factor, bool) or not capacity_factor > 0):
            raise ValueError(f"capacity_factor must be None or > 0, got {capacity_factor!r}")
        self.num_experts, self.top_k, self.capacity_factor, self.group = num_experts, top_k, capacity_factor, group
        self.num_local_experts = num_experts // world
        self.first_expert = _rank(group) * self.num_local_experts
        self.router = nn.Linear(d_model, num_experts, bias=False)
        bound = d_model**-0.5  # nn.Linear's U(-1/sqrt(fan_in), 1/sqrt(fan_in)), from a shared seed
        with torch.no_grad():
            self.router.weight.uniform_(-bound, bound, generator=torch.Generator().manual_seed(seed))
        self.experts = nn.ModuleList([MLP(d_model, d_ff) for _ in range(self.num_local_experts)])
        self.aux_loss: torch.Tensor | None = None
        # END SOLUTION

    @classmethod
    def from_dense(cls, moe: MoE, group: dist.ProcessGroup | None = None) -> ExpertParallelMoE:
        """This rank's part of a ``models.MoE``: a copy of its router and of experts first_expert ...
        first_expert + E/W - 1, with its top_k and capacity_factor, on its device and dtype (training
        the result never changes ``moe``). ``TypeError`` if ``moe`` is not a models.MoE."""
        # BEGIN SOLUTION: Task 8.2 (ExpertParallelMoE)
        if not isinstance(moe, MoE):
            raise TypeError(f"moe must be a cs336_systems.models.MoE, got {type(moe).__name__}")
        d_ff, d_model = moe.experts[0].fc1.weight.shape
        layer = cls(d_model, d_ff, moe.num_experts, top_k=moe.top_k, capacity_factor=moe.capacity_factor,
                    group=group).to(device=moe.router.weight.device, dtype=moe.router.weight.dtype)  # fmt: skip
        layer.router.load_state_dict(moe.router.state_dict())
        for i, expert in enumerate(layer.experts):
            expert.load_state_dict(moe.experts[layer.first_expert + i].state_dict())
        return layer
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., d_model), this rank's tokens -> (..., d_model); sets ``aux_loss`` (see the class)."""
        # BEGIN SOLUTION: Task 8.2 (ExpertParallelMoE)
        tokens = x.reshape(-1, x.shape[-1])  # (n, d)
        n, E, k, world = tokens.shape[0], self.num_experts, self.top_k, _world(self.group)
        probs = self.router(tokens).softmax(dim=-1)  # (n, E)
        weights, chosen = probs.topk(k, dim=-1)  # (n, k)
        if k > 1:
            weights = weights / weights.sum(dim=-1, keepdim=True)

        # Assignment a = c*n + t is token t's choice c. A stable sort by expert keeps, inside each
        # expert, the choice-major token order that the capacity queue is defined in.
        queue = chosen.t().reshape(-1)  # (k*n,)
        order = torch.argsort(queue, stable=True)  # (k*n,): sorted by (expert, choice, token)
        group_id = queue[order] * k + order // n  # (expert, choice) of each sorted assignment
        counts = torch.bincount(group_id, minlength=E * k)  # (E*k,) this rank's assignments per (e, c)
        fraction = counts.view(E, k).sum(dim=1).to(probs.dtype) / (n * k)  # f_i (E,)
        self.aux_loss = E * (fraction * probs.mean(dim=0)).sum()

        all_counts = self._gather_counts(counts)  # (W, E*k), every rank's counts
        kept = self._kept_counts(all_counts)  # (W, E*k): how many of each rank's (e, c) survive capacity
        start = torch.cumsum(counts, 0) - counts  # first sorted index of each (e, c) group
        position = torch.arange(k * n, device=x.device) - start[group_id]  # rank inside my (e, c) group
        keep = position < kept[_rank(self.group)][group_id]  # (k*n,) over sorted assignments
        sent = order[keep]  # kept assignments, sorted by expert (so by destination rank)

        # Rows per destination rank (its E/W experts) and per source rank (my E/W experts).
        per_rank = kept.view(world, world, self.num_local_experts * k).sum(dim=2)  # (src, dst)
        input_splits = per_rank[_rank(self.group)].tolist()
        output_splits = per_rank[:, _rank(self.group)].tolist()

        received = all_to_all_tokens(tokens[sent % n], output_splits, input_splits, self.group)  # (m, d)
        processed = self._run_local_experts(received, kept)  # (m, d), same row order
        back = all_to_all_tokens(processed, input_splits, output_splits, self.group)  # (len(sent), d)

        w = weights.t().reshape(-1)[sent]  # (len(sent),) weight of each kept assignment
        out = torch.zeros_like(tokens).index_add(0, sent % n, w[:, None] * back)
        return out.view(x.shape)
        # END SOLUTION

    # BEGIN SOLUTION
    def _gather_counts(self, counts: torch.Tensor) -> torch.Tensor:
        world = _world(self.group)
        if world == 1:
            return counts[None]
        out = counts.new_empty(world * counts.numel())
        _all_gather_tensor(out, counts, group=self.group)
        return out.view(world, -1)

    def _kept_counts(self, all_counts: torch.Tensor) -> torch.Tensor:
        """(W, E*k) kept assignments per source rank and (expert, choice): each expert's queue is
        choice-major, then source rank, then token, and keeps its first C entries."""
        if self.capacity_factor is None:
            return all_counts
        world, E, k = all_counts.shape[0], self.num_experts, self.top_k
        c = all_counts.view(world, E, k)
        capacity = expert_capacity(int(all_counts.sum()) // k, E, k, self.capacity_factor)
        per_choice = c.sum(dim=0)  # (E, k)
        ahead = (torch.cumsum(per_choice, 1) - per_choice)[None] + (torch.cumsum(c, 0) - c)  # queued before
        return (capacity - ahead).clamp(min=0).minimum(c).view(world, E * k)

    def _run_local_experts(self, received: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
        """Rows arrive by source rank, then (local expert, choice): regroup them by local expert, run
        each expert once on its rows, and put the results back in the arrival order."""
        world, L, k = kept.shape[0], self.num_local_experts, self.top_k
        mine = kept.view(world, world, L, k)[:, _rank(self.group)]  # (src, L, k)
        expert_of_row = torch.arange(L, device=received.device).repeat_interleave(k).repeat(world)
        expert_of_row = expert_of_row.repeat_interleave(mine.reshape(-1))  # (m,)
        by_expert = torch.argsort(expert_of_row, stable=True)
        sizes = torch.bincount(expert_of_row, minlength=L).tolist()
        chunks = received[by_expert].split(sizes)
        outputs = torch.cat([expert(chunk) for expert, chunk in zip(self.experts, chunks)])
        return outputs[torch.argsort(by_expert)]  # inverse permutation: arrival order

    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 8.3: EP x DP gradient averaging
# ---------------------------------------------------------------------------------------------


def all_reduce_moe_gradients(moe: ExpertParallelMoE, dp_group: dist.ProcessGroup | None = None) -> None:
    """After ``loss.backward()`` on every rank, make every gradient of ``moe`` the gradient of the
    mean of all ranks' losses (each rank's loss being over its own tokens), in place.

    The ranks form an EP x DP grid: ``moe.group`` (size W_ep) holds one copy of every expert, and
    ``dp_group`` (size W_dp, None = no data parallelism) joins the ranks that hold the same experts
    in different EP groups. After backward, expert e's gradient already sums the loss terms of every
    token its EP group routed to it, and the router's gradient only this rank's terms. So:
    one all-reduce (sum) of the router's gradients over ``moe.group``, then one all-reduce (sum) over
    ``dp_group`` of all of this rank's gradients flattened into one buffer (router and experts), then
    every gradient is divided by W_ep * W_dp. A parameter whose ``.grad`` is None (an expert that got
    no token) counts as zeros. No communication over a group of size 1.

    ``TypeError`` naming ``moe`` if it is not an ``ExpertParallelMoE`` (a dense ``models.MoE``
    included: its experts are not split, so there is nothing to sync), before any communication.
    """
    # BEGIN SOLUTION: Task 8.3 (EP x DP gradients)
    if not isinstance(moe, ExpertParallelMoE):
        raise TypeError(f"moe must be an ExpertParallelMoE, got {type(moe).__name__}")
    params = list(moe.parameters())
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    ep, dp = _world(moe.group), (_world(dp_group) if dp_group is not None else 1)
    if ep > 1:
        dist.all_reduce(moe.router.weight.grad, group=moe.group)
    if dp > 1:
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat, group=dp_group)
        for p, g in zip(params, flat.split([p.numel() for p in params])):
            p.grad.copy_(g.view_as(p))
    for p in params:
        p.grad.div_(ep * dp)
    # END SOLUTION
