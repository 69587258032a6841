"""Mutant: num_experts not divisible by the EP size is accepted (experts silently lost)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.expert_parallel",
    "        if num_experts % world != 0:\n            raise ValueError(",
    "        if False:\n            raise ValueError(",
)
