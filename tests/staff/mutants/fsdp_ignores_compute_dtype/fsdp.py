"""Mutant: FSDP accepts compute_dtype but computes in fp32 anyway."""

from reference_solutions import fsdp as _ref
from reference_solutions.fsdp import *  # noqa: F403


class FSDP(_ref.FSDP):
    def __init__(self, module, *, compute_dtype=None, group=None):
        super().__init__(module, compute_dtype=None, group=group)  # Bug: compute_dtype dropped.
