"""Mutant: no check that the batch divides into microbatches (chunk() silently makes uneven ones)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "            if tensor.shape[0] < m or tensor.shape[0] % m:",
    "            if False:",
)
