"""Collectives built only from point-to-point messages (send/recv/isend/irecv/batch_isend_irecv).

Your task (handouts/01-collectives.md): implement each function below using ONLY
``dist.send``, ``dist.recv``, ``dist.isend``, ``dist.irecv``, ``dist.P2POp`` and
``dist.batch_isend_irecv``. The tests record every torch.distributed call your code makes and fail
on any built-in collective (``dist.all_reduce``, ``dist.broadcast``, ...).

Every function takes ``group`` (None = WORLD) and works for any group size N >= 1, any shape
(empty and 0-d included) and float32/float64/bfloat16/int64 tensors, on gloo (CPU) or NCCL (CUDA).
Peers are addressed by global rank; positions in lists follow the rank *within* the group.
Bad input raises ValueError/TypeError naming the argument, on every rank, before any message.

Costs for M bytes on N ranks (alpha = per-message latency, beta = seconds per byte):
    broadcast, reduce   binomial tree: ceil(log2 N) rounds, M bytes per round
    all_gather          ring: N-1 steps, each rank sends (N-1)/N of the result
    reduce_scatter      ring: N-1 steps, each rank sends (N-1)/N of its input
    all_reduce          ring reduce-scatter + ring all-gather: each rank sends 2(N-1)/N * M,
                        which no algorithm beats for large M (the "bandwidth-optimal" bound);
                        recursive doubling: log2 N exchanges of all M bytes (latency-optimal);
                        "auto" picks the cheaper of the two under the alpha-beta model
    all_to_all          pairwise: N-1 steps, step k talks to rank +k and rank -k
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = [
    "broadcast",
    "reduce",
    "all_gather",
    "reduce_scatter",
    "all_reduce",
    "all_to_all",
    "ALL_REDUCE_ALGORITHMS",
    "ALPHA_BETA",
    "choose_all_reduce_algorithm",
]

# BEGIN SOLUTION
# Pipelining unit of the ring's reduce-scatter: large enough that per-message costs vanish,
# small enough that adding one segment overlaps receiving the next.
_SEGMENT_BYTES = 1 << 21
_IN_FLIGHT = 4  # receive segments posted ahead of the one being added
_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32)
# END SOLUTION


# BEGIN SOLUTION
# ---------------------------------------------------------------------------------------------
# Shared plumbing: who am I in the group, argument checks, one round of simultaneous exchange.
# ---------------------------------------------------------------------------------------------


def _group_view(group) -> tuple[list[int], int]:
    """(global ranks of the group in group order, my position in it)."""
    ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
    return ranks, ranks.index(dist.get_rank())


def _check_tensor(tensor, name: str = "tensor") -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype not in _DTYPES:
        raise TypeError(f"{name} has unsupported dtype {tensor.dtype}; use one of {[str(d) for d in _DTYPES]}")


def _check_member(rank, ranks: list[int], name: str) -> int:
    """Position of global rank ``rank`` in the group, or a ValueError naming the argument."""
    if not isinstance(rank, int) or isinstance(rank, bool):
        raise TypeError(f"{name} must be an int (a global rank), got {type(rank).__name__}")
    if rank not in ranks:
        raise ValueError(f"{name}={rank} is not a rank of the group (its global ranks are {ranks})")
    return ranks.index(rank)


def _post(ops: list[dist.P2POp]) -> list[dist.Work]:
    """Start point-to-point ops; their handles in order. On CUDA (NCCL) they go as one batch: two ranks
    each starting a send before a receive in separate calls could wait on each other forever. On the
    CPU (gloo) every ``isend``/``irecv`` returns at once anyway, and separate calls cost less than a
    batch (~50 us less per exchange, which is most of a small message's time)."""
    if ops and ops[0].tensor.is_cuda:
        return dist.batch_isend_irecv(ops)
    return [op.op(op.tensor, op.peer, op.group) for op in ops]


def _exchange(group, send: torch.Tensor | None, to: int, recv: torch.Tensor | None, frm: int) -> None:
    """Send ``send`` to global rank ``to`` while receiving ``recv`` from global rank ``frm``.

    Posted together so that a ring of ranks all sending first cannot deadlock; empty tensors
    are skipped on both sides (both sides know the sizes, so they agree on what to skip).
    """
    ops = []
    if send is not None and send.numel() > 0:
        ops.append(dist.P2POp(dist.isend, send, to, group))
    if recv is not None and recv.numel() > 0:
        ops.append(dist.P2POp(dist.irecv, recv, frm, group))
    for work in _post(ops):
        work.wait()


# END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 1.1: broadcast
# ---------------------------------------------------------------------------------------------


def broadcast(tensor: torch.Tensor, src: int, group: dist.ProcessGroup | None = None) -> None:
    """Copy ``tensor`` from global rank ``src`` into ``tensor`` on every rank of ``group``, in place.

    Binomial tree over ranks relative to ``src``: in round k, every rank that already holds the
    data (relative rank < 2**k) sends it to relative rank + 2**k; ceil(log2 N) rounds in all.
    All ranks must pass tensors of the same shape and dtype.
    """
    # BEGIN SOLUTION: Task 1.1 (broadcast)
    _check_tensor(tensor)
    ranks, me = _group_view(group)
    root = _check_member(src, ranks, "src")
    n = len(ranks)
    rel = (me - root) % n
    buf = tensor if tensor.is_contiguous() else tensor.contiguous()
    mask = 1
    while mask < n:
        if rel < mask and rel + mask < n:
            dist.send(buf, ranks[(rel + mask + root) % n], group)
        elif mask <= rel < 2 * mask:
            dist.recv(buf, ranks[(rel - mask + root) % n], group)
        mask <<= 1
    if buf is not tensor:
        tensor.copy_(buf)
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 1.2: reduce
# ---------------------------------------------------------------------------------------------


def reduce(tensor: torch.Tensor, dst: int, group: dist.ProcessGroup | None = None) -> None:
    """Sum ``tensor`` over all ranks of ``group`` into ``tensor`` on global rank ``dst``, in place.

    Other ranks' tensors are left unchanged. Binomial tree, the broadcast run backwards: in round
    k, relative ranks with bit k set send their partial sum to relative rank - 2**k and drop out.
    """
    # BEGIN SOLUTION: Task 1.2 (reduce)
    _check_tensor(tensor)
    ranks, me = _group_view(group)
    root = _check_member(dst, ranks, "dst")
    n = len(ranks)
    rel = (me - root) % n
    partial = tensor.contiguous().clone() if rel != 0 else None
    acc = partial if partial is not None else tensor.contiguous()
    incoming = torch.empty_like(acc)
    mask = 1
    while mask < n:
        if rel & mask:
            dist.send(acc, ranks[(rel - mask + root) % n], group)
            break
        if rel + mask < n:
            dist.recv(incoming, ranks[(rel + mask + root) % n], group)
            acc += incoming
        mask <<= 1
    if rel == 0 and acc is not tensor:
        tensor.copy_(acc)
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 1.3: all_gather (ring)
# ---------------------------------------------------------------------------------------------


# BEGIN SOLUTION
def _ring_all_gather_chunks(chunks: list[torch.Tensor], ranks: list[int], me: int, group) -> None:
    """Ring all-gather in place: on entry ``chunks[me]`` holds this rank's piece; on return all do.

    Step s: send the piece that arrived last (piece me - s) to the next rank, receive piece
    me - s - 1 from the previous one. Each rank sends N - 1 pieces in all.
    """
    n = len(ranks)
    nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]
    for step in range(n - 1):
        _exchange(group, chunks[(me - step) % n], nxt, chunks[(me - step - 1) % n], prv)


