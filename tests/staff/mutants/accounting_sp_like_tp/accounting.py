"""Mutant: Sequence parallelism assumed to save nothing beyond tensor parallelism."""

from reference_solutions import accounting as _ref
from reference_solutions.accounting import *  # noqa: F403


def activation_memory_per_layer(seq, batch, hidden, heads, tp=1, sequence_parallel=False):
    _ref.activation_memory_per_layer(seq, batch, hidden, heads, tp, sequence_parallel)  # input checks
    return _ref.activation_memory_per_layer(seq, batch, hidden, heads, tp)  # Bug: SP ignored
