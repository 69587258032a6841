"""Mutant: Ring all-reduce counted as one pass, (N-1)/N*M: the all-gather half is forgotten."""

from reference_solutions import accounting as _ref
from reference_solutions.accounting import *  # noqa: F403


def ring_all_reduce_bytes_per_rank(num_bytes, world_size):
    return _ref.ring_all_reduce_bytes_per_rank(num_bytes, world_size) / 2  # Bug: reduce-scatter only