# END SOLUTION


def all_gather(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Concatenate every rank's ``tensor`` along dim 0, in group-rank order; returned on every rank.

    Shapes: each rank passes (d0, *rest) -> returns (N * d0, *rest); a 0-d tensor gives (N,).
    Ring algorithm: N - 1 steps, each rank sends its neighbour one rank's piece per step.
    """
    # BEGIN SOLUTION: Task 1.3 (all_gather (ring))
    _check_tensor(tensor)
    ranks, me = _group_view(group)
    piece = tensor.reshape(1) if tensor.dim() == 0 else tensor
    out = torch.empty((len(ranks) * piece.shape[0], *piece.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    chunks = list(out.chunk(len(ranks))) if out.shape[0] > 0 else [out] * len(ranks)
    chunks[me].copy_(piece)
    _ring_all_gather_chunks(chunks, ranks, me, group)
    return out
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 1.4: reduce_scatter (ring)
# ---------------------------------------------------------------------------------------------


# BEGIN SOLUTION
def _ring_reduce_scatter_chunks(chunks: list[torch.Tensor], ranks: list[int], me: int, group) -> None:
    """Ring reduce-scatter in place over ``chunks`` (N pieces, sizes may differ, may be empty).

    Step s: send the partial sum of piece me - s - 1 to the next rank, receive the previous
    rank's partial sum of piece me - s - 2 and add it in. After N - 1 steps ``chunks[me]`` holds
    the full sum of piece ``me``; the other pieces hold partial sums (scratch).
    """
    n = len(ranks)
    nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]
    for step in range(n - 1):
        _exchange_and_add(group, chunks[(me - step - 1) % n], nxt, chunks[(me - step - 2) % n], prv)


def _exchange_and_add(group, send: torch.Tensor, to: int, target: torch.Tensor, frm: int) -> None:
    """Send ``send`` to ``to``; receive a tensor like ``target`` from ``frm`` and add it into ``target``.

    Both are cut into segments, each segment's send and receive posted together (one batch, so
    NCCL cannot deadlock two ranks sending to each other), up to ``_IN_FLIGHT`` segments ahead:
    each received segment is added while the next ones are in flight, so the additions hide
    behind the transfer (as gloo's and NCCL's rings do), and the scratch memory stays at a few
    segments whatever the tensor size. ``send`` may be ``target`` itself (recursive doubling
    sends the partial sum it then adds into): a segment is then added only once it has left.
    """
    seg = max(1, _SEGMENT_BYTES // max(1, send.element_size()))
    outgoing = [s for s in send.reshape(-1).split(seg) if s.numel()]
    pieces = [p for p in target.reshape(-1).split(seg) if p.numel()]
    in_place = send.numel() > 0 and send.data_ptr() == target.data_ptr()
    slots = min(_IN_FLIGHT, len(pieces))
    size = pieces[0].numel() if pieces else 0  # the first segment is the largest
    scratch = [torch.empty(size, dtype=target.dtype, device=target.device) for _ in range(slots)]
    pending, sent = [], []  # receives not yet added (oldest first); send handles, waited at the end
    for i in range(max(len(outgoing), len(pieces))):
        if len(pending) == slots > 0 and i < len(pieces):
            _add_when_received(*pending.pop(0))
        ops = [dist.P2POp(dist.isend, outgoing[i], to, group)] if i < len(outgoing) else []
        if i < len(pieces):
            buf = scratch[i % slots][: pieces[i].numel()]
            ops.append(dist.P2POp(dist.irecv, buf, frm, group))
        works = _post(ops)
        if i < len(pieces):  # the receive's handle is waited once, before adding (gloo hangs on a second wait)
            # In place, the segment's own send must finish before the add overwrites it (NCCL returns
            # one handle for the whole batch: waiting the receive covers the send).
            send_work = works[0] if in_place and len(works) > 1 else None
            pending.append((works[-1], buf, pieces[i], send_work))
            works = works[1:-1] if send_work is not None else works[:-1]
        sent.extend(works)
    for item in pending:
        _add_when_received(*item)
    for work in sent:
        work.wait()


def _add_when_received(work, buf: torch.Tensor, piece: torch.Tensor, send_work=None) -> None:
    work.wait()
    if send_work is not None:
        send_work.wait()
    piece += buf


# END SOLUTION


def reduce_scatter(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sum ``tensor`` over the group and return this rank's chunk of the sum along dim 0.

    Shapes: each rank passes (N * c, *rest) -> returns (c, *rest), chunk i going to group rank i.
    ``tensor.shape[0]`` must divide by N (``ValueError`` otherwise); ``tensor`` is not modified.
    """
    # BEGIN SOLUTION: Task 1.4 (reduce_scatter (ring))
    _check_tensor(tensor)
    ranks, me = _group_view(group)
    n = len(ranks)
    if tensor.dim() == 0 or tensor.shape[0] % n != 0:
        dim0 = "a 0-d tensor" if tensor.dim() == 0 else f"shape[0]={tensor.shape[0]}"
        raise ValueError(f"tensor must have dim 0 divisible by the group size {n}, got {dim0}")
    work = tensor.contiguous().clone()
    chunks = list(work.chunk(n)) if work.shape[0] > 0 else [work] * n
    _ring_reduce_scatter_chunks(chunks, ranks, me, group)
    return chunks[me].clone()
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 1.5: ring all_reduce
# ---------------------------------------------------------------------------------------------


