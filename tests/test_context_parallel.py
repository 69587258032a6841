"""Part 9: context parallelism, ring attention (handouts/09-context-parallel.md).

    pytest tests/test_context_parallel.py                   # your implementation, world sizes 1, 2, 4
    pytest tests/test_context_parallel.py -m task9_2        # only the forward ring

The parent draws the whole sequence's q, k, v and the upstream gradient, computes the oracle with
torch's ``scaled_dot_product_attention`` in float64 on the whole sequence, and cuts everything into
the blocks each rank holds with its own slicing (so a ring test does not depend on your
``shard_sequence``). Ranks run ring attention on their blocks under the communication recorder and
a log of the matrix products they compute (``MatmulLog``); the parent judges outputs, log-sum-exps
and gradients against the oracle, and from the two logs: who talked to whom, how many bytes, whether
each transfer was posted before a block's compute and waited after it, and how much attention work
each rank did.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from tests.harness import assert_close, run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank
from tests.harness.recorder import CommRecorder, calls, collective_ops, format_events
from tests.oracles.attention import attention_oracle, backward_rank, cut_sequence, forward_rank, rank_blocks

LAYOUTS = ["contiguous", "zigzag"]
MASKS = ["full", "causal"]
# (batch, heads, tokens per rank, d, dv) per dtype: odd head dims; 6 tokens = two zigzag chunks of 3.
SHAPES = {torch.float64: (2, 3, 6, 5, 3), torch.float32: (1, 2, 6, 7, 7)}
# float32 results are compared with the float64 oracle rounded to float32; the ring's sums run in a
# different order than one softmax over the whole row, so allow a few float32 ulps more than the table.
TOL = {torch.float64: {}, torch.float32: {"rtol": 1e-4, "atol": 1e-5}}


def _rand(shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale


def _case(world_size: int, dtype, seed: int, logit_scale: float = 1.0):
    """Whole-sequence inputs for one dtype's shape: q, k, v, dout (float64, rounded to ``dtype``)."""
    b, h, per_rank, d, dv = SHAPES[dtype]
    s = per_rank * world_size
    # Scaling q and k by sqrt(logit_scale) scales every score by logit_scale.
    q = _rand((b, h, s, d), seed, math.sqrt(logit_scale)).to(dtype)
    k = _rand((b, h, s, d), seed + 1, math.sqrt(logit_scale)).to(dtype)
    v = _rand((b, h, s, dv), seed + 2).to(dtype)
    dout = _rand((b, h, s, dv), seed + 3).to(dtype)
    return q, k, v, dout


# -- judging the logs -------------------------------------------------------------------------------


def _p2p(events, op: str, backward: bool | None = None):
    return [e for e in calls(events) if e.op == op and (backward is None or e.in_backward == backward)]


def _overlapped_bytes(events, matmuls, op: str, backward: bool) -> int:
    """Bytes of ``op`` calls (isend/irecv) followed by a block's compute before the next wait.

    That is what "the transfer hides behind the compute" means in a log: the message is in flight
    while the rank multiplies, and only then does the rank wait.
    """
    times = [t for t, _, bw in matmuls if bw == backward]
    waits = sorted(e.time for e in events if e.op == "wait")
    total = 0
    for e in _p2p(events, op, backward):
        next_wait = next((t for t in waits if t > e.time), math.inf)
        if any(e.time < t < next_wait for t in times):
            total += e.nbytes
    return total


