"""Mutant: Bubble as Megatron's ratio to the ideal time, (p-1)/(v*m), not a fraction of the step."""

from reference_solutions import accounting as _ref
from reference_solutions.accounting import *  # noqa: F403


def pipeline_bubble_fraction(num_stages, num_microbatches, virtual_stages=1):
    _ref.pipeline_bubble_fraction(num_stages, num_microbatches, virtual_stages)  # keeps the input checks
    return (num_stages - 1) / (virtual_stages * num_microbatches)  # Bug: bubble time / useful time
