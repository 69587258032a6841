"""Mutant: Parameters assigned to ranks at random: each rank draws its own assignment (torch is
seeded differently on each rank), so some parameters have two owners and some none."""

import torch

from reference_solutions import sharded_optimizer as _ref
from reference_solutions.sharded_optimizer import *  # noqa: F403


class ShardedOptimizer(_ref.ShardedOptimizer):
    def add_param_group(self, param_group):
        torch.optim.Optimizer.add_param_group(self, param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            self._owner[p] = int(torch.randint(self._world, ()))  # Bug: not the same on every rank.
        owned = [p for p in group["params"] if self._owner[p] == self._rank]
        if not owned:
            self._local_groups.append(None)
            return
        local_group = {**{k: v for k, v in group.items() if k != "params"}, "params": owned}
        if self._local is None:
            self._local = self._optimizer_cls([local_group], **self._optimizer_kwargs)
        else:
            self._local.add_param_group(local_group)
        self._local_groups.append(self._local.param_groups[-1])
