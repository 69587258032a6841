"""Mutant: add_param_group after construction records the group but never gives it to the inner
optimizer: parameters added mid-training are never updated."""

from reference_solutions import sharded_optimizer as _ref
from reference_solutions.sharded_optimizer import *  # noqa: F403


class ShardedOptimizer(_ref.ShardedOptimizer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._built = True

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        if getattr(self, "_built", False) and self._local_groups[-1] is not None:
            self._local.param_groups.pop()  # Bug: only groups given to __init__ reach the inner optimizer.
            self._local_groups[-1] = None
