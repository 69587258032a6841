"""Part 9's suite catches realistic ring-attention bugs, each quickly and with a message that teaches.

    pytest tests/staff/mutants/test_context_parallel_mutants.py -v        # staff only

Each mutant is the reference with one edit (tests/staff/mutants/context_parallel_*/ and the 9.4
accounting one); the selected slice of tests/test_context_parallel.py (or of the file SUITE_OF names)
must fail on it at world size 2 and show the text given here.
"""

from __future__ import annotations

import pytest

from tests.staff.mutants.runner import Mutant, assert_killed

pytestmark = pytest.mark.staff

SUITE = "tests/test_context_parallel.py"
HIDDEN = "tests/staff/hidden/test_context_parallel_hidden.py"

SHARD = "::test_shard_sequence_gives_each_rank_its_blocks_and_unshard_restores_the_sequence"
FORWARD = "::test_ring_attention_forward_matches_attention_on_the_whole_sequence"
LARGE = "::test_ring_attention_forward_is_stable_at_large_logits"
RING = "::test_forward_ring_sends_n_minus_1_hops_to_the_next_rank_overlapped_with_compute"
BALANCE = "::test_zigzag_balances_causal_work_and_masked_blocks_are_skipped"
GRADS = "::test_ring_attention_gradients_match_attention_on_the_whole_sequence"
BAD = "::test_bad_input_raises_on_every_rank_before_communicating"

MUTANTS = [
    Mutant("context_parallel_merge_not_rescaled", f"{FORWARD}[w2-contiguous-full]",
           "contiguous full attention, float64"),
    Mutant("context_parallel_merge_overflows", f"{LARGE}[w2-float64]", "with scores up to ~3000 (float64): out"),
    Mutant("context_parallel_causal_local_offset", f"{FORWARD}[w2-contiguous-causal]", "contiguous causal attention"),
    Mutant("context_parallel_zigzag_chunks_swapped", f"{SHARD}[w2-dim-2-zigzag]", "should be chunks 0 and 3 of 4"),
    Mutant("context_parallel_dkv_not_returned", f"{GRADS}[w2-contiguous-full]",
           "dk (the gradient of this rank's own key/value block)"),
    Mutant("context_parallel_hop_missing", f"{RING}[w2-contiguous-full]", "expected 1 hop(s) of"),
    Mutant("context_parallel_not_overlapped", f"{RING}[w2-contiguous-full]", "were posted before a block's compute"),
    Mutant("context_parallel_hidden_half_computed", f"{BALANCE}[w2]", "must skip what the mask hides"),
    Mutant("context_parallel_no_validation", f"{BAD}[w2-forward-causal-not-bool]",
           "expected TypeError, but the call returned normally"),
    # Only the hidden sub-group test runs a ring on a group smaller than the world.
    Mutant("accounting_ring_attention_forward_only",
           "::test_context_parallel_accounting_gives_the_handouts_examples", "ring bytes, s=32k"),
    Mutant("context_parallel_world_ring", "::test_two_rings_on_sub_groups_keep_to_their_group",
           "is not part of group"),
]  # fmt: skip
SUITE_OF = {
    "context_parallel_world_ring": HIDDEN,
    "accounting_ring_attention_forward_only": "tests/test_accounting_context_parallel.py",
}


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_suite_kills_the_mutant(mutant):
    """The selected slice of the suite fails on this mutant, quickly, with a message that teaches."""
    names = () if mutant.package.startswith("accounting") else ("rank ",)  # pure functions: no ranks to name
    assert_killed(mutant, SUITE_OF.get(mutant.package, SUITE), names=names, deadline=15)
