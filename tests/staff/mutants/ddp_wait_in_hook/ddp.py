"""Mutant: DDPIndividualParameters waits for each all-reduce inside its hook: no overlap with backward."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.ddp",
    "        self._pending.append((dist.all_reduce(p.grad, group=self.group, async_op=True), p))",
    "        work = dist.all_reduce(p.grad, group=self.group, async_op=True)\n"
    "        work.wait()\n"
    "        self._pending.append((work, p))",
)
