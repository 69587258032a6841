"""Hidden tests for part 3, stages 1-2 (never shipped to students): an odd world size.

    pytest tests/staff/hidden/test_sharded_optimizer_hidden.py --impl reference

World size 3 (explicit, not ``--world-sizes``): ownership cannot split the parameters evenly, the
average divides by 3, and the group added at step 2 must still be owned and synced.
"""

from __future__ import annotations

import pytest

from tests.oracles.sharded_optimizer import OPTIMIZERS, STAGES, assert_params_match_the_oracle


@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
@pytest.mark.parametrize("stage", STAGES)
def test_three_ranks_match_the_unsharded_optimizer_every_step(opt_name, stage):
    """On 3 ranks, stages 1 and 2 keep every rank's parameters equal to the plain optimizer's, every step."""
    assert_params_match_the_oracle(3, opt_name, stage)
