"""The attention oracle of Part 9 and the ring-attention rank functions.

    from tests.oracles.attention import attention_oracle, backward_rank, cut_sequence, forward_rank, rank_blocks
    want = attention_oracle(q, k, v, dout, causal=True)       # whole sequence, float64, in the parent
    blocks = rank_blocks(world_size, zigzag, q, k, v, dout)   # blocks[r]: rank r's pieces
    outs = run_ranks(world_size, backward_rank, [(blocks, True, zigzag)])

``attention_oracle`` is torch's ``scaled_dot_product_attention`` on the whole sequence in float64
(out, log-sum-exp, dq, dk, dv); ``cut_sequence`` and ``rank_blocks`` are the parent's own cut of a
sequence into the blocks each rank holds, contiguous or zigzag (so a ring test does not depend on
the student's ``shard_sequence``). ``forward_rank`` and ``backward_rank`` run ring attention on a
rank's blocks under the communication recorder and a ``MatmulLog``.

Used by tests/test_context_parallel.py and Part 9's hidden tests.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tests.harness.recorder import CommRecorder
from tests.oracles.matmul_log import MatmulLog


def cut_sequence(x: torch.Tensor, world_size: int, zigzag: bool, dim: int = 2) -> list[torch.Tensor]:
    """The parent's own cut of a whole-sequence tensor: what each rank holds (the handout's picture)."""
    if not zigzag:
        return list(x.chunk(world_size, dim))
    chunks = x.chunk(2 * world_size, dim)
    return [torch.cat([chunks[r], chunks[2 * world_size - 1 - r]], dim) for r in range(world_size)]


def attention_oracle(q, k, v, dout, causal: bool) -> dict[str, torch.Tensor]:
    """Whole-sequence attention in float64: out, lse, and the gradients of q, k, v for ``dout``."""
    q, k, v = (t.double().detach().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out.backward(dout.double())
    scores = (q @ k.transpose(-2, -1)).detach() / math.sqrt(q.shape[-1])
    if causal:
        s = q.shape[2]
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return {"out": out.detach(), "lse": torch.logsumexp(scores, -1), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def rank_blocks(world_size: int, zigzag: bool, *tensors) -> list[tuple[torch.Tensor, ...]]:
    """blocks[rank] = that rank's piece of each tensor."""
    return list(zip(*(cut_sequence(t, world_size, zigzag) for t in tensors)))


def forward_rank(ctx, cases):
    """cases: list of (blocks, causal, zigzag); returns [(out, lse, comm events, matmul log)] per case."""
    cp = ctx.load("context_parallel")
    results = []
    for blocks, causal, zigzag in cases:
        q, k, v = (t.to(ctx.device) for t in blocks[ctx.rank][:3])
        with CommRecorder() as rec, MatmulLog() as log:
            out, lse = cp.ring_attention_forward(q, k, v, causal=causal, zigzag=zigzag)
        results.append((out, lse, rec.events, log.events))
    return results


def backward_rank(ctx, cases):
    """cases: list of (blocks, causal, zigzag); returns [(out, dq, dk, dv, comm events, matmul log)]."""
    cp = ctx.load("context_parallel")
    results = []
    for blocks, causal, zigzag in cases:
        q, k, v, dout = (t.to(ctx.device) for t in blocks[ctx.rank])
        q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
        with CommRecorder() as rec, MatmulLog() as log:
            out = cp.ring_attention(q, k, v, causal=causal, zigzag=zigzag)
            # dLoss/dout = dout; a scalar loss, because out.backward(dout) makes torch import sympy (2 s)
            (out * dout).sum().backward()
        results.append((out.detach(), q.grad, k.grad, v.grad, rec.events, log.events))
    return results
