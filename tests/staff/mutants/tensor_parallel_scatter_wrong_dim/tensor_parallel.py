"""Mutant: scatter_to_tp_region (and the gather's backward) split dim 0 instead of the last dim."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.tensor_parallel", "x.chunk(_world(group), dim=-1)",
       "x.chunk(_world(group), dim=0)")  # fmt: skip
