"""Mutant: interleaved backwards run the chunks in forward order (chunk 0 first) instead of reversed."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    'return Action("B", (j // (p * v)) * p + j % p, v - 1 - (j // p) % v)',
    'return Action("B", (j // (p * v)) * p + j % p, (j // p) % v)',
)
