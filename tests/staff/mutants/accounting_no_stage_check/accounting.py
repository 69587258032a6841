"""Mutant: zero_memory_per_gpu treats any stage above 3 as stage 3 instead of rejecting it."""

from reference_solutions import accounting as _ref
from reference_solutions.accounting import *  # noqa: F403


def zero_memory_per_gpu(num_params, world_size, stage, *, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    kw = dict(param_bytes=param_bytes, grad_bytes=grad_bytes, optimizer_bytes=optimizer_bytes)
    return _ref.zero_memory_per_gpu(num_params, world_size, min(stage, 3), **kw)  # Bug: no range check
