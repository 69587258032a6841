"""Mutant: DDPBucketed never resets which grads are ready, so later steps launch buckets too early."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.ddp",
    "            b.ready.clear()\n",
    "",
)
