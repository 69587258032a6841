"""Hidden tests for part 2 (never shipped to students): an odd world size and more steps.

    pytest tests/staff/hidden/test_ddp_hidden.py --impl reference

World size 3 (an explicit size, not ``--world-sizes``) and five AdamW steps on the deep model: the
average divides by 3, and per-step state (which grads are ready, which buckets launched) must be
reset every step, which the public tests check over fewer steps at the default sizes.
"""

from __future__ import annotations

import pytest

from tests.oracles.ddp import check_training_matches_one_process, variant_params


@pytest.mark.parametrize("variant", variant_params(["naive", "flat", "individual", "bucketed-0.002MiB"]))
def test_five_adamw_steps_on_three_ranks_match_one_process(variant):
    """Five AdamW steps on 3 ranks give every rank the grads and parameters of one process on the whole batch."""
    check_training_matches_one_process(3, variant, "deep", "adamw", steps=5)
