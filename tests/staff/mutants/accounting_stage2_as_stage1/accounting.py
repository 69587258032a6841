"""Mutant: ZeRO stage 2 memory computed as stage 1 (gradients left replicated)."""

from reference_solutions import accounting as _ref
from reference_solutions.accounting import *  # noqa: F403


def zero_memory_per_gpu(num_params, world_size, stage, *, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    kw = dict(param_bytes=param_bytes, grad_bytes=grad_bytes, optimizer_bytes=optimizer_bytes)
    return _ref.zero_memory_per_gpu(num_params, world_size, 1 if stage == 2 else stage, **kw)  # Bug
