"""The distributed test harness: ranks produce, the parent (pytest) judges.

    from tests.harness import run_ranks, assert_ranks_close

    def all_reduce_rank(ctx, inputs):                  # runs in every rank process
        x = inputs[ctx.rank].clone()
        ctx.load("collectives").all_reduce(x)           # the implementation under test
        return x

    def test_all_reduce(world_size):                    # runs in pytest
        inputs = [torch.randn(7, 5) for _ in range(world_size)]
        outs = run_ranks(world_size, all_reduce_rank, inputs)
        assert_ranks_close(outs, sum(inputs), what="all_reduce")

See tests/README.md for the whole design: pools, deadlines, stacks, the recorder.
"""

from tests.harness.compare import TOLERANCES, assert_close, assert_ranks_close, describe_mismatch, tolerance
from tests.harness.config import CONFIG
from tests.harness.context import RankContext
from tests.harness.pool import RankFailure
from tests.harness.run import run_ranks

__all__ = [
    "CONFIG",
    "RankContext",
    "RankFailure",
    "TOLERANCES",
    "assert_close",
    "assert_ranks_close",
    "describe_mismatch",
    "run_ranks",
    "tolerance",
]
