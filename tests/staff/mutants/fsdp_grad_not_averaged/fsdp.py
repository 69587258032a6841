"""Mutant: FSDP reduce-scatters the weight grads but does not divide by the world size."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.fsdp",
    "        return chunk.div_(self.world)",
    "        return chunk  # Bug: the sum over ranks, not the mean.",
)
