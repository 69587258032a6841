"""Mutant: split_into_stages gives the extra layers to the last stages instead of the first."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.pipeline",
    "(1 if s < extra else 0)",
    "(1 if s >= num_stages - extra else 0)",
)
