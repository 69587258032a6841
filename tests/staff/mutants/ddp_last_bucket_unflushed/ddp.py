"""Mutant: the bucket being filled when the loop ends is never appended (first parameters unsynced)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.ddp",
    "    return buckets\n",
    "    return buckets[:-1]\n",
)