def _assert_ring_traffic(rank, world_size, events, matmuls, *, backward: bool, hop_bytes: int, hops: int,
                         overlapped_hops: int, what: str) -> None:  # fmt: skip
    """Only neighbours, ``hops`` hops of ``hop_bytes`` each way, ``overlapped_hops`` of them hidden."""
    __tracebackhide__ = True
    log = format_events(events)
    where = f"rank {rank}, {what}"
    bad = collective_ops(events)
    assert not bad, f"{where}: only isend/irecv/batch_isend_irecv, got {sorted({e.op for e in bad})}:\n{log}"
    sends, recvs = _p2p(events, "isend", backward) + _p2p(events, "send", backward), _p2p(events, "irecv", backward)
    recvs += _p2p(events, "recv", backward)
    nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
    assert {e.peer for e in sends} <= {nxt}, f"{where}: sends must go only to the next rank {nxt}:\n{log}"
    assert {e.peer for e in recvs} <= {prv}, f"{where}: receives must come only from the previous rank {prv}:\n{log}"
    sent, received = sum(e.nbytes for e in sends), sum(e.nbytes for e in recvs)
    assert sent == hops * hop_bytes and received == hops * hop_bytes, (
        f"{where}: expected {hops} hop(s) of {hop_bytes} bytes each way ({hops * hop_bytes} bytes), "
        f"sent {sent} and received {received}:\n{log}"
    )
    for op, total in (("isend", sent), ("irecv", received)):
        hidden = _overlapped_bytes(events, matmuls, op, backward)
        assert hidden >= overlapped_hops * hop_bytes, (
            f"{where}: only {hidden} of the {total} bytes given to {op} were posted before a block's compute and "
            f"waited after it; {overlapped_hops} hop(s) of {hop_bytes} bytes must be (post the next block's "
            f"isend/irecv with batch_isend_irecv, compute with the current block, then wait):\n{log}"
        )


# -- Task 9.1: layouts ------------------------------------------------------------------------------


def shard_rank(ctx, x, zigzag, dim):
    cp = ctx.load("context_parallel")
    mine = cp.shard_sequence(x.to(ctx.device), zigzag=zigzag, dim=dim)
    return mine, cp.unshard_sequence(mine, zigzag=zigzag, dim=dim)


@pytest.mark.task9_1
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim", [-2, 0], ids=["dim-2", "dim0"])
def test_shard_sequence_gives_each_rank_its_blocks_and_unshard_restores_the_sequence(world_size, layout, dim):
    """shard_sequence cuts blocks (zigzag: chunks r and 2N-1-r); unshard_sequence puts them back in order."""
    zigzag = layout == "zigzag"
    x = torch.arange(2.0 * 3 * 4 * world_size * 2).reshape(2, 3, 4 * world_size, 2)  # (batch, heads, s, d)
    x = x.movedim(2, dim)  # the sequence dim where the test asks for it
    outs = run_ranks(world_size, shard_rank, x, zigzag, dim)
    expected = cut_sequence(x, world_size, zigzag, dim)
    for rank, (mine, whole) in enumerate(outs):
        chunks = f"chunks {rank} and {2 * world_size - 1 - rank} of {2 * world_size}" if zigzag else f"block {rank}"
        assert_close(mine, expected[rank], what=f"rank {rank}, shard_sequence({layout}, dim={dim}) should be {chunks}")
        assert_close(whole, x, what=f"rank {rank}, unshard_sequence(shard_sequence(x)) ({layout}, dim={dim})")


# -- Task 9.2: the forward ring ---------------------------------------------------------------------


@pytest.mark.task9_2
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_ring_attention_forward_matches_attention_on_the_whole_sequence(world_size, layout, mask):
    """Each rank's out and lse equal its block of SDPA on the whole sequence (float32/64, odd head dims)."""
    zigzag, causal = layout == "zigzag", mask == "causal"
    cases, oracles = [], []
    for i, dtype in enumerate(SHAPES):
        q, k, v, dout = _case(world_size, dtype, seed=10 * i)
        oracles.append((dtype, attention_oracle(q, k, v, dout, causal)))
        cases.append((rank_blocks(world_size, zigzag, q, k, v), causal, zigzag))
    outs = run_ranks(world_size, forward_rank, cases)
    for i, (dtype, want) in enumerate(oracles):
        acc = torch.promote_types(dtype, torch.float32)
        out_blocks = cut_sequence(want["out"].to(dtype), world_size, zigzag)
        lse_blocks = cut_sequence(want["lse"].to(acc), world_size, zigzag, dim=2)
        for rank, results in enumerate(outs):
            out, lse, _, _ = results[i]
            what = f"rank {rank}, {layout} {mask} attention, {str(dtype)[6:]} {tuple(SHAPES[dtype])}"
            assert_close(out, out_blocks[rank], what=f"{what}: out", **TOL[dtype])
            assert_close(lse, lse_blocks[rank], what=f"{what}: lse (log of the softmax denominator)", **TOL[dtype])


