"""Mutant: DDPBucketed divides each bucket by the world size before the all-reduce and again after."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.ddp",
    "        bucket.work = dist.all_reduce(",
    "        bucket.buffer.div_(self.world_size)\n        bucket.work = dist.all_reduce(",
)