def all_reduce(
    tensor: torch.Tensor, op: str = "sum", group: dist.ProcessGroup | None = None, *, algorithm: str = "auto"
) -> None:
    """Sum (``op="sum"``) or average (``op="avg"``) ``tensor`` over the group, in place, on every rank.

    Every algorithm sends point-to-point messages only, gives the same integer results bit for
    bit, and leaves the same bits on every rank. ``"avg"`` divides by N once, after the sum
    (averaging an integer tensor is a ``TypeError``); an unknown ``algorithm`` is a ``ValueError``.

    ``algorithm="ring"`` (Task 1.5, bandwidth-optimal): split the flattened tensor into N
    contiguous chunks (``torch.tensor_split``: sizes differ by at most one, some are empty when
    numel < N); a ring reduce-scatter leaves chunk i fully reduced on group rank i, then a ring
    all-gather circulates the reduced chunks. 2(N-1) steps, each sending one chunk to the next
    rank only: 2(N-1)/N of the data per rank in all. ``"avg"`` divides only this rank's reduced
    chunk, between the two phases (1/N of the work).

    ``algorithm="recursive_doubling"`` (Task 1.7, latency-optimal): with p = 2**floor(log2 N),
    the N - p extra group ranks p + i first send their whole tensor to group rank i, which adds
    it (the fold in). Group ranks 0..p-1 then, in step k = 0, 1, ..., log2(p) - 1, exchange their
    whole partial sum with group rank ``me XOR 2**k`` and add what they receive: after step k each
    holds the sum over its block of 2**(k+1) ranks. Last, group rank i sends the result to group
    rank p + i (the fold out). log2(p) steps, 2 more with a fold, each moving all M bytes (in one
    message up to 64 KiB; larger tensors may go in pieces).
    ``"avg"`` divides once, after the last exchange step (the extra ranks receive the average).

    ``algorithm="auto"`` (the default; Task 1.7): whichever ``choose_all_reduce_algorithm`` picks for this
    tensor's size in bytes and N, with the (alpha, beta) of ``ALPHA_BETA`` for the group's backend.
    """
    # BEGIN SOLUTION: Task 1.5 (ring all_reduce)
    _check_tensor(tensor)
    if op not in ("sum", "avg"):
        raise ValueError(f'op must be "sum" or "avg", got {op!r}')
    if op == "avg" and not tensor.is_floating_point():
        raise TypeError(f'op="avg" needs a floating-point tensor, got {tensor.dtype}')
    if algorithm not in ALL_REDUCE_ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALL_REDUCE_ALGORITHMS}, got {algorithm!r}")
    ranks, me = _group_view(group)
    n = len(ranks)
    if n == 1:
        return
    if algorithm == "auto":  # same size and group size on every rank, so every rank picks the same
        alpha, beta = ALPHA_BETA.get(dist.get_backend(group), ALPHA_BETA["gloo"])
        algorithm = choose_all_reduce_algorithm(tensor.numel() * tensor.element_size(), n, alpha=alpha, beta=beta)
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.reshape(-1).clone()  # (numel,)
    if algorithm == "recursive_doubling":
        _recursive_doubling(flat, op, ranks, me, group)
    else:
        chunks = list(torch.tensor_split(flat, n))  # N views, sizes differ by at most one
        _ring_reduce_scatter_chunks(chunks, ranks, me, group)
        if op == "avg":
            chunks[me].div_(n)
        _ring_all_gather_chunks(chunks, ranks, me, group)
    if not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 1.6: all_to_all (uneven sizes)
