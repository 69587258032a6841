"""Mutant: the combine weights are read token-major while the rows are choice-major."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.expert_parallel",
    "w = weights.t().reshape(-1)[sent]",
    "w = weights.reshape(-1)[sent]",
)
