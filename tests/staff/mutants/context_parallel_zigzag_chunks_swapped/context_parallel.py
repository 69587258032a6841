"""Mutant: zigzag shards hold chunk 2N-1-r before chunk r (the positions the ring assumes no longer match)."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.context_parallel",
       old="mine = [chunks[me], chunks[2 * n - 1 - me]] if zigzag",
       new="mine = [chunks[2 * n - 1 - me], chunks[me]] if zigzag")  # fmt: skip
