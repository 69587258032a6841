"""Hidden tests for part 5 (never shipped to students): chunks whose widths differ, an odd pipeline.

    pytest tests/staff/hidden/test_pipeline_hidden.py --impl reference

Explicit world sizes instead of ``--world-sizes``: 2 and 3 stages over the 6-layer ``widths`` model
cut into 6 chunks, so every chunk boundary carries another width (10, 3, 7, 4) and each chunk's
shape header must describe its own activation. On NCCL a size larger than the visible GPUs is skipped.
"""

from __future__ import annotations

import pytest

from tests.harness import run_ranks
from tests.oracles.pipeline import assert_matches_oracle, chunked_train_rank, make_batches, oracle_steps


@pytest.mark.task5_6
@pytest.mark.parametrize("p", [2, 3])
@pytest.mark.parametrize("checkpoint", [False, True], ids=["keep", "checkpoint"])
def test_interleaved_chunks_of_different_widths_train_like_one_process(p, checkpoint):
    """Interleaved over 6 one-layer chunks of different widths (p = 2, v = 3; p = 3, v = 2) equals one process.

    Each chunk's activation has its own shape: a rank must learn it per chunk from its header."""
    v, m = 6 // p, 2 * p
    batches = make_batches("widths", 2 * m, steps=2, seed=7 + p)
    results = run_ranks(p, chunked_train_rank, ("interleaved", v, checkpoint), m, batches, model_kind="widths")
    assert_matches_oracle(results, oracle_steps("widths", p * v, batches), list(range(p)),
                          f"interleaved v={v}, widths model, checkpoint={checkpoint}")  # fmt: skip
