"""Mutant: DDPBucketed accepts a negative bucket size (it silently acts like 0)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.ddp",
    "math.isnan(bucket_size_mb) or bucket_size_mb < 0",
    "math.isnan(bucket_size_mb)",
)
