"""Mutant: from_dense deals experts round-robin (e on rank e % W) while routing expects blocks (e // (E/W))."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.expert_parallel",
    "moe.experts[layer.first_expert + i]",
    "moe.experts[_rank(group) + i * _world(group)]",
)
