"""Mutant: the forward ring stops one hop short (the last block never arrives; the one held is used twice)."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.context_parallel", old="more = step < n - 1", new="more = step < n - 2")
