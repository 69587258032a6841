"""Mutant: the load-balancing fraction f sums the counts over experts instead of over choices."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.expert_parallel",
    "fraction = counts.view(E, k).sum(dim=1)",
    "fraction = counts.view(E, k).sum(dim=0)",
)
