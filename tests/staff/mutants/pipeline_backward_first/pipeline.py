"""Mutant: 1F1B's steady state runs the backward before the forward of each pair."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    '[Action("F", warmup + i), Action("B", i)]',
    '[Action("B", i), Action("F", warmup + i)]',
)
