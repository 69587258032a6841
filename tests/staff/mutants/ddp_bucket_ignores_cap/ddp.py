"""Mutant: the bucket check looks at the new parameter alone, not the bucket's total: few, huge buckets."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.ddp",
    "size + nbytes > cap_bytes",
    "nbytes > cap_bytes",
)
