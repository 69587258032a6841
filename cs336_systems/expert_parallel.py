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


# ---------------------------------------------------------------------------------------------
# ## Task 8.1: all_to_all_tokens (uneven all-to-all as an autograd function)
# ---------------------------------------------------------------------------------------------


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
    raise NotImplementedError("Task 8.1 (all_to_all_tokens): see handouts/08-expert-parallel.md §8.1")


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
        raise NotImplementedError("Task 8.2 (ExpertParallelMoE): see handouts/08-expert-parallel.md §8.2")

    @classmethod
    def from_dense(cls, moe: MoE, group: dist.ProcessGroup | None = None) -> ExpertParallelMoE:
        """This rank's part of a ``models.MoE``: a copy of its router and of experts first_expert ...
        first_expert + E/W - 1, with its top_k and capacity_factor, on its device and dtype (training
        the result never changes ``moe``). ``TypeError`` if ``moe`` is not a models.MoE."""
        raise NotImplementedError("Task 8.2 (ExpertParallelMoE): see handouts/08-expert-parallel.md §8.2")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., d_model), this rank's tokens -> (..., d_model); sets ``aux_loss`` (see the class)."""
        raise NotImplementedError("Task 8.2 (ExpertParallelMoE): see handouts/08-expert-parallel.md §8.2")


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
    raise NotImplementedError("Task 8.3 (EP x DP gradients): see handouts/08-expert-parallel.md §8.3")
