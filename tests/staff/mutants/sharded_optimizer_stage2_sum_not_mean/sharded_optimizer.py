"""Mutant: Stage 2 reduce-scatters the grads but forgets to divide by the world size (sum, not mean)."""

from reference_solutions import sharded_optimizer as _ref
from reference_solutions.sharded_optimizer import *  # noqa: F403


class ShardedOptimizer(_ref.ShardedOptimizer):
    def _reduce_scatter_grads(self, per_rank, slot):
        super()._reduce_scatter_grads(per_rank, slot)
        for p in per_rank[self._rank]:
            if p.grad is not None:
                p.grad.mul_(self._world)  # Bug: undoes the division: owners step on the sum of grads.
