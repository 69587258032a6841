"""Mutant: FSDP reduce-scatters the weight grads but does not divide by the world size."""

import torch
import torch.distributed as dist

from reference_solutions import sharded_optimizer as _ref
from reference_solutions.sharded_optimizer import *  # noqa: F403


class _SummingShard(_ref._Shard):
    def reduce_scatter(self, grad, dtype):
        padded = torch.zeros(self.world * self.chunk, dtype=dtype, device=grad.device)
        padded[: self.numel] = grad.reshape(-1)
        if self.world == 1:
            return padded
        chunk = torch.empty(self.chunk, dtype=dtype, device=grad.device)
        dist.reduce_scatter_tensor(chunk, padded, group=self.group)
        return chunk  # Bug: the sum over ranks, not the mean.


class FSDP(_ref.FSDP):
    def __init__(self, module, *, compute_dtype=None, group=None):
        super().__init__(module, compute_dtype=compute_dtype, group=group)
        for info in self._shards.values():
            info.__class__ = _SummingShard
