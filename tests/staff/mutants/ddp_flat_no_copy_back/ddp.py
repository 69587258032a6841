"""Mutant: all_reduce_gradients_flat reduces the flat buffer but never copies it back into .grad."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.ddp",
    "            grad.copy_(synced)",
    "            pass",
)