@pytest.mark.task9_2
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_ring_attention_forward_is_stable_at_large_logits(world_size, dtype):
    """Scores in the thousands (exp overflows) still give the right out and lse: the merge stays in log space."""
    logit_scale = 3000.0 if dtype == torch.float64 else 300.0  # exp overflows above ~709 / ~88
    q, k, v, dout = _case(world_size, dtype, seed=7, logit_scale=logit_scale)
    want = attention_oracle(q, k, v, dout, causal=True)
    outs = run_ranks(world_size, forward_rank, [(rank_blocks(world_size, True, q, k, v), True, True)])
    # float32 scores of size ~1000 carry rounding errors of ~1e-4 themselves: compare at that level.
    tol = {} if dtype == torch.float64 else {"rtol": 1e-3, "atol": 1e-3}
    acc = torch.promote_types(dtype, torch.float32)
    for rank, [(out, lse, _, _)] in enumerate(outs):
        what = f"rank {rank}, zigzag causal attention with scores up to ~{logit_scale:g} ({str(dtype)[6:]})"
        assert_close(out, cut_sequence(want["out"].to(dtype), world_size, True)[rank], what=f"{what}: out", **tol)
        assert_close(lse, cut_sequence(want["lse"].to(acc), world_size, True)[rank], what=f"{what}: lse", **tol)


@pytest.mark.task9_2
@pytest.mark.parametrize("layout, mask", [("contiguous", "full"), ("zigzag", "causal"), ("contiguous", "causal")])
def test_forward_ring_sends_n_minus_1_hops_to_the_next_rank_overlapped_with_compute(world_size, layout, mask):
    """Forward: only neighbours, N-1 key/value hops, each posted before a block's compute and waited after it."""
    zigzag, causal = layout == "zigzag", mask == "causal"
    q, k, v, _ = _case(world_size, torch.float32, seed=3)
    outs = run_ranks(world_size, forward_rank, [(rank_blocks(world_size, zigzag, q, k, v), causal, zigzag)])
    hop = (k.numel() + v.numel()) // world_size * 4  # one key block and one value block, float32
    # In the contiguous causal layout some ranks skip whole blocks (nothing to compute, nothing to hide behind).
    hidden = 0 if (causal and not zigzag) else world_size - 1
    for rank, [(_, _, events, matmuls)] in enumerate(outs):
        _assert_ring_traffic(rank, world_size, events, matmuls, backward=False, hop_bytes=hop, hops=world_size - 1,
                             overlapped_hops=hidden, what=f"forward ({layout}, {mask})")  # fmt: skip


@pytest.mark.task9_2
@pytest.mark.world_sizes(2, 3, 4, 8)
def test_zigzag_balances_causal_work_and_masked_blocks_are_skipped(world_size):
    """Causal zigzag: every rank multiplies within one block of the others, about (N+1)/2 blocks, not N."""
    q, k, v, _ = _case(world_size, torch.float32, seed=5)
    b, h, c, d, dv = SHAPES[torch.float32]
    block = 2 * b * h * c * c * (d + dv)  # FLOPs of one (c queries x c keys) block: q·kᵀ and p·v
    outs = run_ranks(world_size, forward_rank, [(rank_blocks(world_size, True, q, k, v), True, True)])
    work = [sum(f for _, f, _ in results[0][3]) for results in outs]
    blocks = ", ".join(f"rank {r}: {w / block:.2f}" for r, w in enumerate(work))
    assert max(work) - min(work) <= block, (
        f"causal zigzag attention should cost every rank the same work (within one block), but the "
        f"blocks multiplied were {blocks}"
    )
    most = (world_size + 1) / 2 * block  # half of every block but the diagonal one, which is computed whole
    assert max(work) <= most, (
        f"causal attention must skip what the mask hides (whole blocks, and the hidden half of a zigzag block): "
        f"at most {(world_size + 1) / 2:g} blocks of work per rank, got {blocks}"
    )


# -- Task 9.3: the backward ring --------------------------------------------------------------------


