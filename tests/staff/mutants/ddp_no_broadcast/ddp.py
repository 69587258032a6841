"""Mutant: the wrappers never broadcast rank 0's weights, so ranks train from different ones."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.ddp",
    "        _broadcast_from_first_rank(module, group)\n",
    "",
    count=2,
)