# ---------------------------------------------------------------------------------------------


def all_to_all(tensors: list[torch.Tensor], group: dist.ProcessGroup | None = None) -> list[torch.Tensor]:
    """Personalised exchange: ``tensors[j]`` goes to group rank j; result ``[i]`` came from rank i.

    Shapes: ``tensors[j]`` is (n_j, *rest) with n_j free per pair; ``*rest`` and dtype must match.
    Dim-0 sizes are exchanged first (one int64 per pair), then the data, pairwise: in step k
    rank r sends to r + k and receives from r - k, so every pair talks exactly once per phase.
    """
    # BEGIN SOLUTION: Task 1.6 (all_to_all (uneven sizes))
    ranks, me = _group_view(group)
    n = len(ranks)
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"tensors must be a list of {n} tensors, got {type(tensors).__name__}")
    if len(tensors) != n:
        raise ValueError(f"tensors must hold one tensor per rank of the group ({n}), got {len(tensors)}")
    for j, t in enumerate(tensors):
        _check_tensor(t, f"tensors[{j}]")
        if t.dim() == 0:
            raise ValueError(f"tensors[{j}] must have at least one dimension (dim 0 is split), got a 0-d tensor")
        if t.shape[1:] != tensors[0].shape[1:] or t.dtype != tensors[0].dtype:
            raise ValueError(
                f"tensors[{j}] has trailing shape {tuple(t.shape[1:])} and dtype {t.dtype}, but tensors[0] "
                f"has {tuple(tensors[0].shape[1:])} and {tensors[0].dtype}: they must match"
            )
    rest, dtype, device = tensors[0].shape[1:], tensors[0].dtype, tensors[0].device
    out: list[torch.Tensor | None] = [None] * n
    out[me] = tensors[me].clone()
    for k in range(1, n):
        to, frm = (me + k) % n, (me - k) % n
        size_out = torch.tensor([tensors[to].shape[0]], dtype=torch.int64, device=device)
        size_in = torch.empty(1, dtype=torch.int64, device=device)
        _exchange(group, size_out, ranks[to], size_in, ranks[frm])
        out[frm] = torch.empty((int(size_in.item()), *rest), dtype=dtype, device=device)
        _exchange(group, tensors[to].contiguous(), ranks[to], out[frm], ranks[frm])
    return out
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 1.7: latency-optimal all_reduce (recursive doubling) and the choice by size
# ---------------------------------------------------------------------------------------------

