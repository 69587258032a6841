"""Mutant: the all-reduce forgets ``group`` and sums over every rank of WORLD."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.tensor_parallel", "dist.all_reduce(out, group=group)", "dist.all_reduce(out)")
