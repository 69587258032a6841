"""Mutant: training_memory_bytes truncates to an int instead of rounding to the nearest."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.accounting",
    old="return int(round(num_params * per_param))",
    new="return int(num_params * per_param)",
)
