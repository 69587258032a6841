"""Mutant: Stage 2 averages every grad with an all-reduce (as DDP does) and then drops the
non-owned ones: right values, but it moves the whole gradient to every rank."""

import torch.distributed as dist

from reference_solutions import sharded_optimizer as _ref
from reference_solutions.sharded_optimizer import *  # noqa: F403


class ShardedOptimizer(_ref.ShardedOptimizer):
    def _reduce_scatter_grads(self, per_rank, slot):
        for r, params in enumerate(per_rank):
            for p in params:
                if p.grad is not None:
                    dist.all_reduce(p.grad, group=self._group)  # Bug: all-reduce, not reduce-scatter.
                    p.grad.div_(self._world)
                if r != self._rank:
                    p.grad = None
