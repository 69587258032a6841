"""Hidden tests for Tasks 5.7-5.8 (never shipped to students): a V over 3 ranks, chunks of different widths.

    pytest tests/staff/hidden/test_pipeline_v_hidden.py --impl reference

The public counterpart is tests/test_pipeline_v.py::test_v_trains_like_one_process_on_the_full_batch
(2 and 4 ranks, equal widths, m = 2p). Here: 3 ranks over the 6-layer ``widths`` model cut into 6
one-layer chunks, so every boundary of the V carries another width (10, 3, 7, 4) and rank 1's two
chunks receive activations of different shapes from the same neighbour; m = 2p + 1, odd, which no
public case uses. On NCCL a size larger than the visible GPUs is skipped. And DualPipeV's F&B pairs at
3 ranks with m = 7 (odd, past 2p): each pair's B gradient receive is posted before its F starts.
"""

from __future__ import annotations

import pytest

from tests.harness import run_ranks
from tests.oracles.pipeline import assert_matches_oracle, make_batches, oracle_steps
from tests.oracles.pipeline_v import check_pairs_post_early, overlap_rank, v_train_rank


@pytest.mark.parametrize(
    "schedule", [pytest.param("zb-v", marks=pytest.mark.task5_7), pytest.param("dualpipev", marks=pytest.mark.task5_8)]
)
@pytest.mark.parametrize("checkpoint", [False, True], ids=["keep", "checkpoint"])
def test_v_over_three_ranks_of_different_widths_trains_like_one_process(schedule, checkpoint):
    """A V over 3 ranks whose 6 chunks differ in width, with m = 7 microbatches, equals one process every step."""
    p, m = 3, 7
    batches = make_batches("widths", 2 * m, steps=2, seed=31)
    results = run_ranks(p, v_train_rank, schedule, checkpoint, m, batches, model_kind="widths")
    assert_matches_oracle(results, oracle_steps("widths", 2 * p, batches), [1, 2, 0],
                          f"{schedule}, 3 ranks, widths model, m={m}, checkpoint={checkpoint}")  # fmt: skip


@pytest.mark.task5_8
def test_dualpipe_v_pairs_post_early_over_three_ranks_with_an_odd_count():
    """DualPipeV over 3 ranks, m = 7: every F&B pair's B gradient receive is posted before its F starts."""
    check_pairs_post_early(run_ranks(3, overlap_rank, 7), 7)