@pytest.mark.task9_3
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_ring_attention_gradients_match_attention_on_the_whole_sequence(world_size, layout, mask):
    """dq, dk, dv of every rank's blocks equal the same blocks of SDPA's gradients on the whole sequence."""
    zigzag, causal = layout == "zigzag", mask == "causal"
    cases, oracles = [], []
    for i, dtype in enumerate(SHAPES):
        q, k, v, dout = _case(world_size, dtype, seed=20 + 10 * i)
        oracles.append((dtype, attention_oracle(q, k, v, dout, causal)))
        cases.append((rank_blocks(world_size, zigzag, q, k, v, dout), causal, zigzag))
    outs = run_ranks(world_size, backward_rank, cases)
    for i, (dtype, want) in enumerate(oracles):
        for rank, results in enumerate(outs):
            what = f"rank {rank}, {layout} {mask} attention, {str(dtype)[6:]} {tuple(SHAPES[dtype])}"
            for j, name in enumerate(["out", "dq", "dk", "dv"]):
                expected = cut_sequence(want[name].to(dtype), world_size, zigzag)[rank]
                hint = " (the gradient of this rank's own key/value block)" if name in ("dk", "dv") else ""
                assert_close(results[i][j], expected, what=f"{what}: {name}{hint}", **TOL[dtype])


@pytest.mark.task9_3
@pytest.mark.parametrize("layout, mask", [("contiguous", "full"), ("zigzag", "causal")])
def test_backward_ring_sends_keys_values_and_their_gradients_to_the_next_rank(world_size, layout, mask):
    """Backward: only neighbours, N-1 key/value hops (hidden behind compute) and N gradient hops."""
    zigzag, causal = layout == "zigzag", mask == "causal"
    q, k, v, dout = _case(world_size, torch.float32, seed=4)
    outs = run_ranks(world_size, backward_rank, [(rank_blocks(world_size, zigzag, q, k, v, dout), causal, zigzag)])
    kv = (k.numel() + v.numel()) // world_size * 4
    # N-1 key/value hops + N gradient hops (the last brings each block's gradient home); none at N = 1.
    hops = 2 * world_size - 1 if world_size > 1 else 0
    for rank, [(_, _, _, _, events, matmuls)] in enumerate(outs):
        _assert_ring_traffic(rank, world_size, events, matmuls, backward=True, hop_bytes=kv, hops=hops,
                             overlapped_hops=world_size - 1, what=f"backward ({layout}, {mask})")  # fmt: skip


@pytest.mark.task9_3
def test_backward_accumulates_and_ships_key_value_gradients_in_float32_for_bfloat16_inputs(world_size):
    """bfloat16 q, k, v: key/value hops in bfloat16, gradient hops in float32 (the docstring's 2x bytes)."""
    b, h, per_rank, d, dv = 1, 2, 6, 8, 4
    s = per_rank * world_size
    q, k = (_rand((b, h, s, d), 60 + i).to(torch.bfloat16) for i in range(2))
    v, dout = (_rand((b, h, s, dv), 62 + i).to(torch.bfloat16) for i in range(2))
    want = attention_oracle(q, k, v, dout, causal=True)
    outs = run_ranks(world_size, backward_rank, [(rank_blocks(world_size, True, q, k, v, dout), True, True)])
    elems = (k.numel() + v.numel()) // world_size  # one key block and one value block
    for rank, [(_, _, dk, dvv, events, _)] in enumerate(outs):
        log, what = format_events(events), f"rank {rank}, backward with bfloat16 q, k, v"
        sends = _p2p(events, "isend", True) + _p2p(events, "send", True)
        by_dtype = {}
        for e in sends:
            by_dtype[e.dtype] = by_dtype.get(e.dtype, 0) + e.nbytes
        want_bytes = {"bfloat16": (world_size - 1) * elems * 2, "float32": world_size * elems * 4}
        want_bytes = {t: n for t, n in want_bytes.items() if n and world_size > 1}  # no ring at N = 1
        assert by_dtype == want_bytes, (
            f"{what}: expected the N-1 key/value hops in bfloat16 and the N gradient hops in float32 "
            f"(gradients accumulate and travel in float32 for 16-bit inputs), bytes sent by dtype "
            f"{want_bytes}, got {by_dtype}:\n{log}"
        )
        for name, got in (("dk", dk), ("dv", dvv)):
            expected = cut_sequence(want[name].to(torch.bfloat16), world_size, True)[rank]
            assert got.dtype == torch.bfloat16, f"{what}: {name} must come back in bfloat16, got {got.dtype}"
            # bfloat16 inputs, and out rounded to bfloat16 before backward: a few bfloat16 ulps
            assert_close(got, expected, what=f"{what}: {name}", rtol=5e-2, atol=5e-2)


