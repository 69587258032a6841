"""The harness's tag-blind point-to-point matching (tests/harness/p2p_matching.py): NCCL's rule on gloo.

    pytest tests/test_harness_p2p_matching.py -v

These tests never touch the implementation under test (marker ``harness``).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.harness import RankFailure, run_ranks
from tests.harness.config import CONFIG
from tests.harness.defaults import ENV_P2P_MATCHING

pytestmark = [pytest.mark.harness, pytest.mark.world_sizes(2)]


def _skip_unless_gloo() -> None:
    if CONFIG.backend != "gloo":
        pytest.skip("the emulation applies to gloo; NCCL is tag-blind by itself")


def tagged_out_of_order_rank(ctx, sizes):
    """Rank 0 sends two tagged messages; rank 1 posts their receives in the other order (only tags pair them)."""
    if ctx.rank == 0:
        works = [
            dist.isend(torch.full((n,), float(tag), device=ctx.device), 1, tag=tag)
            for tag, n in enumerate(sizes, start=1)
        ]
        for w in works:
            w.wait()
        return None
    bufs = {tag: torch.zeros(n, device=ctx.device) for tag, n in enumerate(sizes, start=1)}
    works = [dist.irecv(bufs[tag], 0, tag=tag) for tag in sorted(bufs, reverse=True)]
    for w in works:
        w.wait()
    return {tag: b for tag, b in bufs.items()}


def in_order_rank(ctx):
    """Tags or not, both sides post in one order: fine under both rules."""
    if ctx.rank == 0:
        dist.send(torch.arange(3.0, device=ctx.device), 1, tag=7)
        w = dist.isend(torch.arange(5.0, device=ctx.device), 1)
        w.wait()
        return None
    a, b = torch.zeros(3, device=ctx.device), torch.zeros(5, device=ctx.device)
    dist.recv(a, 0, tag=7)
    dist.recv(b, 0)
    return a.sum().item() + b.sum().item()


@pytest.mark.parametrize("sizes", [(4, 4), (3, 5), (6, 2)], ids=["same-size", "smaller-first", "larger-first"])
def test_receives_posted_in_another_order_than_the_sends_fail_naming_both_messages(world_size, sizes):
    """Only tags make this program right: under tag-blind matching it fails, whatever the sizes, with a
    message naming the pair of ranks, the two messages that crossed and the rule."""
    _skip_unless_gloo()
    with pytest.raises(RankFailure) as info:
        run_ranks(world_size, tagged_out_of_order_rank, sizes)
    text = str(info.value)
    assert "crossed from rank 0 to rank 1" in text, text
    assert "receive #0 from rank 0 (tag 2" in text and "send #0 to rank 1 (tag 1" in text, text
    assert "NCCL ignores tag" in text and "same order on both sides" in text, text


def test_with_gloos_tag_matching_the_same_program_passes(world_size, monkeypatch):
    """--p2p-matching tags (CS336_P2P_MATCHING=tags) restores gloo's matching by tag: the difference shows."""
    _skip_unless_gloo()
    monkeypatch.setenv(ENV_P2P_MATCHING, "tags")
    out = run_ranks(world_size, tagged_out_of_order_rank, (3, 5))
    assert out[1][1].tolist() == [1.0] * 3 and out[1][2].tolist() == [2.0] * 5


def test_sends_and_receives_posted_in_one_order_pass(world_size):
    """Two ranks that post their messages in the same order pass tag-blind matching, whatever their tags."""
    _skip_unless_gloo()
    assert run_ranks(world_size, in_order_rank)[1] == 3.0 + 10.0
