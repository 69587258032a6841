"""Mutant: the cap is bucket_size_mb * 10**6 bytes instead of bucket_size_mb * 2**20."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.ddp",
    "bucket_size_mb * 2**20)",
    "bucket_size_mb * 10**6)",
)
