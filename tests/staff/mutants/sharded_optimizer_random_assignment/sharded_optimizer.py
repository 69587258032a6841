"""Mutant: Parameters assigned to ranks at random: each rank draws its own assignment (torch is
seeded differently on each rank), so some parameters have two owners and some none."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.sharded_optimizer",
    "            self._owner[p] = owner",
    "            self._owner[p] = int(torch.randint(self._world, ()))  # Bug: not the same on every rank.",
)
