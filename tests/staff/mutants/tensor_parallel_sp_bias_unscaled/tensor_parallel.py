"""Mutant: with sequence parallelism every rank adds the whole fc2 bias before the reduce-scatter."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.tensor_parallel", "return bias / world", "return bias.clone()")
