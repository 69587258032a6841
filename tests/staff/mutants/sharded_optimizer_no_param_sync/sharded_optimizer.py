"""Mutant: Owners update their parameters but never send them: the other ranks keep stale copies."""

from reference_solutions import sharded_optimizer as _ref
from reference_solutions.sharded_optimizer import *  # noqa: F403


class ShardedOptimizer(_ref.ShardedOptimizer):
    def _all_gather_params(self, per_rank, slot):
        pass  # Bug: no all-gather/broadcast of the updated parameters after the owners' step.
