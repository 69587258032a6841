"""Mutant: the capacity counts this rank's tokens times the group size, as if every rank had as many tokens."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.expert_parallel",
    old="expert_capacity(int(all_counts.sum()) // k, E, k, self.capacity_factor)",
    new="expert_capacity(int(all_counts[0].sum()) // k * world, E, k, self.capacity_factor)",
)
