"""Mutant: interleaved forwards switch chunk every microbatch instead of every group of p microbatches."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    'return Action("F", (j // (p * v)) * p + j % p, (j // p) % v)',
    'return Action("F", (j // (p * v)) * p + j % p, j % v)',
)
