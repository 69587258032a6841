"""Context parallelism: ring attention over a sequence split across ranks (Liu et al., 2023).

Every rank of ``group`` holds one block of the sequence: the queries, keys and values of the same
tokens. Attention needs every key and value, so the key/value blocks travel around the ring: at each
of N steps a rank attends its queries to the block it holds while that block is already on its way to
the next rank and the next block on its way from the previous one; the partial results are merged
with the online-softmax (log-sum-exp) rule. Backward runs the same ring, and the gradients of each
key/value block travel with it until they arrive back at the rank that owns the block.

    q, k, v (batch, heads, s/N, d) on each rank --N-1 key/value hops--> out (batch, heads, s/N, dv)

Layouts: contiguous (rank r holds tokens [r·s/N, (r+1)·s/N)) or zigzag (the sequence cut into 2N
chunks, rank r holds chunks r and 2N-1-r, so that causal attention costs every rank the same).

Bytes each rank sends per call, with K and V the bytes of its key and value blocks:
    forward   (N-1)·(K+V)                      the key/value hops
    backward  (N-1)·(K+V) + N·(K+V)            the key/value hops again, and their gradients' hops
                                               (float32 gradients for 16-bit inputs: 2x those bytes)
Only neighbours talk (send to group rank r+1, receive from r-1), with isend/irecv in one
``batch_isend_irecv`` per hop, posted before the compute that it hides behind.

Your task (handouts/09-context-parallel.md): the two layouts (9.1), the forward ring with the
online-softmax merge (9.2) and the backward ring (9.3). ``ring_attention`` at the bottom is given: it
joins your forward and backward into one autograd node. Use ``dist.batch_isend_irecv`` with
``dist.P2POp(dist.isend/irecv, ...)`` to the neighbours only (unshard_sequence may use
``dist.all_gather``). Bad input raises ValueError/TypeError naming the argument, on every rank, before
any message.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["shard_sequence", "unshard_sequence", "ring_attention_forward", "ring_attention_backward", "ring_attention"]


# ---------------------------------------------------------------------------------------------
# ## Task 9.1: shard_sequence / unshard_sequence (contiguous and zigzag layouts)
# ---------------------------------------------------------------------------------------------


def shard_sequence(
    x: torch.Tensor, group: dist.ProcessGroup | None = None, *, zigzag: bool = False, dim: int = -2
) -> torch.Tensor:
    """This rank's block of the whole-sequence tensor ``x`` (the same on every rank), along ``dim``.

    Contiguous (``zigzag=False``): the sequence of length s is cut into N blocks of s/N and group
    rank r gets block r. Zigzag: it is cut into 2N chunks of s/(2N) and rank r gets chunk r followed
    by chunk 2N-1-r (rank 0 the first and the last chunk), which balances causal attention.
    Shapes: (..., s, ...) -> (..., s/N, ...). No communication; returns a new contiguous tensor (not
    a view of ``x``). s must divide by N (by 2N for zigzag): ``ValueError`` naming ``x`` otherwise.
    """
    raise NotImplementedError("Task 9.1 (shard_sequence): see handouts/09-context-parallel.md §9.1")


def unshard_sequence(
    x: torch.Tensor, group: dist.ProcessGroup | None = None, *, zigzag: bool = False, dim: int = -2
) -> torch.Tensor:
    """Inverse of ``shard_sequence``: every rank's block gathered back into the whole sequence.

    Every rank passes its block (all of the same shape) and gets the whole tensor, tokens in order:
    (..., s/N, ...) -> (..., s, ...). Uses the built-in ``dist.all_gather`` (one collective; this
    part is about attention, not about gathering), then puts the pieces in sequence order (for zigzag,
    rank r's two halves go to chunks r and 2N-1-r). The result carries no autograd history. A zigzag
    block needs an even length (two chunks): ``ValueError`` naming ``x`` otherwise.
    """
    raise NotImplementedError("Task 9.1 (unshard_sequence): see handouts/09-context-parallel.md §9.1")


# ---------------------------------------------------------------------------------------------
# ## Task 9.2: ring attention, forward (online softmax over the blocks of the ring)
# ---------------------------------------------------------------------------------------------


def ring_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    zigzag: bool = False,
    group: dist.ProcessGroup | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of this rank's queries to the keys and values of the whole sequence, over a ring.

    Shapes: q, k (batch, heads, s/N, d), v (batch, heads, s/N, dv): this rank's block of the
    sequence in the layout ``shard_sequence`` gives (``zigzag`` says which; s/N even for zigzag).
    Returns ``(out, lse)``: out (batch, heads, s/N, dv) in q's dtype, equal to this rank's block of
    ``scaled_dot_product_attention`` on the whole sequence (scale 1/sqrt(d); ``causal``: token i
    attends to tokens j <= i by *global* position), and lse (batch, heads, s/N), the natural log of
    the softmax denominator of every query (log Σ_j exp(q·k_j/sqrt(d)) over the keys it attends), in
    float32 (float64 for float64 inputs). All arithmetic is in that dtype too.

    Ring: N steps; at step t this rank holds the key/value block of group rank r - t. Before
    computing with it, it posts the next hop (one ``batch_isend_irecv``: its block to rank r+1, the
    next from rank r-1, into fresh buffers) and waits for that hop after the compute: N-1 hops,
    (N-1)·(K+V) bytes sent, only to neighbours. Blocks merge by the online-softmax rule, which never
    exponentiates a positive number (no overflow at large scores). With ``causal``, a block (or a
    part of one) that no query may see is skipped, not computed and masked. Bad input (not 4-D
    float tensors of one dtype, k not shaped like q, v's (batch, heads, seq) not q's, an empty or,
    for zigzag, odd local length, non-bool flags) raises ``ValueError``/``TypeError`` naming the
    argument, before any message.
    """
    raise NotImplementedError("Task 9.2 (ring attention forward): see handouts/09-context-parallel.md §9.2")


# ---------------------------------------------------------------------------------------------
# ## Task 9.3: ring attention, backward (key/value gradients travel back to their owner)
# ---------------------------------------------------------------------------------------------


def ring_attention_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    *,
    causal: bool = False,
    zigzag: bool = False,
    group: dist.ProcessGroup | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients ``(dq, dk, dv)`` of this rank's blocks, given ``dout`` = dLoss/d``out``.

    ``q, k, v, causal, zigzag, group`` as in ``ring_attention_forward``, whose ``(out, lse)`` this
    takes; ``dout`` is shaped like ``out``. Returns tensors shaped and typed like q, k and v: dq is
    this rank's queries' gradient, dk and dv the gradient of the loss with respect to *this rank's*
    key and value block, summed over the queries of every rank. With P = exp(q·kᵀ/sqrt(d) - lse)
    (the probabilities, recomputed per block) and D = rowsum(dout ∘ out):
        dv += Pᵀ·dout,   dS = P ∘ (dout·vᵀ - D),   dq += dS·k/sqrt(d),   dk += dSᵀ·q/sqrt(d).

    Ring: as in forward, N steps and N-1 key/value hops, each posted before its step's compute and
    waited after it. The gradient of the block held at step t is accumulated by every rank it visits
    and travels with it: after computing, a rank adds the gradient that arrived from rank r-1 (posted
    there one step earlier, so it too hides behind a compute) and posts the sum to rank r+1; after the
    last step one more hop brings each block's finished gradient home: N gradient hops, N·(K+V) bytes
    (in float32 for 16-bit inputs), only to neighbours. Bad input as in forward.
    """
    raise NotImplementedError("Task 9.3 (ring attention backward): see handouts/09-context-parallel.md §9.3")


# ---------------------------------------------------------------------------------------------
# Given: the autograd node that joins your forward (9.2) and backward (9.3)
# ---------------------------------------------------------------------------------------------


class _RingAttention(torch.autograd.Function):
    """One autograd node: forward saves what backward needs (q, k, v, out, lse); nothing else."""

    @staticmethod
    def forward(ctx, q, k, v, causal, zigzag, group):
        out, lse = ring_attention_forward(q, k, v, causal=causal, zigzag=zigzag, group=group)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.zigzag, ctx.group = causal, zigzag, group
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ring_attention_backward(
            dout, q, k, v, out, lse, causal=ctx.causal, zigzag=ctx.zigzag, group=ctx.group
        )
        return dq, dk, dv, None, None, None


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    zigzag: bool = False,
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """Differentiable ring attention (given: it wires tasks 9.2 and 9.3 into one autograd node).

    Returns ``ring_attention_forward(...)[0]``; its backward calls ``ring_attention_backward`` and
    hands dq, dk, dv to q, k and v. Arguments as in ``ring_attention_forward``.
    """
    return _RingAttention.apply(q, k, v, causal, zigzag, group)
