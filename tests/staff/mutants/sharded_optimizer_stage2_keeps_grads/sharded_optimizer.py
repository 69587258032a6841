"""Mutant: Stage 2 averages the owned grads but leaves every other grad in place: no memory saved."""

from reference_solutions import sharded_optimizer as _ref
from reference_solutions.sharded_optimizer import *  # noqa: F403


class ShardedOptimizer(_ref.ShardedOptimizer):
    def _reduce_scatter_grads(self, per_rank, slot):
        kept = {p: p.grad for params in per_rank for p in params}
        super()._reduce_scatter_grads(per_rank, slot)
        for p, grad in kept.items():
            if p.grad is None:
                p.grad = grad  # Bug: the non-owned (unaveraged) grads stay allocated.
