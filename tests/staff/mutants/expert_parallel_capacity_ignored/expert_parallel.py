"""Mutant: dropped assignments are still dispatched and combined instead of contributing zero."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.expert_parallel",
    "kept = self._kept_counts(all_counts)",
    "kept = all_counts",
)
