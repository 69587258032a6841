"""Mutant: all_reduce_gradients sums the gradients but never divides by the world size."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.ddp",
    "            p.grad.div_(world_size)\n",
    "",
)
