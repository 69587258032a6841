"""Mutant: the router gradient is not summed over the EP group (only this rank's tokens count)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.expert_parallel",
    "        dist.all_reduce(moe.router.weight.grad, group=moe.group)\n",
    "        pass\n",
)
