"""Mutant: Stage 1 that is not sharded: every rank builds the inner optimizer over all parameters,
so every rank keeps the whole optimizer state (the results are still right)."""

from reference_solutions import sharded_optimizer as _ref
from reference_solutions.sharded_optimizer import *  # noqa: F403


class ShardedOptimizer(_ref.ShardedOptimizer):
    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        local_group = {**{k: v for k, v in group.items() if k != "params"}, "params": group["params"]}
        # Bug: the inner optimizer gets every parameter, not only the owned ones.
        if self._local_groups[-1] is not None:
            self._local.param_groups.pop()
        if self._local is None:
            self._local = self._optimizer_cls([local_group], **self._optimizer_kwargs)
        else:
            self._local.add_param_group(local_group)
        self._local_groups[-1] = self._local.param_groups[-1]
