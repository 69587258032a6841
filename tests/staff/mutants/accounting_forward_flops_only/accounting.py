"""Mutant: Training FLOPs counted as 2ND (the forward pass only)."""

from reference_solutions import accounting as _ref
from reference_solutions.accounting import *  # noqa: F403


def training_flops(num_params, num_tokens):
    return _ref.training_flops(num_params, num_tokens) / 3  # Bug: forward only, backward forgotten
