"""Mutant: a stage never releases a microbatch's stashed activations after its backward."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "else step.stash.pop((i, k))",
    "else step.stash[(i, k)]",
)
