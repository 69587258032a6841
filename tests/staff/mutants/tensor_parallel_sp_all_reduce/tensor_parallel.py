"""Mutant: the sequence-parallel reduce-scatter is an all-reduce followed by a chunk (right values, 2x traffic)."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.tensor_parallel", "        return _reduce_scatter_first(x, group)",
       "        return _all_reduce(x, group).chunk(_world(group))[_rank(group)].contiguous()")  # fmt: skip
