"""Mutant: no counts exchange: every rank assumes the others route exactly as it does."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.expert_parallel",
    "all_counts = self._gather_counts(counts)",
    "all_counts = counts[None].expand(world, -1)",
)