ALL_REDUCE_ALGORITHMS = ("ring", "recursive_doubling", "auto")

# (alpha, beta) per backend that algorithm="auto" uses: seconds per message and seconds per byte.
# Only alpha / beta matters for the choice (N = 4: crossover 8 alpha / beta). gloo: measured with
# python -m scripts.bench.collectives on the course's 2-core machine, where 4 ranks' times cross between
# 1 and 4 MiB; alpha / beta = 2e5 B puts the crossover there (1.5 MiB). The least-squares fit of
# the same run (alpha ~ 1.6e-3 s, beta ~ 1.4e-9 s/B) puts it at ~9 MiB, too late: the model has no
# term for the additions, which share the 2 cores with the messages (recursive doubling adds
# log2(N) * M per rank, the ring (N-1)/N * M). nccl: orders of magnitude for NVLink in one node
# (a few microseconds, ~100 GB/s per link), not measured here. Refit both on your own hardware.
ALPHA_BETA = {"gloo": (2.0e-4, 1.0e-9), "nccl": (5.0e-6, 1.0e-11)}


def choose_all_reduce_algorithm(num_bytes: int, world_size: int, *, alpha: float, beta: float) -> str:
    """The algorithm ``all_reduce(..., algorithm="auto")`` runs: the one with the smaller modelled time.

    The alpha-beta model (alpha = seconds per message, beta = seconds per byte) for M =
    ``num_bytes`` bytes on N = ``world_size`` ranks, with p = 2**floor(log2 N):

        ring                 2(N-1) * alpha + 2(N-1)/N * M * beta
        recursive_doubling   s * (alpha + M * beta),  s = log2 p, plus 2 if N != p (the fold in and out)

    Returns ``"recursive_doubling"`` when its time is strictly smaller, else ``"ring"`` (ties,
    and N = 1, go to the ring). ``all_reduce(..., algorithm="auto")`` calls it with the
    (alpha, beta) of ``ALPHA_BETA[backend]`` for the group's backend (gloo's for others).
    A negative ``num_bytes``, ``alpha`` or ``beta``, or a ``world_size`` below 1, is a ``ValueError``.
    """
    # BEGIN SOLUTION: Task 1.7 (all_reduce algorithms)
    for name, value, least in [("num_bytes", num_bytes, 0), ("world_size", world_size, 1)]:
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    if alpha < 0 or beta < 0:
        raise ValueError(f"alpha and beta must be >= 0, got alpha={alpha!r}, beta={beta!r}")
    n = world_size
    p = 1 << (n.bit_length() - 1)
    steps = (p.bit_length() - 1) + (2 if n != p else 0)
    t_ring = 2 * (n - 1) * alpha + 2 * (n - 1) / n * num_bytes * beta
    t_doubling = steps * (alpha + num_bytes * beta)
    return "recursive_doubling" if t_doubling < t_ring else "ring"
    # END SOLUTION