def two_rings_rank(ctx, data):
    """World 4 as two rings, {0, 1} and {2, 3}: each runs attention (forward and backward) on its own sequence."""
    cp = ctx.load("context_parallel")
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank creates every group, in order
    ring, pos = divmod(ctx.rank, 2)
    q, k, v, dout = (t.to(ctx.device).clone() for t in data[ring][pos])
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    with CommRecorder() as rec:
        out = cp.ring_attention(q, k, v, group=groups[ring])
        (out * dout).sum().backward()
    return out.detach(), q.grad, k.grad, v.grad, rec.events


@pytest.mark.task9_3
@pytest.mark.world_sizes(4)
def test_two_rings_on_sub_groups_each_attend_to_their_own_sequence(world_size):
    """``group``: world 4 as two rings of 2; each matches SDPA on its own sequence and talks only inside its ring."""
    inputs = [_case(2, torch.float64, seed=80 + ring) for ring in range(2)]
    oracles = [attention_oracle(*x, causal=False) for x in inputs]
    outs = run_ranks(world_size, two_rings_rank, [rank_blocks(2, False, *x) for x in inputs])
    for rank, (out, dq, dk, dv, events) in enumerate(outs):
        ring, pos = divmod(rank, 2)
        members = [2 * ring, 2 * ring + 1]
        what = f"rank {rank} (group rank {pos} of the ring {members})"
        for e in calls(events):
            assert e.group_ranks == tuple(members) and e.peer in (None, *members), (
                f"{what}: every message must stay inside group {members}:\n{format_events(events)}"
            )
        for name, got in zip(["out", "dq", "dk", "dv"], [out, dq, dk, dv]):
            assert_close(got, cut_sequence(oracles[ring][name], 2, False)[pos], what=f"{what}: {name}")


# -- bad input: a clear error on every rank, before any message ---------------------------------------


def _qkv(ctx, s=4, d=3):
    return [torch.ones(1, 2, s, d, device=ctx.device) for _ in range(3)]


BAD_INPUT = [
    BadInput("shard-length-not-divisible",
             lambda cp, ctx: cp.shard_sequence(torch.ones(2, ctx.world_size + 1, device=ctx.device), dim=1),
             "ValueError", names="x", task="task9_1"),
    BadInput("shard-zigzag-length-not-divisible-by-2N",
             lambda cp, ctx: cp.shard_sequence(torch.ones(1, 2, 3 * ctx.world_size, 4, device=ctx.device), zigzag=True),
             "ValueError", names="x", task="task9_1"),
    BadInput("unshard-zigzag-odd-block",
             lambda cp, ctx: cp.unshard_sequence(torch.ones(1, 2, 3, 4, device=ctx.device), zigzag=True),
             "ValueError", names="x", task="task9_1"),
    BadInput("forward-q-not-4d",
             lambda cp, ctx: cp.ring_attention_forward(torch.ones(2, 4, 3, device=ctx.device), *_qkv(ctx)[1:]),
             "ValueError", names="q", task="task9_2"),
    BadInput("forward-k-shape-differs", lambda cp, ctx: cp.ring_attention_forward(
        _qkv(ctx)[0], torch.ones(1, 2, 4, 5, device=ctx.device), _qkv(ctx)[2]),
             "ValueError", names="k", task="task9_2"),
    BadInput("forward-v-dtype-differs", lambda cp, ctx: cp.ring_attention_forward(
        *_qkv(ctx)[:2], torch.ones(1, 2, 4, 3, dtype=torch.float64, device=ctx.device)),
             "TypeError", names="v", task="task9_2"),
    BadInput("forward-zigzag-odd-block", lambda cp, ctx: cp.ring_attention_forward(*_qkv(ctx, s=3), zigzag=True),
             "ValueError", names="q", task="task9_2"),
    BadInput("forward-causal-not-bool", lambda cp, ctx: cp.ring_attention_forward(*_qkv(ctx), causal="yes"),
             "TypeError", names="causal", task="task9_2"),
]  # fmt: skip


@pytest.mark.world_sizes(2, 3, 4, 8)
@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """Bad shapes, dtypes, lengths or flags raise ValueError/TypeError naming the argument, before any message."""
    assert_rejected_before_communicating(run_ranks(world_size, bad_input_rank, "context_parallel", case), case)
