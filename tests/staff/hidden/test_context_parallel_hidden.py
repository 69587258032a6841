"""Hidden tests for part 9 (never shipped to students): an odd ring, longer blocks, sub-groups.

    pytest tests/staff/hidden/test_context_parallel_hidden.py --impl reference

They use explicit world sizes instead of ``--world-sizes``: 3 (an odd ring, where the zigzag chunk
pairs and the hop that brings gradients home are easy to get off by one) and 4 split into two rings
of 2 (every message must stay inside ``group``, and positions follow the rank *within* it). On NCCL
a size larger than the visible GPUs is skipped.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from tests.harness import assert_close, run_ranks
from tests.harness.recorder import CommRecorder, calls, format_events
from tests.oracles.attention import attention_oracle, backward_rank, cut_sequence, forward_rank, rank_blocks


def _inputs(seed: int, s: int, b=2, h=2, d=8, dv=6):
    gen = torch.Generator().manual_seed(seed)
    q, k, dout = (torch.randn(b, h, s, n, generator=gen, dtype=torch.float64) for n in (d, d, dv))
    v = torch.randn(b, h, s, dv, generator=gen, dtype=torch.float64)
    return q * 2, k * 2, v, dout  # scores of a few units: softmax neither flat nor one-hot


@pytest.mark.task9_2
@pytest.mark.task9_3
@pytest.mark.parametrize("layout, causal", [("contiguous", True), ("zigzag", True), ("zigzag", False)])
def test_odd_ring_of_three_matches_attention_on_the_whole_sequence(layout, causal):
    """World size 3, 10 tokens per rank: out, dq, dk, dv equal SDPA's on the whole sequence."""
    n, zigzag = 3, layout == "zigzag"
    q, k, v, dout = _inputs(seed=31, s=10 * n)
    want = attention_oracle(q, k, v, dout, causal)
    outs = run_ranks(n, backward_rank, [(rank_blocks(n, zigzag, q, k, v, dout), causal, zigzag)])
    mask = "causal" if causal else "full"
    for rank, [result] in enumerate(outs):
        for j, name in enumerate(["out", "dq", "dk", "dv"]):
            expected = cut_sequence(want[name], n, zigzag)[rank]
            assert_close(result[j], expected, what=f"rank {rank} of 3, {layout} {mask} attention: {name}")


def subgroup_rank(ctx, data, whole):
    """Two rings: even and odd global ranks. Each runs causal zigzag attention on its own sequence."""
    cp = ctx.load("context_parallel")
    evens, odds = list(range(0, ctx.world_size, 2)), list(range(1, ctx.world_size, 2))
    groups = [dist.new_group(evens), dist.new_group(odds)]  # every rank creates every group, in order
    ring = ctx.rank % 2
    members = [evens, odds][ring]
    pos = members.index(ctx.rank)
    q, k, v, dout = (t.to(ctx.device).clone() for t in data[ring][pos])
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    with CommRecorder() as rec:
        mine = cp.shard_sequence(whole[ring].to(ctx.device), group=groups[ring], zigzag=True)
        out = cp.ring_attention(q, k, v, causal=True, zigzag=True, group=groups[ring])
        out.backward(dout)
        gathered = cp.unshard_sequence(mine, group=groups[ring], zigzag=True)
    return members, mine, gathered, out.detach(), q.grad, k.grad, v.grad, rec.events


