"""Mutant: a stage never releases a microbatch's stashed activations after its backward."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "x, out = step.stash.pop(i)",
    "x, out = step.stash[i]",
)