# BEGIN SOLUTION
def _recursive_doubling(flat: torch.Tensor, op: str, ranks: list[int], me: int, group) -> None:
    """Recursive doubling all-reduce of ``flat`` in place, with the fold for N not a power of two.

    Follows MPICH's recursive doubling (Thakur, Rabenseifner & Gropp 2005), with the extra ranks
    taken from the end of the group so that the core's partner is simply ``me XOR 2**k``.
    """
    n = len(ranks)
    p = 1 << (n.bit_length() - 1)  # largest power of two <= n
    extra = me >= p
    partner = me - p if extra else me + p  # the other side of this rank's fold, if any
    if partner < n:  # fold in: the extra rank's tensor is added into its partner's
        send, target = (flat, flat[:0]) if extra else (flat[:0], flat)
        _exchange_and_add(group, send, ranks[partner], target, ranks[partner])
    if not extra:
        mask = 1
        while mask < p:
            _exchange_and_add(group, flat, ranks[me ^ mask], flat, ranks[me ^ mask])
            mask <<= 1
        if op == "avg":
            flat.div_(n)
    if partner < n:  # fold out: the partner hands the extra rank the finished result
        send, recv = (None, flat) if extra else (flat, None)
        _exchange(group, send, ranks[partner], recv, ranks[partner])


# END SOLUTION
