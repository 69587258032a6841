"""Mutant: ZB-H1's bubble counted as 1F1B's, (p - 1)(F + B + W) idle, as if the Ws filled nothing."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.accounting",
    "idle = (p - 1) * (f + b - w)",
    "idle = (p - 1) * (f + b + w)",
)