@pytest.mark.task9_1
@pytest.mark.task9_3
def test_two_rings_on_sub_groups_keep_to_their_group():
    """World 4 as two groups ({0, 2}, {1, 3}): blocks follow the rank within the group; no message leaves it."""
    inputs = [_inputs(seed=40 + g, s=8) for g in range(2)]
    data = [rank_blocks(2, True, *x) for x in inputs]
    whole = [x[0] for x in inputs]  # the q of each ring: shard_sequence must cut it by group rank
    oracles = [attention_oracle(*x, causal=True) for x in inputs]
    outs = run_ranks(4, subgroup_rank, data, whole)
    for rank, (members, mine, gathered, out, dq, dk, dv, events) in enumerate(outs):
        ring, pos = rank % 2, members.index(rank)
        what = f"rank {rank} (group rank {pos} of group {members})"
        for e in calls(events):
            assert e.group_ranks == tuple(members), (
                f"{what}: a message went outside the group:\n{format_events(events)}"
            )
            assert e.peer is None or e.peer in members, f"{what}: peer {e.peer} is not in the group: {e}"
        assert_close(mine, cut_sequence(whole[ring], 2, True)[pos], what=f"{what}: shard_sequence (zigzag)")
        assert_close(gathered, whole[ring], what=f"{what}: unshard_sequence(shard_sequence(x))")
        for name, got in zip(["out", "dq", "dk", "dv"], [out, dq, dk, dv]):
            assert_close(got, cut_sequence(oracles[ring][name], 2, True)[pos], what=f"{what}: {name}")


@pytest.mark.task9_2
def test_long_blocks_at_large_logits_in_float64():
    """World 3, 64 tokens per rank, scores up to ~5000: out and lse stay finite and exact."""
    n = 3
    q, k, v, dout = _inputs(seed=50, s=64 * n, d=4, dv=4)
    q, k = q * math.sqrt(600), k * math.sqrt(600)
    want = attention_oracle(q, k, v, dout, causal=True)
    outs = run_ranks(n, forward_rank, [(rank_blocks(n, True, q, k, v), True, True)])
    for rank, [(out, lse, _, _)] in enumerate(outs):
        assert_close(out, cut_sequence(want["out"], n, True)[rank], what=f"rank {rank}: out at large logits")
        assert_close(lse, cut_sequence(want["lse"], n, True, dim=2)[rank], what=f"rank {rank}: lse at large logits")


@pytest.mark.task9_3
@pytest.mark.parametrize("layout, causal", [("contiguous", False), ("zigzag", True)])
def test_bfloat16_gradients_travel_in_float32_on_a_ring_of_three(layout, causal):
    """World 3, bfloat16, 4 tokens per rank: key/value hops in bfloat16, the 3 gradient hops in float32."""
    n, zigzag = 3, layout == "zigzag"
    q, k, v, dout = (t.to(torch.bfloat16) for t in _inputs(seed=70, s=4 * n, b=1, h=3, d=6, dv=10))
    want = attention_oracle(q, k, v, dout, causal)
    outs = run_ranks(n, backward_rank, [(rank_blocks(n, zigzag, q, k, v, dout), causal, zigzag)])
    elems = (k.numel() + v.numel()) // n
    want_bytes = {"bfloat16": (n - 1) * elems * 2, "float32": n * elems * 4}
    for rank, [(_, _, dk, dv, events, _)] in enumerate(outs):
        by_dtype = {}
        for e in calls(events):
            if e.op in ("isend", "send") and e.in_backward:
                by_dtype[e.dtype] = by_dtype.get(e.dtype, 0) + e.nbytes
        assert by_dtype == want_bytes, (
            f"rank {rank} of 3: expected the N-1 key/value hops in bfloat16 and the N gradient hops in float32, "
            f"bytes sent by dtype {want_bytes}, got {by_dtype}:\n{format_events(events)}"
        )
        for name, got in (("dk", dk), ("dv", dv)):
            assert got.dtype == torch.bfloat16, f"rank {rank} of 3: {name} must come back in bfloat16, got {got.dtype}"
            expected = cut_sequence(want[name].to(torch.bfloat16), n, zigzag)[rank]
            # bfloat16 inputs, and out rounded to bfloat16 before backward: a few bfloat16 ulps
            assert_close(got, expected, what=f"rank {rank} of 3, bfloat16 {layout}: {name}", rtol=5e-2, atol=5e-2)
